// Autocast: the dtype each op returns inside a region (PyTorch's lists), f64 left alone, the
// region's nesting and restore, the cached f16 weight copies (one per parameter per region,
// tagged param_f16, freed with the graph after backward), and gradients reaching the f32 master
// weights in f32.
#include <doctest/doctest.h>

#include <memory>

#include "engine/core/generator.h"
#include "engine/memory/tag.h"
#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/linear.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "support/tensor_host.h"

using namespace kiln;

namespace {
Tensor param(const Shape& s) {
  MemoryScope ms(MemoryTag::param);
  Tensor t = randn(s);
  t.set_requires_grad(true);
  return t;
}
}  // namespace

TEST_CASE("autocast: off by default, the guard nests and restores") {
  CHECK_FALSE(autocast_enabled());
  {
    AutocastGuard on;
    CHECK(autocast_enabled());
    CHECK(autocast_dtype() == DType::f16);
    {
      AutocastGuard off(false);
      CHECK_FALSE(autocast_enabled());
    }
    CHECK(autocast_enabled());
  }
  CHECK_FALSE(autocast_enabled());
  CHECK_THROWS_AS((void)AutocastGuard(true, DType::f32), Error);
}

TEST_CASE("autocast: output dtypes per op") {
  manual_seed(3);
  Tensor x = randn({2, 3, 6, 6}), w = param({4, 3, 3, 3}), b = param({4});
  Tensor a = randn({5, 7}), m = randn({7, 3}), lw = param({3, 7}), lb = param({3});
  Tensor y = tensor_from<int64_t>({0, 2, 1, 0, 2}, {5});
  Tensor rm = zeros({4}), rv = ones({4}), bw = param({4}), bb = param({4});
  AutocastGuard on;
  // lower-precision list
  Tensor c = conv2d(x, w, b, {1, 1}, {1, 1});
  CHECK(c.dtype() == DType::f16);
  CHECK(matmul(a, m).dtype() == DType::f16);
  Tensor logits = linear(a, lw, lb);
  CHECK(logits.dtype() == DType::f16);
  // f32 list (f16 inputs are upcast)
  CHECK(softmax(logits, 1).dtype() == DType::f32);
  CHECK(log_softmax(logits, 1).dtype() == DType::f32);
  CHECK(cross_entropy(logits, y).dtype() == DType::f32);
  CHECK(nll_loss(log_softmax(logits, 1), y).dtype() == DType::f32);
  CHECK(mse_loss(logits, to_dtype(zeros({5, 3}), DType::f16)).dtype() == DType::f32);
  CHECK(sum(logits).dtype() == DType::f32);
  CHECK(mean(logits, {1}).dtype() == DType::f32);
  // batch_norm: statistics in f32 (running stats stay f32), output in the input's dtype
  Tensor bn = batch_norm(c, bw, bb, rm, rv, true);
  CHECK(bn.dtype() == DType::f16);
  CHECK(rm.dtype() == DType::f32);
  CHECK(rm.to_vector<float>()[0] != 0.0f);  // updated
  // everything else follows its inputs
  CHECK(relu(c).dtype() == DType::f16);
  CHECK(max_pool2d(c, {2, 2}).dtype() == DType::f16);
  CHECK(add(c, c).dtype() == DType::f16);
  CHECK(relu(x).dtype() == DType::f32);
  // f64 is never cast
  Tensor a64 = to_dtype(a, DType::f64), m64 = to_dtype(m, DType::f64);
  CHECK(matmul(a64, m64).dtype() == DType::f64);
}

TEST_CASE("autocast: f16 results match the f32 op to f16 accuracy, outside a region ops follow inputs") {
  manual_seed(5);
  Tensor x = randn({2, 3, 8, 8}), w = param({6, 3, 3, 3});
  Tensor ref = conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  CHECK(ref.dtype() == DType::f32);
  Tensor got;
  {
    AutocastGuard on;
    got = conv2d(x, w, Tensor(), {1, 1}, {1, 1});
  }
  CHECK(got.dtype() == DType::f16);
  const double err = test::rel_error(to_dtype(got, DType::f32), ref);
  CHECK(err < 2e-3);
  CHECK(err > 0.0);  // really computed from rounded operands
  CHECK(softmax(to_dtype(x, DType::f16), 1).dtype() == DType::f16);
}

TEST_CASE("autocast: one cached f16 copy per parameter, tagged param_f16, freed after backward") {
  manual_seed(7);
  Tensor x = randn({4, 8}), w = param({8, 8});
  std::weak_ptr<StorageImpl> copy;
  Tensor loss;
  {
    AutocastGuard on;
    Tensor h = linear(x, w);          // w used twice in one region: one cast
    Tensor o = linear(relu(h), w);
    CHECK(autocast_detail::cache_size() == 1);
    Tensor c1 = autocast_detail::to_lower(w), c2 = autocast_detail::to_lower(w);
    CHECK(c1.is_same(c2));
    CHECK(c1.dtype() == DType::f16);
    CHECK(c1.storage()->tag == MemoryTag::param_f16);
    CHECK(w.storage()->tag == MemoryTag::param);
    CHECK(h.storage()->tag != MemoryTag::param_f16);  // activations are not weight copies
    copy = c1.storage();
    loss = sum(o);
  }
  CHECK(autocast_detail::cache_size() == 0);  // leaving the region drops the cache...
  CHECK_FALSE(copy.expired());                // ...but the graph still holds the copy
  loss.backward();
  CHECK(copy.expired());  // freed with the graph
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::f32);  // master gradient in f32
  CHECK(w.dtype() == DType::f32);
  CHECK(std::string(tag_name(MemoryTag::param_f16)) == "param_f16");
}

TEST_CASE("autocast: gradients through a small conv net match f32 to f16 accuracy") {
  manual_seed(11);
  auto conv = std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1);
  auto bn = std::make_shared<nn::BatchNorm2d>(4);
  auto fc = std::make_shared<nn::Linear>(4 * 4 * 4, 3);
  Tensor x = randn({3, 2, 8, 8});
  Tensor y = tensor_from<int64_t>({0, 1, 2}, {3});
  auto run = [&](bool amp) {
    conv->zero_grad();
    bn->zero_grad();
    fc->zero_grad();
    Tensor loss;
    {
      AutocastGuard g(amp);
      Tensor h = max_pool2d(relu((*bn)((*conv)(x))), {2, 2});
      loss = cross_entropy((*fc)(flatten(h, 1)), y);
    }
    CHECK(loss.dtype() == DType::f32);
    loss.backward();
    return std::vector<Tensor>{clone(conv->weight.grad()), clone(fc->weight.grad()), clone(bn->weight.grad())};
  };
  std::vector<Tensor> ref = run(false), got = run(true);
  for (size_t i = 0; i < ref.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].dtype() == DType::f32);
    CHECK(test::rel_error(got[i], ref[i]) < 2e-2);
  }
}
