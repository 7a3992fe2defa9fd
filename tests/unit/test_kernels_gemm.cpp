// kiln::cpu::gemm / gemm_batched against a naive triple loop in double, and the thread knob.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/threads.h"

using namespace kiln;

namespace {

template <typename T>
std::vector<T> rand_vec(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = (T)u(g);
  return v;
}

// Reference: C = alpha * op(A) op(B) + beta * C, all in double.
template <typename T>
std::vector<double> ref_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                             const T* A, int64_t lda, const T* B, int64_t ldb, double beta,
                             const T* C, int64_t ldc) {
  std::vector<double> out(M * ldc, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        double a = ta ? A[k * lda + i] : A[i * lda + k];
        double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
      }
      out[i * ldc + j] = alpha * s + (beta == 0 ? 0.0 : beta * (double)C[i * ldc + j]);
    }
  return out;
}

template <typename T>
void check_gemm_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t pad, double alpha,
                     double beta, std::mt19937& g, double tol) {
  int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  auto A = rand_vec<T>((ta ? K : M) * lda, g);
  auto B = rand_vec<T>((tb ? N : K) * ldb, g);
  auto C = rand_vec<T>(M * ldc, g);
  if (beta == 0) C.assign(C.size(), std::numeric_limits<T>::quiet_NaN());  // must be overwritten
  auto want = ref_gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  cpu::gemm<T>(ta, tb, M, N, K, (T)alpha, A.data(), lda, B.data(), ldb, (T)beta, C.data(), ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double got = C[i * ldc + j], w = want[i * ldc + j];
      INFO("ta=", ta, " tb=", tb, " M=", M, " N=", N, " K=", K, " i=", i, " j=", j);
      REQUIRE(std::abs(got - w) <= tol * (1.0 + std::sqrt((double)K)));
    }
}

}  // namespace

TEST_CASE("gemm matches a naive reference for all transposes, padded leading dims, alpha/beta") {
  std::mt19937 g(1234);
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 100, 9}, {3, 129, 40}};
  for (auto& s : sizes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        check_gemm_case<double>(ta, tb, s[0], s[1], s[2], 3, 0.7, 0.0, g, 1e-13);
        check_gemm_case<double>(ta, tb, s[0], s[1], s[2], 0, 1.0, -0.5, g, 1e-13);
        check_gemm_case<float>(ta, tb, s[0], s[1], s[2], 2, 1.3, 1.0, g, 2e-6);
        check_gemm_case<float>(ta, tb, s[0], s[1], s[2], 0, 1.0, 0.0, g, 2e-6);
      }
}

TEST_CASE("gemm with K == 0 scales C by beta, M or N == 0 is a no-op") {
  std::vector<float> C = {1, 2, 3, 4};
  cpu::gemm<float>(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.5f, C.data(), 2);
  CHECK(C == std::vector<float>({0.5f, 1.f, 1.5f, 2.f}));
  cpu::gemm<float>(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 0.f, C.data(), 2);
  CHECK(C == std::vector<float>({0, 0, 0, 0}));
  cpu::gemm<float>(false, false, 0, 2, 3, 1.f, nullptr, 3, nullptr, 2, 0.f, nullptr, 2);
}

TEST_CASE("gemm rejects a too-small leading dimension") {
  std::vector<double> A(12), B(12), C(16);
  CHECK_THROWS_AS(cpu::gemm<double>(false, false, 4, 4, 3, 1.0, A.data(), 2, B.data(), 4, 0.0, C.data(), 4),
                  kiln::Error);
  CHECK_THROWS_AS(cpu::gemm<double>(false, false, 4, 4, 3, 1.0, A.data(), 3, B.data(), 4, 0.0, C.data(), 3),
                  kiln::Error);
}

TEST_CASE("gemm_batched matches per-matrix references (small: threaded, large: sequential, broadcast A)") {
  std::mt19937 g(99);
  for (int64_t M : {3, 70}) {
    int64_t N = M + 1, K = M + 2, batch = 5;
    auto A = rand_vec<double>(M * K, g);  // stride_a = 0: one A for all
    auto B = rand_vec<double>(batch * N * K, g);
    auto C = rand_vec<double>(batch * M * N, g);
    auto C0 = C;
    cpu::gemm_batched<double>(false, true, M, N, K, 2.0, A.data(), K, 0, B.data(), K, N * K, 1.0,
                              C.data(), N, M * N, batch);
    for (int64_t b = 0; b < batch; ++b) {
      auto want = ref_gemm(false, true, M, N, K, 2.0, A.data(), K, B.data() + b * N * K, K, 1.0,
                           C0.data() + b * M * N, N);
      for (int64_t i = 0; i < M * N; ++i) REQUIRE(std::abs(C[b * M * N + i] - want[i]) < 1e-12);
    }
  }
}

TEST_CASE("set_num_threads sets the kernel thread count and rejects 0") {
  int before = cpu::num_threads();
  cpu::set_num_threads(1);
  CHECK(cpu::num_threads() == 1);
  cpu::set_num_threads(2);
  CHECK(cpu::num_threads() == 2);
  CHECK_THROWS_AS(cpu::set_num_threads(0), kiln::Error);
  cpu::set_num_threads(before);
}
