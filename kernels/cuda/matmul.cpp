// Batched GEMM on the GPU through cuBLAS (cublasGemmStridedBatchedEx), as kernels/cpu/matmul.h.
// kiln is row-major and cuBLAS column-major: a row-major C (M x N) is a column-major C^T, and
// C^T = op(B)^T op(A)^T, so the call swaps A and B and M and N. f32 computes in true f32
// (pedantic math) unless TF32 is allowed (handles.h); f16/bf16 compute in f32 on Tensor Cores with
// cuBLAS's default math; f64 in f64. The math mode is set on the handle before every GEMM.
// With `--kernels kiln`, f16 GEMMs run on kiln's own Tensor Core GEMM (hgemm.h), one launch per
// batch entry, same row-major convention, f32 accumulation, f16 C.
#include <climits>

#include "kernels/cuda/backend.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/hgemm.h"
#include "kernels/cuda/kernel_select.h"
#include "kernels/cuda/runtime.h"

namespace kiln::cuda {

// cuBLAS math mode of a GEMM: pedantic only for f32 without TF32, where f32 parity with the CPU
// needs true f32 and no reduced-precision Tensor Core path; TF32 Tensor Core math for f32 when
// allowed; the default mode (Tensor Cores, cuBLAS's own reductions) for f16/bf16 and f64, whose
// precision is set by the compute type.
cublasMath_t gemm_math_mode(DType dt, bool tf32) {
  if (dt == DType::f32) return tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH;
  return CUBLAS_DEFAULT_MATH;
}

void gemm_strided(DType dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
                  int64_t lda, int64_t sa, const void* B, int64_t ldb, int64_t sb, double beta, void* C, int64_t ldc,
                  int64_t sc, int64_t batch) {
  auto what = [&] {
    return str_cat("matmul ", dtype_name(dt), " M=", M, " N=", N, " K=", K, " batch=", batch, ta ? " A^T" : "",
                   tb ? " B^T" : "", " lda=", lda, " ldb=", ldb, " ldc=", ldc);
  };
  if (M == 0 || N == 0 || batch == 0) return;
  for (int64_t v : {M, N, K, lda, ldb, ldc, batch})
    KILN_CHECK(v <= INT_MAX, what(), ": a size exceeds cuBLAS's 32-bit limit");
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
  cudaDataType_t type;
  cublasComputeType_t compute;
  float af = (float)alpha, bf = (float)beta;
  const void* pa = &af;
  const void* pb = &bf;
  switch (dt) {
    case DType::f32:
      type = CUDA_R_32F;
      compute = allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
      break;
    case DType::f64:
      type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F_PEDANTIC;
      pa = &alpha;
      pb = &beta;
      break;
    case DType::f16: type = CUDA_R_16F; compute = CUBLAS_COMPUTE_32F; break;
    case DType::bf16: type = CUDA_R_16BF; compute = CUBLAS_COMPUTE_32F; break;
    default: throw Error(str_cat("matmul: dtype ", dtype_name(dt), " not supported on cuda"));
  }
  cublasHandle_t h = cublas_handle(current_device());
  KILN_CUBLAS_CHECK(cublasSetMathMode(h, gemm_math_mode(dt, allow_tf32())), what());
  KILN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                               (int)N, (int)M, (int)K, pa, B, type, (int)ldb, (long long)sb, A, type,
                                               (int)lda, (long long)sa, pb, C, type, (int)ldc, (long long)sc,
                                               (int)batch, compute, CUBLAS_GEMM_DEFAULT),
                    what());
}

}  // namespace kiln::cuda
