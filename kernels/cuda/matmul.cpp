// Batched GEMM on the GPU through cuBLAS (cublasGemmStridedBatchedEx), as kernels/cpu/matmul.h.
// kiln is row-major and cuBLAS column-major: a row-major C (M x N) is a column-major C^T, and
// C^T = op(B)^T op(A)^T, so the call swaps A and B and M and N (the arguments come from
// blas_args.h, host arithmetic unit-tested on the CPU). f32 computes in true f32
// (pedantic math) unless TF32 is allowed (handles.h); f16/bf16 compute in f32 on Tensor Cores with
// cuBLAS's default math; f64 in f64. The math mode is set on the handle before every GEMM.
// With `--kernels kiln`, f16 GEMMs run on kiln's own Tensor Core GEMM (hgemm.h), one launch per
// batch entry, same row-major convention, f32 accumulation, f16 C.
#include "kernels/cuda/backend.h"
#include "kernels/cuda/blas_args.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/hgemm.h"
#include "kernels/cuda/kernel_select.h"
#include "kernels/cuda/runtime.h"

namespace kiln::cuda {
namespace {

// kiln's enums of blas_args.h as cuBLAS's (the arithmetic is there, unit-tested on the CPU).
cudaDataType_t cuda_type(BlasType t) {
  switch (t) {
    case BlasType::f32: return CUDA_R_32F;
    case BlasType::f64: return CUDA_R_64F;
    case BlasType::f16: return CUDA_R_16F;
    default: return CUDA_R_16BF;
  }
}
cublasComputeType_t cublas_compute(BlasCompute c) {
  switch (c) {
    case BlasCompute::c32f: return CUBLAS_COMPUTE_32F;
    case BlasCompute::c32f_pedantic: return CUBLAS_COMPUTE_32F_PEDANTIC;
    case BlasCompute::c32f_fast_tf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    default: return CUBLAS_COMPUTE_64F_PEDANTIC;
  }
}
cublasOperation_t cublas_op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

// cuBLAS math mode of a GEMM (blas_precision): pedantic only for f32 without TF32, where f32 parity
// with the CPU needs true f32 and no reduced-precision Tensor Core path; TF32 Tensor Core math for
// f32 when allowed; the default mode (Tensor Cores, cuBLAS's own reductions) for f16/bf16 and f64,
// whose precision is set by the compute type.
cublasMath_t gemm_math_mode(DType dt, bool tf32) {
  switch (blas_precision(dt, tf32).math) {
    case BlasMath::pedantic: return CUBLAS_PEDANTIC_MATH;
    case BlasMath::tf32_tensor_op: return CUBLAS_TF32_TENSOR_OP_MATH;
    default: return CUBLAS_DEFAULT_MATH;
  }
}

void gemm_strided(DType dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
                  int64_t lda, int64_t sa, const void* B, int64_t ldb, int64_t sb, double beta, void* C, int64_t ldc,
                  int64_t sc, int64_t batch) {
  auto what = [&] {
    return str_cat("matmul ", dtype_name(dt), " M=", M, " N=", N, " K=", K, " batch=", batch, ta ? " A^T" : "",
                   tb ? " B^T" : "", " lda=", lda, " ldb=", ldb, " ldc=", ldc);
  };
  const CublasGemmArgs g = cublas_gemm_args(ta, tb, M, N, K, lda, sa, ldb, sb, ldc, sc, batch);
  if (cublas_gemm_is_empty(g)) return;
  const char* invalid = cublas_gemm_invalid(g);
  KILN_CHECK(*invalid == 0, what(), ": ", invalid);
  if (dt == DType::f16 && kernel_source() == KernelSource::kiln) {
    const int dev = current_device();
    const char* a = static_cast<const char*>(A);
    const char* b = static_cast<const char*>(B);
    char* c = static_cast<char*>(C);
    const int64_t es = 2;  // bytes per f16 element; strides are in elements
    for (int64_t i = 0; i < batch; ++i)
      hgemm(ta, tb, M, N, K, (float)alpha, a + i * sa * es, lda, b + i * sb * es, ldb, (float)beta, c + i * sc * es, ldc,
            DType::f16, compute_stream(dev));
    return;
  }
  const BlasPrecision p = blas_precision(dt, allow_tf32());
  const cudaDataType_t type = cuda_type(p.type);
  float af = (float)alpha, bf = (float)beta;
  const void* pa = p.double_scalars ? static_cast<const void*>(&alpha) : &af;
  const void* pb = p.double_scalars ? static_cast<const void*>(&beta) : &bf;
  const void* ga = g.a_from == GemmSide::kiln_a ? A : B;
  const void* gb = g.b_from == GemmSide::kiln_a ? A : B;
  cublasHandle_t h = cublas_handle(current_device());
  KILN_CUBLAS_CHECK(cublasSetMathMode(h, gemm_math_mode(dt, allow_tf32())), what());
  KILN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, cublas_op(g.trans_a), cublas_op(g.trans_b), (int)g.m, (int)g.n,
                                               (int)g.k, pa, ga, type, (int)g.lda, (long long)g.stride_a, gb, type,
                                               (int)g.ldb, (long long)g.stride_b, pb, C, type, (int)g.ldc,
                                               (long long)g.stride_c, (int)g.batch, cublas_compute(p.compute),
                                               CUBLAS_GEMM_DEFAULT),
                    what());
}

}  // namespace kiln::cuda
