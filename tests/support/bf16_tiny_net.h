// Test support for issue 35's bf16 numerics (tests/unit/test_amp_bf16.cpp, tests/parity/test_parity_amp_bf16.cpp):
// a conv + batch norm + relu + linear + cross-entropy net built from kiln's ops, run once in f32 (the graph cut
// at every layer, so the gradient reaching each layer's output is kept) and once under bf16 autocast, and the
// scale A of each result's rounding error: the sum of the absolute values of the terms that make it,
//   logits z[n,j] = sum_k h[n,k] W[j,k] + b[j]           A = sum_k |h| |W| + |b|          (reduction 288)
//   dW_fc[j,k]    = sum_n dz[n,j] h[n,k]                 A = sum_n |dz| |h|               (reduction N = 4)
//   dgamma[c]     = sum_{n,y,x} dbn * xhat               A = sum |dbn| |xhat|             (reduction N*H*W = 144)
//   dW_conv       = sum_{n,y,x} dc * x (3x3 window)      A = sum |dc| |x|                 (reduction 144)
//   (biases: the sum of |the gradient| over the same rows)
// computed in f64 from the f32 run. A sum whose terms are each off by <= e relative is off by <= e A, in any
// order and however much the terms cancel (the conv bias's gradient is 0 up to rounding, batch norm follows it,
// while its A is not): A, not the result, scales a bf16 tolerance that must hold for any summation order.
// Header-only test support, never used by kiln itself.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"

namespace kiln::test {

struct TinyNet {
  static constexpr int64_t N = 4, C = 3, S = 6, K = 8, classes = 5;  // x (N, C, S, S), conv C -> K, fc K*S*S -> 5
  Tensor x, y;                                                         // f32 input, i64 labels
  std::vector<std::pair<std::string, Tensor>> params;                  // f32 master weights (leaves)
  const Tensor& p(size_t i) const { return params[i].second; }
};

inline TinyNet make_tiny_net(uint64_t seed) {
  manual_seed(seed);
  TinyNet n;
  auto leaf = [](Tensor t) {
    t.set_requires_grad(true);
    return t;
  };
  n.x = randn({TinyNet::N, TinyNet::C, TinyNet::S, TinyNet::S});
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < TinyNet::N; ++i) labels.push_back((i * 3 + 1) % TinyNet::classes);
  n.y = empty({TinyNet::N}, DType::i64);
  for (int64_t i = 0; i < TinyNet::N; ++i) static_cast<int64_t*>(n.y.data_ptr())[i] = labels[(size_t)i];
  const int64_t in_fc = TinyNet::K * TinyNet::S * TinyNet::S;
  n.params = {{"conv_w", leaf(mul(randn({TinyNet::K, TinyNet::C, 3, 3}), 0.3))},
              {"conv_b", leaf(mul(randn({TinyNet::K}), 0.2))},
              {"bn_w", leaf(add(mul(randn({TinyNet::K}), 0.2), 1.0))},
              {"bn_b", leaf(mul(randn({TinyNet::K}), 0.2))},
              {"fc_w", leaf(mul(randn({TinyNet::classes, in_fc}), 0.06))},
              {"fc_b", leaf(mul(randn({TinyNet::classes}), 0.1))}};
  return n;
}

struct TinyRun {
  Tensor logits, loss;        // f32 (bf16 logits widened)
  std::vector<Tensor> grads;  // f32, in params' order
  // f32 run only (f64): conv output c, batch norm output bn, relu output h (flattened), logits z, and the
  // gradients reaching c (dc), bn (dbn), h (dh) and z (dz).
  Tensor c, bn, h, z, dc, dbn, dh, dz;
};

// Forward + loss (under bf16 autocast when `bf16`), backward outside the region; the gradients of the f32
// master weights.
inline TinyRun run_tiny(const TinyNet& n, bool bf16) {
  for (const auto& [name, p] : n.params) p.set_grad(Tensor());
  TinyRun r;
  if (bf16) {
    Tensor loss, z;
    {
      AutocastGuard ac(true, DType::bf16);
      Tensor c = conv2d(n.x, n.p(0), n.p(1), {1, 1}, {1, 1});
      Tensor b = batch_norm(c, n.p(2), n.p(3), Tensor(), Tensor(), true);
      z = linear(flatten(relu(b), 1), n.p(4), n.p(5));
      loss = cross_entropy(z, n.y);
    }
    loss.backward();
    r.logits = to_dtype(z.detach(), DType::f32);
    r.loss = loss.detach();
  } else {
    // The graph cut after every layer: each piece's backward leaves the gradient of its output behind.
    auto cut = [](const Tensor& t) {
      Tensor d = t.detach();
      d.set_requires_grad(true);
      return d;
    };
    Tensor c = conv2d(n.x, n.p(0), n.p(1), {1, 1}, {1, 1}), c2 = cut(c);
    Tensor b = batch_norm(c2, n.p(2), n.p(3), Tensor(), Tensor(), true), b2 = cut(b);
    Tensor h = flatten(relu(b2), 1), h2 = cut(h);
    Tensor z = linear(h2, n.p(4), n.p(5)), z2 = cut(z);
    Tensor loss = cross_entropy(z2, n.y);
    loss.backward();
    z.backward(z2.grad());
    h.backward(h2.grad());
    b.backward(b2.grad());
    c.backward(c2.grad());
    r.logits = z.detach();
    r.loss = loss.detach();
    auto f64 = [](const Tensor& t) { return to_dtype(t.detach(), DType::f64); };
    r.c = f64(c);
    r.bn = f64(b);
    r.h = f64(h);
    r.z = f64(z);
    r.dc = f64(c2.grad());
    r.dbn = f64(b2.grad());
    r.dh = f64(h2.grad());
    r.dz = f64(z2.grad());
  }
  for (const auto& [name, p] : n.params) r.grads.push_back(p.grad().detach());
  return r;
}

// The error scales A (see the header comment) of the logits and of each gradient, in f64, from an f32 run.
struct TinyScales {
  Tensor logits;
  std::vector<Tensor> grads;  // params' order
};

inline TinyScales tiny_scales(const TinyNet& n, const TinyRun& r) {
  NoGradGuard no_grad;
  auto f64 = [](const Tensor& t) { return to_dtype(t.detach(), DType::f64); };
  TinyScales s;
  const Tensor aW = abs(f64(n.p(4))), ab = abs(f64(n.p(5))), ah = abs(r.h), adz = abs(r.dz), adc = abs(r.dc),
               adbn = abs(r.dbn);
  s.logits = add(matmul(ah, transpose(aW, 0, 1)), ab);
  // xhat: the batch-normalized conv output (biased variance, eps 1e-5, as batch_norm).
  const Tensor mu = mean(r.c, {0, 2, 3}, true);
  const Tensor var = mean(mul(sub(r.c, mu), sub(r.c, mu)), {0, 2, 3}, true);
  const Tensor axhat = abs(div(sub(r.c, mu), sqrt(add(var, 1e-5))));
  // sum |dc| |x| over each 3x3 window: the weight gradient of a convolution of |x| given |dc|.
  Tensor w0 = zeros({TinyNet::K, TinyNet::C, 3, 3}, DType::f64);
  {
    EnableGradGuard on;
    w0.set_requires_grad(true);
    conv2d(abs(f64(n.x)), w0, Tensor(), {1, 1}, {1, 1}).backward(adc);
  }
  s.grads = {w0.grad().detach(),
             sum(adc, {0, 2, 3}),
             sum(mul(adbn, axhat), {0, 2, 3}),
             sum(adbn, {0, 2, 3}),
             matmul(transpose(adz, 0, 1), ah),
             sum(adz, {0})};
  return s;
}

// ||a - b||_2 (f64).
inline double l2_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = to_dtype(a, DType::f64).to_vector<double>(), y = to_dtype(b, DType::f64).to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += (x[i] - y[i]) * (x[i] - y[i]);
  return std::sqrt(s);
}

// ||a||_2 (f64).
inline double l2(const Tensor& a) { return l2_diff(a, zeros_like(a)); }

// max over elements of |a - b| / scale (all f64-converted); scale > 0 everywhere is the caller's concern.
inline double max_ratio(const Tensor& a, const Tensor& b, const Tensor& scale) {
  const std::vector<double> x = to_dtype(a, DType::f64).to_vector<double>(), y = to_dtype(b, DType::f64).to_vector<double>(),
                            s = to_dtype(scale, DType::f64).to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]) / s[i]);
  return m;
}

}  // namespace kiln::test
