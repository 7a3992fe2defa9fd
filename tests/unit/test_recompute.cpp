// Recompute-on-backward (engine/nn/recompute.h): gradients and BatchNorm buffers of a
// checkpointed training step equal the plain step's bit for bit on the CPU in f32 (ResNet18 with
// the small stem, the small CNN with dropout), the BN counter moves once, segment bounds, the
// Checkpoint wrapper, and the memory it saves.
#include <doctest/doctest.h>

#include <cstring>

#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/tag.h"
#include "engine/nn/batch_norm2d.h"
#include "engine/nn/recompute.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "models/registry.h"
#include "support/tensor_host.h"

using namespace kiln;

namespace {

struct StepResult {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> tensors;  // grads then buffers, raw bytes
  std::vector<uint8_t> input_grad;
  double loss = 0;
};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  REQUIRE(t.defined());
  Tensor c = contiguous(t.detach());
  std::vector<uint8_t> b(c.nbytes());
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

// One training step (forward, cross entropy, backward) from a fixed seed; segments 0 = plain.
// amp: the forward and the loss run under autocast (f16), backward outside it, as --amp does.
StepResult run_step(const std::string& model, int64_t image, int64_t channels, int segments, bool input_grad,
                    bool amp = false) {
  manual_seed(7);
  nn::ModulePtr m = models::make_model(model, 10, channels, image);
  m->train();
  if (segments > 0) m->set_recompute_segments(segments);
  manual_seed(11);
  Tensor x = normal({4, channels, image, image}, 0.0, 1.0);
  if (input_grad) x.set_requires_grad(true);
  Tensor y = tensor_from(std::vector<int64_t>{1, 3, 5, 7}, {4});
  Tensor loss;
  {
    AutocastGuard ac(amp, DType::f16);
    loss = cross_entropy((*m)(x), y);
  }
  loss.backward();
  StepResult r;
  r.loss = loss.item();
  for (auto& [n, p] : m->named_parameters()) r.tensors.emplace_back(n + ".grad", bytes_of(p.grad()));
  for (auto& [n, b] : m->named_buffers()) r.tensors.emplace_back(n, bytes_of(b));
  if (input_grad) r.input_grad = bytes_of(x.grad());
  // The generator must end where the plain run ends (the recompute restores it).
  r.tensors.emplace_back("rng.offset", std::vector<uint8_t>((uint8_t*)&global_rng().offset,
                                                            (uint8_t*)&global_rng().offset + 8));
  return r;
}

void check_equal(const StepResult& plain, const StepResult& ck) {
  CHECK(plain.loss == ck.loss);
  REQUIRE(plain.tensors.size() == ck.tensors.size());
  int mismatches = 0;
  for (size_t i = 0; i < plain.tensors.size(); ++i) {
    CAPTURE(plain.tensors[i].first);
    const bool same = plain.tensors[i].second == ck.tensors[i].second;
    if (!same) ++mismatches;
    CHECK(same);
  }
  CHECK(plain.input_grad == ck.input_grad);
  CHECK(mismatches == 0);
}

}  // namespace

TEST_CASE("segment_bounds splits stages evenly, first segments longer") {
  auto b = nn::segment_bounds(10, 4);
  REQUIRE(b.size() == 4);
  CHECK(b[0] == std::pair<size_t, size_t>{0, 3});
  CHECK(b[1] == std::pair<size_t, size_t>{3, 6});
  CHECK(b[2] == std::pair<size_t, size_t>{6, 8});
  CHECK(b[3] == std::pair<size_t, size_t>{8, 10});
  CHECK(nn::segment_bounds(3, 8).size() == 3);
  CHECK_THROWS_AS(nn::segment_bounds(3, 0), Error);
}

TEST_CASE("checkpointed resnet18_small: gradients, BN buffers and loss bit for bit") {
  StepResult plain = run_step("resnet18_small", 8, 3, 0, true);
  for (int seg : {2, 4, 10}) {
    CAPTURE(seg);
    check_equal(plain, run_step("resnet18_small", 8, 3, seg, true));
  }
}

TEST_CASE("checkpointed small_cnn with dropout: bit for bit (Philox replay), input without grad") {
  StepResult plain = run_step("small_cnn", 12, 1, 0, false);
  for (int seg : {2, 3, 4}) {
    CAPTURE(seg);
    check_equal(plain, run_step("small_cnn", 12, 1, seg, false));
  }
}

TEST_CASE("checkpoint under autocast recomputes under autocast: small_cnn and resnet18_small bit for bit") {
  struct Case {
    const char* model;
    int64_t image, channels;
    bool input_grad;
  };
  for (const Case& c : {Case{"small_cnn", 12, 1, false}, Case{"resnet18_small", 8, 3, true}}) {
    CAPTURE(c.model);
    StepResult plain = run_step(c.model, c.image, c.channels, 0, c.input_grad, /*amp=*/true);
    // Autocast really changes the numbers (else the comparison below would prove nothing).
    StepResult f32 = run_step(c.model, c.image, c.channels, 0, c.input_grad, /*amp=*/false);
    CHECK(plain.tensors.front().second != f32.tensors.front().second);
    for (int seg : {2, 3}) {
      CAPTURE(seg);
      check_equal(plain, run_step(c.model, c.image, c.channels, seg, c.input_grad, /*amp=*/true));
    }
  }
  CHECK_FALSE(autocast_enabled());
}

TEST_CASE("the stages of resnet18 (torchvision stem) chain to forward exactly") {
  manual_seed(3);
  nn::ModulePtr m = models::make_model("resnet18", 5, 3, 32);
  m->eval();
  Tensor x = normal({2, 3, 32, 32}, 0.0, 1.0);
  NoGradGuard ng;
  Tensor a = (*m)(x), b = x;
  auto st = m->stages();
  CHECK(st.size() == 10);
  for (auto& s : st) b = s.fn(b);
  CHECK(bytes_of(a) == bytes_of(b));
}

TEST_CASE("BatchNorm counter and running stats move once per checkpointed step") {
  manual_seed(1);
  auto seq = std::make_shared<nn::Sequential>();
  auto bn = std::make_shared<nn::BatchNorm2d>(3);
  seq->push_back(std::make_shared<nn::Conv2d>(3, 3, 3, 1, 1)).push_back(bn).push_back(std::make_shared<nn::ReLU>());
  auto ck = std::make_shared<nn::Recompute>(seq);
  Tensor x = normal({2, 3, 5, 5}, 0.0, 1.0).set_requires_grad(true);
  Tensor loss = sum((*ck)(x));
  CHECK(bn->num_batches_tracked.item() == 1);
  std::vector<uint8_t> rm = bytes_of(bn->running_mean);
  loss.backward();
  CHECK(bn->num_batches_tracked.item() == 1);
  CHECK(bytes_of(bn->running_mean) == rm);
  CHECK(x.grad().defined());
  CHECK(ck->named_parameters()[0].first == "module.0.weight");
  // Backward twice through the same checkpoint is the usual error.
  CHECK_THROWS_AS(loss.backward(), Error);
}

TEST_CASE("an in-place change of a checkpoint's saved input is caught") {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Linear>(4, 4));
  Tensor x = normal({2, 4}, 0.0, 1.0).set_requires_grad(true);
  Tensor h = mul(x, 2.0);
  Tensor y = nn::recompute([seq](const Tensor& t) { return (*seq)(t); }, h, seq->parameters());
  Tensor loss = sum(y);
  add_(h, 1.0);
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("modified by an in-place operation"), Error);
}

TEST_CASE("checkpointing lowers the peak of saved activations on the CPU") {
  CachingAllocator* a = caching_allocator_for(Device::cpu());
  REQUIRE(a != nullptr);
  auto peak_activation = [&](int seg) {
    manual_seed(2);
    nn::ModulePtr m = models::make_model("resnet18_small", 10, 3, 16);
    if (seg) m->set_recompute_segments(seg);
    Tensor x = normal({8, 3, 16, 16}, 0.0, 1.0);
    Tensor y = tensor_from(std::vector<int64_t>(8, 1), {8});
    a->reset_peak();
    const int64_t base = a->stats().tag_allocated[(int)MemoryTag::activation].current;
    Tensor loss;
    {
      MemoryScope s(MemoryTag::temporary);
      loss = cross_entropy((*m)(x), y);
    }
    loss.backward();
    return a->stats().tag_allocated[(int)MemoryTag::activation].peak - base;
  };
  const int64_t plain = peak_activation(0), ck = peak_activation(4);
  MESSAGE("activation peak: plain ", plain, " B, 4 segments ", ck, " B");
  CHECK(ck < plain * 3 / 4);  // the recompute of the largest segment is part of the peak
}
