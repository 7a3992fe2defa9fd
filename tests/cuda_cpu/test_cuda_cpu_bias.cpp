// kiln's per-channel bias kernels (kernels/cuda/bias.cu: bias_add_kernel, the grid-wide bias gradient
// bias_grad_chunks + bias_grad_finish) in the CPU execution mode against the CPU backend
// (kernels/cpu/bias.cpp), on NCHW-like (outer, K, inner) and channels-last / linear (rows, K, 1) views:
// NaN, +-inf, -0, sizes that are not multiples of the warp or the block, N*H*W = 0 and 1, f16 sums that
// overflow f16 (results >= 2 x 65504, so no accumulation order can keep them finite) and f16 partial
// sums that overflow while the result is small (<= 65504 / 2: only f32 accumulation gets it).
// bias_add is one rounding per element: bit-exact. bias_grad: bit-exact on integer data (every partial
// sum exact in f32), else within the f32 summation bound (below).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/half.h"
#include "kernels/common/bias_math.h"
#include "kernels/cpu/bias.h"
#include "cuda_cpu/adversarial.h"
// The CPU mode's declarations (namespace kiln::cuda_on_cpu); after the CPU backend's.
#include "kernels/cuda_cpu/prelude.h"
#include "kernels/cuda/nn_backend.h"

namespace cpu = kiln::cpu;
namespace gpu = kiln::cuda_on_cpu;
namespace bm = kiln::bias_math;
using kiln::DType;
using kiln::half;
using kiln::bfloat16;

namespace {

template <typename T> DType dt();
template <> DType dt<float>() { return DType::f32; }
template <> DType dt<double>() { return DType::f64; }
template <> DType dt<half>() { return DType::f16; }
template <> DType dt<bfloat16>() { return DType::bf16; }

// Significand bits of T (the unit roundoff of a store is 2^-bits).
template <typename T> int mant_bits();
template <> int mant_bits<float>() { return 24; }
template <> int mant_bits<double>() { return 53; }
template <> int mant_bits<half>() { return 11; }
template <> int mant_bits<bfloat16>() { return 8; }

struct Shape3 {
  int64_t outer, K, inner;
};

// (outer, K, inner): odd sizes (not multiples of 32, 256 or a vector width), N*H*W = 1 and 0, the
// channels-last / linear view (inner 1), and channels long enough to be cut into chunks (grid-wide).
const Shape3 kShapes[] = {{2, 3, 5},   {1, 1, 1},      {1, 6, 1},    {0, 4, 9},  {4, 5, 0},    {3, 33, 1},
                          {67, 5, 1},  {2, 7, 1031},   {5, 3, 37},   {1, 3, 70001}, {9000, 2, 1}, {3, 2, 4099}};

std::string label(const char* op, DType d, const Shape3& s) {
  return kiln::str_cat(op, " ", kiln::dtype_name(d), " (outer ", s.outer, ", K ", s.K, ", inner ", s.inner, ")");
}

// Bit equality, except that any NaN matches any NaN (payloads may differ).
template <typename T>
int bits_differ(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = (double)got[i], w = (double)want[i];
    if (std::isnan(g) && std::isnan(w)) continue;
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (++bad <= 3) MESSAGE(what, ": element ", i, " CPU mode ", g, ", CPU backend ", w);
  }
  return bad;
}

template <typename T>
void add_case(const Shape3& s, uint64_t seed) {
  const size_t n = (size_t)(s.outer * s.K * s.inner);
  std::vector<T> y = kiln_test::adversarial<T>(n, seed), b = kiln_test::adversarial<T>((size_t)s.K, seed + 1, 3);
  std::vector<T> want = y, got = y;
  cpu::bias_add(dt<T>(), s.outer, s.K, s.inner, want.data(), b.data());
  gpu::bias_add(dt<T>(), s.outer, s.K, s.inner, got.data(), b.data());
  const std::string what = label("bias_add", dt<T>(), s);
  CHECK_MESSAGE(bits_differ(got, want, what) == 0, what);
}

// db from both backends (db preset to 7 so an unwritten channel shows).
template <typename T>
void grad_both(const Shape3& s, const std::vector<T>& dy, std::vector<T>& got, std::vector<T>& want) {
  got.assign((size_t)s.K, T(7.0f));
  want.assign((size_t)s.K, T(7.0f));
  cpu::bias_grad(dt<T>(), s.outer, s.K, s.inner, dy.data(), want.data());
  gpu::bias_grad(dt<T>(), s.outer, s.K, s.inner, dy.data(), got.data());
}

// The CPU mode accumulates in f32 (f64 for f64): thread-serial runs of at most ceil(chunk_len / 256)
// terms, two block trees of depth 8, a serial run of at most ceil(chunks / 256) partials. Bound used:
// |error| <= 64 u_acc sum|x| + 2 u_T |want| (64 covers every run of these shapes: chunk_len <= 4096 so
// <= 16 serial terms, 16 tree levels, <= 1 partial per thread; 2 u_T: the stores' roundings, the CPU's
// f64 -> f32 -> T double rounding included).
template <typename T>
void grad_adversarial_case(const Shape3& s, uint64_t seed) {
  const size_t n = (size_t)(s.outer * s.K * s.inner);
  const std::vector<T> dy = kiln_test::adversarial<T>(n, seed, 11);
  std::vector<T> got, want;
  grad_both(s, dy, got, want);
  const std::string what = label("bias_grad", dt<T>(), s);
  const int acc_bits = dt<T>() == DType::f64 ? 53 : 24;
  int bad = 0;
  for (int64_t k = 0; k < s.K; ++k) {
    double abs_sum = 0;
    for (int64_t j = 0; j < s.outer * s.inner; ++j) abs_sum += std::fabs((double)dy[(size_t)bm::elem_offset(j, k, s.K, s.inner)]);
    const double g = (double)got[(size_t)k], w = (double)want[(size_t)k];
    const double tol = 64 * std::ldexp(abs_sum, -acc_bits) + 2 * std::ldexp(std::fabs(w), -mant_bits<T>());
    const bool ok = kiln_test::close_value(g, w, 0.0, tol);
    if (!ok && ++bad <= 3) MESSAGE(what, ": channel ", k, " CPU mode ", g, ", CPU backend ", w, ", bound ", tol);
  }
  CHECK_MESSAGE(bad == 0, what);
}

// Integers in [-8, 8] (and -0): every partial sum of every order is exact in f32, so the result is
// bit-exact whatever the grid does; a dropped or doubled element shows.
template <typename T>
void grad_exact_case(const Shape3& s, uint64_t seed) {
  const size_t n = (size_t)(s.outer * s.K * s.inner);
  std::vector<T> dy = kiln_test::adversarial<T>(n, seed, 0);
  for (size_t i = 0; i < n; ++i) {
    const double v = std::round(std::fmod((double)dy[i] * 3.0, 9.0));
    dy[i] = T((float)(v == 0 ? -0.0 : v));
  }
  std::vector<T> got, want;
  grad_both(s, dy, got, want);
  const std::string what = label("bias_grad (integers)", dt<T>(), s);
  CHECK_MESSAGE(bits_differ(got, want, what) == 0, what);
}

template <typename T>
void all_cases(uint64_t seed) {
  for (const Shape3& s : kShapes) {
    add_case<T>(s, seed);
    grad_adversarial_case<T>(s, seed + 2);
    grad_exact_case<T>(s, seed + 3);
    seed += 10;
  }
}

}  // namespace

TEST_CASE("CPU mode: bias_math: every element of every channel is covered once, chunks are non-empty") {
  for (const Shape3& s : kShapes) {
    const int64_t count = s.outer * s.inner, total = s.outer * s.K * s.inner;
    std::vector<int> hits((size_t)total, 0);
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t j = 0; j < count; ++j) {
        const int64_t o = bm::elem_offset(j, k, s.K, s.inner);
        REQUIRE(o >= 0);
        REQUIRE(o < total);
        ++hits[(size_t)o];
        // the element's channel is k in the (outer, K, inner) layout
        CHECK((o / s.inner) % s.K == k);
      }
    for (int h : hits) CHECK(h == 1);
    for (int64_t part : {4, 8}) {
      const bm::ChunkPlan p = bm::chunk_plan(s.K, count, part);
      CHECK(p.chunks >= 1);
      CHECK(s.K * p.chunks * part <= (int64_t)kiln::kKernelScratchMax);
      if (count > 0) {
        CHECK(p.chunk_len * p.chunks >= count);       // covered
        CHECK(p.chunk_len * (p.chunks - 1) < count);  // the last chunk is not empty
      }
    }
  }
  // many channels: the scratch bound caps the chunks (one chunk per channel at the limit)
  const bm::ChunkPlan wide = bm::chunk_plan(100000, 1 << 20, 4);
  CHECK(wide.chunks == 1);
  CHECK(bm::chunk_plan(1, 1 << 20, 4).chunks == 512);
}

TEST_CASE("CPU mode: bias_add and bias_grad f32 on adversarial inputs") { all_cases<float>(100); }
TEST_CASE("CPU mode: bias_add and bias_grad f16 on adversarial inputs") { all_cases<half>(200); }
TEST_CASE("CPU mode: bias_add and bias_grad bf16 and f64 on adversarial inputs") {
  all_cases<bfloat16>(300);
  all_cases<double>(400);
}

TEST_CASE("CPU mode: bias_grad f16: sums past f16's range are inf, f16-overflowing partial sums with a small result are not") {
  // Channel 0: 60000 x 5 = 300000 >= 2 x 65504: +inf in every order. Channel 1: the same negated: -inf.
  // Channel 2: +60000, -60000 alternating over up to 4096 elements, then 1.5: the exact result 1.5 is
  // <= 65504 / 2 (every partial sum is a multiple of 32 below 2^29: exact in f32 in any order), while any
  // 16-bit accumulator that adds two same-sign elements (a thread's strided run, a block's tree) gives
  // inf, and the result NaN or inf.
  // Channel 3: 40000 x 4 - 40000 x 3 + 0.25 = 40000.25, exact in f32 in every order, rounded to f16's
  // 40000 (spacing 32) by both backends.
  for (const Shape3 s : {Shape3{1, 4, 4100}, Shape3{4100, 4, 1}, Shape3{2, 4, 8}}) {
    const int64_t count = s.outer * s.inner;
    std::vector<half> dy((size_t)(count * s.K), half(0.0f));
    for (int64_t j = 0; j < count; ++j) {
      auto at = [&](int64_t k) -> half& { return dy[(size_t)bm::elem_offset(j, k, s.K, s.inner)]; };
      at(0) = half(j < 5 ? 60000.0f : 0.0f);
      at(1) = half(j < 5 ? -60000.0f : -0.0f);
      const int64_t h = count / 2, pairs_end = std::min<int64_t>(count - 1, 4096) & ~int64_t(1);
      if (j < pairs_end) at(2) = half(j % 2 == 0 ? 60000.0f : -60000.0f);
      if (j == count - 1) at(2) = half(1.5f);
      if (j < 4) at(3) = half(40000.0f);
      if (j >= h && j < h + 3) at(3) = half(-40000.0f);
      if (j == count - 2) at(3) = half(0.25f);
    }
    std::vector<half> got, want;
    grad_both(s, dy, got, want);
    const std::string what = label("bias_grad overflow", DType::f16, s);
    CHECK_MESSAGE(bits_differ(got, want, what) == 0, what);
    CHECK((float)got[0] == INFINITY);
    CHECK((float)got[1] == -INFINITY);
    CHECK((float)got[2] == 1.5f);
    CHECK((float)got[3] == 40000.0f);
  }
}

TEST_CASE("CPU mode: bias_grad is a grid-wide reduction: a long channel is cut over many blocks, then combined") {
  gpu::clear_launch_geometry();
  const Shape3 s{1, 3, 70001};
  std::vector<float> dy = kiln_test::moderate<float>((size_t)(s.K * s.inner), 9);
  std::vector<float> got, want;
  grad_both(s, dy, got, want);
  const int64_t chunks = bm::chunk_plan(s.K, s.inner, 4).chunks;
  CHECK(chunks >= 30);
  CHECK(gpu::most_blocks_launched("bias_grad_chunks") == s.K * chunks);
  CHECK(gpu::most_blocks_launched("bias_grad_finish") == s.K);
  for (int64_t k = 0; k < s.K; ++k) {  // the bound of grad_adversarial_case
    double abs_sum = 0;
    for (int64_t j = 0; j < s.inner; ++j) abs_sum += std::fabs((double)dy[(size_t)(k * s.inner + j)]);
    CHECK(std::fabs(got[(size_t)k] - want[(size_t)k]) <= 64 * std::ldexp(abs_sum, -24) + 2 * std::ldexp(std::fabs(want[(size_t)k]), -24));
  }
}

TEST_CASE("CPU mode: bias_add / bias_grad reject a dtype or size they do not take, naming the op") {
  std::vector<int32_t> v(4, 0);
  CHECK_THROWS_WITH_AS(gpu::bias_add(DType::i32, 1, 2, 2, v.data(), v.data()),
                       doctest::Contains("bias_add on cuda: dtype i32"), kiln::Error);
  CHECK_THROWS_WITH_AS(gpu::bias_grad(DType::f32, -1, 2, 2, v.data(), v.data()),
                       doctest::Contains("bias_grad on cuda: negative size"), kiln::Error);
  CHECK_THROWS_WITH_AS(cpu::bias_add(DType::u8, 1, 2, 2, v.data(), v.data()),
                       doctest::Contains("bias_add on cpu: dtype u8"), kiln::Error);
}
