// The CUDA backend's GEMM entry point (kernels/cuda/matmul.cpp's gemm_strided, the function KILN_DISPATCH
// reaches for every matmul / linear on cuda) in the CPU execution mode: under --kernels kiln an f16 GEMM
// runs kiln's hgemm once per batch entry with the batch strides applied, bit for bit what hgemm gives
// called directly (hgemm itself is checked against f64 in test_cuda_cpu_gemm.cpp); every other choice
// (vendor, or a dtype kiln has no kernel for) reaches cuBLAS, which cannot run in the CPU mode, and fails
// naming the call instead of computing anything.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "engine/core/half.h"
#include "cuda_cpu/adversarial.h"
// The CPU mode's declarations (namespace kiln::cuda_on_cpu).
#include "kernels/cuda_cpu/prelude.h"
#include <cublas_v2.h>  // the CPU mode's shim: its failing stubs
#include "kernels/cuda/backend.h"
#include "kernels/cuda/hgemm.h"
#include "kernels/cuda/kernel_select.h"

namespace gpu = kiln::cuda_on_cpu;
using kiln::DType;
using kiln::half;

namespace {

struct Restore {
  ~Restore() { gpu::set_kernel_source(gpu::KernelSource::vendor); }
};

}  // namespace

TEST_CASE("CPU mode: gemm_strided f16 under --kernels kiln is hgemm per batch entry, batch strides applied") {
  Restore restore;
  gpu::set_kernel_source(gpu::KernelSource::kiln);
  // batch 3 of (M x K) x (K x N), sizes off the tile and the k16 step, A transposed, B's batch stride 0
  // (a shared weight, as linear's), C padded (ldc > N) with its padding left alone.
  const int64_t M = 37, N = 21, K = 19, batch = 3, lda = M, ldb = N, ldc = N + 3;
  const int64_t sa = K * lda, sb = 0, sc = M * ldc;
  std::vector<half> A((size_t)(sa * batch)), B((size_t)(K * ldb));
  const std::vector<float> av = kiln_test::moderate<float>(A.size(), 5, 1.0), bv = kiln_test::moderate<float>(B.size(), 6, 1.0);
  for (size_t i = 0; i < A.size(); ++i) A[i] = half(av[i]);
  for (size_t i = 0; i < B.size(); ++i) B[i] = half(bv[i]);
  std::vector<half> got((size_t)(sc * batch), half(NAN)), want = got;  // preset NaN: finite inputs never give it
  gpu::gemm_strided(DType::f16, true, false, M, N, K, 0.5, A.data(), lda, sa, B.data(), ldb, sb, 0.0, got.data(), ldc, sc,
                    batch);
  for (int64_t i = 0; i < batch; ++i)
    gpu::hgemm(true, false, M, N, K, 0.5f, A.data() + i * sa, lda, B.data() + i * sb, ldb, 0.0f, want.data() + i * sc, ldc,
               DType::f16, nullptr);
  CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(half)) == 0);
  int changed = 0;  // the call wrote every batch entry (the preset NaN is gone from the M x N parts)
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) changed += !std::isnan((float)got[(size_t)(i * sc + m * ldc + n)]);
  CHECK(changed == batch * M * N);
  CHECK(std::isnan((float)got[(size_t)(N)]));  // row 0's padding untouched
}

TEST_CASE("CPU mode: gemm_strided that would need cuBLAS fails naming the call (vendor, f32 under kiln)") {
  Restore restore;
  std::vector<float> a(16, 1.0f), c(16, 0.0f);
  std::vector<half> h(16, half(1.0f));
  // vendor f16, and f32 under either choice: cuBLAS's handle is the first thing asked, and it throws.
  CHECK_THROWS_WITH_AS(gpu::gemm_strided(DType::f16, false, false, 4, 4, 4, 1.0, h.data(), 4, 0, h.data(), 4, 0, 0.0,
                                         h.data(), 4, 0, 1),
                       doctest::Contains("cublas_handle: a cuBLAS call in the CPU mode"), kiln::Error);
  gpu::set_kernel_source(gpu::KernelSource::kiln);
  CHECK_THROWS_WITH_AS(gpu::gemm_strided(DType::f32, false, false, 4, 4, 4, 1.0, a.data(), 4, 0, a.data(), 4, 0, 0.0,
                                         c.data(), 4, 0, 1),
                       doctest::Contains("cublas_handle: a cuBLAS call in the CPU mode"), kiln::Error);
  // The stubs behind the handle name their call too.
  CHECK_THROWS_WITH_AS(cublasSetMathMode(nullptr, CUBLAS_DEFAULT_MATH), doctest::Contains("cublasSetMathMode: a cuBLAS call"),
                       kiln::Error);
  CHECK(c == std::vector<float>(16, 0.0f));  // nothing computed
}
