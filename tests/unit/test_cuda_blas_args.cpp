// The cuBLAS argument mapping of kernels/cuda/matmul.cpp (kernels/cuda/blas_args.h) on the CPU: a
// column-major strided-batched GEMM evaluated with exactly the arguments matmul.cpp passes to
// cublasGemmStridedBatchedEx (cuBLAS's documented semantics, its argument rules checked) must equal
// kiln's CPU gemm_strided on the same row-major buffers: transposed operands, padded leading
// dimensions (a column slice), batch strides, a broadcast operand (stride 0), sizes 1 and K = 0.
// No cuBLAS runs here; this tests the arithmetic, not the library.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cuda/blas_args.h"

using namespace kiln;
using kiln::cuda::CublasGemmArgs;
using kiln::cuda::GemmSide;

namespace {

// cuBLAS's GEMM as its documentation states it, column-major, in double:
// C[b] (m x n, ldc) = alpha * op(A[b]) * op(B[b]) + beta * C[b]; op(X)(i, j) = X[j + i * ld] when
// transposed, X[i + j * ld] otherwise.
void reference_cublas_gemm(const CublasGemmArgs& g, double alpha, const double* kiln_a, const double* kiln_b,
                           double beta, double* C) {
  REQUIRE_MESSAGE(std::strlen(cuda::cublas_gemm_invalid(g)) == 0, cuda::cublas_gemm_invalid(g));
  const double* A = g.a_from == GemmSide::kiln_a ? kiln_a : kiln_b;
  const double* B = g.b_from == GemmSide::kiln_a ? kiln_a : kiln_b;
  for (int64_t b = 0; b < g.batch; ++b) {
    const double* a = A + b * g.stride_a;
    const double* bb = B + b * g.stride_b;
    double* c = C + b * g.stride_c;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          const double av = g.trans_a ? a[p + i * g.lda] : a[i + p * g.lda];
          const double bv = g.trans_b ? bb[j + p * g.ldb] : bb[p + j * g.ldb];
          acc += av * bv;
        }
        c[i + j * g.ldc] = alpha * acc + beta * c[i + j * g.ldc];
      }
  }
}

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  int64_t pad_a, pad_b, pad_c;  // extra columns of the stored row-major matrices (ld = cols + pad)
  int64_t batch;
  bool broadcast_b;  // B shared by every batch entry (stride 0)
};

// Runs one case both ways; returns the largest difference.
double run_case(const Case& cs, std::mt19937& rng) {
  // Stored row-major shapes: A is (M x K), or (K x M) when transposed; likewise B.
  const int64_t ar = cs.ta ? cs.K : cs.M, ac = cs.ta ? cs.M : cs.K;
  const int64_t br = cs.tb ? cs.N : cs.K, bc = cs.tb ? cs.K : cs.N;
  const int64_t lda = std::max<int64_t>(ac + cs.pad_a, 1), ldb = std::max<int64_t>(bc + cs.pad_b, 1);
  const int64_t ldc = std::max<int64_t>(cs.N + cs.pad_c, 1);
  const int64_t sa = ar * lda + 3, sb = cs.broadcast_b ? 0 : br * ldb + 5, sc = cs.M * ldc + 2;
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> A(cs.batch * sa + 1), B((cs.broadcast_b ? 1 : cs.batch) * (br * ldb + 5) + 1),
      C0(cs.batch * sc + 1);
  for (double& v : A) v = u(rng);
  for (double& v : B) v = u(rng);
  for (double& v : C0) v = u(rng);
  std::vector<double> c_cpu = C0, c_ref = C0;
  const double alpha = 1.5, beta = 0.25;
  cpu::gemm_strided(DType::f64, cs.ta, cs.tb, cs.M, cs.N, cs.K, alpha, A.data(), lda, sa, B.data(), ldb, sb, beta,
                    c_cpu.data(), ldc, sc, cs.batch);
  const CublasGemmArgs g = cuda::cublas_gemm_args(cs.ta, cs.tb, cs.M, cs.N, cs.K, lda, sa, ldb, sb, ldc, sc, cs.batch);
  if (!cuda::cublas_gemm_is_empty(g)) reference_cublas_gemm(g, alpha, A.data(), B.data(), beta, c_ref.data());
  double worst = 0;
  for (size_t i = 0; i < C0.size(); ++i) worst = std::max(worst, std::fabs(c_cpu[i] - c_ref[i]));
  return worst;
}

}  // namespace

// M, N, K: odd sizes, 1 in each place, K above a 32-wide tile.
const std::array<int64_t, 3> kSizes[] = {{3, 5, 7}, {1, 4, 2}, {6, 1, 3}, {2, 3, 1}, {17, 9, 33}};

TEST_CASE("cuBLAS GEMM arguments: a column-major GEMM with them equals kiln's CPU matmul") {
  std::mt19937 rng(33);
  int cases = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const std::array<int64_t, 3>& mnk : kSizes)
        for (int64_t pad : {0, 3})
          for (int64_t batch : {1, 3})
            for (bool bcast : {false, true}) {
              const Case cs{ta, tb, mnk[0], mnk[1], mnk[2], pad, pad + 1, pad * 2, batch, bcast};
              CAPTURE(ta);
              CAPTURE(tb);
              CAPTURE(cs.M);
              CAPTURE(cs.N);
              CAPTURE(cs.K);
              CAPTURE(pad);
              CAPTURE(batch);
              CAPTURE(bcast);
              CHECK(run_case(cs, rng) < 1e-12);
              ++cases;
            }
  CHECK(cases == 160);
}

TEST_CASE("cuBLAS GEMM arguments: K = 0 scales C by beta, an empty C is no call") {
  std::mt19937 rng(7);
  CHECK(run_case(Case{false, false, 4, 3, 0, 0, 0, 0, 2, false}, rng) < 1e-12);
  CHECK(run_case(Case{true, true, 4, 3, 0, 1, 2, 1, 1, true}, rng) < 1e-12);
  CHECK(cuda::cublas_gemm_is_empty(cuda::cublas_gemm_args(false, false, 0, 3, 4, 4, 0, 3, 0, 3, 0, 1)));
  CHECK(cuda::cublas_gemm_is_empty(cuda::cublas_gemm_args(false, false, 3, 0, 4, 4, 0, 1, 0, 1, 0, 1)));
  CHECK(cuda::cublas_gemm_is_empty(cuda::cublas_gemm_args(false, false, 3, 3, 4, 4, 0, 3, 0, 3, 0, 0)));
  CHECK_FALSE(cuda::cublas_gemm_is_empty(cuda::cublas_gemm_args(false, false, 3, 3, 0, 1, 0, 3, 0, 3, 0, 1)));
}

TEST_CASE("cuBLAS GEMM arguments: swapped operands, m = N, n = M, cuBLAS's rules on leading dimensions") {
  // Row-major A (2 x 5, ld 8) times B^T where B is stored (3 x 5, ld 6): C (2 x 3, ld 4).
  const CublasGemmArgs g = cuda::cublas_gemm_args(false, true, 2, 3, 5, 8, 16, 6, 18, 4, 8, 2);
  CHECK(g.a_from == GemmSide::kiln_b);
  CHECK(g.b_from == GemmSide::kiln_a);
  CHECK(g.trans_a);
  CHECK_FALSE(g.trans_b);
  CHECK(g.m == 3);
  CHECK(g.n == 2);
  CHECK(g.k == 5);
  CHECK(g.lda == 6);
  CHECK(g.stride_a == 18);
  CHECK(g.ldb == 8);
  CHECK(g.stride_b == 16);
  CHECK(g.ldc == 4);
  CHECK(g.stride_c == 8);
  CHECK(std::string(cuda::cublas_gemm_invalid(g)).empty());
  // A row-major ld below its row length breaks cuBLAS's lda/ldb/ldc rules, named.
  CHECK(std::string(cuda::cublas_gemm_invalid(cuda::cublas_gemm_args(false, true, 2, 3, 5, 4, 0, 6, 0, 4, 0, 1))) ==
        "ldb is below the rows of the stored B");
  CHECK(std::string(cuda::cublas_gemm_invalid(cuda::cublas_gemm_args(false, true, 2, 3, 5, 8, 0, 4, 0, 4, 0, 1))) ==
        "lda is below the rows of the stored A");
  CHECK(std::string(cuda::cublas_gemm_invalid(cuda::cublas_gemm_args(false, true, 2, 3, 5, 8, 0, 6, 0, 2, 0, 1))) ==
        "ldc is below m");
  CHECK(std::string(cuda::cublas_gemm_invalid(
            cuda::cublas_gemm_args(false, false, 2, (int64_t)1 << 31, 5, 8, 0, (int64_t)1 << 31, 0, (int64_t)1 << 31,
                                   0, 1))) == "a size exceeds cuBLAS's 32-bit limit");
}

TEST_CASE("cuBLAS GEMM precision: data type, compute type and math mode per dtype") {
  using namespace kiln::cuda;
  const BlasPrecision f32 = blas_precision(DType::f32, false);
  CHECK((f32.type == BlasType::f32 && f32.compute == BlasCompute::c32f_pedantic && f32.math == BlasMath::pedantic &&
         !f32.double_scalars));
  const BlasPrecision tf32 = blas_precision(DType::f32, true);
  CHECK((tf32.compute == BlasCompute::c32f_fast_tf32 && tf32.math == BlasMath::tf32_tensor_op));
  const BlasPrecision f64 = blas_precision(DType::f64, true);
  CHECK((f64.type == BlasType::f64 && f64.compute == BlasCompute::c64f_pedantic && f64.double_scalars));
  for (DType dt : {DType::f16, DType::bf16}) {
    const BlasPrecision p = blas_precision(dt, false);
    CHECK((p.compute == BlasCompute::c32f && p.math == BlasMath::default_math && !p.double_scalars));
    CHECK(p.type == (dt == DType::f16 ? BlasType::f16 : BlasType::bf16));
  }
  CHECK_THROWS_WITH(blas_precision(DType::i32, false), doctest::Contains("not supported on cuda"));
}
