// Every CPU op, forward and backward, against PyTorch 1.13 on the same random f32 inputs
// (exchanged as .npy through tests/support/oracle/oracle.py, one python start for all cases).
// f32 relative error (L2) <= 1e-5; conv and matmul <= 1e-4.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "support/oracle/oracle_client.h"
#include "support/tensor_host.h"

using namespace kiln;
using kiln::test::from_host;
using kiln::test::rel_error;
using kiln::test::to_host;

namespace {

struct ParityCase {
  std::string label;
  oracle::Case torch_case;
  std::vector<Tensor> inputs;  // kiln leaves (f32), same values as the torch inputs
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run;  // kiln outputs
  double tol = 1e-5;
};

Tensor rnd(const Shape& s, double lo = -1, double hi = 1) {
  NoGradGuard ng;
  return uniform(s, lo, hi, DType::f32).set_requires_grad(true);
}

ParityCase make(const std::string& label, const std::string& op, std::vector<Tensor> in, nlohmann::json kwargs,
                std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run, double tol = 1e-5,
                std::vector<oracle::Arg> extra = {}) {
  ParityCase c;
  c.label = label;
  c.torch_case.op = op;
  for (auto& t : in) c.torch_case.inputs.push_back(to_host(t));
  for (auto& e : extra) c.torch_case.inputs.push_back(e);
  c.torch_case.kwargs = kwargs;
  c.inputs = in;
  c.run = run;
  c.tol = tol;
  return c;
}

using V = std::vector<Tensor>;

}  // namespace

TEST_CASE("parity with PyTorch: every op forward and backward") {
  manual_seed(2024);
  std::vector<ParityCase> cs;
  Tensor target = tensor_from<int64_t>({0, 4, 2, 1, 3, 2, 4}, {7});
  Tensor target_ign = tensor_from<int64_t>({0, 4, -100, 1, 3, 2, -100}, {7});
  Tensor cw = uniform({5}, 0.5, 2.0, DType::f32);
  Tensor cond = gt(uniform({3, 1}, -1, 1, DType::f32), 0.0);

  cs.push_back(make("add broadcast", "add", {rnd({3, 4, 5}), rnd({4, 1})}, {}, [](const V& x) { return V{add(x[0], x[1])}; }));
  cs.push_back(make("sub", "sub", {rnd({3, 4}), rnd({3, 4})}, {{"alpha", 0.5}}, [](const V& x) { return V{sub(x[0], x[1], 0.5)}; }));
  cs.push_back(make("mul", "mul", {rnd({2, 3, 4}), rnd({3, 1})}, {}, [](const V& x) { return V{mul(x[0], x[1])}; }));
  cs.push_back(make("div", "div", {rnd({3, 4}), rnd({4}, 0.5, 2)}, {}, [](const V& x) { return V{div(x[0], x[1])}; }));
  cs.push_back(make("neg", "neg", {rnd({5})}, {}, [](const V& x) { return V{neg(x[0])}; }));
  cs.push_back(make("pow", "pow", {rnd({3, 4}, 0.5, 2), rnd({3, 4}, 0.5, 2)}, {}, [](const V& x) { return V{pow(x[0], x[1])}; }));
  cs.push_back(make("exp", "exp", {rnd({3, 4})}, {}, [](const V& x) { return V{exp(x[0])}; }));
  cs.push_back(make("log", "log", {rnd({3, 4}, 0.2, 3)}, {}, [](const V& x) { return V{log(x[0])}; }));
  cs.push_back(make("sqrt", "sqrt", {rnd({3, 4}, 0.2, 3)}, {}, [](const V& x) { return V{sqrt(x[0])}; }));
  cs.push_back(make("abs", "abs", {rnd({3, 4})}, {}, [](const V& x) { return V{abs(x[0])}; }));
  cs.push_back(make("relu", "relu", {rnd({3, 4})}, {}, [](const V& x) { return V{relu(x[0])}; }));
  cs.push_back(make("leaky_relu", "leaky_relu", {rnd({3, 4})}, {{"negative_slope", 0.1}}, [](const V& x) { return V{leaky_relu(x[0], 0.1)}; }));
  cs.push_back(make("gelu", "gelu", {rnd({3, 4}, -3, 3)}, {}, [](const V& x) { return V{gelu(x[0])}; }));
  cs.push_back(make("sigmoid", "sigmoid", {rnd({3, 4}, -3, 3)}, {}, [](const V& x) { return V{sigmoid(x[0])}; }));
  cs.push_back(make("tanh", "tanh", {rnd({3, 4}, -3, 3)}, {}, [](const V& x) { return V{tanh(x[0])}; }));
  cs.push_back(make("clamp", "clamp", {rnd({3, 4})}, {{"min", -0.3}, {"max", 0.4}}, [](const V& x) { return V{clamp(x[0], -0.3, 0.4)}; }));
  {
    auto c = make("where", "where", {}, {}, nullptr);
    Tensor a = rnd({3, 4}), b = rnd({4});
    c.torch_case.inputs = {to_host(cond), to_host(a), to_host(b)};
    c.torch_case.requires_grad = {0, 1, 1};
    c.inputs = {a, b};
    c.run = [cond](const V& x) { return V{where(cond, x[0], x[1])}; };
    cs.push_back(c);
  }
  cs.push_back(make("sum dims", "sum", {rnd({3, 4, 5})}, {{"dim", {0, 2}}}, [](const V& x) { return V{sum(x[0], {0, 2})}; }));
  cs.push_back(make("sum keepdim", "sum", {rnd({3, 4, 5})}, {{"dim", 1}, {"keepdim", true}}, [](const V& x) { return V{sum(x[0], {1}, true)}; }));
  cs.push_back(make("mean", "mean", {rnd({3, 4, 5})}, {{"dim", -1}}, [](const V& x) { return V{mean(x[0], {-1})}; }));
  cs.push_back(make("var", "var", {rnd({3, 4, 5})}, {{"dim", 1}}, [](const V& x) { return V{var(x[0], {1})}; }));
  cs.push_back(make("max dim", "max", {rnd({3, 4, 5})}, {{"dim", 1}}, [](const V& x) {
    auto r = max(x[0], 1);
    return V{r.values, r.indices};
  }));
  cs.push_back(make("min dim keepdim", "min", {rnd({3, 4, 5})}, {{"dim", 2}, {"keepdim", true}}, [](const V& x) {
    auto r = min(x[0], 2, true);
    return V{r.values, r.indices};
  }));
  {
    auto c = make("argmax", "argmax", {rnd({4, 6})}, {{"dim", 1}}, [](const V& x) { return V{argmax(x[0], 1)}; });
    c.torch_case.requires_grad = {0};
    cs.push_back(c);
  }
  cs.push_back(make("matmul batched", "matmul", {rnd({2, 3, 8}), rnd({8, 5})}, {}, [](const V& x) { return V{matmul(x[0], x[1])}; }, 1e-4));
  cs.push_back(make("matmul 1d", "matmul", {rnd({8}), rnd({3, 8, 5})}, {}, [](const V& x) { return V{matmul(x[0], x[1])}; }, 1e-4));
  cs.push_back(make("linear", "linear", {rnd({6, 8}), rnd({5, 8}), rnd({5})}, {}, [](const V& x) { return V{linear(x[0], x[1], x[2])}; }, 1e-4));
  cs.push_back(make("conv2d", "conv2d", {rnd({2, 4, 9, 8}), rnd({6, 2, 3, 3}), rnd({6})},
                    {{"stride", {2, 1}}, {"padding", {1, 2}}, {"dilation", {1, 2}}, {"groups", 2}},
                    [](const V& x) { return V{conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {1, 2}, 2)}; }, 1e-4));
  cs.push_back(make("conv2d 7x7 s2", "conv2d", {rnd({2, 3, 20, 20}), rnd({8, 3, 7, 7})}, {{"stride", 2}, {"padding", 3}},
                    [](const V& x) { return V{conv2d(x[0], x[1], Tensor(), {2, 2}, {3, 3})}; }, 1e-4));
  cs.push_back(make("max_pool2d", "max_pool2d", {rnd({2, 3, 9, 9})}, {{"kernel_size", 3}, {"stride", 2}, {"padding", 1}},
                    [](const V& x) { return V{max_pool2d(x[0], {3, 3}, {2, 2}, {1, 1})}; }));
  cs.push_back(make("avg_pool2d", "avg_pool2d", {rnd({2, 3, 9, 8})}, {{"kernel_size", 3}, {"stride", 2}, {"padding", 1}, {"ceil_mode", true}},
                    [](const V& x) { return V{avg_pool2d(x[0], {3, 3}, {2, 2}, {1, 1}, true)}; }));
  cs.push_back(make("adaptive_avg_pool2d", "adaptive_avg_pool2d", {rnd({2, 3, 7, 9})}, {{"output_size", {3, 4}}},
                    [](const V& x) { return V{adaptive_avg_pool2d(x[0], {3, 4})}; }));
  {
    Tensor x = rnd({4, 3, 5, 5}), w = rnd({3}), b = rnd({3});
    Tensor rm = uniform({3}, -0.5, 0.5, DType::f32), rv = uniform({3}, 0.5, 1.5, DType::f32);
    auto c = make("batch_norm train", "batch_norm", {}, {{"training", true}, {"momentum", 0.1}, {"eps", 1e-5}}, nullptr);
    c.torch_case.inputs = {to_host(x), to_host(rm), to_host(rv), to_host(w), to_host(b)};
    c.torch_case.requires_grad = {1, 0, 0, 1, 1};
    c.inputs = {x, w, b};
    Tensor rm2 = clone(rm), rv2 = clone(rv);
    c.run = [rm2, rv2](const V& v) { return V{batch_norm(v[0], v[1], v[2], rm2, rv2, true, 0.1, 1e-5)}; };
    cs.push_back(c);
    auto e = make("batch_norm eval", "batch_norm", {}, {{"training", false}, {"eps", 1e-5}}, nullptr);
    e.torch_case.inputs = c.torch_case.inputs;
    e.torch_case.requires_grad = {1, 0, 0, 1, 1};
    auto fresh = [](const Tensor& t) { return clone(t).detach().set_requires_grad(true); };
    e.inputs = {fresh(x), fresh(w), fresh(b)};  // separate leaves: gradients must not accumulate across cases
    e.run = [rm, rv](const V& v) { return V{batch_norm(v[0], v[1], v[2], rm, rv, false, 0.1, 1e-5)}; };
    cs.push_back(e);
  }
  cs.push_back(make("softmax", "softmax", {rnd({3, 5, 4}, -3, 3)}, {{"dim", 1}}, [](const V& x) { return V{softmax(x[0], 1)}; }));
  cs.push_back(make("log_softmax", "log_softmax", {rnd({6, 7}, -3, 3)}, {{"dim", -1}}, [](const V& x) { return V{log_softmax(x[0], -1)}; }));
  {
    auto c = make("cross_entropy weighted smoothed ignore", "cross_entropy", {rnd({7, 5}, -2, 2)},
                  {{"ignore_index", -100}, {"label_smoothing", 0.15}}, nullptr);
    c.torch_case.inputs.push_back(to_host(target_ign));
    c.torch_case.inputs.push_back(to_host(cw));
    c.torch_case.requires_grad = {1, 0, 0};
    c.run = [target_ign, cw](const V& x) { return V{cross_entropy(x[0], target_ign, cw, Reduction::mean, -100, 0.15)}; };
    cs.push_back(c);
    auto d = make("cross_entropy sum", "cross_entropy", {rnd({7, 5}, -2, 2)}, {{"reduction", "sum"}}, nullptr);
    d.torch_case.inputs.push_back(to_host(target));
    d.torch_case.requires_grad = {1, 0};
    d.run = [target](const V& x) { return V{cross_entropy(x[0], target, Tensor(), Reduction::sum)}; };
    cs.push_back(d);
    auto n = make("nll_loss none", "nll_loss", {rnd({7, 5}, -3, 0)}, {{"reduction", "none"}}, nullptr);
    n.torch_case.inputs.push_back(to_host(target));
    n.torch_case.inputs.push_back(to_host(cw));
    n.torch_case.requires_grad = {1, 0, 0};
    n.run = [target, cw](const V& x) { return V{nll_loss(x[0], target, cw, Reduction::none)}; };
    cs.push_back(n);
  }
  cs.push_back(make("mse_loss", "mse_loss", {rnd({4, 3}), rnd({4, 3})}, {}, [](const V& x) { return V{mse_loss(x[0], x[1])}; }));
  cs.push_back(make("cat", "cat", {rnd({2, 3}), rnd({2, 5})}, {{"dim", 1}}, [](const V& x) { return V{cat({x[0], x[1]}, 1)}; }));
  cs.push_back(make("stack", "stack", {rnd({2, 3}), rnd({2, 3})}, {{"dim", 0}}, [](const V& x) { return V{stack({x[0], x[1]}, 0)}; }));
  cs.push_back(make("pad", "pad", {rnd({2, 3, 4})}, {{"pad", {1, 2, 0, 1}}, {"value", 0.5}},
                    [](const V& x) { return V{pad(x[0], {1, 2, 0, 1}, 0.5)}; }));

  // Upstream gradients: random, the same for both sides (only for floating outputs).
  std::vector<V> kiln_out(cs.size());
  std::vector<oracle::Case> tcs;
  for (auto& c : cs) {
    V outs = c.run(c.inputs);
    for (auto& o : outs) {
      if (is_floating(o.dtype())) {
        NoGradGuard ng;
        Tensor g = uniform(o.sizes(), 0.5, 1.5, DType::f32);
        c.torch_case.grad_out.push_back(to_host(g));
        o.set_name("");
        if (o.requires_grad()) o.backward(g);
      } else {
        c.torch_case.grad_out.push_back(std::nullopt);
      }
    }
    kiln_out[&c - &cs[0]] = outs;
    tcs.push_back(c.torch_case);
  }
  const std::string dir = (std::filesystem::temp_directory_path() / ("kiln_parity_ops_" + std::to_string(::getpid()))).string();
  std::vector<oracle::Result> res = oracle::run(tcs, dir);
  std::filesystem::remove_all(dir);
  REQUIRE(res.size() == cs.size());
  int checked = 0;
  for (size_t k = 0; k < cs.size(); ++k) {
    auto& c = cs[k];
    CAPTURE(c.label);
    REQUIRE_MESSAGE(res[k].error.empty(), c.label, ": torch error: ", res[k].error);
    REQUIRE(res[k].outputs.size() >= kiln_out[k].size());
    for (size_t o = 0; o < kiln_out[k].size(); ++o) {
      Tensor ref = from_host(res[k].outputs[o]);
      Tensor got = kiln_out[k][o];
      if (!is_floating(got.dtype())) {
        CHECK_MESSAGE(got.to_vector<int64_t>() == ref.to_vector<int64_t>(), c.label, " output ", o);
        continue;
      }
      double e = rel_error(got, ref);
      CHECK_MESSAGE(e <= c.tol, c.label, " output ", o, " rel error ", e);
      ++checked;
    }
    // Gradients: torch input index i maps to kiln input in order of float tensor inputs that required grad.
    size_t kin = 0;
    for (size_t i = 0; i < c.torch_case.inputs.size() && kin < c.inputs.size(); ++i) {
      bool req = c.torch_case.requires_grad.empty() ? true : c.torch_case.requires_grad[i] != 0;
      if (!req) continue;
      if (!c.torch_case.inputs[i].array || !is_floating(c.torch_case.inputs[i].array->dtype)) continue;
      auto it = res[k].grads.find((int)i);
      REQUIRE_MESSAGE(it != res[k].grads.end(), c.label, ": torch returned no grad for input ", i);
      Tensor gk = c.inputs[kin].grad();
      REQUIRE_MESSAGE(gk.defined(), c.label, ": kiln computed no grad for input ", kin);
      double e = rel_error(gk, from_host(it->second));
      CHECK_MESSAGE(e <= c.tol, c.label, " grad of input ", i, " rel error ", e);
      ++checked;
      ++kin;
    }
  }
  MESSAGE("parity: ", cs.size(), " cases, ", checked, " tensors compared with PyTorch");
}
