// Batch norm kernels (see batch_norm.h). Each channel c touches the N strided runs
// x[n, c, 0:HW]; one OpenMP task per channel, sums in double (two passes for the variance, so
// large means do not cancel digits). Outputs are computed as (x - mean) * (gamma * invstd) + beta
// with x - mean in double, never as x * scale + shift in T: with a channel mean large against its
// std (mean 1e3, std 0.21) the f32 product x * scale carries an error of ulp(1e3 * 4.8) ~ 2e-4 that
// the subtraction of shift cannot remove (tests/parity/test_parity_bn_precision.cpp). This is more
// precise than PyTorch's CPU kernel (which uses the scale/shift form), deliberately. The training loops
// run in the machine's best instruction set (batch_norm_train.inc, cpu_isa.h), the same bits in each.
// The 16-bit training kernels (*_16) run their sums and outputs in f32 lanes instead where a channel's
// runs hold at least 32 values (batch_norm_channel16.h: its error bound, and why f32 suffices for 8- and
// 11-bit results); shorter runs keep the double loops' arithmetic, and runs of one value (HW == 1: channels-last
// data, (N*H*W, C) in memory) take it over rows with the channels innermost (batch_norm_rows16.inc: the same
// f32-lane arithmetic and bound, one lane per channel; the per-channel strided loops took 0.26 s of a 1.1 s
// bf16 ResNet18 step at 8x224, the rows in double 30 ms of a 490 ms channels-last step).
#include "kernels/cpu/batch_norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cpu/batch_norm_channel.h"
#include "kernels/cpu/batch_norm_channel16.h"
#include "kernels/cpu/cpu_isa.h"

// batch_norm_channel16.h's always-inlined helpers pass 64-byte vectors by value: GCC's ABI note about that
// (-Wpsabi, given where the templates are instantiated) concerns no call that exists.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kiln::cpu {

namespace {

void check_sizes(int64_t N, int64_t C, int64_t HW, const char* op) {
  KILN_CHECK(N >= 0 && C >= 1 && HW >= 0, op, ": bad sizes N=", N, " C=", C, " HW=", HW);
}

using bn_channel::grad_sums;

// The rows kernels' helpers (batch_norm_rows16.inc): the task grid; a block's vector v of 16 channels
// (the channels past the block's end read as 0, never stored); a lane sum's double accumulators.
namespace rows16 {
constexpr int64_t kRowChannels = 64;  // a task's block: 4 vectors of 16 channels (128 bytes of a bf16 row)
constexpr int64_t kRowsPerPart = 4096;
constexpr int64_t kMaxRowParts = 8;
constexpr int64_t kSplitRows = 1024;
// The rows' parts: one per kRowsPerPart rows, at most kMaxRowParts, and 2 from kSplitRows rows on; from M alone
// (the bits must not depend on the thread count). The 2 parts of ResNet18's layer2-3 at 8x224 (M 6272, 1568) let 2
// threads each take a half of the rows (the half their conv wrote, in their own L2) instead of each reading every
// row's other half of the channels from the other core.
inline int64_t row_parts(int64_t M) {
  return M >= 2 * kRowsPerPart ? std::min(kMaxRowParts, M / kRowsPerPart) : M >= kSplitRows ? 2 : 1;
}
using bn16::F32h;
using bn16::F32v;
using bn16::F64h;
// the n (>= 1) channels of a row from p, n >= 16: a whole vector; fewer: value by value (p + n may be the tensor's end)
template <typename X>
inline __attribute__((always_inline)) F32v load(const X* p, int64_t n) {
  return n >= bn16::kLanes ? bn16::load(p) : bn16::load_tail(p, n, 0.0f, p + n);
}
template <typename X>
inline __attribute__((always_inline)) void store(X* o, const F32v& v, int64_t n) {
  if (n >= bn16::kLanes)
    bn16::store(o, v, bn16::kLanes);  // a constant size: the copy is one store, not a call
  else
    bn16::store(o, v, n);
}
// 16 channels' sums in double lanes: each f32 lane set is added in (exactly) and cleared
struct Sum {
  F64h lo = {}, hi = {};
};
inline __attribute__((always_inline)) void flush(Sum& s, F32v& a) {
  F32h h[2];
  std::memcpy(h, &a, sizeof a);
  s.lo += __builtin_convertvector(h[0], F64h);
  s.hi += __builtin_convertvector(h[1], F64h);
  a = F32v{};
}
inline __attribute__((always_inline)) double lane(const Sum& s, int l) {
  return l < bn16::kLanes / 2 ? s.lo[l] : s.hi[l - bn16::kLanes / 2];
}
}  // namespace rows16

// The training loops once per instruction set (cpu_isa.h): baseline, AVX2, AVX-512.
#define KILN_ISA_TARGET
#define KILN_ISA_NAME(f) f##_baseline
#include "kernels/cpu/batch_norm_train.inc"
#include "kernels/cpu/batch_norm_rows16.inc"
#undef KILN_ISA_TARGET
#undef KILN_ISA_NAME
#if KILN_CPU_ISA_CLONES
#define KILN_ISA_TARGET KILN_TARGET_AVX2
#define KILN_ISA_NAME(f) f##_avx2
#include "kernels/cpu/batch_norm_train.inc"
#include "kernels/cpu/batch_norm_rows16.inc"
#undef KILN_ISA_TARGET
#undef KILN_ISA_NAME
#define KILN_ISA_TARGET KILN_TARGET_AVX512
#define KILN_ISA_NAME(f) f##_avx512
#include "kernels/cpu/batch_norm_train.inc"
#include "kernels/cpu/batch_norm_rows16.inc"
#undef KILN_ISA_TARGET
#undef KILN_ISA_NAME
#endif

// The training forward in the machine's best instruction set; X the data's type, T the parameters'.
template <typename X, typename T>
void forward_train_any(int64_t N, int64_t C, int64_t HW, const X* x, const T* gamma, const T* beta, double eps, X* y,
                       T* save_mean, T* save_invstd, T* running_mean, T* running_var, double momentum,
                       const char* op) {
  check_sizes(N, C, HW, op);
  const int64_t M = N * HW;
  KILN_CHECK(M > 1, op, ": expected more than 1 value per channel when training, got input (", N, ", ", C, ", ", HW,
             ")");
#if KILN_CPU_ISA_CLONES
  switch (cpu_isa_vector(cpu_isa())) {
    case CpuIsa::avx512:
      return forward_train_avx512(N, C, HW, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean, running_var,
                                  momentum);
    case CpuIsa::avx2:
      return forward_train_avx2(N, C, HW, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean, running_var,
                                momentum);
    default: break;
  }
#endif
  forward_train_baseline(N, C, HW, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean, running_var, momentum);
}

template <typename X, typename T>
void backward_train_any(int64_t N, int64_t C, int64_t HW, const X* dy, const X* x, const T* gamma,
                        const T* save_mean, const T* save_invstd, X* dx, T* dgamma, T* dbeta, const char* op) {
  check_sizes(N, C, HW, op);
#if KILN_CPU_ISA_CLONES
  switch (cpu_isa_vector(cpu_isa())) {
    case CpuIsa::avx512:
      return backward_train_avx512(N, C, HW, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
    case CpuIsa::avx2:
      return backward_train_avx2(N, C, HW, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
    default: break;
  }
#endif
  backward_train_baseline(N, C, HW, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

}  // namespace

template <typename T>
void batch_norm_forward_train(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                              double eps, T* y, T* save_mean, T* save_invstd, T* running_mean,
                              T* running_var, double momentum) {
  forward_train_any(N, C, HW, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean, running_var, momentum,
                    "batch_norm_forward_train");
}

template <typename X>
void batch_norm_forward_train_16(int64_t N, int64_t C, int64_t HW, const X* x, const float* gamma, const float* beta,
                                 double eps, X* y, float* save_mean, float* save_invstd, float* running_mean,
                                 float* running_var, double momentum) {
  const char* op = "batch_norm_forward_train_16";
  if (HW == 1 && N > 1) {  // rows (channels-last): f32 lanes over C
    check_sizes(N, C, HW, op);
#if KILN_CPU_ISA_CLONES
    switch (cpu_isa_vector(cpu_isa())) {
      case CpuIsa::avx512:
        return forward_rows_16_avx512(N, C, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean, running_var,
                                      momentum);
      case CpuIsa::avx2:
        return forward_rows_16_avx2(N, C, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean, running_var,
                                    momentum);
      default: break;
    }
#endif
    return forward_rows_16_baseline(N, C, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean, running_var,
                                    momentum);
  }
  // Runs shorter than one f32 vector (channels-last data is (N*H*W, C, 1); 2x2 and 4x4 planes) keep the
  // double loops, which take short runs value by value: padded to 32 lanes they would do up to 32x the work.
  if (HW < bn16::kMinRun)
    return forward_train_any(N, C, HW, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean, running_var,
                             momentum, op);
  check_sizes(N, C, HW, op);
  KILN_CHECK(N * HW > 1, op, ": expected more than 1 value per channel when training, got input (", N, ", ", C, ", ",
             HW, ")");
#if KILN_CPU_ISA_CLONES
  switch (cpu_isa_vector(cpu_isa())) {
    case CpuIsa::avx512:
      return forward_train_16_avx512(N, C, HW, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean,
                                     running_var, momentum);
    case CpuIsa::avx2:
      return forward_train_16_avx2(N, C, HW, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean,
                                   running_var, momentum);
    default: break;
  }
#endif
  forward_train_16_baseline(N, C, HW, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean, running_var,
                            momentum);
}

template <typename T>
void batch_norm_forward_eval(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                             const T* running_mean, const T* running_var, double eps, T* y) {
  check_sizes(N, C, HW, "batch_norm_forward_eval");
  KILN_CHECK(running_mean && running_var, "batch_norm_forward_eval: running_mean and running_var are required");
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const double invstd = 1.0 / std::sqrt((double)running_var[c] + eps);
      const double g = gamma ? (double)gamma[c] : 1.0, b = beta ? (double)beta[c] : 0.0;
      const double k = g * invstd, mean = (double)running_mean[c];
      const T* xp = x + (n * C + c) * HW;
      T* yp = y + (n * C + c) * HW;
      for (int64_t i = 0; i < HW; ++i) yp[i] = (T)(((double)xp[i] - mean) * k + b);
    }
}

template <typename T>
void batch_norm_backward_train(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                               const T* save_mean, const T* save_invstd, T* dx, T* dgamma, T* dbeta) {
  backward_train_any(N, C, HW, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta, "batch_norm_backward_train");
}

template <typename X>
void batch_norm_backward_train_16(int64_t N, int64_t C, int64_t HW, const X* dy, const X* x, const float* gamma,
                                  const float* save_mean, const float* save_invstd, X* dx, float* dgamma,
                                  float* dbeta) {
  if (HW == 1) {  // rows, as the forward
    check_sizes(N, C, HW, "batch_norm_backward_train_16");
#if KILN_CPU_ISA_CLONES
    switch (cpu_isa_vector(cpu_isa())) {
      case CpuIsa::avx512:
        return backward_rows_16_avx512(N, C, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
      case CpuIsa::avx2:
        return backward_rows_16_avx2(N, C, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
      default: break;
    }
#endif
    return backward_rows_16_baseline(N, C, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
  }
  if (HW < bn16::kMinRun)  // as the forward
    return backward_train_any(N, C, HW, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta,
                              "batch_norm_backward_train_16");
  check_sizes(N, C, HW, "batch_norm_backward_train_16");
#if KILN_CPU_ISA_CLONES
  switch (cpu_isa_vector(cpu_isa())) {
    case CpuIsa::avx512:
      return backward_train_16_avx512(N, C, HW, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
    case CpuIsa::avx2:
      return backward_train_16_avx2(N, C, HW, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
    default: break;
  }
#endif
  backward_train_16_baseline(N, C, HW, dy, x, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

template <typename T>
void batch_norm_backward_eval(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                              const T* running_mean, const T* running_var, double eps, T* dx, T* dgamma,
                              T* dbeta) {
  check_sizes(N, C, HW, "batch_norm_backward_eval");
  KILN_CHECK(running_mean && running_var, "batch_norm_backward_eval: running_mean and running_var are required");
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    const double invstd = 1.0 / std::sqrt((double)running_var[c] + eps);
    if (dgamma || dbeta) {
      double sum_dy, sum_dy_xmu;
      grad_sums(N, C, HW, dy, x, c, (double)running_mean[c], &sum_dy, &sum_dy_xmu);
      if (dbeta) dbeta[c] = (T)sum_dy;
      if (dgamma) dgamma[c] = (T)(sum_dy_xmu * invstd);
    }
    if (dx) {
      const T k = (T)((gamma ? (double)gamma[c] : 1.0) * invstd);
      for (int64_t n = 0; n < N; ++n) {
        const T* g = dy + (n * C + c) * HW;
        T* o = dx + (n * C + c) * HW;
        for (int64_t i = 0; i < HW; ++i) o[i] = g[i] * k;
      }
    }
  }
}

#define KILN_INSTANTIATE_BN(T)                                                                            \
  template void batch_norm_forward_train<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, double, \
                                            T*, T*, T*, T*, T*, double);                                 \
  template void batch_norm_forward_eval<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,        \
                                           const T*, const T*, double, T*);                               \
  template void batch_norm_backward_train<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,      \
                                             const T*, const T*, T*, T*, T*);                             \
  template void batch_norm_backward_eval<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,       \
                                            const T*, const T*, double, T*, T*, T*);
KILN_INSTANTIATE_BN(float)
KILN_INSTANTIATE_BN(double)
#undef KILN_INSTANTIATE_BN
#define KILN_INSTANTIATE_BN_16(X)                                                                            \
  template void batch_norm_forward_train_16<X>(int64_t, int64_t, int64_t, const X*, const float*, const float*, \
                                               double, X*, float*, float*, float*, float*, double);          \
  template void batch_norm_backward_train_16<X>(int64_t, int64_t, int64_t, const X*, const X*, const float*,  \
                                                const float*, const float*, X*, float*, float*);
KILN_INSTANTIATE_BN_16(half)
KILN_INSTANTIATE_BN_16(bfloat16)
#undef KILN_INSTANTIATE_BN_16

}  // namespace kiln::cpu
