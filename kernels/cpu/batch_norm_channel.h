// The per-channel arithmetic of the CPU batch norm kernels, shared by the fused kernels
// (batch_norm.cpp) and the staged ones for data-parallel statistics (batch_norm_sync.cpp), so both
// compute the same bits from the same sums. x, dy, y: (N, C, HW) contiguous; channel c is the N
// strided runs x[n, c, 0:HW]. The data (x, y, dy, dx: type X) may be 16-bit while the parameters and
// statistics (type T) are f32: a 16-bit value is widened exactly on load and a result is rounded to f32
// first and then to 16 bits, the same bits as staging the data through f32 copies (the 16-bit training
// kernels use this only for runs shorter than 32 values; longer ones: batch_norm_channel16.h). Private to
// kernels/cpu; no allocation, no threads.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/core/half.h"
#include "kernels/cpu/lanes.h"

namespace kiln::cpu::bn_channel {

// The channel sums run in 8 double lanes (kernels/cpu/lanes.h): the same bits at any thread count and on
// every instruction set.
using lanes::fold;
using lanes::kLanes;
using lanes::Lanes;
using lanes::load;

// v rounded to the data type: 16-bit data through f32 (what an f32 result copied to 16 bits gives).
template <typename X>
inline X round_to(double v) {
  if constexpr (std::is_same_v<X, bfloat16> || std::is_same_v<X, half>)
    return X((float)v);
  else
    return (X)v;
}

// sum of x over channel c, in double
template <typename T>
inline double sum(int64_t N, int64_t C, int64_t HW, const T* x, int64_t c) {
  Lanes acc = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t n = 0; n < N; ++n) lanes::add_run(x + (n * C + c) * HW, HW, acc);
  return fold(acc);
}

// sum of (x - mean)^2 over channel c, in double (the second pass of the variance)
template <typename T>
inline double centered_squares(int64_t N, int64_t C, int64_t HW, const T* x, int64_t c, double mean) {
  Lanes acc = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t n = 0; n < N; ++n) lanes::add_centered_squares(x + (n * C + c) * HW, HW, mean, acc);
  return fold(acc);
}

// Given the channel's mean and biased var over M values: save_mean / save_invstd, the running stats
// (unbiased variance), and y = (x - mean) * (gamma * invstd) + beta in double, rounded once on store.
template <typename X, typename T>
inline void normalize(int64_t N, int64_t C, int64_t HW, const X* x, const T* gamma, const T* beta, double eps,
                      int64_t c, double mean, double var, int64_t M, X* y, T* save_mean, T* save_invstd,
                      T* running_mean, T* running_var, double momentum) {
  const double invstd = 1.0 / std::sqrt(var + eps);
  save_mean[c] = (T)mean;
  save_invstd[c] = (T)invstd;
  if (running_mean) running_mean[c] = (T)((1.0 - momentum) * (double)running_mean[c] + momentum * mean);
  if (running_var)
    running_var[c] = (T)((1.0 - momentum) * (double)running_var[c] + momentum * var * (double)M / (double)(M - 1));
  const double g = gamma ? (double)gamma[c] : 1.0, b = beta ? (double)beta[c] : 0.0;
  const double k = g * invstd;
  for (int64_t n = 0; n < N; ++n) {
    const X* xp = x + (n * C + c) * HW;
    X* yp = y + (n * C + c) * HW;
    for (int64_t i = 0; i < HW; ++i) yp[i] = round_to<X>(((double)xp[i] - mean) * k + b);
  }
}

// Per-channel sums of dy and dy * (x - mean), in double.
template <typename T>
inline void grad_sums(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, int64_t c, double mean,
                      double* sum_dy, double* sum_dy_xmu) {
  Lanes a = {0, 0, 0, 0, 0, 0, 0, 0}, b = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t n = 0; n < N; ++n) {
    const T* g = dy + (n * C + c) * HW;
    const T* xp = x + (n * C + c) * HW;
    int64_t i = 0;
    for (; i + kLanes <= HW; i += kLanes) {
      Lanes gv, xv;
      load(g + i, gv);
      load(xp + i, xv);
      a += gv;
      b += gv * (xv - mean);
    }
    for (int j = 0; i < HW; ++i, ++j) {
      a[j] += (double)g[i];
      b[j] += (double)g[i] * ((double)xp[i] - mean);
    }
  }
  *sum_dy = fold(a);
  *sum_dy_xmu = fold(b);
}

// dx = k * (dy - mean_dy - (x - mean) * proj), k = gamma * invstd, mean_dy = sum_dy / M,
// proj = sum(dy * (x - mean)) * invstd^2 / M; (x - mean) in double, as in the forward.
template <typename X, typename T>
inline void input_grad(int64_t N, int64_t C, int64_t HW, const X* dy, const X* x, const T* gamma, int64_t c,
                       double mean, double invstd, double sum_dy, double sum_dy_xmu, int64_t M, X* dx) {
  const double k = (gamma ? (double)gamma[c] : 1.0) * invstd;
  const double mean_dy = sum_dy / (double)M;
  const double proj = sum_dy_xmu * invstd * invstd / (double)M;
  for (int64_t n = 0; n < N; ++n) {
    const X* g_ = dy + (n * C + c) * HW;
    const X* xp = x + (n * C + c) * HW;
    X* o = dx + (n * C + c) * HW;
    for (int64_t i = 0; i < HW; ++i)
      o[i] = round_to<X>(k * ((double)g_[i] - mean_dy - ((double)xp[i] - mean) * proj));
  }
}

}  // namespace kiln::cpu::bn_channel
