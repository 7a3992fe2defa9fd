// NaN, +-inf, +-0 and exact ties through every CPU op kiln has, forward and backward, against
// PyTorch 1.13 element by element (support/oracle/parity_exact.h): a NaN torch gives must be a NaN in
// kiln, never a 0 (kiln's relu once turned NaN images into a finite loss and a NaN model).
// Also the cases of issue 14: whole-tensor max/min with ties (gradient split evenly), pow at a = 0
// with a tensor exponent, maximum/minimum with a NaN side, and upstream gradients holding NaN where
// torch masks them.
#include <doctest/doctest.h>

#include "support/oracle/parity_exact.h"

using namespace kiln;
using kiln::test::exact_case;
using kiln::test::ExactCase;
using kiln::test::leaf;
using V = std::vector<Tensor>;

namespace {

const float kNan = NAN, kInf = INFINITY;
// The special values every unary op sees: NaN, +-inf, +-0, and ordinary numbers around the kinks.
const std::vector<float> kSpecial = {kNan, kInf, -kInf, 0.f, -0.f, 0.5f, -0.5f, 1.f, -1.f, 2.5f, -3.f};

Tensor special() { return leaf(kSpecial, {(int64_t)kSpecial.size()}); }

// Every (a, b) pair of special values, as two (n*n) vectors.
std::pair<Tensor, Tensor> special_pairs() {
  std::vector<float> a, b;
  for (float x : kSpecial)
    for (float y : kSpecial) {
      a.push_back(x);
      b.push_back(y);
    }
  const int64_t n = (int64_t)a.size();
  return {leaf(a, {n}), leaf(b, {n})};
}

// An upstream gradient of ones with a NaN at every third element (checks torch's masking).
Tensor ones_with_nan(const Shape& s) {
  std::vector<float> v((size_t)numel_of(s), 1.f);
  for (size_t i = 0; i < v.size(); i += 3) v[i] = kNan;
  return tensor_from<float>(v, s);
}

}  // namespace

TEST_CASE("parity with PyTorch: NaN, inf and signed zeros through unary ops, forward and backward") {
  std::vector<ExactCase> cs;
  auto unary = [&](const std::string& label, const std::string& op, nlohmann::json kw,
                   std::function<Tensor(const Tensor&)> f, std::vector<oracle::Arg> extra = {}) {
    cs.push_back(exact_case(label, op, {special()}, kw, [f](const V& x) { return V{f(x[0])}; }, extra));
  };
  unary("neg", "neg", {}, [](const Tensor& x) { return neg(x); });
  unary("exp", "exp", {}, [](const Tensor& x) { return exp(x); });
  unary("log", "log", {}, [](const Tensor& x) { return log(x); });
  unary("sqrt", "sqrt", {}, [](const Tensor& x) { return sqrt(x); });
  unary("rsqrt", "rsqrt", {}, [](const Tensor& x) { return rsqrt(x); });
  unary("abs", "abs", {}, [](const Tensor& x) { return abs(x); });
  unary("relu", "relu", {}, [](const Tensor& x) { return relu(x); });
  unary("relu_ (in place on a non-leaf)", "relu", {}, [](const Tensor& x) {
    Tensor t = mul(x, 1.0);
    relu_(t);
    return t;
  });
  unary("leaky_relu", "leaky_relu", {{"negative_slope", 0.1}}, [](const Tensor& x) { return leaky_relu(x, 0.1); });
  unary("gelu", "gelu", {}, [](const Tensor& x) { return gelu(x); });
  unary("sigmoid", "sigmoid", {}, [](const Tensor& x) { return sigmoid(x); });
  unary("tanh", "tanh", {}, [](const Tensor& x) { return tanh(x); });
  unary("clamp both", "clamp", {{"min", -0.5}, {"max", 0.6}}, [](const Tensor& x) { return clamp(x, -0.5, 0.6); });
  unary("clamp min", "clamp", {{"min", 0.0}}, [](const Tensor& x) { return clamp(x, 0.0, std::nullopt); });
  unary("clamp max", "clamp", {{"max", 0.3}}, [](const Tensor& x) { return clamp(x, std::nullopt, 0.3); });
  for (double p : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.5, 1.0, 0.0, -3.0})
    unary("pow scalar " + std::to_string(p), "pow", {}, [p](const Tensor& x) { return pow(x, p); }, {p});
  unary("add scalar", "add", {}, [](const Tensor& x) { return add(x, 2.0); }, {2.0});
  unary("mul scalar", "mul", {}, [](const Tensor& x) { return mul(x, -1.5); }, {-1.5});
  unary("rsub scalar", "rsub", {}, [](const Tensor& x) { return rsub(x, 1.0); }, {1.0});
  // Upstream gradients holding NaN: masked ops give exactly 0 where torch masks.
  for (const char* op : {"relu", "clamp"}) {
    auto c = exact_case(std::string(op) + " with a NaN upstream gradient", op,
                        {special()}, op == std::string("clamp") ? nlohmann::json{{"min", -0.5}, {"max", 0.6}} : nlohmann::json::object(),
                        [op](const V& x) { return V{op == std::string("clamp") ? clamp(x[0], -0.5, 0.6) : relu(x[0])}; });
    c.grad_out = {ones_with_nan({(int64_t)kSpecial.size()})};
    cs.push_back(c);
  }
  int n = kiln::test::run_exact_cases(cs, "unary");
  MESSAGE("non-finite unary parity: ", cs.size(), " cases, ", n, " tensors compared with PyTorch");
}

TEST_CASE("parity with PyTorch: NaN and inf through binary ops, every pair of special values") {
  std::vector<ExactCase> cs;
  auto binary = [&](const std::string& label, const std::string& op, nlohmann::json kw,
                    std::function<Tensor(const Tensor&, const Tensor&)> f, bool nan_grad = false) {
    auto [a, b] = special_pairs();
    auto c = exact_case(label, op, {a, b}, kw, [f](const V& x) { return V{f(x[0], x[1])}; });
    if (nan_grad) c.grad_out = {ones_with_nan(a.sizes())};
    cs.push_back(c);
  };
  binary("add", "add", {}, [](const Tensor& a, const Tensor& b) { return add(a, b); });
  binary("add alpha", "add", {{"alpha", 0.5}}, [](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); });
  binary("sub", "sub", {}, [](const Tensor& a, const Tensor& b) { return sub(a, b); });
  binary("mul", "mul", {}, [](const Tensor& a, const Tensor& b) { return mul(a, b); });
  binary("div", "div", {}, [](const Tensor& a, const Tensor& b) { return div(a, b); });
  binary("pow (tensor exponent)", "pow", {}, [](const Tensor& a, const Tensor& b) { return pow(a, b); });
  binary("maximum", "maximum", {}, [](const Tensor& a, const Tensor& b) { return maximum(a, b); });
  binary("minimum", "minimum", {}, [](const Tensor& a, const Tensor& b) { return minimum(a, b); });
  binary("maximum, NaN upstream gradient", "maximum", {}, [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, true);
  binary("pow, NaN upstream gradient", "pow", {}, [](const Tensor& a, const Tensor& b) { return pow(a, b); }, true);
  {  // where: NaN in the branch not taken must not leak into the output or the other gradient
    Tensor a = leaf({kNan, 1.f, kInf, -kInf, 2.f, kNan}, {6}), b = leaf({0.f, kNan, 3.f, kNan, -kInf, 1.f}, {6});
    Tensor cond = tensor_from<uint8_t>({1, 0, 1, 0, 0, 1}, {6});
    ExactCase c;
    c.label = "where";
    c.torch_case.op = "where";
    c.torch_case.inputs = {test::to_host(cond), test::to_host(a), test::to_host(b)};
    c.torch_case.requires_grad = {0, 1, 1};
    c.inputs = {a, b};
    c.torch_index = {1, 2};
    c.run = [cond](const V& x) { return V{where(cond, x[0], x[1])}; };
    cs.push_back(c);
  }
  int n = kiln::test::run_exact_cases(cs, "binary");
  MESSAGE("non-finite binary parity: ", cs.size(), " cases, ", n, " tensors compared with PyTorch");
}

TEST_CASE("parity with PyTorch: reductions with NaN, inf and ties, whole-tensor max/min split ties evenly") {
  std::vector<ExactCase> cs;
  // rows: a NaN; +inf and -inf (sum NaN); ties at the max and min; all -inf; ordinary
  const std::vector<float> rows = {1.f,   kNan, 2.f,  kNan, 0.f,    //
                                   kInf, -kInf, 1.f,  2.f,  3.f,    //
                                   3.f,   3.f,  1.f,  3.f,  1.f,    //
                                   -kInf, -kInf, -kInf, -kInf, -kInf,  //
                                   0.5f, -2.f,  4.f,  1.f,  -1.f};
  auto red = [&](const std::string& label, const std::string& op, nlohmann::json kw, std::function<V(const Tensor&)> f,
                 std::vector<float> v = {}, Shape s = {5, 5}) {
    if (v.empty()) v = rows;
    cs.push_back(exact_case(label, op, {leaf(v, s)}, kw, [f](const V& x) { return f(x[0]); }));
  };
  red("sum dim", "sum", {{"dim", 1}}, [](const Tensor& x) { return V{sum(x, {1})}; });
  red("sum all", "sum", {}, [](const Tensor& x) { return V{sum(x)}; });
  red("mean dim", "mean", {{"dim", 1}}, [](const Tensor& x) { return V{mean(x, {1})}; });
  red("var dim", "var", {{"dim", 1}}, [](const Tensor& x) { return V{var(x, {1})}; });
  red("max dim (first NaN, first tie)", "max", {{"dim", 1}}, [](const Tensor& x) {
    auto r = max(x, 1);
    return V{r.values, r.indices};
  });
  red("min dim", "min", {{"dim", 1}}, [](const Tensor& x) {
    auto r = min(x, 1);
    return V{r.values, r.indices};
  });
  red("max dim 0", "max", {{"dim", 0}}, [](const Tensor& x) {
    auto r = max(x, 0);
    return V{r.values, r.indices};
  });
  // Issue 14's cases for the whole-tensor form: torch splits the gradient among the tied elements.
  red("max all, ties [[1,3,3],[1,2,3]]", "max", {}, [](const Tensor& x) { return V{max(x)}; }, {1, 3, 3, 1, 2, 3}, {2, 3});
  red("min all, ties", "min", {}, [](const Tensor& x) { return V{min(x)}; }, {1, 3, 1, 1, 2, 3}, {2, 3});
  red("max all, two NaNs", "max", {}, [](const Tensor& x) { return V{max(x)}; }, {1, kNan, 3, kNan, kInf, 3}, {2, 3});
  red("min all, two -inf", "min", {}, [](const Tensor& x) { return V{min(x)}; }, {1, -kInf, 3, 0, -kInf, 3}, {2, 3});
  red("max all, all -inf", "max", {}, [](const Tensor& x) { return V{max(x)}; }, {-kInf, -kInf, -kInf}, {3});
  red("max all, the 5x5 rows (one NaN-led)", "max", {}, [](const Tensor& x) { return V{max(x)}; });
  red("max all, no tie", "max", {}, [](const Tensor& x) { return V{max(x)}; }, {0.5f, -2.f, 4.f, 1.f}, {2, 2});
  {
    Tensor x = tensor_from<float>(rows, {5, 5});  // no gradient: a torch input without grad
    cs.push_back(exact_case("argmax with NaN", "argmax", {}, {{"dim", 1}}, [x](const V&) { return V{argmax(x, 1)}; },
                            {test::to_host(x)}));
  }
  {
    auto c = exact_case("max all, NaN upstream gradient", "max", {leaf({1, 3, 3, 1, 2, 3}, {2, 3})}, {},
                        [](const V& x) { return V{max(x[0])}; });
    c.grad_out = {tensor_from<float>({kNan}, {})};
    cs.push_back(c);
  }
  int n = kiln::test::run_exact_cases(cs, "reduce");
  MESSAGE("non-finite reduction parity: ", cs.size(), " cases, ", n, " tensors compared with PyTorch");
}

TEST_CASE("parity with PyTorch: NaN and inf through softmax, losses, pools, batch norm, linear and conv") {
  std::vector<ExactCase> cs;
  const std::vector<float> sm = {kInf, 1, 2, kNan, 1, 2, -kInf, -kInf, 1, -kInf, -kInf, -kInf, 1, 2, 3};
  cs.push_back(exact_case("softmax", "softmax", {leaf(sm, {5, 3})}, {{"dim", 1}},
                          [](const V& x) { return V{softmax(x[0], 1)}; }));
  cs.push_back(exact_case("log_softmax", "log_softmax", {leaf(sm, {5, 3})}, {{"dim", 1}},
                          [](const V& x) { return V{log_softmax(x[0], 1)}; }));
  {
    Tensor t = tensor_from<int64_t>({0, 1, 2, 2, 0}, {5});
    auto c = exact_case("cross_entropy none", "cross_entropy", {leaf(sm, {5, 3})}, {{"reduction", "none"}},
                        [t](const V& x) { return V{cross_entropy(x[0], t, Tensor(), Reduction::none)}; },
                        {test::to_host(t)});
    cs.push_back(c);
    auto m = exact_case("cross_entropy mean", "cross_entropy", {leaf(sm, {5, 3})}, {},
                        [t](const V& x) { return V{cross_entropy(x[0], t)}; }, {test::to_host(t)});
    cs.push_back(m);
  }
  cs.push_back(exact_case("mse_loss", "mse_loss", {leaf({kInf, 1, kNan, 0}, {4}), leaf({kInf, -kInf, 1, 2}, {4})},
                          {{"reduction", "none"}},
                          [](const V& x) { return V{mse_loss(x[0], x[1], Reduction::none)}; }));
  {
    // 2 planes of 4x4, 2x2 windows: NaN (two in one window: the last one wins in torch), all -inf,
    // +inf, ties.
    const std::vector<float> p = {kNan, 1, 5, 5,  2, kNan, 5, 1,  -kInf, -kInf, kInf, 0,  -kInf, -kInf, 1, 2,
                                  1, 2, 3, 4,  kNan, 0, 0, kInf,  7, 7, 1, 1,  7, 7, 1, 1};
    cs.push_back(exact_case("max_pool2d", "max_pool2d", {leaf(p, {1, 2, 4, 4})}, {{"kernel_size", 2}},
                            [](const V& x) { return V{max_pool2d(x[0], {2, 2})}; }));
    cs.push_back(exact_case("max_pool2d overlapping, padded", "max_pool2d", {leaf(p, {1, 2, 4, 4})},
                            {{"kernel_size", 3}, {"stride", 1}, {"padding", 1}},
                            [](const V& x) { return V{max_pool2d(x[0], {3, 3}, {1, 1}, {1, 1})}; }));
    cs.push_back(exact_case("avg_pool2d", "avg_pool2d", {leaf(p, {1, 2, 4, 4})}, {{"kernel_size", 2}},
                            [](const V& x) { return V{avg_pool2d(x[0], {2, 2})}; }));
    cs.push_back(exact_case("adaptive_avg_pool2d", "adaptive_avg_pool2d", {leaf(p, {1, 2, 4, 4})},
                            {{"output_size", {3, 3}}}, [](const V& x) { return V{adaptive_avg_pool2d(x[0], {3, 3})}; }));
  }
  {
    // batch norm, training: a NaN in channel 0 makes channel 0 (and its running stats) NaN, channel 1
    // stays finite, as in torch.
    std::vector<float> xv(2 * 2 * 3);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.25f * (float)i - 1.f;
    xv[1] = kNan;  // (n 0, c 0)
    Tensor x = leaf(xv, {2, 2, 3}), w = leaf({1.5f, -0.5f}, {2}), b = leaf({0.1f, 0.2f}, {2});
    Tensor rm = tensor_from<float>({0.f, 0.5f}, {2}), rv = tensor_from<float>({1.f, 2.f}, {2});
    auto c = exact_case("batch_norm train with NaN", "batch_norm", {}, {{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}}, nullptr);
    c.torch_case.inputs = {test::to_host(x), test::to_host(rm), test::to_host(rv), test::to_host(w), test::to_host(b)};
    c.torch_case.requires_grad = {1, 0, 0, 1, 1};
    c.inputs = {x, w, b};
    c.torch_index = {0, 3, 4};
    c.run = [rm, rv](const V& v) { return V{batch_norm(v[0], v[1], v[2], rm, rv, true, 0.1, 1e-5)}; };
    c.buffers = {{1, rm}, {2, rv}};
    c.rtol = 1e-4;
    cs.push_back(c);
  }
  cs.push_back(exact_case("linear with inf and NaN", "linear",
                          {leaf({kInf, 1, 2, 0, kNan, 1}, {2, 3}), leaf({1, -1, 0.5f, 2, 0, 1}, {2, 3}), leaf({0.f, 1.f}, {2})},
                          {}, [](const V& x) { return V{linear(x[0], x[1], x[2])}; }));
  {
    std::vector<float> xv(1 * 2 * 4 * 4);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = 0.125f * (float)(i % 7) - 0.3f;
    xv[5] = kNan;
    xv[26] = kInf;
    std::vector<float> wv(3 * 2 * 2 * 2);
    for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.25f * (float)(i % 5) - 0.5f;
    cs.push_back(exact_case("conv2d with NaN and inf", "conv2d", {leaf(xv, {1, 2, 4, 4}), leaf(wv, {3, 2, 2, 2})},
                            {{"padding", 1}}, [](const V& x) { return V{conv2d(x[0], x[1], Tensor(), {1, 1}, {1, 1})}; }));
  }
  {
    // dropout: a dropped NaN stays NaN (torch computes input * noise). All-NaN input makes the output
    // independent of the random mask; the gradient is random, so only the output is compared here.
    Tensor x = tensor_from<float>(std::vector<float>(64, kNan), {64});
    auto c = exact_case("dropout of NaN", "dropout", {}, {{"p", 0.5}, {"training", true}},
                        [x](const V&) { return V{dropout(x, 0.5, true)}; }, {test::to_host(x)});
    cs.push_back(c);
  }
  int n = kiln::test::run_exact_cases(cs, "nn");
  MESSAGE("non-finite nn parity: ", cs.size(), " cases, ", n, " tensors compared with PyTorch");
}

TEST_CASE("dropout: dropped elements keep NaN and inf in the output and in the gradient") {
  manual_seed(5);
  const std::vector<float> xv = {kNan, kInf, -kInf, 1.f, kNan, kInf, -kInf, 1.f, 2.f, 3.f};
  Tensor x = tensor_from<float>(xv, {10}).set_requires_grad(true);
  Tensor y = dropout(x, 0.5, true);
  y.backward(tensor_from<float>(std::vector<float>(10, kNan), {10}));
  const std::vector<float> yv = y.to_vector<float>(), gv = x.grad().to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    CAPTURE(i);
    if (std::isnan(xv[i])) CHECK(std::isnan(yv[i]));                          // kept or dropped
    if (std::isinf(xv[i])) CHECK((std::isnan(yv[i]) || yv[i] == 2 * xv[i]));  // dropped: inf * 0
    if (std::isfinite(xv[i])) CHECK((yv[i] == 0.f || yv[i] == 2 * xv[i]));
    CHECK(std::isnan(gv[i]));  // NaN * (scale or 0), never a silent 0
  }
}

TEST_CASE("the element comparison of these tests tells NaN from 0, inf from a large number, -inf from inf") {
  using kiln::test::exact_mismatch;
  auto t = [](std::vector<float> v) { return tensor_from<float>(v, {(int64_t)v.size()}); };
  CHECK(exact_mismatch(t({0.f}), t({kNan}), 1e-5, 1e-6) != "");
  CHECK(exact_mismatch(t({kNan}), t({0.f}), 1e-5, 1e-6) != "");
  CHECK(exact_mismatch(t({3e38f}), t({kInf}), 1e-5, 1e-6) != "");
  CHECK(exact_mismatch(t({-kInf}), t({kInf}), 1e-5, 1e-6) != "");
  CHECK(exact_mismatch(t({1.f, 0.f}), t({1.f}), 1e-5, 1e-6) != "");
  CHECK(exact_mismatch(t({1.0001f}), t({1.f}), 1e-5, 1e-6) != "");
  CHECK(exact_mismatch(t({kNan, kInf, -kInf, 1.f}), t({kNan, kInf, -kInf, 1.000001f}), 1e-5, 1e-6) == "");
}
