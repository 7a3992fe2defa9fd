// Parity cases against the PyTorch oracle compared element by element, NaN and inf included: a
// reference NaN must be NaN in kiln, a reference +-inf the same inf, and finite values agree within
// atol + rtol * |ref|. For edge cases (NaN, inf, ties, empty tensors), where an L2 relative error
// (test_parity_ops.cpp) would be NaN or hide a single wrong element. Test support only (header).
//
// A case: kiln leaves `inputs` are torch inputs 0..k-1, all requiring grad; `extra` torch inputs
// (scalars, targets, index tensors) follow without grad. A case built by hand (torch inputs in
// another order) says which torch input each kiln leaf is in `torch_index`. Buffers (batch_norm
// running stats) are compared after the op when listed in `buffers` (torch input index -> the kiln
// tensor updated).
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>

#include "support/oracle/oracle_client.h"
#include "support/tensor_host.h"

namespace kiln::test {

struct ExactCase {
  std::string label;
  oracle::Case torch_case;
  std::vector<Tensor> inputs;  // kiln leaves = torch inputs 0..inputs.size()-1 (requires grad)
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run;
  std::vector<Tensor> grad_out;  // upstream gradient per floating output; empty: uniform(0.5, 1.5)
  std::map<int, Tensor> buffers;  // torch input index -> kiln tensor updated in place by run
  std::vector<int> torch_index;   // torch input of each kiln leaf; empty: 0, 1, ...
  double rtol = 1e-5, atol = 1e-6;
};

// Where `got` differs from `ref` by the rule above: "" when it does not, else the first element.
inline std::string exact_mismatch(const Tensor& got, const Tensor& ref, double rtol, double atol) {
  if (got.sizes() != ref.sizes()) return "shape " + shape_str(got.sizes()) + " vs torch " + shape_str(ref.sizes());
  std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok;
    if (std::isnan(r[i])) ok = std::isnan(g[i]);
    else if (std::isinf(r[i])) ok = g[i] == r[i];
    else ok = std::isfinite(g[i]) && std::fabs(g[i] - r[i]) <= atol + rtol * std::fabs(r[i]);
    if (!ok) {
      std::ostringstream os;
      os << "element " << i << ": kiln " << g[i] << ", torch " << r[i];
      return os.str();
    }
  }
  return "";
}

inline Tensor leaf(const std::vector<float>& v, const Shape& s) {
  return tensor_from<float>(v, s).set_requires_grad(true);
}

// A case whose torch call is op(inputs..., extra...) with kwargs.
inline ExactCase exact_case(const std::string& label, const std::string& op, std::vector<Tensor> in,
                            nlohmann::json kwargs, std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run,
                            std::vector<oracle::Arg> extra = {}) {
  ExactCase c;
  c.label = label;
  c.torch_case.op = op;
  for (auto& t : in) {
    c.torch_case.inputs.push_back(to_host(t));
    c.torch_case.requires_grad.push_back(1);
  }
  for (auto& e : extra) {
    c.torch_case.inputs.push_back(e);
    c.torch_case.requires_grad.push_back(0);
  }
  c.torch_case.kwargs = kwargs;
  c.inputs = std::move(in);
  c.run = std::move(run);
  return c;
}

// Runs every case in kiln (forward, then backward of each floating output with its upstream
// gradient) and in one oracle batch, and checks outputs, gradients and buffers. Returns the number
// of tensors compared.
inline int run_exact_cases(std::vector<ExactCase>& cs, const std::string& tag) {
  std::vector<std::vector<Tensor>> outs(cs.size());
  std::vector<oracle::Case> tcs;
  for (size_t k = 0; k < cs.size(); ++k) {
    ExactCase& c = cs[k];
    CAPTURE(c.label);
    outs[k] = c.run(c.inputs);
    size_t fo = 0;
    for (auto& o : outs[k]) {
      if (!is_floating(o.dtype())) {
        c.torch_case.grad_out.push_back(std::nullopt);
        continue;
      }
      Tensor g;
      if (fo < c.grad_out.size()) {
        g = c.grad_out[fo];
      } else {
        NoGradGuard ng;
        g = uniform(o.sizes(), 0.5, 1.5, o.dtype());
      }
      ++fo;
      c.torch_case.grad_out.push_back(to_host(g));
      if (o.requires_grad()) o.backward(g, true);
    }
    tcs.push_back(c.torch_case);
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kiln_parity_" + tag + "_" + std::to_string(::getpid()))).string();
  std::vector<oracle::Result> res = oracle::run(tcs, dir);
  REQUIRE(res.size() == cs.size());
  int compared = 0;
  for (size_t k = 0; k < cs.size(); ++k) {
    ExactCase& c = cs[k];
    CAPTURE(c.label);
    REQUIRE_MESSAGE(res[k].error.empty(), c.label, ": torch error: ", res[k].error);
    REQUIRE(res[k].outputs.size() >= outs[k].size());
    for (size_t o = 0; o < outs[k].size(); ++o) {
      Tensor ref = from_host(res[k].outputs[o]);
      const Tensor& got = outs[k][o];
      if (!is_floating(got.dtype())) {
        CHECK_MESSAGE(got.to_vector<int64_t>() == ref.to_vector<int64_t>(), c.label, " output ", o, " (indices)");
      } else {
        std::string m = exact_mismatch(got, ref, c.rtol, c.atol);
        CHECK_MESSAGE(m.empty(), c.label, " output ", o, ": ", m);
      }
      ++compared;
    }
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const int ti = c.torch_index.empty() ? (int)i : c.torch_index.at(i);
      auto it = res[k].grads.find(ti);
      REQUIRE_MESSAGE(it != res[k].grads.end(), c.label, ": torch returned no grad for input ", i);
      Tensor gk = c.inputs[i].grad();
      Tensor ref = from_host(it->second);
      if (!gk.defined()) gk = zeros(ref.sizes(), ref.dtype());  // kiln: no path to this input
      std::string m = exact_mismatch(gk, ref, c.rtol, c.atol);
      CHECK_MESSAGE(m.empty(), c.label, " grad of input ", i, ": ", m);
      ++compared;
    }
    for (auto& [i, t] : c.buffers) {
      auto it = res[k].buffers.find(i);
      REQUIRE_MESSAGE(it != res[k].buffers.end(), c.label, ": torch returned no buffer ", i);
      std::string m = exact_mismatch(t, from_host(it->second), c.rtol, c.atol);
      CHECK_MESSAGE(m.empty(), c.label, " buffer ", i, ": ", m);
      ++compared;
    }
  }
  std::filesystem::remove_all(dir);
  return compared;
}

}  // namespace kiln::test
