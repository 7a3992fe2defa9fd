// Scalar math of kiln's elementwise ops, shared by the CPU and CUDA backends. Compute type is
// float for f16/bf16/f32 and double for f64; the backends load, call these, and round on store.
// NaN and inf follow PyTorch 1.13 (CPU) exactly, tested in tests/parity/test_parity_nonfinite.cpp:
// relu(NaN) = NaN and its gradient passes at NaN, clamp keeps NaN, maximum/minimum return NaN when
// either side is NaN, sign(NaN) = 0, pow by 0.5 / -0.5 is sqrt / rsqrt (so pow(-inf, 0.5) = NaN and
// pow(-0, -0.5) = -inf, as torch). Comparisons are written so that NaN takes the branch PyTorch takes;
// do not rewrite them as fmax/fmin (those drop NaN) or let a build use fast-math.
#pragma once
#include <cmath>
#include <cstdint>

#include "engine/core/host_device.h"

namespace kiln {

enum class UnaryOp : uint8_t {
  neg, exp, log, sqrt, rsqrt, abs, relu, leaky_relu, gelu, sigmoid, tanh, clamp, pow_scalar, add_scalar,
  mul_scalar, rsub_scalar, gelu_grad, sign, gt_scalar, isfinite
};
enum class BinaryOp : uint8_t {
  add, sub, mul, div, pow, maximum, minimum, gt, lt, eq,
  relu_grad,        // (grad, out) -> out <= 0 ? 0 : grad  (torch's threshold_backward: NaN passes grad)
  leaky_relu_grad,  // (grad, x) -> x > 0 ? grad : grad * a
  ge_mask           // (a, b) -> a >= b  (1/0 in the compute type)
};

// a, b: op parameters (alpha of add/sub, slope of leaky_relu, clamp bounds, exponent...).
template <typename C>
KILN_HOST_DEVICE C unary_math(UnaryOp op, C x, C a, C b) {
  switch (op) {
    case UnaryOp::neg: return -x;
    case UnaryOp::exp: return std::exp(x);
    case UnaryOp::log: return std::log(x);
    case UnaryOp::sqrt: return std::sqrt(x);
    case UnaryOp::rsqrt: return C(1) / std::sqrt(x);
    case UnaryOp::abs: return std::fabs(x);
    case UnaryOp::relu: return x < C(0) ? C(0) : x;  // NaN and -0 pass through, like torch.relu
    case UnaryOp::leaky_relu: return x > C(0) ? x : x * a;
    case UnaryOp::gelu: return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440)));
    case UnaryOp::gelu_grad: {  // d/dx gelu(x)
      C cdf = C(0.5) * (C(1) + std::erf(x * C(0.70710678118654752440)));
      C pdf = std::exp(C(-0.5) * x * x) * C(0.39894228040143267794);
      return cdf + x * pdf;
    }
    case UnaryOp::sigmoid: return C(1) / (C(1) + std::exp(-x));
    case UnaryOp::tanh: return std::tanh(x);
    case UnaryOp::clamp: {  // NaN propagates, like torch.clamp
      C r = x < a ? a : x;
      r = r > b ? b : r;
      return x != x ? x : r;
    }
    case UnaryOp::pow_scalar:  // torch's special exponents (they differ from std::pow at -0 and -inf)
      if (a == C(2)) return x * x;
      if (a == C(3)) return x * x * x;
      if (a == C(0.5)) return std::sqrt(x);
      if (a == C(-0.5)) return C(1) / std::sqrt(x);
      if (a == C(-1)) return C(1) / x;
      if (a == C(-2)) return C(1) / (x * x);
      return std::pow(x, a);
    case UnaryOp::add_scalar: return x + a;
    case UnaryOp::mul_scalar: return x * a;
    case UnaryOp::rsub_scalar: return a - x;
    case UnaryOp::sign: return x > C(0) ? C(1) : (x < C(0) ? C(-1) : C(0));
    case UnaryOp::gt_scalar: return x > a ? C(1) : C(0);
    case UnaryOp::isfinite: return std::isfinite(x) ? C(1) : C(0);
  }
  return x;
}

template <typename C>
KILN_HOST_DEVICE C binary_math(BinaryOp op, C x, C y, C a) {
  switch (op) {
    case BinaryOp::add: return x + a * y;
    case BinaryOp::sub: return x - a * y;
    case BinaryOp::mul: return x * y;
    case BinaryOp::div: return x / y;
    case BinaryOp::pow: return std::pow(x, y);
    case BinaryOp::maximum: return (x != x || y != y) ? x + y : (x > y ? x : y);
    case BinaryOp::minimum: return (x != x || y != y) ? x + y : (x < y ? x : y);
    case BinaryOp::gt: return x > y ? C(1) : C(0);
    case BinaryOp::lt: return x < y ? C(1) : C(0);
    case BinaryOp::eq: return x == y ? C(1) : C(0);
    case BinaryOp::relu_grad: return y <= C(0) ? C(0) : x;
    case BinaryOp::leaky_relu_grad: return y > C(0) ? x : x * a;
    case BinaryOp::ge_mask: return x >= y ? C(1) : C(0);
  }
  return x;
}

}  // namespace kiln
