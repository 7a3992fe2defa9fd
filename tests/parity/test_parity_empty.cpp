// Empty tensors and 0-size dims against PyTorch 1.13: reductions over a 0-size dim give torch's
// identities (sum 0, mean and var NaN), softmax over one is empty, linear's backward at batch 0 gives
// zero weight and bias gradients, mse_loss of empty tensors is NaN (mean) / 0 (sum) / empty (none),
// matmul with an inner size of 0 is zeros. max/min over a 0-size dim stay errors, as in torch.
#include <doctest/doctest.h>

#include "support/oracle/parity_exact.h"

using namespace kiln;
using kiln::test::exact_case;
using kiln::test::ExactCase;
using V = std::vector<Tensor>;

namespace {
Tensor empty_leaf(const Shape& s) { return zeros(s).set_requires_grad(true); }
Tensor leaf_of(const Shape& s) {
  NoGradGuard ng;
  return uniform(s, -1, 1, DType::f32).set_requires_grad(true);
}
}  // namespace

TEST_CASE("parity with PyTorch: empty dims in reductions, softmax, linear, mse_loss and matmul") {
  manual_seed(14);
  std::vector<ExactCase> cs;
  auto one = [&](const std::string& label, const std::string& op, std::vector<Tensor> in, nlohmann::json kw,
                 std::function<V(const V&)> f) { cs.push_back(exact_case(label, op, std::move(in), kw, f)); };
  one("sum over a 0-size dim", "sum", {empty_leaf({3, 0})}, {{"dim", 1}}, [](const V& x) { return V{sum(x[0], {1})}; });
  one("sum keepdim over a 0-size dim", "sum", {empty_leaf({3, 0, 2})}, {{"dim", 1}, {"keepdim", true}},
      [](const V& x) { return V{sum(x[0], {1}, true)}; });
  one("sum of all of an empty tensor", "sum", {empty_leaf({3, 0})}, {}, [](const V& x) { return V{sum(x[0])}; });
  one("mean over a 0-size dim", "mean", {empty_leaf({3, 0})}, {{"dim", 1}}, [](const V& x) { return V{mean(x[0], {1})}; });
  one("mean of all of an empty tensor", "mean", {empty_leaf({0})}, {}, [](const V& x) { return V{mean(x[0])}; });
  one("var over a 0-size dim", "var", {empty_leaf({3, 0})}, {{"dim", 1}}, [](const V& x) { return V{var(x[0], {1})}; });
  one("sum over a dim of a tensor with another 0-size dim", "sum", {empty_leaf({0, 4})}, {{"dim", 1}},
      [](const V& x) { return V{sum(x[0], {1})}; });
  one("softmax over a 0-size dim", "softmax", {empty_leaf({3, 0})}, {{"dim", 1}}, [](const V& x) { return V{softmax(x[0], 1)}; });
  one("log_softmax over a 0-size dim", "log_softmax", {empty_leaf({3, 0})}, {{"dim", 1}},
      [](const V& x) { return V{log_softmax(x[0], 1)}; });
  one("softmax of an empty tensor along a non-empty dim", "softmax", {empty_leaf({3, 0})}, {{"dim", 0}},
      [](const V& x) { return V{softmax(x[0], 0)}; });
  one("linear at batch 0", "linear", {empty_leaf({0, 4}), leaf_of({3, 4}), leaf_of({3})}, {},
      [](const V& x) { return V{linear(x[0], x[1], x[2])}; });
  one("mse_loss of empty tensors (mean)", "mse_loss", {empty_leaf({0, 4}), empty_leaf({0, 4})}, {},
      [](const V& x) { return V{mse_loss(x[0], x[1])}; });
  one("mse_loss of empty tensors (sum)", "mse_loss", {empty_leaf({0, 4}), empty_leaf({0, 4})}, {{"reduction", "sum"}},
      [](const V& x) { return V{mse_loss(x[0], x[1], Reduction::sum)}; });
  one("mse_loss of empty tensors (none)", "mse_loss", {empty_leaf({0, 4}), empty_leaf({0, 4})}, {{"reduction", "none"}},
      [](const V& x) { return V{mse_loss(x[0], x[1], Reduction::none)}; });
  one("matmul with inner size 0", "matmul", {empty_leaf({2, 0}), empty_leaf({0, 3})}, {},
      [](const V& x) { return V{matmul(x[0], x[1])}; });
  int n = kiln::test::run_exact_cases(cs, "empty");
  MESSAGE("empty-dim parity: ", cs.size(), " cases, ", n, " tensors compared with PyTorch");
}

TEST_CASE("empty dims: max and min over a 0-size dim are errors naming the op and the shape, as in torch") {
  Tensor x = zeros({3, 0});
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  const std::string a = message([&] { max(x, 1); });
  CHECK(a.find("max") != std::string::npos);
  CHECK(a.find("size 0") != std::string::npos);
  const std::string b = message([&] { min(x); });
  CHECK(b.find("min") != std::string::npos);
  CHECK(b.find("empty tensor") != std::string::npos);
  // A reduction that keeps the 0-size dim is empty and fine (torch too).
  CHECK(max(x, 0).values.sizes() == Shape{0});
}
