// Gradients through whole modules in f64 (central differences): the input and every parameter
// of a conv/BN/ReLU/pool/flatten/linear stack, of a ResNet BasicBlock with downsample and of a
// Bottleneck with downsample (stride 2) and without (identity shortcut).
#include <doctest/doctest.h>

#include "engine/core/generator.h"
#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "models/resnet.h"
#include "support/gradcheck.h"

using namespace kiln;

namespace {
std::vector<Tensor> input_and_params(const Tensor& x, const nn::Module& m) {
  std::vector<Tensor> v{x};
  for (auto& [n, p] : m.named_parameters()) v.push_back(p);
  return v;
}
}  // namespace

TEST_CASE("gradcheck: conv -> BN (train) -> ReLU -> max-pool -> flatten -> linear, input and parameters") {
  manual_seed(21);
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1));
  seq->push_back(std::make_shared<nn::BatchNorm2d>(3));
  seq->push_back(std::make_shared<nn::ReLU>());
  seq->push_back(std::make_shared<nn::MaxPool2d>(2));
  seq->push_back(std::make_shared<nn::Flatten>());
  seq->push_back(std::make_shared<nn::Linear>(12, 4));
  seq->to(DType::f64);
  CHECK(seq->state_dict()[0].second.dtype() == DType::f64);
  Tensor x = test::random_input({2, 2, 4, 4});
  CHECK(test::gradcheck("conv-bn-relu-pool-linear", [&](auto& v) { return (*seq)(v[0]); }, input_and_params(x, *seq),
                        1e-6, 1e-5) <= 1e-5);
}

TEST_CASE("gradcheck: ResNet BasicBlock with downsample (stride 2), eval and train mode") {
  manual_seed(22);
  auto block = std::make_shared<models::BasicBlock>(2, 4, 2);
  REQUIRE(block->downsample != nullptr);
  block->to(DType::f64);
  Tensor x = test::random_input({2, 2, 4, 4});
  for (bool train : {false, true}) {
    CAPTURE(train);
    block->train(train);
    CHECK(test::gradcheck("basic block", [&](auto& v) { return (*block)(v[0]); }, input_and_params(x, *block), 1e-6,
                          1e-5) <= 1e-5);
  }
}

TEST_CASE("gradcheck: ResNet Bottleneck with downsample (stride 2) and with identity, eval and train mode") {
  manual_seed(23);
  auto down = std::make_shared<models::Bottleneck>(3, 2, 2);  // 3 -> 8 channels, stride on conv2
  auto same = std::make_shared<models::Bottleneck>(8, 2, 1);  // 8 -> 8: identity shortcut
  REQUIRE(down->downsample != nullptr);
  REQUIRE(same->downsample == nullptr);
  Tensor x3 = test::random_input({2, 3, 4, 4}, true), x8 = test::random_input({2, 8, 3, 3}, true);  // non-contiguous
  for (auto [block, x] : {std::make_pair(down, x3), std::make_pair(same, x8)}) {
    block->to(DType::f64);
    for (bool train : {false, true}) {
      CAPTURE(train);
      CAPTURE(x.str());
      block->train(train);
      CHECK(test::gradcheck("bottleneck", [&](auto& v) { return (*block)(v[0]); }, input_and_params(x, *block), 1e-6,
                            1e-5) <= 1e-5);
    }
  }
}
