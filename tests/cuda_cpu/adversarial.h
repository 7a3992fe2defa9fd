// Shared by the cuda-cpu tests: adversarial inputs (NaN, +-inf, -0, denormals, huge and tiny
// magnitudes, constant runs and ties mixed into random values) and the comparison of a CPU-mode
// result against the CPU backend's (NaN matches NaN, inf matches the same inf, else a tolerance;
// exact where the operation is exact). Test code only.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace kiln_test {

// n values: random normals scaled by `scale`, with every `special_every`-th slot an adversarial
// value (0: none). Deterministic in `seed`.
template <typename T>
std::vector<T> adversarial(size_t n, uint64_t seed, int special_every = 7, double scale = 3.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd(0.0, scale);
  const double inf = std::numeric_limits<double>::infinity();
  const double specials[] = {std::nan(""), inf, -inf, -0.0, 0.0, 1e-40, -1e-42, 1e30, -1e30, 1e-30, 2.5, 2.5, -7.0};
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    double x = nd(rng);
    if (special_every > 0 && rng() % special_every == 0) x = specials[rng() % (sizeof specials / sizeof specials[0])];
    v[i] = T(x);
  }
  return v;
}

// Finite, moderate values (for ops whose result would be NaN everywhere with one special).
template <typename T>
std::vector<T> moderate(size_t n, uint64_t seed, double scale = 2.0) {
  return adversarial<T>(n, seed, 0, scale);
}

inline bool close_value(double got, double want, double rtol, double atol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// Counts mismatches (reports the first few); rtol = atol = 0 asks for bit equality of the values.
template <typename T>
int compare(const std::vector<T>& got, const std::vector<T>& want, double rtol, double atol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = (double)got[i], w = (double)want[i];
    if (close_value(g, w, rtol, atol)) continue;
    if (++bad <= 3) MESSAGE(what, ": element ", i, " CPU mode ", g, ", CPU backend ", w);
  }
  return bad;
}

}  // namespace kiln_test
