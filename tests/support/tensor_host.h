// Test helpers: Tensor <-> HostArray (engine/io) for exchanging arrays with the PyTorch oracle.
#pragma once
#include <cmath>
#include <cstring>

#include "engine/io/host_array.h"
#include "engine/autograd/grad_mode.h"
#include "engine/ops/ops.h"

namespace kiln::test {

inline HostArray to_host(const Tensor& t) {
  Tensor c = contiguous(t.detach());
  HostArray a;
  a.dtype = c.dtype();
  a.shape = c.sizes();
  a.bytes.resize(c.nbytes());
  if (!a.bytes.empty()) std::memcpy(a.bytes.data(), c.data_ptr(), a.bytes.size());
  return a;
}

inline Tensor from_host(const HostArray& a) {
  Tensor t = empty(a.shape, a.dtype);
  if (!a.bytes.empty()) std::memcpy(t.data_ptr(), a.bytes.data(), a.bytes.size());
  return t;
}

// ||a - b||_2 / ||b||_2 over all elements (b the reference), in f64; NaN if shapes differ.
inline double rel_error(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return NAN;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

}  // namespace kiln::test
