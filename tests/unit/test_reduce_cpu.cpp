// The CPU row reductions' sums in lanes and chunks (kernels/cpu/reduce.cpp): against a long double
// left-to-right sum on adversarial rows (cancelling large values, one huge value among small ones,
// lengths around the lane and chunk boundaries, f32 and f64), the same bits at 1 and 2 threads, and
// NaN / inf propagated from any position, including the last, partial chunk.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/reduce.h"
#include "kernels/cpu/threads.h"

using namespace kiln;

namespace {

template <typename T>
std::vector<T> adversarial_row(int64_t n, int kind, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<T> v((size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    const double x = u(g);
    switch (kind) {
      case 0: v[(size_t)i] = (T)x; break;                                        // uniform(-1, 1)
      case 1: v[(size_t)i] = (T)((i % 2 ? 1e6 : -1e6) + x); break;               // cancelling pairs
      case 2: v[(size_t)i] = (T)(i == n / 3 ? 3e7 : 1e-3 * (x + 1.0)); break;    // one huge, many tiny
      default: v[(size_t)i] = (T)(-5.0 - 4.0 * x * x); break;                    // all negative
    }
  }
  return v;
}

// |double lane/chunk sum - exact| <= (n / 8 + 300) * eps * sum |x| (each lane adds n / 8 values, then
// the lanes' and chunks' folds); the result is then rounded once to T (rel: half an ulp of T, with slack).
// Loose against typical rounding, but an element dropped or counted twice is far outside it.
template <typename T>
void check_sums(DType dt, double rel) {
  const std::vector<int64_t> lengths = {1, 7, 8, 9, 65535, 65536, 65537, 98311, 2359296, 2359296 + 13};
  for (int64_t n : lengths)
    for (int kind = 0; kind < 4; ++kind) {
      CAPTURE(n);
      CAPTURE(kind);
      const std::vector<T> row = adversarial_row<T>(n, kind, (uint32_t)(n * 4 + kind));
      long double want = 0, scale = 0;
      for (T x : row) {
        want += (long double)(double)x;
        scale += std::fabs((long double)(double)x);
      }
      T got1 = 0, got2 = 0, mean = 0;
      {
        cpu::ThreadScope one(1);
        cpu::reduce_rows(ReduceOp::sum, dt, row.data(), 1, n, &got1, nullptr);
      }
      {
        cpu::ThreadScope two(2);
        cpu::reduce_rows(ReduceOp::sum, dt, row.data(), 1, n, &got2, nullptr);
        cpu::reduce_rows(ReduceOp::mean, dt, row.data(), 1, n, &mean, nullptr);
      }
      // the double sum is within a few ulps of the exact one, then rounded once to T
      const double err = ((double)n / 8.0 + 300.0) * 1.12e-16 * (double)scale;
      const double tol = rel * ((double)std::fabs(want) + err) + err;
      CHECK(std::fabs((double)got1 - (double)want) <= tol);
      CHECK(std::memcmp(&got1, &got2, sizeof(T)) == 0);  // the thread count changes no bit
      CHECK(std::fabs((double)mean - (double)(want / n)) <= tol / (double)n);
    }
}

}  // namespace

TEST_CASE("reduce cpu: lane and chunk sums match a long double sum, the same bits at any thread count") {
  check_sums<double>(DType::f64, 2.3e-16);
  check_sums<float>(DType::f32, 1.2e-7);
}

TEST_CASE("reduce cpu: several rows, variance in chunks, NaN and inf from any position") {
  // two long rows at once (the rows run in parallel, each row's chunks serially): same as one at a time
  const int64_t n = 3 * 65536 + 5;
  std::vector<float> rows = adversarial_row<float>(2 * n, 1, 77);
  float both[2], one = 0;
  cpu::reduce_rows(ReduceOp::sum, DType::f32, rows.data(), 2, n, both, nullptr);
  cpu::reduce_rows(ReduceOp::sum, DType::f32, rows.data() + n, 1, n, &one, nullptr);
  CHECK(both[1] == one);
  // variance of a long row against the two-pass long double formula
  std::vector<double> r = adversarial_row<double>(n, 3, 5);
  long double m = 0;
  for (double x : r) m += x;
  m /= n;
  long double s = 0;
  for (double x : r) s += ((long double)x - m) * ((long double)x - m);
  double var = 0, var_u = 0;
  cpu::reduce_rows(ReduceOp::var, DType::f64, r.data(), 1, n, &var, nullptr);
  cpu::reduce_rows(ReduceOp::var_unbiased, DType::f64, r.data(), 1, n, &var_u, nullptr);
  // positive terms: relative error at most (n / 8 + 300) * eps = 2.8e-12 here, plus the mean's (tiny)
  CHECK(std::fabs(var - (double)(s / n)) <= 1e-10 * (double)(s / n));
  CHECK(std::fabs(var_u - (double)(s / (n - 1))) <= 1e-10 * (double)(s / (n - 1)));
  // a NaN or an inf anywhere (first lane, a middle chunk, the tail of the last chunk) reaches the sum
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t pos : {(int64_t)0, (int64_t)65539, n - 1}) {
    CAPTURE(pos);
    std::vector<float> v = adversarial_row<float>(n, 0, 9);
    float out = 0;
    v[(size_t)pos] = std::numeric_limits<float>::quiet_NaN();
    cpu::reduce_rows(ReduceOp::sum, DType::f32, v.data(), 1, n, &out, nullptr);
    CHECK(std::isnan(out));
    v[(size_t)pos] = inf;
    cpu::reduce_rows(ReduceOp::sum, DType::f32, v.data(), 1, n, &out, nullptr);
    CHECK(out == inf);
    v[(size_t)(n / 2)] = -inf;
    cpu::reduce_rows(ReduceOp::sum, DType::f32, v.data(), 1, n, &out, nullptr);
    CHECK(std::isnan(out));
  }
}
