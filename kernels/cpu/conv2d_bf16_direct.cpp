// The direct bf16 convolution (see conv2d_bf16_direct.h): the rule, the forced setting, the ISA dispatch and
// the small f32 copies of w and the bias; the loops are in conv2d_bf16_direct.inc.
#include "kernels/cpu/conv2d_bf16_direct.h"

#include <omp.h>

#include <atomic>
#include <cstring>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cpu/bf16_runs.h"
#include "kernels/cpu/cpu_isa.h"

namespace kiln::cpu {

namespace {

// The 64-byte vector type in a default-target helper: GCC warns that passing it by value would change the ABI
// with AVX-512; the helpers are always inlined into each variant, so no call passes one.
#pragma GCC diagnostic ignored "-Wpsabi"

// 16 f32 lanes: one AVX-512 register, two AVX2 ones, four SSE2 ones; lane-wise IEEE operations everywhere.
typedef float V16 __attribute__((vector_size(16 * sizeof(float))));

inline __attribute__((always_inline)) V16 load16(const float* p) {
  V16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The 16 lanes added in a fixed order (pairs, then pairs of pairs).
inline __attribute__((always_inline)) float fold16(const V16& v) {
  float a[8];
  for (int i = 0; i < 8; ++i) a[i] = v[i] + v[i + 8];
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

#define KILN_ISA_TARGET
#define KILN_ISA_NAME(f) f##_baseline
#include "kernels/cpu/conv2d_bf16_direct.inc"
#undef KILN_ISA_TARGET
#undef KILN_ISA_NAME
#if KILN_CPU_ISA_CLONES
#define KILN_ISA_TARGET KILN_TARGET_AVX2
#define KILN_ISA_NAME(f) f##_avx2
#include "kernels/cpu/conv2d_bf16_direct.inc"
#undef KILN_ISA_TARGET
#undef KILN_ISA_NAME
#define KILN_ISA_TARGET KILN_TARGET_AVX512
#define KILN_ISA_NAME(f) f##_avx512
#include "kernels/cpu/conv2d_bf16_direct.inc"
#undef KILN_ISA_TARGET
#undef KILN_ISA_NAME
#endif

#if KILN_CPU_ISA_CLONES
#define KILN_DIRECT_CALL(f, ...)                                              \
  do {                                                                        \
    const CpuIsa isa = cpu_isa_vector(cpu_isa());                             \
    if (isa == CpuIsa::avx512) return f##_avx512(__VA_ARGS__);                \
    if (isa == CpuIsa::avx2) return f##_avx2(__VA_ARGS__);                    \
    return f##_baseline(__VA_ARGS__);                                         \
  } while (0)
#else
#define KILN_DIRECT_CALL(f, ...) return f##_baseline(__VA_ARGS__)
#endif

// The same reduction length below which oneDNN is not used (conv2d_bf16.cpp's kMinReduction).
constexpr int64_t kMaxDirectReduction = 15;

std::atomic<int> direct_forced{-2};  // -2: not read yet; -1 the rule; 0 off; 1 on

int forced_mode() {
  int v = direct_forced.load(std::memory_order_acquire);
  if (v != -2) return v;
  int m = -1;
  if (const char* e = std::getenv("KILN_BF16_CONV_DIRECT")) {
    const std::string s(e);
    if (s == "on") m = 1;
    else if (s == "off") m = 0;
    else KILN_CHECK(s.empty() || s == "auto", "KILN_BF16_CONV_DIRECT: '", s, "' is not one of auto, on, off");
  }
  int expected = -2;
  direct_forced.compare_exchange_strong(expected, m, std::memory_order_acq_rel);
  return direct_forced.load(std::memory_order_acquire);
}

void check_desc(const Conv2dDesc& d, const char* op) {
  KILN_CHECK(d.groups == 1, op, ": groups ", d.groups, " is not supported (groups 1 only); conv (N ", d.N, ", C ", d.C,
             ", H ", d.H, ", W ", d.W, ") -> K ", d.K);
  KILN_CHECK(d.N >= 0 && d.C >= 1 && d.K >= 1 && d.out_h() >= 1 && d.out_w() >= 1, op, ": bad sizes N ", d.N, " C ",
             d.C, " H ", d.H, " W ", d.W, " K ", d.K, " R ", d.R, " S ", d.S);
}

std::vector<float> widen(const bfloat16* p, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (float)p[i];
  return v;
}

}  // namespace

bool conv2d_bf16_uses_direct(const Conv2dDesc& d) {
  if (d.groups != 1) return false;
  const int m = forced_mode();
  if (m >= 0) return m == 1;
  return d.C * d.R * d.S <= kMaxDirectReduction;
}

int set_conv2d_bf16_direct_forced(int mode) {
  KILN_CHECK(mode >= -1 && mode <= 1, "set_conv2d_bf16_direct_forced: mode ", mode, " is not -1, 0 or 1");
  const int old = forced_mode();
  direct_forced.store(mode, std::memory_order_release);
  return old;
}

void conv2d_bf16_direct_forward(const Conv2dDesc& d, const bfloat16* x, const bfloat16* w, const void* bias,
                                Bf16Bias bt, bfloat16* y) {
  check_desc(d, "conv2d_bf16_direct_forward");
  const std::vector<float> wf = widen(w, d.K * d.C * d.R * d.S);
  std::vector<float> bf;
  if (bias && bt == Bf16Bias::f32) bf.assign((const float*)bias, (const float*)bias + d.K);
  if (bias && bt == Bf16Bias::bf16) bf = widen((const bfloat16*)bias, d.K);
  KILN_DIRECT_CALL(direct_forward, d, x, wf.data(), bf.empty() ? nullptr : bf.data(), y);
}

void conv2d_bf16_direct_backward_input(const Conv2dDesc& d, const bfloat16* dy, const bfloat16* w, bfloat16* dx) {
  check_desc(d, "conv2d_bf16_direct_backward_input");
  const std::vector<float> wf = widen(w, d.K * d.C * d.R * d.S);
  KILN_DIRECT_CALL(direct_backward_input, d, dy, wf.data(), dx);
}

void conv2d_bf16_direct_backward_weight(const Conv2dDesc& d, const bfloat16* x, const bfloat16* dy, bfloat16* dw,
                                        void* dbias, Bf16Bias bt) {
  check_desc(d, "conv2d_bf16_direct_backward_weight");
  const int64_t nw = d.K * d.C * d.R * d.S;
  std::vector<float> dwf(nw), dbf(dbias && bt != Bf16Bias::none ? d.K : 0);
  [&] { KILN_DIRECT_CALL(direct_backward_weight, d, x, dy, dwf.data(), dbf.empty() ? nullptr : dbf.data()); }();
  f32_run_to_bf16(dw, dwf.data(), nw);
  if (dbf.empty()) return;
  if (bt == Bf16Bias::f32) {
    for (int64_t k = 0; k < d.K; ++k) ((float*)dbias)[k] = dbf[k];
  } else {
    f32_run_to_bf16((bfloat16*)dbias, dbf.data(), d.K);
  }
}

#undef KILN_DIRECT_CALL

}  // namespace kiln::cpu
