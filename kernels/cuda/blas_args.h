// The arguments kiln passes to cublasGemmStridedBatchedEx, as plain host arithmetic: which kiln
// operand becomes cuBLAS's A and B, the transposes, m/n/k, leading dimensions, batch strides, the
// data / compute type and the math mode per dtype. kernels/cuda/matmul.cpp calls these and only
// translates the enums to cuBLAS's; tests/unit/test_cuda_blas_args.cpp evaluates a column-major
// GEMM with exactly these arguments on the CPU. Includes no CUDA header and must not: it is
// compiled into every build, with or without CUDA.
#pragma once
#include <climits>
#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/core/error.h"

namespace kiln::cuda {

// Which of kiln's row-major operands a cuBLAS operand is.
enum class GemmSide { kiln_a, kiln_b };

// One strided-batched column-major GEMM: C = alpha * op(A) * op(B) + beta * C with C (m x n),
// op(A) (m x k), op(B) (k x n), element (i, j) of a column-major X at X[i + j * ldx], batch entry
// b at X + b * stride_x (strides and leading dimensions in elements).
struct CublasGemmArgs {
  bool trans_a = false, trans_b = false;  // CUBLAS_OP_T when true, CUBLAS_OP_N otherwise
  int64_t m = 0, n = 0, k = 0;
  GemmSide a_from = GemmSide::kiln_b, b_from = GemmSide::kiln_a;
  int64_t lda = 0, stride_a = 0, ldb = 0, stride_b = 0, ldc = 0, stride_c = 0;
  int64_t batch = 0;
};

// kiln's row-major C (M x N, ldc) = op(A) (M x K, lda) * op(B) (K x N, ldb), per batch entry.
// A row-major matrix with leading dimension ld is the column-major transpose with the same ld, so
// C^T = op(B)^T op(A)^T: cuBLAS's A is kiln's B, its B is kiln's A, m = N, n = M, and each
// operand keeps its own transpose flag and leading dimension.
inline CublasGemmArgs cublas_gemm_args(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t sa,
                                       int64_t ldb, int64_t sb, int64_t ldc, int64_t sc, int64_t batch) {
  CublasGemmArgs g;
  g.trans_a = tb;
  g.trans_b = ta;
  g.m = N;
  g.n = M;
  g.k = K;
  g.a_from = GemmSide::kiln_b;
  g.lda = ldb;
  g.stride_a = sb;
  g.b_from = GemmSide::kiln_a;
  g.ldb = lda;
  g.stride_b = sa;
  g.ldc = ldc;
  g.stride_c = sc;
  g.batch = batch;
  return g;
}

// A GEMM with an empty C (m, n or batch 0) is not called at all; k = 0 is (C = beta * C).
inline bool cublas_gemm_is_empty(const CublasGemmArgs& g) { return g.m == 0 || g.n == 0 || g.batch == 0; }

// "" when cuBLAS accepts the arguments (its documented rules: sizes >= 0 and within int,
// lda >= max(1, rows of the stored A), likewise ldb, ldc >= max(1, m)), else the first rule broken.
inline const char* cublas_gemm_invalid(const CublasGemmArgs& g) {
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch})
    if (v < 0 || v > INT_MAX) return "a size exceeds cuBLAS's 32-bit limit";
  const int64_t rows_a = g.trans_a ? g.k : g.m, rows_b = g.trans_b ? g.n : g.k;
  if (g.lda < (rows_a > 1 ? rows_a : 1)) return "lda is below the rows of the stored A";
  if (g.ldb < (rows_b > 1 ? rows_b : 1)) return "ldb is below the rows of the stored B";
  if (g.ldc < (g.m > 1 ? g.m : 1)) return "ldc is below m";
  return "";
}

// cuBLAS's data type, compute type and math mode per kiln dtype (matmul.cpp maps them to
// cudaDataType_t, cublasComputeType_t, cublasMath_t). f32 is true f32 (pedantic) unless TF32 is
// allowed; f16/bf16 compute in f32 with the default math (Tensor Cores); f64 in f64.
enum class BlasType { f32, f64, f16, bf16 };
enum class BlasCompute { c32f, c32f_pedantic, c32f_fast_tf32, c64f_pedantic };
enum class BlasMath { default_math, pedantic, tf32_tensor_op };

struct BlasPrecision {
  BlasType type;
  BlasCompute compute;
  BlasMath math;
  bool double_scalars;  // alpha / beta as double (f64 compute) rather than float
};

inline BlasPrecision blas_precision(DType dt, bool tf32) {
  switch (dt) {
    case DType::f32:
      return tf32 ? BlasPrecision{BlasType::f32, BlasCompute::c32f_fast_tf32, BlasMath::tf32_tensor_op, false}
                  : BlasPrecision{BlasType::f32, BlasCompute::c32f_pedantic, BlasMath::pedantic, false};
    case DType::f64: return BlasPrecision{BlasType::f64, BlasCompute::c64f_pedantic, BlasMath::default_math, true};
    case DType::f16: return BlasPrecision{BlasType::f16, BlasCompute::c32f, BlasMath::default_math, false};
    case DType::bf16: return BlasPrecision{BlasType::bf16, BlasCompute::c32f, BlasMath::default_math, false};
    default: throw Error(str_cat("matmul: dtype ", dtype_name(dt), " not supported on cuda"));
  }
}

}  // namespace kiln::cuda
