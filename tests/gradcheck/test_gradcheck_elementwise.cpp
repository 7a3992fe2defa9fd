// Gradients of elementwise, reduction, view and matmul ops by f64 central differences, on
// random, non-contiguous and broadcast inputs.
#include "support/gradcheck.h"

using namespace kiln;
using kiln::test::gradcheck;
using kiln::test::random_input;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

TEST_CASE("gradcheck: binary ops with broadcasting and non-contiguous inputs") {
  manual_seed(1);
  struct Case { const char* name; Fn f; double lo, hi; };
  std::vector<Case> cases = {
      {"add", [](auto& x) { return add(x[0], x[1], 0.7); }, -1, 1},
      {"sub", [](auto& x) { return sub(x[0], x[1]); }, -1, 1},
      {"mul", [](auto& x) { return mul(x[0], x[1]); }, -1, 1},
      {"div", [](auto& x) { return div(x[0], x[1]); }, 0.5, 2},
      {"pow", [](auto& x) { return pow(x[0], x[1]); }, 0.5, 2},
      {"maximum", [](auto& x) { return maximum(x[0], x[1]); }, -1, 1},
      {"minimum", [](auto& x) { return minimum(x[0], x[1]); }, -1, 1},
  };
  for (auto& c : cases) {
    for (bool nc : {false, true}) {
      Tensor a = random_input({3, 4, 5}, nc, c.lo, c.hi);
      Tensor b = random_input({4, 1}, false, c.lo, c.hi);  // broadcast
      CAPTURE(c.name);
      CHECK(gradcheck(c.name, c.f, {a, b}) <= 1e-6);
      Tensor d = random_input({3, 4, 5}, !nc, c.lo, c.hi);
      CHECK(gradcheck(c.name, c.f, {a, d}) <= 1e-6);
    }
  }
}

TEST_CASE("gradcheck: unary ops") {
  manual_seed(2);
  struct Case { const char* name; Fn f; double lo, hi; };
  std::vector<Case> cases = {
      {"neg", [](auto& x) { return neg(x[0]); }, -1, 1},
      {"exp", [](auto& x) { return exp(x[0]); }, -1, 1},
      {"log", [](auto& x) { return log(x[0]); }, 0.2, 2},
      {"sqrt", [](auto& x) { return sqrt(x[0]); }, 0.2, 2},
      {"rsqrt", [](auto& x) { return rsqrt(x[0]); }, 0.2, 2},
      {"abs", [](auto& x) { return abs(x[0]); }, -1, 1},
      {"relu", [](auto& x) { return relu(x[0]); }, -1, 1},
      {"leaky_relu", [](auto& x) { return leaky_relu(x[0], 0.2); }, -1, 1},
      {"gelu", [](auto& x) { return gelu(x[0]); }, -2, 2},
      {"sigmoid", [](auto& x) { return sigmoid(x[0]); }, -2, 2},
      {"tanh", [](auto& x) { return tanh(x[0]); }, -2, 2},
      {"clamp", [](auto& x) { return clamp(x[0], -0.5, 0.6); }, -1, 1},
      {"pow_scalar", [](auto& x) { return pow(x[0], 3.0); }, -1, 1},
      {"pow_scalar 0.5 (sqrt)", [](auto& x) { return pow(x[0], 0.5); }, 0.2, 2},
      {"pow_scalar -0.5 (rsqrt)", [](auto& x) { return pow(x[0], -0.5); }, 0.2, 2},
      {"pow_scalar -1", [](auto& x) { return pow(x[0], -1.0); }, 0.2, 2},
      {"pow_scalar -2", [](auto& x) { return pow(x[0], -2.0); }, 0.2, 2},
      {"pow_scalar 1.5", [](auto& x) { return pow(x[0], 1.5); }, 0.2, 2},
      {"mul_scalar", [](auto& x) { return mul(add(x[0], 0.5), -2.5); }, -1, 1},
      {"rsub", [](auto& x) { return rsub(x[0], 2.0); }, -1, 1},
  };
  for (auto& c : cases)
    for (bool nc : {false, true}) {
      CAPTURE(c.name);
      CHECK(gradcheck(c.name, c.f, {random_input({4, 6}, nc, c.lo, c.hi)}) <= 1e-6);
    }
}

TEST_CASE("gradcheck: where with broadcast condition") {
  manual_seed(3);
  Tensor a = random_input({3, 4}, true), b = random_input({4}, false);
  Tensor cond = gt(uniform({3, 1}, -1, 1, DType::f64), 0.0);
  CHECK(gradcheck("where", [&](auto& x) { return where(cond, x[0], x[1]); }, {a, b}) <= 1e-6);
}

TEST_CASE("gradcheck: reductions") {
  manual_seed(4);
  for (bool nc : {false, true}) {
    Tensor x = random_input({3, 4, 5}, nc);
    CHECK(gradcheck("sum all", [](auto& v) { return sum(v[0]); }, {x}) <= 1e-6);
    CHECK(gradcheck("sum dims", [](auto& v) { return sum(v[0], {0, 2}); }, {x}) <= 1e-6);
    CHECK(gradcheck("sum keepdim", [](auto& v) { return sum(v[0], {1}, true); }, {x}) <= 1e-6);
    CHECK(gradcheck("mean", [](auto& v) { return mean(v[0], {-1}); }, {x}) <= 1e-6);
    CHECK(gradcheck("var", [](auto& v) { return var(v[0], {1}); }, {x}) <= 1e-6);
    CHECK(gradcheck("var biased", [](auto& v) { return var(v[0], {0, 2}, false, true); }, {x}) <= 1e-6);
    CHECK(gradcheck("max", [](auto& v) { return max(v[0], 1).values; }, {x}) <= 1e-6);
    CHECK(gradcheck("min", [](auto& v) { return min(v[0], 2, true).values; }, {x}) <= 1e-6);
    // over all elements (random values: no ties, so the gradient is one-hot and differentiable)
    CHECK(gradcheck("max all", [](auto& v) { return max(v[0]); }, {x}) <= 1e-6);
    CHECK(gradcheck("min all", [](auto& v) { return min(v[0]); }, {x}) <= 1e-6);
  }
}

TEST_CASE("gradcheck: pow with a tensor exponent at a = 0 (where torch masks the gradient)") {
  // a holds exact zeros; with integer exponents 2 and 3 pow is differentiable there in both a and b
  // (d/da = b * 0^(b-1) = 0, d/db = 0 since 0^b is flat for b > 0). The unmasked formula gives
  // 0 * log(0) = NaN for d/db.
  Tensor a = tensor_from<double>({0.0, 0.7, 0.0, 1.3, 0.0, 0.4}, {2, 3}).set_requires_grad(true);
  Tensor b = tensor_from<double>({2.0, 3.0, 3.0, 2.0, 2.0, 3.0}, {2, 3}).set_requires_grad(true);
  CHECK(gradcheck("pow at a = 0, integer b", [](auto& v) { return pow(v[0], v[1]); }, {a, b}) <= 1e-6);
  // b = 0 (a constant): d/da is 0 everywhere, also at a = 0 where b * a^(b-1) would be 0 * inf.
  Tensor a2 = tensor_from<double>({0.0, 0.5, 0.0, 2.0}, {4}).set_requires_grad(true);
  Tensor b0 = zeros({4}, DType::f64);
  CHECK(gradcheck("pow at a = 0, b = 0", [&](auto& v) { return pow(v[0], b0); }, {a2}) <= 1e-6);
}

TEST_CASE("gradcheck: views") {
  manual_seed(5);
  Tensor x = random_input({2, 3, 4}, true);
  CHECK(gradcheck("reshape", [](auto& v) { return mul(reshape(v[0], {6, 4}), reshape(v[0], {6, 4})); }, {x}) <= 1e-6);
  CHECK(gradcheck("permute", [](auto& v) { return exp(permute(v[0], {2, 0, 1})); }, {x}) <= 1e-6);
  CHECK(gradcheck("transpose", [](auto& v) { return exp(transpose(v[0], 0, 2)); }, {x}) <= 1e-6);
  CHECK(gradcheck("narrow", [](auto& v) { return exp(narrow(v[0], 2, 1, 2)); }, {x}) <= 1e-6);
  CHECK(gradcheck("slice step", [](auto& v) { return exp(slice(v[0], 2, 0, 4, 2)); }, {x}) <= 1e-6);
  CHECK(gradcheck("select", [](auto& v) { return exp(select(v[0], 1, -1)); }, {x}) <= 1e-6);
  CHECK(gradcheck("expand", [](auto& v) { return exp(expand(unsqueeze(v[0], 0), {3, 2, 3, 4})); }, {x}) <= 1e-6);
  CHECK(gradcheck("squeeze", [](auto& v) { return exp(squeeze(narrow(v[0], 1, 0, 1), 1)); }, {x}) <= 1e-6);
  CHECK(gradcheck("flatten", [](auto& v) { return exp(flatten(v[0], 1)); }, {x}) <= 1e-6);
  CHECK(gradcheck("contiguous", [](auto& v) { return mul(contiguous(v[0]), 3.0); }, {x}) <= 1e-6);
}

TEST_CASE("gradcheck: matmul and linear") {
  manual_seed(6);
  for (bool nc : {false, true}) {
    Tensor a = random_input({3, 4}, nc), b = random_input({4, 5}, !nc);
    CHECK(gradcheck("matmul 2d", [](auto& v) { return matmul(v[0], v[1]); }, {a, b}) <= 1e-6);
    Tensor ba = random_input({2, 3, 4}, nc), bb = random_input({4, 2}, false);
    CHECK(gradcheck("matmul batched broadcast", [](auto& v) { return matmul(v[0], v[1]); }, {ba, bb}) <= 1e-6);
    Tensor va = random_input({4}, false);
    CHECK(gradcheck("matmul 1d", [](auto& v) { return matmul(v[0], v[1]); }, {va, b}) <= 1e-6);
    Tensor x = random_input({5, 4}, nc), w = random_input({3, 4}, false), bias = random_input({3}, false);
    CHECK(gradcheck("linear", [](auto& v) { return linear(v[0], v[1], v[2]); }, {x, w, bias}) <= 1e-6);
  }
}

TEST_CASE("gradcheck: in-place ops on non-leaf tensors") {
  manual_seed(7);
  Tensor x = random_input({3, 4}, false), y = random_input({3, 4}, false);
  CHECK(gradcheck("relu_", [](auto& v) { Tensor t = mul(v[0], 2.0); relu_(t); return t; }, {x}) <= 1e-6);
  CHECK(gradcheck("add_", [](auto& v) { Tensor t = mul(v[0], 1.5); add_(t, v[1], 0.5); return t; }, {x, y}) <= 1e-6);
  CHECK(gradcheck("mul_", [](auto& v) { Tensor t = add(mul(v[0], v[0]), 0.0); mul_(t, v[1]); return t; }, {x, y}) <= 1e-6);
  CHECK(gradcheck("gradient accumulation (x used twice)", [](auto& v) { return add(mul(v[0], v[0]), exp(v[0])); },
                  {x}) <= 1e-6);
}
