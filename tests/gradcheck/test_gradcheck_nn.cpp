// Gradients of the neural-network ops by f64 central differences (non-contiguous inputs too).
#include "support/gradcheck.h"
#include "engine/ops/batch_norm_sync.h"

using namespace kiln;
using kiln::test::gradcheck;
using kiln::test::random_input;

TEST_CASE("gradcheck: conv2d with stride, padding, dilation, groups, bias") {
  manual_seed(11);
  struct Case { Shape x, w; std::vector<int64_t> s, p, d; int64_t g; bool bias; };
  std::vector<Case> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{1, 4, 8, 7}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, true},
      {{2, 2, 5, 5}, {3, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, false},
      {{1, 4, 9, 9}, {4, 1, 3, 3}, {2, 2}, {2, 2}, {2, 2}, 4, true},
  };
  for (auto& c : cases) {
    for (bool nc : {false, true}) {
      Tensor x = random_input(c.x, nc), w = random_input(c.w, false);
      Tensor b = c.bias ? random_input({c.w[0]}) : Tensor();
      std::vector<Tensor> in = {x, w};
      if (c.bias) in.push_back(b);
      CHECK(gradcheck("conv2d", [&](auto& v) {
        return conv2d(v[0], v[1], c.bias ? v[2] : Tensor(), c.s, c.p, c.d, c.g);
      }, in) <= 1e-6);
    }
  }
}

TEST_CASE("gradcheck: pooling") {
  manual_seed(12);
  Tensor x = random_input({2, 3, 7, 8}, true);
  CHECK(gradcheck("max_pool2d", [](auto& v) { return max_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, {x}) <= 1e-6);
  CHECK(gradcheck("max_pool2d ceil dil", [](auto& v) { return max_pool2d(v[0], {2, 2}, {2, 2}, {0, 0}, {2, 1}, true); },
                  {x}) <= 1e-6);
  CHECK(gradcheck("avg_pool2d", [](auto& v) { return avg_pool2d(v[0], {3, 2}, {2, 1}, {1, 1}); }, {x}) <= 1e-6);
  CHECK(gradcheck("avg_pool2d no pad count", [](auto& v) { return avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}, true, false); },
                  {x}) <= 1e-6);
  CHECK(gradcheck("adaptive_avg_pool2d", [](auto& v) { return adaptive_avg_pool2d(v[0], {3, 5}); }, {x}) <= 1e-6);
  CHECK(gradcheck("adaptive_avg_pool2d 1x1", [](auto& v) { return adaptive_avg_pool2d(v[0], {1}); }, {x}) <= 1e-6);
}

TEST_CASE("gradcheck: batch_norm in training and eval mode") {
  manual_seed(13);
  Tensor x = random_input({4, 3, 3, 2}, true), w = random_input({3}), b = random_input({3});
  CHECK(gradcheck("batch_norm train", [](auto& v) {
    return batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), true);
  }, {x, w, b}) <= 1e-6);
  Tensor rm = uniform({3}, -0.5, 0.5, DType::f64), rv = uniform({3}, 0.5, 1.5, DType::f64);
  CHECK(gradcheck("batch_norm eval", [&](auto& v) { return batch_norm(v[0], v[1], v[2], rm, rv, false); },
                  {x, w, b}) <= 1e-6);
  Tensor x2 = random_input({5, 4}, false);
  CHECK(gradcheck("batch_norm 2d no affine", [](auto& v) {
    return batch_norm(v[0], Tensor(), Tensor(), Tensor(), Tensor(), true);
  }, {x2}) <= 1e-6);
  // A channel mean large against its std (mean 1e3, std 0.2): the (x - mean) form of the backward.
  Tensor x3;
  {
    NoGradGuard ng;
    x3 = add(mul(randn({4, 3, 3, 2}, DType::f64), 0.2), 1000.0).set_requires_grad(true);
  }
  CHECK(gradcheck("batch_norm train, mean 1e3 std 0.2", [](auto& v) {
    return batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), true);
  }, {x3, w, b}, 1e-6, 1e-5) <= 1e-5);
}

TEST_CASE("gradcheck: batch_norm_sync (SyncBatchNorm) with one rank's sums") {
  // The reducer of one rank leaves the sums as they are: the op's own backward (the staged kernels, the
  // global sums of dy and dy * (x - mean)) against central differences, also with the global parameter
  // gradients (BnParamGrads::global, rank 0's).
  manual_seed(15);
  Tensor x = random_input({4, 3, 3, 2}, true), w = random_input({3}), b = random_input({3});
  const ChannelSumReducer one_rank = [](double*, int64_t) {};
  for (BnParamGrads g : {BnParamGrads::local, BnParamGrads::global})
    CHECK(gradcheck("batch_norm_sync train", [&](auto& v) {
      return batch_norm_sync(v[0], v[1], v[2], Tensor(), Tensor(), 0.1, 1e-5, one_rank, g);
    }, {x, w, b}) <= 1e-6);
}

TEST_CASE("gradcheck: softmax, log_softmax and losses") {
  manual_seed(14);
  Tensor x = random_input({3, 5, 4}, true);
  CHECK(gradcheck("softmax dim1", [](auto& v) { return softmax(v[0], 1); }, {x}) <= 1e-6);
  CHECK(gradcheck("log_softmax last", [](auto& v) { return log_softmax(v[0], -1); }, {x}) <= 1e-6);
  Tensor logits = random_input({6, 5}, true);
  Tensor target = tensor_from<int64_t>({0, 4, 2, 1, 3, 2}, {6});
  Tensor weight = uniform({5}, 0.5, 2.0, DType::f64);
  CHECK(gradcheck("cross_entropy", [&](auto& v) { return cross_entropy(v[0], target); }, {logits}) <= 1e-6);
  CHECK(gradcheck("cross_entropy weighted smoothed ignore", [&](auto& v) {
    Tensor t = tensor_from<int64_t>({0, -100, 2, 1, 3, 2}, {6});
    return cross_entropy(v[0], t, weight, Reduction::mean, -100, 0.2);
  }, {logits}) <= 1e-6);
  CHECK(gradcheck("cross_entropy none", [&](auto& v) { return cross_entropy(v[0], target, weight, Reduction::none); },
                  {logits}) <= 1e-6);
  CHECK(gradcheck("cross_entropy sum smoothing", [&](auto& v) {
    return cross_entropy(v[0], target, Tensor(), Reduction::sum, -100, 0.1);
  }, {logits}) <= 1e-6);
  CHECK(gradcheck("nll_loss", [&](auto& v) { return nll_loss(log_softmax(v[0], 1), target, weight); }, {logits}) <= 1e-6);
  Tensor a = random_input({4, 3}, true), b = random_input({4, 3});
  CHECK(gradcheck("mse_loss", [](auto& v) { return mse_loss(v[0], v[1]); }, {a, b}) <= 1e-6);
}

TEST_CASE("gradcheck: dropout (replayed mask), cat, stack, pad") {
  Tensor x = random_input({4, 6}, true);
  CHECK(gradcheck("dropout", [](auto& v) {
    manual_seed(77);  // the same Philox mask on every evaluation
    return dropout(v[0], 0.3, true);
  }, {x}) <= 1e-6);
  Tensor a = random_input({2, 3}, true), b = random_input({2, 5}), c = random_input({2, 3});
  CHECK(gradcheck("cat", [](auto& v) { return cat({v[0], v[1]}, 1); }, {a, b}) <= 1e-6);
  CHECK(gradcheck("stack", [](auto& v) { return stack({v[0], v[1]}, 1); }, {a, c}) <= 1e-6);
  CHECK(gradcheck("pad", [](auto& v) { return pad(v[0], {1, 2, 0, 1}, 0.5); }, {a}) <= 1e-6);
}
