// Gradient checking by central differences in f64, for the gradcheck suite. Inputs may be
// non-contiguous views; every element of every input is perturbed in turn.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/ops/ops.h"

namespace kiln::test {

// A random f64 leaf of `shape`; when `noncontig`, a strided view (every other element of a
// wider buffer, then transposed if 2+ dims) with the same logical values layout.
inline Tensor random_input(const Shape& shape, bool noncontig = false, double lo = -1.0, double hi = 1.0) {
  NoGradGuard ng;
  if (!noncontig || shape.empty()) return uniform(shape, lo, hi, DType::f64).set_requires_grad(true);
  Shape wide = shape;
  std::reverse(wide.begin(), wide.end());
  wide.back() *= 2;
  Tensor base = uniform(wide, lo, hi, DType::f64);
  Tensor v = slice(base, -1, 0, wide.back(), 2);
  std::vector<int64_t> perm(shape.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = (int64_t)(perm.size() - 1 - i);
  v = permute(v, perm).detach();
  REQUIRE(v.sizes() == shape);
  v.set_requires_grad(true);
  return v;
}

inline double* element_ptr(const Tensor& t, int64_t flat) {
  double* p = static_cast<double*>(t.data_ptr());
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t i = flat % t.sizes()[d];
    flat /= t.sizes()[d];
    off += i * t.strides()[d];
  }
  return p + off;
}

// Checks d(sum(f(inputs) * v))/d(inputs) against central differences; returns the worst
// relative error (|analytic - numeric| / max(1, |numeric|)).
inline double gradcheck(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                        const std::vector<Tensor>& inputs, double eps = 1e-6, double tol = 1e-6) {
  for (const auto& in : inputs) in.zero_grad();
  Tensor out = f(inputs);
  Tensor v;
  {
    NoGradGuard ng;
    v = uniform(out.sizes(), 0.5, 1.5, DType::f64);
  }
  out.backward(v);
  double worst = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& in = inputs[k];
    if (!in.requires_grad()) continue;
    Tensor g = in.grad();
    REQUIRE_MESSAGE(g.defined(), name, ": input ", k, " got no gradient");
    REQUIRE(g.sizes() == in.sizes());
    std::vector<double> ga = g.to_vector<double>();
    for (int64_t j = 0; j < in.numel(); ++j) {
      double* p = element_ptr(in, j);
      double orig = *p;
      NoGradGuard ng;
      *p = orig + eps;
      double lp = sum(mul(f(inputs), v)).item();
      *p = orig - eps;
      double lm = sum(mul(f(inputs), v)).item();
      *p = orig;
      double num = (lp - lm) / (2 * eps);
      double err = std::fabs(ga[j] - num) / std::max(1.0, std::fabs(num));
      if (err > worst) worst = err;
      if (err > tol) {
        FAIL_CHECK(name, ": input ", k, " element ", j, ": analytic ", ga[j], " numeric ", num);
        return worst;
      }
    }
  }
  return worst;
}

}  // namespace kiln::test
