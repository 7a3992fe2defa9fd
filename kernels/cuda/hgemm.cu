// Host entry point of kiln's FP16 Tensor Core GEMM: validates arguments, picks the stored layouts
// of A and B from the transpose flags and launches the tiled kernel of hgemm_tile.h.
#include "kernels/cuda/hgemm.h"

#include <cstdint>

#include "engine/core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/hgemm_tile.h"

namespace kiln::cuda {

namespace tc {

bool device_supports_tc(int dev) {
  int major = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "hgemm: device query");
  return major >= 8;
}

}  // namespace tc

namespace {

using tile::Layout;

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <Layout LA, Layout LB>
void dispatch_out(const tile::GemmProblem& p, const __half* A, const __half* B, void* C, DType c_dtype, float alpha,
                  float beta, cudaStream_t stream) {
  if (c_dtype == DType::f16)
    tc::launch_tc_gemm<tile::GemmProblem, LA, LB, __half>(p, A, B, static_cast<__half*>(C), alpha, beta, 1, nullptr,
                                                          stream, "hgemm");
  else
    tc::launch_tc_gemm<tile::GemmProblem, LA, LB, float>(p, A, B, static_cast<float*>(C), alpha, beta, 1, nullptr,
                                                         stream, "hgemm");
}

}  // namespace

void hgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
           const void* B, int64_t ldb, float beta, void* C, int64_t ldc, DType c_dtype, cudaStream_t stream) {
  KILN_CHECK(M >= 0 && N >= 0 && K >= 0, "hgemm: negative size M=", M, " N=", N, " K=", K);
  KILN_CHECK(c_dtype == DType::f16 || c_dtype == DType::f32, "hgemm: C must be f16 or f32");
  KILN_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N, "hgemm: leading dimension too small (M=",
             M, " N=", N, " K=", K, " lda=", lda, " ldb=", ldb, " ldc=", ldc, ")");
  if (M == 0 || N == 0) return;
  int dev = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&dev), "hgemm");
  KILN_CHECK(tc::device_supports_tc(dev), "hgemm: kiln's Tensor Core GEMM needs sm_80 or later (cuda:", dev, ")");
  tile::GemmProblem p;
  p.M = M; p.N = N; p.K = K; p.lda = lda; p.ldb = ldb; p.ldc = ldc;
  p.a_trans = trans_a; p.b_trans = trans_b;
  p.a_vec = lda % 8 == 0 && aligned16(A);
  p.b_vec = ldb % 8 == 0 && aligned16(B);
  const __half* a = static_cast<const __half*>(A);
  const __half* b = static_cast<const __half*>(B);
  if (!trans_a && !trans_b) dispatch_out<Layout::mk, Layout::kn>(p, a, b, C, c_dtype, alpha, beta, stream);
  else if (!trans_a && trans_b) dispatch_out<Layout::mk, Layout::nk>(p, a, b, C, c_dtype, alpha, beta, stream);
  else if (trans_a && !trans_b) dispatch_out<Layout::km, Layout::kn>(p, a, b, C, c_dtype, alpha, beta, stream);
  else dispatch_out<Layout::km, Layout::nk>(p, a, b, C, c_dtype, alpha, beta, stream);
}

}  // namespace kiln::cuda
