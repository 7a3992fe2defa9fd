// CUDA elementwise kernels: copy/cast, fill, unary, binary, where, random fill and dropout. Math
// comes from kernels/common/elementwise_math.h and engine/core/philox.h, shared with the CPU.
// Contiguous f32/f16/bf16/f64 operands take a 16-byte vectorized, coalesced grid-stride path;
// anything else (broadcast, transposed, sliced) takes the general strided path over LoopShape.
// The op code is a runtime argument (uniform across a warp) to keep instantiations few.
#include <cstring>

#include "engine/core/philox.h"
#include "kernels/common/dropout_math.h"
#include "kernels/common/float_to_int.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/nn_backend.h"
#include "kernels/cuda/launch.cuh"

namespace kiln::cuda {
namespace {

// Byte offsets of NOPS operands over a coalesced loop shape.
template <int NOPS>
struct Indexer {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t bstride[NOPS][kMaxDims];
  __device__ __forceinline__ void offsets(int64_t i, int64_t* off) const {
#pragma unroll
    for (int k = 0; k < NOPS; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      int64_t q = i / sizes[d], r = i - q * sizes[d];
      i = q;
#pragma unroll
      for (int k = 0; k < NOPS; ++k) off[k] += r * bstride[k][d];
    }
  }
};

template <int NOPS>
Indexer<NOPS> make_indexer(LoopShape s, StridedOperand* ops, char** base) {
  coalesce_dims(s, ops, NOPS);
  Indexer<NOPS> ix;
  ix.ndim = s.ndim;
  for (int d = 0; d < s.ndim; ++d) {
    ix.sizes[d] = s.sizes[d];
    for (int k = 0; k < NOPS; ++k) ix.bstride[k][d] = ops[k].strides[d] * (int64_t)dtype_size(ops[k].dtype);
  }
  for (int k = 0; k < NOPS; ++k) base[k] = ops[k].data;
  return ix;
}

// True when every operand is dense with unit stride after coalescing (one flat dim).
template <int NOPS>
bool all_contiguous(const Indexer<NOPS>& ix, const StridedOperand* ops) {
  if (ix.ndim != 1) return false;
  for (int k = 0; k < NOPS; ++k)
    if (ix.bstride[k][0] != (int64_t)dtype_size(ops[k].dtype)) return false;
  return true;
}

bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

std::string loop_str(const LoopShape& s) {
  std::string r = "(";
  for (int d = 0; d < s.ndim; ++d) r += (d ? ", " : "") + std::to_string(s.sizes[d]);
  return r + ")";
}

// ---- unary / binary ----

template <typename T>
struct alignas(16) Vec16 {  // 16 bytes of T; alignas(16) lets nvcc emit one 128-bit load/store (ld.global.v4)
  static constexpr int n = 16 / sizeof(T);
  T v[n];
};

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) unary_contig(UnaryOp op, int64_t n, T* out, const T* in, typename Compute<T>::type a,
                             typename Compute<T>::type b, bool vec) {
  using C = typename Compute<T>::type;
  const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
  int64_t done = 0;
  if (vec) {
    constexpr int V = Vec16<T>::n;
    const int64_t nv = n / V;
    for (int64_t i = tid; i < nv; i += step) {
      Vec16<T> x = reinterpret_cast<const Vec16<T>*>(in)[i], y;
#pragma unroll
      for (int j = 0; j < V; ++j) y.v[j] = T(unary_math<C>(op, (C)x.v[j], a, b));
      reinterpret_cast<Vec16<T>*>(out)[i] = y;
    }
    done = nv * V;
  }
  for (int64_t i = done + tid; i < n; i += step) out[i] = T(unary_math<C>(op, (C)in[i], a, b));
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) unary_strided(UnaryOp op, int64_t n, Indexer<2> ix, char* out, const char* in,
                              typename Compute<T>::type a, typename Compute<T>::type b) {
  using C = typename Compute<T>::type;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    ix.offsets(i, off);
    *reinterpret_cast<T*>(out + off[0]) = T(unary_math<C>(op, (C)*reinterpret_cast<const T*>(in + off[1]), a, b));
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) binary_contig(BinaryOp op, int64_t n, T* out, const T* x, const T* y, typename Compute<T>::type a,
                              bool vec) {
  using C = typename Compute<T>::type;
  const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
  int64_t done = 0;
  if (vec) {
    constexpr int V = Vec16<T>::n;
    const int64_t nv = n / V;
    for (int64_t i = tid; i < nv; i += step) {
      Vec16<T> xv = reinterpret_cast<const Vec16<T>*>(x)[i], yv = reinterpret_cast<const Vec16<T>*>(y)[i], o;
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = T(binary_math<C>(op, (C)xv.v[j], (C)yv.v[j], a));
      reinterpret_cast<Vec16<T>*>(out)[i] = o;
    }
    done = nv * V;
  }
  for (int64_t i = done + tid; i < n; i += step) out[i] = T(binary_math<C>(op, (C)x[i], (C)y[i], a));
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) binary_strided(BinaryOp op, int64_t n, Indexer<3> ix, char* out, const char* x, const char* y,
                               typename Compute<T>::type a) {
  using C = typename Compute<T>::type;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[3];
    ix.offsets(i, off);
    *reinterpret_cast<T*>(out + off[0]) = T(binary_math<C>(op, (C)*reinterpret_cast<const T*>(x + off[1]),
                                                           (C)*reinterpret_cast<const T*>(y + off[2]), a));
  }
}

template <typename T>
void unary_t(UnaryOp op, const LoopShape& s, StridedOperand out, StridedOperand in, double a, double b) {
  using C = typename Compute<T>::type;
  StridedOperand ops[2] = {out, in};
  char* base[2];
  Indexer<2> ix = make_indexer<2>(s, ops, base);
  const int64_t n = s.numel();
  if (all_contiguous<2>(ix, ops)) {
    bool vec = aligned16(base[0]) && aligned16(base[1]);
    launch_kernel("unary_contig", unary_contig<T>, grid_for(vec ? n / Vec16<T>::n + 1 : n), kThreads, 0, stream(),
        op, n, (T*)base[0], (const T*)base[1], (C)a, (C)b, vec);
  } else {
    launch_kernel("unary_strided", unary_strided<T>, grid_for(n), kThreads, 0, stream(), op, n, ix, base[0], base[1], (C)a, (C)b);
  }
  KILN_CUDA_LAUNCH_CHECK(str_cat("unary op ", (int)op, " ", dtype_name(out.dtype), loop_str(s)));
}

template <typename T>
void binary_t(BinaryOp op, const LoopShape& s, StridedOperand out, StridedOperand x, StridedOperand y, double a) {
  using C = typename Compute<T>::type;
  StridedOperand ops[3] = {out, x, y};
  char* base[3];
  Indexer<3> ix = make_indexer<3>(s, ops, base);
  const int64_t n = s.numel();
  if (all_contiguous<3>(ix, ops)) {
    bool vec = aligned16(base[0]) && aligned16(base[1]) && aligned16(base[2]);
    launch_kernel("binary_contig", binary_contig<T>, grid_for(vec ? n / Vec16<T>::n + 1 : n), kThreads, 0, stream(),
        op, n, (T*)base[0], (const T*)base[1], (const T*)base[2], (C)a, vec);
  } else {
    launch_kernel("binary_strided", binary_strided<T>, grid_for(n), kThreads, 0, stream(), op, n, ix, base[0], base[1], base[2], (C)a);
  }
  KILN_CUDA_LAUNCH_CHECK(str_cat("binary op ", (int)op, " ", dtype_name(out.dtype), loop_str(s)));
}

// ---- copy / cast, fill, where ----

// Same dtype, any layout: moves W-byte words.
template <typename W>
__global__ void KILN_KERNEL_BOUNDS(kThreads) copy_words(int64_t n, Indexer<2> ix, char* dst, const char* src) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    ix.offsets(i, off);
    *reinterpret_cast<W*>(dst + off[0]) = *reinterpret_cast<const W*>(src + off[1]);
  }
}

// Cast through double, exactly as the CPU's load_d/store_d (f16/bf16 through f32; to an integer
// by float_to_int: truncate, saturate, NaN -> 0).
__device__ __forceinline__ double load_any(const char* p, DType dt) {
  switch (dt) {
    case DType::f32: return (double)*reinterpret_cast<const float*>(p);
    case DType::f64: return *reinterpret_cast<const double*>(p);
    case DType::f16: return (double)(float)*reinterpret_cast<const half*>(p);
    case DType::bf16: return (double)(float)*reinterpret_cast<const bfloat16*>(p);
    case DType::i32: return (double)*reinterpret_cast<const int32_t*>(p);
    case DType::i64: return (double)*reinterpret_cast<const int64_t*>(p);
    case DType::u8: return (double)*reinterpret_cast<const uint8_t*>(p);
  }
  return 0;
}
__device__ __forceinline__ void store_any(char* p, DType dt, double v) {
  switch (dt) {
    case DType::f32: *reinterpret_cast<float*>(p) = (float)v; break;
    case DType::f64: *reinterpret_cast<double*>(p) = v; break;
    case DType::f16: *reinterpret_cast<half*>(p) = half((float)v); break;
    case DType::bf16: *reinterpret_cast<bfloat16*>(p) = bfloat16((float)v); break;
    case DType::i32: *reinterpret_cast<int32_t*>(p) = float_to_int<int32_t>(v); break;
    case DType::i64: *reinterpret_cast<int64_t*>(p) = float_to_int<int64_t>(v); break;
    case DType::u8: *reinterpret_cast<uint8_t*>(p) = float_to_int<uint8_t>(v); break;
  }
}

__global__ void KILN_KERNEL_BOUNDS(kThreads) cast_kernel(int64_t n, Indexer<2> ix, char* dst, DType ddt, const char* src, DType sdt) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    ix.offsets(i, off);
    store_any(dst + off[0], ddt, load_any(src + off[1], sdt));
  }
}

template <typename W>
__global__ void KILN_KERNEL_BOUNDS(kThreads) fill_words(int64_t n, Indexer<1> ix, char* dst, W value) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[1];
    ix.offsets(i, off);
    *reinterpret_cast<W*>(dst + off[0]) = value;
  }
}

template <typename W>
__global__ void KILN_KERNEL_BOUNDS(kThreads) where_words(int64_t n, Indexer<4> ix, char* out, const char* cond, const char* x, const char* y) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[4];
    ix.offsets(i, off);
    const bool c = *reinterpret_cast<const uint8_t*>(cond + off[1]) != 0;
    *reinterpret_cast<W*>(out + off[0]) = *reinterpret_cast<const W*>(c ? x + off[2] : y + off[3]);
  }
}

template <typename W>
void fill_t(const LoopShape& s, StridedOperand dst, const char* bits) {
  W v;
  std::memcpy(&v, bits, sizeof(W));
  StridedOperand ops[1] = {dst};
  char* base[1];
  Indexer<1> ix = make_indexer<1>(s, ops, base);
  launch_kernel("fill_words", fill_words<W>, grid_for(s.numel()), kThreads, 0, stream(), s.numel(), ix, base[0], v);
}

template <typename W>
void where_t(const LoopShape& s, StridedOperand out, StridedOperand cond, StridedOperand x, StridedOperand y) {
  StridedOperand ops[4] = {out, cond, x, y};
  char* base[4];
  Indexer<4> ix = make_indexer<4>(s, ops, base);
  launch_kernel("where_words", where_words<W>, grid_for(s.numel()), kThreads, 0, stream(), s.numel(), ix, base[0], base[1], base[2], base[3]);
}

// ---- random ----

// Element i as the CPU computes it, with explicit round-to-nearest double ops so nvcc cannot fuse
// them into FMAs (the CPU does not): uniform is bit-identical; normal uses device log/cos, which
// may differ from glibc's in the last bit of a double.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) random_kernel(T* out, int64_t n, int kind, double lo, double hi, uint64_t seed, uint64_t offset) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    double v;
    if (kind == 0) {
      v = __dadd_rn(lo, __dmul_rn(__dsub_rn(hi, lo), (double)philox_uniform(seed, offset, (uint64_t)i)));
    } else {
      float u1 = philox_uniform(seed, offset, 2 * (uint64_t)i);
      float u2 = philox_uniform(seed, offset, 2 * (uint64_t)i + 1);
      double r = sqrt(__dmul_rn(-2.0, log(__dsub_rn(1.0, (double)u1))));
      v = __dadd_rn(lo, __dmul_rn(__dmul_rn(hi, r), cos(__dmul_rn(6.283185307179586, (double)u2))));
    }
    store_any(reinterpret_cast<char*>(out + i), DTypeOf<T>::value, v);
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) dropout_fwd_kernel(int64_t n, const T* x, float pf, T scale, uint64_t seed, uint64_t offset, T* y,
                                   uint8_t* mask) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
    const uint64_t ctr = offset + (uint64_t)g;
    Philox4 c = {{(uint32_t)ctr, (uint32_t)(ctr >> 32), 0u, 0u}};
    Philox4 r = philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = g * 4 + k;
      if (i >= n) break;
      const float u = (float)(r.v[k] >> 8) * (1.0f / 16777216.0f);
      const bool keep = u >= pf;
      y[i] = dropout_apply(x[i], keep, scale);  // a dropped NaN stays NaN (torch: input * noise)
      if (mask) mask[i] = keep ? 1 : 0;
    }
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) dropout_bwd_kernel(int64_t n, const T* dy, const uint8_t* mask, T scale, T* dx) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    dx[i] = dropout_apply(dy[i], mask[i] != 0, scale);
}

#define KILN_FLOAT_SWITCH(dt, what, CALL)                                                     \
  switch (dt) {                                                                               \
    case DType::f32: { using T = float; CALL; } break;                                        \
    case DType::f64: { using T = double; CALL; } break;                                       \
    case DType::f16: { using T = half; CALL; } break;                                         \
    case DType::bf16: { using T = bfloat16; CALL; } break;                                    \
    default: throw Error(str_cat(what, ": dtype ", dtype_name(dt), " not supported on cuda")); \
  }

}  // namespace

void copy(const LoopShape& s, StridedOperand dst, StridedOperand src) {
  const int64_t n = s.numel();
  if (n == 0) return;
  StridedOperand ops[2] = {dst, src};
  char* base[2];
  Indexer<2> ix = make_indexer<2>(s, ops, base);
  auto what = [&] { return str_cat("copy ", dtype_name(src.dtype), " -> ", dtype_name(dst.dtype), loop_str(s)); };
  if (dst.dtype == src.dtype) {
    const size_t es = dtype_size(dst.dtype);
    if (all_contiguous<2>(ix, ops)) {
      KILN_CUDA_CHECK(cudaMemcpyAsync(base[0], base[1], (size_t)n * es, cudaMemcpyDeviceToDevice, stream()), what());
      return;
    }
    switch (es) {
      case 1: launch_kernel("copy_words", copy_words<uint8_t>, grid_for(n), kThreads, 0, stream(), n, ix, base[0], base[1]); break;
      case 2: launch_kernel("copy_words", copy_words<uint16_t>, grid_for(n), kThreads, 0, stream(), n, ix, base[0], base[1]); break;
      case 4: launch_kernel("copy_words", copy_words<uint32_t>, grid_for(n), kThreads, 0, stream(), n, ix, base[0], base[1]); break;
      default: launch_kernel("copy_words", copy_words<uint64_t>, grid_for(n), kThreads, 0, stream(), n, ix, base[0], base[1]); break;
    }
  } else {
    launch_kernel("cast_kernel", cast_kernel, grid_for(n), kThreads, 0, stream(), n, ix, base[0], dst.dtype, base[1], src.dtype);
  }
  KILN_CUDA_LAUNCH_CHECK(what());
}

void fill(const LoopShape& s, StridedOperand dst, double value) {
  if (s.numel() == 0) return;
  // The bit pattern as the CPU stores it (host-side conversion, same rounding).
  char bits[8] = {0};
  switch (dst.dtype) {
    case DType::f32: { float v = (float)value; std::memcpy(bits, &v, 4); } break;
    case DType::f64: std::memcpy(bits, &value, 8); break;
    case DType::f16: { half v((float)value); std::memcpy(bits, &v, 2); } break;
    case DType::bf16: { bfloat16 v((float)value); std::memcpy(bits, &v, 2); } break;
    case DType::i32: { int32_t v = float_to_int<int32_t>(value); std::memcpy(bits, &v, 4); } break;
    case DType::i64: { int64_t v = float_to_int<int64_t>(value); std::memcpy(bits, &v, 8); } break;
    case DType::u8: { uint8_t v = float_to_int<uint8_t>(value); std::memcpy(bits, &v, 1); } break;
  }
  switch (dtype_size(dst.dtype)) {
    case 1: fill_t<uint8_t>(s, dst, bits); break;
    case 2: fill_t<uint16_t>(s, dst, bits); break;
    case 4: fill_t<uint32_t>(s, dst, bits); break;
    default: fill_t<uint64_t>(s, dst, bits); break;
  }
  KILN_CUDA_LAUNCH_CHECK(str_cat("fill ", dtype_name(dst.dtype), loop_str(s), " with ", value));
}

void unary(UnaryOp op, const LoopShape& s, StridedOperand out, StridedOperand in, double a, double b) {
  if (s.numel() == 0) return;
  KILN_FLOAT_SWITCH(out.dtype, "unary", unary_t<T>(op, s, out, in, a, b));
}

void binary(BinaryOp op, const LoopShape& s, StridedOperand out, StridedOperand x, StridedOperand y, double a) {
  if (s.numel() == 0) return;
  KILN_FLOAT_SWITCH(out.dtype, "binary", binary_t<T>(op, s, out, x, y, a));
}

void where(const LoopShape& s, StridedOperand out, StridedOperand cond, StridedOperand x, StridedOperand y) {
  if (s.numel() == 0) return;
  switch (dtype_size(out.dtype)) {
    case 1: where_t<uint8_t>(s, out, cond, x, y); break;
    case 2: where_t<uint16_t>(s, out, cond, x, y); break;
    case 4: where_t<uint32_t>(s, out, cond, x, y); break;
    default: where_t<uint64_t>(s, out, cond, x, y); break;
  }
  KILN_CUDA_LAUNCH_CHECK(str_cat("where ", dtype_name(out.dtype), loop_str(s)));
}

void random_fill(void* out, DType dt, int64_t n, int kind, double lo, double hi, uint64_t seed, uint64_t offset) {
  if (n <= 0) return;
  KILN_FLOAT_SWITCH(dt, "random",
                    (launch_kernel("random_kernel", random_kernel<T>, grid_for(n), kThreads, 0, stream(), (T*)out, n, kind, lo, hi, seed, offset)));
  KILN_CUDA_LAUNCH_CHECK(str_cat("random_fill ", dtype_name(dt), " n=", n, kind ? " normal" : " uniform"));
}

template <typename T>
void dropout_forward(int64_t n, const T* x, double p, uint64_t seed, uint64_t offset, T* y, uint8_t* mask) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout_forward: p must be in [0, 1], got ", p);
  KILN_CHECK(n >= 0, "dropout_forward: bad size ", n);
  if (n == 0) return;
  const T scale = (T)(p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
  launch_kernel("dropout_fwd_kernel", dropout_fwd_kernel<T>, grid_for((n + 3) / 4), kThreads, 0, stream(), n, x, (float)p, scale, seed, offset, y, mask);
  KILN_CUDA_LAUNCH_CHECK(str_cat("dropout_forward n=", n, " p=", p));
}

template <typename T>
void dropout_backward(int64_t n, const T* dy, const uint8_t* mask, double p, T* dx) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout_backward: p must be in [0, 1], got ", p);
  KILN_CHECK(mask != nullptr || n == 0, "dropout_backward: the forward's mask is required");
  if (n == 0) return;
  const T scale = (T)(p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
  launch_kernel("dropout_bwd_kernel", dropout_bwd_kernel<T>, grid_for(n), kThreads, 0, stream(), n, dy, mask, scale, dx);
  KILN_CUDA_LAUNCH_CHECK(str_cat("dropout_backward n=", n, " p=", p));
}

template void dropout_forward<float>(int64_t, const float*, double, uint64_t, uint64_t, float*, uint8_t*);
template void dropout_forward<double>(int64_t, const double*, double, uint64_t, uint64_t, double*, uint8_t*);
template void dropout_backward<float>(int64_t, const float*, const uint8_t*, double, float*);
template void dropout_backward<double>(int64_t, const double*, const uint8_t*, double, double*);

}  // namespace kiln::cuda
