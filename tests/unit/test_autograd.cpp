// Autograd behaviour and its error messages: accumulation, no_grad, detach, retain_graph,
// version checks on saved tensors, bad shapes and dtypes.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "engine/autograd/grad_mode.h"
#include "engine/ops/ops.h"
#include "engine/train/memory_peak.h"

using namespace kiln;

static bool throws_with(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.find(needle) == std::string::npos) {
      MESSAGE("message was: ", m);
      return false;
    }
    return true;
  }
  return false;
}

TEST_CASE("leaf gradients accumulate across backward calls and zero_grad clears them") {
  Tensor x = tensor_from<double>({1, 2, 3}, {3}).set_requires_grad(true);
  sum(mul(x, x)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  sum(mul(x, 3.0)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5, 7, 9});
  x.zero_grad();
  CHECK(!x.grad().defined());
}

TEST_CASE("no_grad records nothing and detach cuts history") {
  Tensor x = ones({2}, DType::f64).set_requires_grad(true);
  {
    NoGradGuard ng;
    Tensor y = mul(x, 2.0);
    CHECK(!y.requires_grad());
  }
  Tensor d = mul(x, 2.0).detach();
  CHECK(!d.requires_grad());
  CHECK(mul(x, 2.0).requires_grad());
}

TEST_CASE("backward with an explicit gradient and from a non-scalar without one") {
  Tensor x = tensor_from<double>({1, 2}, {2}).set_requires_grad(true);
  Tensor y = mul(x, x);
  y.backward(tensor_from<double>({1, 10}, {2}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 40});
  Tensor z = mul(x, x);
  CHECK(throws_with([&] { z.backward(); }, "implicitly created only for one-element outputs"));
  CHECK(throws_with([&] { z.backward(ones({3}, DType::f64)); }, "does not match the output shape"));
}

TEST_CASE("backward twice without retain_graph fails clearly, with it, works") {
  Tensor x = tensor_from<double>({1, 2}, {2}).set_requires_grad(true);
  Tensor l = sum(mul(x, x));
  l.backward(Tensor(), true);
  l.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 8});
  CHECK(throws_with([&] { l.backward(); }, "backward through the graph a second time"));
}

TEST_CASE("in-place change of a saved tensor is detected, naming op, shape and versions") {
  Tensor x = tensor_from<double>({1, 2}, {2}).set_requires_grad(true);
  Tensor e = exp(x);
  Tensor s = sum(e);
  add_(e, 1.0);
  CHECK(throws_with([&] { s.backward(); }, "exp: a tensor f64 (2,) cpu saved for backward was modified by an in-place operation (saved at version 0, now at version 1)"));
}

TEST_CASE("in-place on a leaf that requires grad is refused") {
  Tensor x = ones({2}, DType::f64).set_requires_grad(true);
  CHECK(throws_with([&] { add_(x, 1.0); }, "leaf tensor"));
  NoGradGuard ng;
  add_(x, 1.0);
  CHECK(x.to_vector<double>() == std::vector<double>{2, 2});
}

TEST_CASE("bad input: shapes, dtypes, dims are kiln::Error naming the op and shapes") {
  Tensor a = ones({2, 3}), b = ones({4, 3}), d = ones({2, 3}, DType::f64);
  CHECK(throws_with([&] { add(a, b); }, "add: shapes (2, 3) and (4, 3) cannot be broadcast"));
  CHECK(throws_with([&] { mul(a, d); }, "mul: dtype mismatch: f32 (2, 3) cpu and f64 (2, 3) cpu"));
  CHECK(throws_with([&] { sum(a, {2}); }, "sum: dim 2 out of range for a tensor of 2 dims"));
  CHECK(throws_with([&] { matmul(a, b); }, "matmul: shapes (2, 3) and (4, 3) cannot be multiplied"));
  CHECK(throws_with([&] { view(a, {5}); }, "view: shape (5,) is invalid for input of shape (2, 3)"));
  CHECK(throws_with([&] { view(transpose(a, 0, 1), {6}); }, "without a copy"));
  CHECK(throws_with([&] { permute(a, {0, 0}); }, "permute: dim 0 repeated"));
}

TEST_CASE("views share storage, reshape copies only when it must") {
  Tensor a = tensor_from<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = transpose(a, 0, 1);
  CHECK(!t.is_contiguous());
  CHECK(t.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  Tensor r = reshape(t, {6});
  CHECK(r.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(r.storage() != a.storage());
  Tensor v = view(a, {3, 2});
  CHECK(v.storage() == a.storage());
  Tensor e = expand(unsqueeze(select(a, 0, 1), 0), {2, 3});
  CHECK(e.to_vector<float>() == std::vector<float>{3, 4, 5, 3, 4, 5});
  CHECK(e.strides()[0] == 0);
  Tensor s = slice(a, 1, 0, 3, 2);
  CHECK(s.to_vector<float>() == std::vector<float>{0, 2, 3, 5});
}

TEST_CASE("every op runs on the meta device without storage data") {
  Tensor x = empty({4, 3}, DType::f32, Device::meta());
  Tensor w = empty({5, 3}, DType::f32, Device::meta());
  Tensor y = relu(linear(x, w));
  CHECK(y.sizes() == Shape{4, 5});
  CHECK(y.device().is_meta());
  Tensor s = sum(mul(y, y), {1});
  CHECK(s.sizes() == Shape{4});
}

TEST_CASE("casts: f32 <-> f16 <-> bf16 round to nearest even") {
  Tensor a = tensor_from<float>({1.0f, 1.0009765625f, 65520.0f, -2.5f}, {4});
  Tensor h = to_dtype(a, DType::f16);
  CHECK(to_dtype(h, DType::f32).to_vector<float>() == std::vector<float>{1.0f, 1.0009765625f, INFINITY, -2.5f});
  Tensor i = to_dtype(a, DType::i64);
  CHECK(i.to_vector<int64_t>()[3] == -2);
}

TEST_CASE("autograd: linear's weight gradient is made in the weight's layout and the leaf keeps that buffer (no copy)") {
  // linear is matmul(x, transpose(w)): the gradient of the transposed operand is computed as g^T x, in w's
  // own (out, in) layout, so AccumulateGrad takes it instead of copying a transposed (in, out) buffer
  // (a strided copy of every linear weight each step). Backward's extra peak is then one weight's bytes,
  // not two.
  const int64_t out = 256, in = 512, batch = 8;
  std::vector<float> xv((size_t)(batch * in));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = (float)((i * 37) % 11) - 5.0f;
  Tensor x = tensor_from<float>(xv, {batch, in});
  Tensor w = zeros({out, in}, DType::f32).set_requires_grad(true);
  Tensor loss = sum(linear(x, w));
  const Device cpu = Device::cpu();
  reset_peak_memory(cpu);
  REQUIRE(peak_memory_bytes(cpu) >= 0);
  int64_t live = 0;
  for (int64_t b : live_tag_bytes(cpu)) live += b;
  loss.backward();
  const int64_t extra = peak_memory_bytes(cpu) - live, wbytes = out * in * 4;
  MESSAGE("backward's peak above the live bytes: ", extra, " for a weight of ", wbytes);
  CHECK(extra < wbytes + wbytes / 2);
  REQUIRE(w.grad().defined());
  CHECK(w.grad().is_contiguous());
  CHECK(w.grad().sizes() == Shape{out, in});
  // d sum / d w[o][i] = sum over the batch of x[b][i], the same in every row
  const std::vector<float> g = w.grad().to_vector<float>();
  for (int64_t i = 0; i < in; ++i) {
    float s = 0;
    for (int64_t b = 0; b < batch; ++b) s += xv[(size_t)(b * in + i)];
    CHECK(g[(size_t)i] == s);
    CHECK(g[(size_t)((out - 1) * in + i)] == s);
  }
}
