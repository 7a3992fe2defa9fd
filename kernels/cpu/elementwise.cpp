// CPU elementwise loops. Each op is instantiated with its opcode as a template argument so the
// switch in unary_math/binary_math folds away and contiguous loops vectorize. The contiguous bf16 rows
// (unary, binary, the f32 <-> bf16 casts) also run in the machine's best instruction set (cpu_isa.h),
// the same bits at each level; everything else is SSE2. Must not allocate: out is given.
#include "kernels/cpu/elementwise.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "engine/core/philox.h"
#include "kernels/common/float_to_int.h"
#include "kernels/cpu/bf16_runs.h"
#include "kernels/cpu/cpu_isa.h"

namespace kiln::cpu {
namespace {

// The unary/binary row loops are flattened: GCC judged unary_math's whole switch too big to inline
// and called it once per element (ReLU ran scalar, a call per value: 3-8% of a training step,
// docs/cpu-profile.md); inlined, the switch folds on the template opcode and the loop vectorizes.
// Same operations in the same order, so the same bits.
#if defined(__GNUC__)
#define KILN_FLATTEN __attribute__((flatten))
#else
#define KILN_FLATTEN
#endif

// The contiguous rows of the bf16 unary / binary ops and of the f32 <-> bf16 casts, compiled once per
// instruction set (cpu_isa.h) and dispatched at run time: with SSE2 alone the bf16 rounding (compare,
// select, narrow to 16 bits) vectorized poorly and the bf16 relu ran at ~2.5x the f32 one
// (docs/cpu-bf16.md's profile); AVX2 / AVX-512 have the blends and narrowing moves. The loops are the
// scalar ones (half.h's conversions, elementwise_math.h's math), lane-wise the same IEEE operations with no
// contraction (-ffp-contract=off), so every level gives the same bits (tests/unit/test_elementwise_bf16.cpp).
// Binary rows: mode 0 both operands contiguous, 1 y a broadcast scalar, 2 x a broadcast scalar.
#define KILN_BF16_ROWS(SUFFIX, TARGET)                                                                           \
  template <UnaryOp OP>                                                                                        \
  TARGET KILN_FLATTEN void unary_bf16_row_##SUFFIX(bfloat16* o, const bfloat16* x, int64_t n, float a, float b) { \
    for (int64_t i = 0; i < n; ++i) o[i] = bfloat16(unary_math<float>(OP, (float)x[i], a, b));               \
  }                                                                                                            \
  template <BinaryOp OP>                                                                                       \
  TARGET KILN_FLATTEN void binary_bf16_row_##SUFFIX(bfloat16* o, const bfloat16* x, const bfloat16* y, int64_t n, \
                                                    float a, int mode) {                                       \
    if (mode == 0) {                                                                                           \
      for (int64_t i = 0; i < n; ++i) o[i] = bfloat16(binary_math<float>(OP, (float)x[i], (float)y[i], a));    \
    } else if (mode == 1) {                                                                                    \
      const float yv = (float)y[0];                                                                            \
      for (int64_t i = 0; i < n; ++i) o[i] = bfloat16(binary_math<float>(OP, (float)x[i], yv, a));             \
    } else {                                                                                                   \
      const float xv = (float)x[0];                                                                            \
      for (int64_t i = 0; i < n; ++i) o[i] = bfloat16(binary_math<float>(OP, xv, (float)y[i], a));             \
    }                                                                                                          \
  }                                                                                                            \
  TARGET void bf16_to_f32_row_##SUFFIX(float* o, const bfloat16* x, int64_t n) { bf16_run_to_f32(o, x, n); }   \
  TARGET void f32_to_bf16_row_##SUFFIX(bfloat16* o, const float* x, int64_t n) { f32_run_to_bf16(o, x, n); }

KILN_BF16_ROWS(baseline, )
#if KILN_CPU_ISA_CLONES
KILN_BF16_ROWS(avx2, KILN_TARGET_AVX2)
KILN_BF16_ROWS(avx512, KILN_TARGET_AVX512)
// f: the row's name, TA: its template arguments (<OP> or nothing)
#define KILN_BF16_ROW_CALL(isa, f, TA, ...)                                       \
  do {                                                                            \
    if ((isa) == CpuIsa::avx512) return f##_avx512 TA(__VA_ARGS__);               \
    if ((isa) == CpuIsa::avx2) return f##_avx2 TA(__VA_ARGS__);                   \
    return f##_baseline TA(__VA_ARGS__);                                          \
  } while (0)
#else
#define KILN_BF16_ROW_CALL(isa, f, TA, ...) return f##_baseline TA(__VA_ARGS__)
#endif
#undef KILN_BF16_ROWS

// The level the bf16 rows take now (read once per op, outside the threads).
inline CpuIsa bf16_row_isa() { return cpu_isa_vector(cpu_isa()); }

template <UnaryOp OP>
void unary_bf16_row(CpuIsa isa, bfloat16* o, const bfloat16* x, int64_t n, float a, float b) {
  KILN_BF16_ROW_CALL(isa, unary_bf16_row, <OP>, o, x, n, a, b);
}
template <BinaryOp OP>
void binary_bf16_row(CpuIsa isa, bfloat16* o, const bfloat16* x, const bfloat16* y, int64_t n, float a, int mode) {
  KILN_BF16_ROW_CALL(isa, binary_bf16_row, <OP>, o, x, y, n, a, mode);
}
void bf16_to_f32_row(CpuIsa isa, float* o, const bfloat16* x, int64_t n) { KILN_BF16_ROW_CALL(isa, bf16_to_f32_row, , o, x, n); }
void f32_to_bf16_row(CpuIsa isa, bfloat16* o, const float* x, int64_t n) { KILN_BF16_ROW_CALL(isa, f32_to_bf16_row, , o, x, n); }
#undef KILN_BF16_ROW_CALL

template <typename T> struct Compute { using type = float; };
template <> struct Compute<double> { using type = double; };

template <typename T> inline typename Compute<T>::type load(const char* p) {
  return (typename Compute<T>::type)(*reinterpret_cast<const T*>(p));
}
template <typename T> inline void store(char* p, typename Compute<T>::type v) { *reinterpret_cast<T*>(p) = T(v); }

template <typename T> inline double load_d(const char* p) { return (double)*reinterpret_cast<const T*>(p); }
template <> inline double load_d<half>(const char* p) { return (float)*reinterpret_cast<const half*>(p); }
template <> inline double load_d<bfloat16>(const char* p) { return (float)*reinterpret_cast<const bfloat16*>(p); }
template <typename T> inline void store_d(char* p, double v) { *reinterpret_cast<T*>(p) = (T)v; }
template <> inline void store_d<half>(char* p, double v) { *reinterpret_cast<half*>(p) = half((float)v); }
template <> inline void store_d<bfloat16>(char* p, double v) { *reinterpret_cast<bfloat16*>(p) = bfloat16((float)v); }
// To an integer: kernels/common/float_to_int.h's rule (truncate, saturate, NaN -> 0), as the CUDA kernels.
template <> inline void store_d<int32_t>(char* p, double v) { *reinterpret_cast<int32_t*>(p) = float_to_int<int32_t>(v); }
template <> inline void store_d<int64_t>(char* p, double v) { *reinterpret_cast<int64_t*>(p) = float_to_int<int64_t>(v); }
template <> inline void store_d<uint8_t>(char* p, double v) { *reinterpret_cast<uint8_t*>(p) = float_to_int<uint8_t>(v); }

// Calls body(ptrs, n, byte_strides) for every innermost row; rows are split across threads.
template <int N, typename F>
void strided_loop(LoopShape s, StridedOperand* ops, F&& body) {
  coalesce_dims(s, ops, N);
  int64_t total = s.numel();
  if (total == 0) return;
  int last = s.ndim - 1;
  int64_t inner = s.sizes[last];
  int64_t rows = total / inner;
  int64_t bstride[N][kMaxDims];
  for (int k = 0; k < N; ++k)
    for (int d = 0; d < s.ndim; ++d) bstride[k][d] = ops[k].strides[d] * (int64_t)dtype_size(ops[k].dtype);
  int64_t inner_bs[N];
  for (int k = 0; k < N; ++k) inner_bs[k] = bstride[k][last];
  auto run_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      char* p[N];
      for (int k = 0; k < N; ++k) p[k] = ops[k].data;
      int64_t rem = r;
      for (int d = last - 1; d >= 0; --d) {
        int64_t i = rem % s.sizes[d];
        rem /= s.sizes[d];
        for (int k = 0; k < N; ++k) p[k] += i * bstride[k][d];
      }
      body(p, inner, inner_bs);
    }
  };
  if (total < 65536 || omp_in_parallel()) {
    run_rows(0, rows);
    return;
  }
  if (rows == 1) {  // split one long row into chunks
    int64_t chunks = std::min<int64_t>(omp_get_max_threads() * 4, (inner + 16383) / 16384);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t b = inner * c / chunks, e = inner * (c + 1) / chunks;
      char* p[N];
      for (int k = 0; k < N; ++k) p[k] = ops[k].data + b * inner_bs[k];
      body(p, e - b, inner_bs);
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) run_rows(r, r + 1);
}

template <typename T, UnaryOp OP>
void unary_t(const LoopShape& s, StridedOperand out, StridedOperand in, double a, double b) {
  using C = typename Compute<T>::type;
  StridedOperand ops[2] = {out, in};
  C ca = (C)a, cb = (C)b;
  const CpuIsa isa = std::is_same<T, bfloat16>::value ? bf16_row_isa() : CpuIsa::baseline;
  strided_loop<2>(s, ops, [&](char** p, int64_t n, const int64_t* bs) KILN_FLATTEN {
    if (bs[0] == (int64_t)sizeof(T) && bs[1] == (int64_t)sizeof(T)) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[1]);
      if constexpr (std::is_same<T, bfloat16>::value) return unary_bf16_row<OP>(isa, o, x, n, ca, cb);
      for (int64_t i = 0; i < n; ++i) o[i] = T(unary_math<C>(OP, (C)x[i], ca, cb));
    } else {
      for (int64_t i = 0; i < n; ++i)
        store<T>(p[0] + i * bs[0], unary_math<C>(OP, load<T>(p[1] + i * bs[1]), ca, cb));
    }
  });
}

template <typename T, BinaryOp OP>
void binary_t(const LoopShape& s, StridedOperand out, StridedOperand x, StridedOperand y, double a) {
  using C = typename Compute<T>::type;
  StridedOperand ops[3] = {out, x, y};
  C ca = (C)a;
  const CpuIsa isa = std::is_same<T, bfloat16>::value ? bf16_row_isa() : CpuIsa::baseline;
  strided_loop<3>(s, ops, [&](char** p, int64_t n, const int64_t* bs) KILN_FLATTEN {
    const int64_t e = sizeof(T);
    T* o = reinterpret_cast<T*>(p[0]);
    const T* xp = reinterpret_cast<const T*>(p[1]);
    const T* yp = reinterpret_cast<const T*>(p[2]);
    if constexpr (std::is_same<T, bfloat16>::value)
      if (bs[0] == e && (bs[1] == e || bs[1] == 0) && (bs[2] == e || bs[2] == 0) && (bs[1] | bs[2]) != 0)
        return binary_bf16_row<OP>(isa, o, xp, yp, n, ca, bs[1] == 0 ? 2 : bs[2] == 0 ? 1 : 0);
    if (bs[0] == e && bs[1] == e && bs[2] == e) {
      for (int64_t i = 0; i < n; ++i) o[i] = T(binary_math<C>(OP, (C)xp[i], (C)yp[i], ca));
    } else if (bs[0] == e && bs[1] == e && bs[2] == 0) {
      C yv = (C)yp[0];
      for (int64_t i = 0; i < n; ++i) o[i] = T(binary_math<C>(OP, (C)xp[i], yv, ca));
    } else if (bs[0] == e && bs[1] == 0 && bs[2] == e) {
      C xv = (C)xp[0];
      for (int64_t i = 0; i < n; ++i) o[i] = T(binary_math<C>(OP, xv, (C)yp[i], ca));
    } else {
      for (int64_t i = 0; i < n; ++i)
        store<T>(p[0] + i * bs[0], binary_math<C>(OP, load<T>(p[1] + i * bs[1]), load<T>(p[2] + i * bs[2]), ca));
    }
  });
}

#define KILN_FLOAT_DISPATCH(dt, NAME, ...)                                 \
  switch (dt) {                                                            \
    case DType::f32: NAME<float>(__VA_ARGS__); break;                      \
    case DType::f64: NAME<double>(__VA_ARGS__); break;                     \
    case DType::f16: NAME<half>(__VA_ARGS__); break;                       \
    case DType::bf16: NAME<bfloat16>(__VA_ARGS__); break;                  \
    default: throw Error(str_cat("elementwise: dtype ", dtype_name(dt), " not supported")); \
  }

template <typename T>
void unary_dispatch(UnaryOp op, const LoopShape& s, StridedOperand out, StridedOperand in, double a, double b) {
  switch (op) {
#define K(o) case UnaryOp::o: unary_t<T, UnaryOp::o>(s, out, in, a, b); break;
    K(neg) K(exp) K(log) K(sqrt) K(rsqrt) K(abs) K(relu) K(leaky_relu) K(gelu) K(sigmoid) K(tanh) K(clamp)
    K(pow_scalar) K(add_scalar) K(mul_scalar) K(rsub_scalar) K(gelu_grad) K(sign) K(gt_scalar) K(isfinite)
#undef K
  }
}

template <typename T>
void binary_dispatch(BinaryOp op, const LoopShape& s, StridedOperand out, StridedOperand x, StridedOperand y,
                     double a) {
  switch (op) {
#define K(o) case BinaryOp::o: binary_t<T, BinaryOp::o>(s, out, x, y, a); break;
    K(add) K(sub) K(mul) K(div) K(pow) K(maximum) K(minimum) K(gt) K(lt) K(eq) K(relu_grad) K(leaky_relu_grad)
    K(ge_mask)
#undef K
  }
}

template <typename D, typename S>
void copy_t(const LoopShape& s, StridedOperand dst, StridedOperand src) {
  StridedOperand ops[2] = {dst, src};
  const CpuIsa isa = std::is_same<D, bfloat16>::value || std::is_same<S, bfloat16>::value ? bf16_row_isa()
                                                                                          : CpuIsa::baseline;
  strided_loop<2>(s, ops, [&](char** p, int64_t n, const int64_t* bs) {
    if constexpr (std::is_same<D, S>::value) {
      if (bs[0] == (int64_t)sizeof(D) && bs[1] == (int64_t)sizeof(S))
        std::memcpy(p[0], p[1], (size_t)n * sizeof(D));
      else
        for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * bs[0], p[1] + i * bs[1], sizeof(D));
    } else if constexpr (std::is_same<D, float>::value && (std::is_same<S, half>::value || std::is_same<S, bfloat16>::value)) {
      if constexpr (std::is_same<S, bfloat16>::value)
        if (bs[0] == (int64_t)sizeof(D) && bs[1] == (int64_t)sizeof(S))
          return bf16_to_f32_row(isa, reinterpret_cast<float*>(p[0]), reinterpret_cast<const bfloat16*>(p[1]), n);
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<float*>(p[0] + i * bs[0]) = (float)*reinterpret_cast<const S*>(p[1] + i * bs[1]);
    } else if constexpr (std::is_same<S, float>::value && (std::is_same<D, half>::value || std::is_same<D, bfloat16>::value)) {
      if constexpr (std::is_same<D, bfloat16>::value)
        if (bs[0] == (int64_t)sizeof(D) && bs[1] == (int64_t)sizeof(S))
          return f32_to_bf16_row(isa, reinterpret_cast<bfloat16*>(p[0]), reinterpret_cast<const float*>(p[1]), n);
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<D*>(p[0] + i * bs[0]) = D(*reinterpret_cast<const float*>(p[1] + i * bs[1]));
    } else {
      for (int64_t i = 0; i < n; ++i) store_d<D>(p[0] + i * bs[0], load_d<S>(p[1] + i * bs[1]));
    }
  });
}

template <typename D>
void copy_to(const LoopShape& s, StridedOperand dst, StridedOperand src) {
  switch (src.dtype) {
    case DType::f32: copy_t<D, float>(s, dst, src); break;
    case DType::f64: copy_t<D, double>(s, dst, src); break;
    case DType::f16: copy_t<D, half>(s, dst, src); break;
    case DType::bf16: copy_t<D, bfloat16>(s, dst, src); break;
    case DType::i32: copy_t<D, int32_t>(s, dst, src); break;
    case DType::i64: copy_t<D, int64_t>(s, dst, src); break;
    case DType::u8: copy_t<D, uint8_t>(s, dst, src); break;
  }
}

template <typename T>
void fill_t(const LoopShape& s, StridedOperand dst, double v) {
  char buf[8];
  store_d<T>(buf, v);
  StridedOperand ops[1] = {dst};
  strided_loop<1>(s, ops, [&](char** p, int64_t n, const int64_t* bs) {
    T val;
    std::memcpy(&val, buf, sizeof(T));
    for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * bs[0]) = val;
  });
}

template <typename T>
void where_t(const LoopShape& s, StridedOperand out, StridedOperand cond, StridedOperand x, StridedOperand y) {
  StridedOperand ops[4] = {out, cond, x, y};
  strided_loop<4>(s, ops, [&](char** p, int64_t n, const int64_t* bs) {
    for (int64_t i = 0; i < n; ++i) {
      bool c = *reinterpret_cast<const uint8_t*>(p[1] + i * bs[1]) != 0;
      *reinterpret_cast<T*>(p[0] + i * bs[0]) = *reinterpret_cast<const T*>(c ? p[2] + i * bs[2] : p[3] + i * bs[3]);
    }
  });
}

template <typename T>
void random_t(T* out, int64_t n, int kind, double lo, double hi, uint64_t seed, uint64_t offset) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (kind == 0) {
      v = lo + (hi - lo) * (double)philox_uniform(seed, offset, (uint64_t)i);
    } else {
      // Box-Muller on two words of the element's own pair of draws.
      float u1 = philox_uniform(seed, offset, 2 * (uint64_t)i);
      float u2 = philox_uniform(seed, offset, 2 * (uint64_t)i + 1);
      double r = std::sqrt(-2.0 * std::log(1.0 - (double)u1));
      v = lo + hi * r * std::cos(6.283185307179586 * (double)u2);
    }
    store_d<T>(reinterpret_cast<char*>(out + i), v);
  }
}

}  // namespace

void copy(const LoopShape& s, StridedOperand dst, StridedOperand src) {
  switch (dst.dtype) {
    case DType::f32: copy_to<float>(s, dst, src); break;
    case DType::f64: copy_to<double>(s, dst, src); break;
    case DType::f16: copy_to<half>(s, dst, src); break;
    case DType::bf16: copy_to<bfloat16>(s, dst, src); break;
    case DType::i32: copy_to<int32_t>(s, dst, src); break;
    case DType::i64: copy_to<int64_t>(s, dst, src); break;
    case DType::u8: copy_to<uint8_t>(s, dst, src); break;
  }
}

void fill(const LoopShape& s, StridedOperand dst, double v) {
  switch (dst.dtype) {
    case DType::f32: fill_t<float>(s, dst, v); break;
    case DType::f64: fill_t<double>(s, dst, v); break;
    case DType::f16: fill_t<half>(s, dst, v); break;
    case DType::bf16: fill_t<bfloat16>(s, dst, v); break;
    case DType::i32: fill_t<int32_t>(s, dst, v); break;
    case DType::i64: fill_t<int64_t>(s, dst, v); break;
    case DType::u8: fill_t<uint8_t>(s, dst, v); break;
  }
}

void unary(UnaryOp op, const LoopShape& s, StridedOperand out, StridedOperand in, double a, double b) {
  KILN_FLOAT_DISPATCH(out.dtype, unary_dispatch, op, s, out, in, a, b);
}

void binary(BinaryOp op, const LoopShape& s, StridedOperand out, StridedOperand x, StridedOperand y, double a) {
  KILN_FLOAT_DISPATCH(out.dtype, binary_dispatch, op, s, out, x, y, a);
}

void where(const LoopShape& s, StridedOperand out, StridedOperand cond, StridedOperand x, StridedOperand y) {
  switch (dtype_size(out.dtype)) {
    case 1: where_t<uint8_t>(s, out, cond, x, y); break;
    case 2: where_t<uint16_t>(s, out, cond, x, y); break;
    case 4: where_t<uint32_t>(s, out, cond, x, y); break;
    case 8: where_t<uint64_t>(s, out, cond, x, y); break;
  }
}

void random_fill(void* out, DType dt, int64_t n, int kind, double lo, double hi, uint64_t seed, uint64_t offset) {
  switch (dt) {
    case DType::f32: random_t(static_cast<float*>(out), n, kind, lo, hi, seed, offset); break;
    case DType::f64: random_t(static_cast<double*>(out), n, kind, lo, hi, seed, offset); break;
    case DType::f16: random_t(static_cast<half*>(out), n, kind, lo, hi, seed, offset); break;
    case DType::bf16: random_t(static_cast<bfloat16*>(out), n, kind, lo, hi, seed, offset); break;
    default: throw Error(str_cat("random: dtype ", dtype_name(dt), " not supported"));
  }
}

}  // namespace kiln::cpu
