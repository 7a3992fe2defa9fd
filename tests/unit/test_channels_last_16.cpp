// Channels-last 16-bit ops on the CPU that run on NHWC without NCHW copies (the bf16 step on channels-last
// batches): max pool (kernels/cpu/pool_nhwc.h) gives the NCHW kernel's bits for y and dx, on NaN, -inf,
// ties, padding, dilation and ceil_mode, bf16 and f16; 16-bit batch norm on channels-last data (the rows
// kernel, kernels/cpu/batch_norm_rows16.inc, f32 lanes) stays channels-last and gives the f32 kernel's values
// on f32 copies within the f32-lane bounds (y, dx: that result rounded to X or a neighbour; running
// statistics, dgamma, dbeta: the lane sums' bound; test_batch_norm_16.cpp derives them and checks the kernel
// against f64 on adversarial rows); relu's gradient and the elementwise
// ops keep channels-last operands channels-last (engine/ops/dispatch.h in_memory_order) with NCHW's values.
// Tiny shapes: the cases run in well under a second, also under ASan.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/ops/ops.h"
#include "kernels/cpu/threads.h"

using namespace kiln;

namespace {

// The bit patterns of a 16-bit tensor (any layout), in logical (N, C, H, W) order.
std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  std::vector<uint32_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = (float)v[i];  // exact for 16-bit values
    std::memcpy(&out[i], &f, sizeof f);
  }
  return out;
}

// X's spacing (ulp) at magnitude v (the subnormal spacing below the normal range)
double ulp16(DType dt, double v) {
  const int mant = dt == DType::bf16 ? 7 : 10, emin = dt == DType::bf16 ? -126 : -14;
  int e = v > 0 && std::isfinite(v) ? std::ilogb(v) : emin;
  if (e < emin) e = emin;
  return std::ldexp(1.0, e - mant);
}

int64_t differing(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  REQUIRE(a.size() == b.size());
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

// Random values in [-2, 2) with some ties (values on a 1/8 grid), NaN, +-inf, -0 sprinkled in.
Tensor adversarial(const Shape& s, DType dt, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> u(-16, 15), pick(0, 40);
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  std::vector<float> v((size_t)n);
  for (auto& x : v) {
    const int p = pick(g);
    x = p == 0 ? NAN : p == 1 ? INFINITY : p == 2 ? -INFINITY : p == 3 ? -0.0f : (float)u(g) / 8.0f;
  }
  return to_dtype(tensor_from<float>(v, s), dt);
}

}  // namespace

TEST_CASE("channels_last 16-bit: max pool on NHWC gives the NCHW kernel's bits, forward and backward") {
  struct Case {
    std::vector<int64_t> k, s, p, dil;
    bool ceil;
  };
  const std::vector<Case> cases = {
      {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false},  // ResNet's stem pool
      {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false},  // the small CNN's
      {{3, 2}, {2, 1}, {1, 0}, {2, 1}, true},   // dilation, ceil_mode, rectangular
  };
  for (DType dt : {DType::bf16, DType::f16})
    for (int threads : {1, 2})
      for (const Case& c : cases) {
        cpu::ThreadScope ts(threads);
        INFO("dtype " << dtype_name(dt) << " threads " << threads << " kernel " << c.k[0] << "x" << c.k[1]);
        // C = 19: a run of channels that is not a multiple of any vector width
        Tensor x = adversarial({2, 19, 9, 11}, dt, 5);
        Tensor xa = clone(x).set_requires_grad(true);
        Tensor xb = contiguous(x, MemoryFormat::channels_last).set_requires_grad(true);
        REQUIRE(is_channels_last(xb));
        Tensor ya = max_pool2d(xa, c.k, c.s, c.p, c.dil, c.ceil), yb = max_pool2d(xb, c.k, c.s, c.p, c.dil, c.ceil);
        CHECK(is_channels_last(yb));
        CHECK(differing(bits(ya), bits(yb)) == 0);
        Tensor dy = adversarial(ya.sizes(), dt, 6);
        ya.backward(dy);
        yb.backward(contiguous(dy, MemoryFormat::channels_last));
        CHECK(is_channels_last(xb.grad()));
        CHECK(differing(bits(xa.grad()), bits(xb.grad())) == 0);
        // The test sees something: NaNs reached y, and some inputs got two contributions summed.
        int64_t nans = 0;
        for (double v : yb.to_vector<double>()) nans += std::isnan(v);
        CHECK(nans > 0);
      }
}

TEST_CASE("channels_last 16-bit: batch norm on NHWC rows gives the f32 kernel's values on f32 copies within the f32-lane bounds") {
  for (DType dt : {DType::bf16, DType::f16})
    for (int threads : {1, 2}) {
      cpu::ThreadScope ts(threads);
      INFO("dtype " << dtype_name(dt) << " threads " << threads);
      // C = 37 (blocks of channels split unevenly), a channel with a large mean against its spread
      std::mt19937 g(11);
      std::normal_distribution<float> nd(0.f, 1.f);
      const int64_t N = 3, C = 37, H = 5, W = 6;
      std::vector<float> xv((size_t)(N * C * H * W));
      for (size_t i = 0; i < xv.size(); ++i) xv[i] = nd(g) * (i % C == 3 ? 0.01f : 1.f) + (i % C == 3 ? 100.f : 0.f);
      // (N, H, W, C) memory: value i belongs to channel i % C; viewed as (N, C, H, W) channels-last
      Tensor x16 = permute(to_dtype(tensor_from<float>(xv, {N, H, W, C}), dt), {0, 3, 1, 2});
      REQUIRE(is_channels_last(x16));
      std::vector<float> gv(C), bv(C), ones(C, 1.f), zeros(C, 0.f);
      for (int64_t c = 0; c < C; ++c) gv[c] = 0.5f + 0.01f * c, bv[c] = -0.2f + 0.02f * c;
      auto run = [&](const Tensor& x, std::vector<Tensor>& out) {
        Tensor xi = x.detach().set_requires_grad(true);
        Tensor w = tensor_from<float>(gv, {C}).set_requires_grad(true), b = tensor_from<float>(bv, {C}).set_requires_grad(true);
        Tensor rm = tensor_from<float>(zeros, {C}), rv = tensor_from<float>(ones, {C});
        Tensor y = batch_norm(xi, w, b, rm, rv, true, 0.1, 1e-5);
        Tensor dy = adversarial(y.sizes(), dt, 12);
        dy = to_dtype(dy, y.dtype());
        // keep dy finite: NaN would make every dx NaN and compare nothing
        dy = where(eq(dy, dy), dy, zeros_like(dy));
        dy = clamp(dy, -2.0, 2.0);
        y.backward(contiguous(dy, MemoryFormat::channels_last));
        out = {y, xi.grad(), w.grad(), b.grad(), rm, rv, dy};
      };
      std::vector<Tensor> a, b;
      run(x16, a);
      run(to_dtype(x16, DType::f32), b);  // the f32 kernel on the same (rows) layout: the double loops
      REQUIRE(a[0].dtype() == dt);
      CHECK(is_channels_last(a[0]));
      CHECK(is_channels_last(a[1]));
      // y, dx: X's rounding of the f32 kernel's value or its neighbour (the f32 lanes' error is far below X's
      // spacing for these values: the results may differ only where the exact value lies near a rounding
      // boundary)
      for (int i = 0; i < 2; ++i) {
        const std::vector<double> k = a[i].to_vector<double>(), r = b[i].to_vector<double>();
        const std::vector<double> kr = to_dtype(b[i], dt).to_vector<double>();
        int64_t off = 0, changed = 0;
        for (size_t j = 0; j < k.size(); ++j) {
          changed += k[j] != kr[j];
          off += !(std::fabs(k[j] - r[j]) <= ulp16(dt, std::fabs(r[j])));
        }
        INFO((i == 0 ? "y" : "dx") << ": " << changed << " of " << k.size() << " values differ from the f32 kernel's rounding");
        CHECK(off == 0);
      }
      // dgamma, dbeta, the running statistics: the lane sums' bound (64 u of the sum of |terms| per channel,
      // test_batch_norm_16.cpp's ref_bounds) and two f32 roundings, from the values the kernels saw
      const std::vector<double> xs = to_dtype(x16, DType::f32).to_vector<double>();
      const std::vector<double> dys = to_dtype(a[6], DType::f32).to_vector<double>();
      const int64_t HW = H * W, M = N * HW;
      constexpr double u = 1.0 / 16777216.0;
      const std::vector<float> kg = a[2].to_vector<float>(), rg = b[2].to_vector<float>();
      const std::vector<float> kb = a[3].to_vector<float>(), rb = b[3].to_vector<float>();
      const std::vector<float> km = a[4].to_vector<float>(), rmr = b[4].to_vector<float>();
      const std::vector<float> kvv = a[5].to_vector<float>(), rvr = b[5].to_vector<float>();
      for (int64_t c = 0; c < C; ++c) {
        double ax = 0, ady = 0, adyx = 0, q = 0, m = 0, sdy = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < HW; ++i) m += xs[(size_t)((n * C + c) * HW + i)] / (double)M;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < HW; ++i) {
            const size_t j = (size_t)((n * C + c) * HW + i);  // logical (N, C, H, W) order
            ax += std::fabs(xs[j]), ady += std::fabs(dys[j]), adyx += std::fabs(dys[j] * (xs[j] - m));
            q += (xs[j] - m) * (xs[j] - m), sdy += dys[j];
          }
        const double s = 1.0 / std::sqrt(q / (double)M + 1e-5);  // invstd
        // the two kernels' f32 means may differ by the lane sum's error: dgamma moves by that times sum dy
        const double dmean = 65 * u * ax / (double)M;
        INFO("channel " << c);
        CHECK(std::fabs(kb[(size_t)c] - rb[(size_t)c]) <= 64 * u * ady + 2 * u * std::fabs(rb[(size_t)c]));
        CHECK(std::fabs(kg[(size_t)c] - rg[(size_t)c]) <=
              (66 * u * adyx + dmean * std::fabs(sdy)) * s * 1.01 + 2 * u * std::fabs(rg[(size_t)c]));
        CHECK(std::fabs(km[(size_t)c] - rmr[(size_t)c]) <= 0.1 * 65 * u * ax / (double)M + 2 * u * std::fabs(rmr[(size_t)c]));
        CHECK(std::fabs(kvv[(size_t)c] - rvr[(size_t)c]) <=
              0.1 * 200 * u * q / (double)(M - 1) + 2 * u * std::fabs(rvr[(size_t)c]));
      }
    }
}

TEST_CASE("channels_last 16-bit: relu, its gradient and add keep NHWC operands NHWC, NCHW's values") {
  Tensor x = adversarial({2, 5, 3, 4}, DType::bf16, 21);
  Tensor xa = clone(x).set_requires_grad(true);
  Tensor xb = contiguous(x, MemoryFormat::channels_last).set_requires_grad(true);
  Tensor ya = add(relu(xa), xa), yb = add(relu(xb), xb);
  CHECK(is_channels_last(yb));
  CHECK(differing(bits(ya), bits(yb)) == 0);
  Tensor dy = adversarial(ya.sizes(), DType::bf16, 22);
  ya.backward(dy);
  yb.backward(contiguous(dy, MemoryFormat::channels_last));
  CHECK(is_channels_last(xb.grad()));
  CHECK(differing(bits(xa.grad()), bits(xb.grad())) == 0);
}
