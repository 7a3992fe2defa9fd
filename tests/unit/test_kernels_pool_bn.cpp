// Pooling and batch-norm kernels (cpu) against direct f64 references written here; backward
// passes against the references' adjoints and central differences; output sizes against values
// printed by PyTorch 1.13.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/pool.h"

using namespace kiln;

namespace {

std::vector<double> rand_vec(size_t n, std::mt19937& g, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

void require_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what, " at ", i, ": got ", got[i], " want ", want[i]);
    REQUIRE(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

Pool2dDesc pdesc(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                 int64_t ph, int64_t pw, int64_t dh, int64_t dw, bool ceil) {
  Pool2dDesc d;
  d.N = N, d.C = C, d.H = H, d.W = W, d.kh = kh, d.kw = kw, d.stride_h = sh, d.stride_w = sw;
  d.pad_h = ph, d.pad_w = pw, d.dil_h = dh, d.dil_w = dw, d.ceil_mode = ceil;
  return d;
}

// Max pool reference: first strict maximum over in-bounds taps.
void ref_max(const Pool2dDesc& d, const std::vector<double>& x, std::vector<double>& y, std::vector<int64_t>& idx) {
  int64_t OH = d.out_h(), OW = d.out_w();
  y.assign(d.N * d.C * OH * OW, 0);
  idx.assign(y.size(), -1);
  for (int64_t pl = 0; pl < d.N * d.C; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -INFINITY;
        int64_t bi = -1;
        for (int64_t i = 0; i < d.kh; ++i)
          for (int64_t j = 0; j < d.kw; ++j) {
            int64_t h = oh * d.stride_h - d.pad_h + i * d.dil_h, w = ow * d.stride_w - d.pad_w + j * d.dil_w;
            if (h < 0 || h >= d.H || w < 0 || w >= d.W) continue;
            double v = x[pl * d.H * d.W + h * d.W + w];
            if (bi < 0 || v > best) best = v, bi = h * d.W + w;
          }
        y[pl * OH * OW + oh * OW + ow] = best;
        idx[pl * OH * OW + oh * OW + ow] = bi;
      }
}

// Average pool reference: enumerate window taps; the padded divisor counts taps inside
// [-pad, in + pad) on each axis, the other counts taps inside the input.
std::vector<double> ref_avg(const Pool2dDesc& d, bool cip, const std::vector<double>& x) {
  int64_t OH = d.out_h(), OW = d.out_w();
  std::vector<double> y(d.N * d.C * OH * OW, 0);
  for (int64_t pl = 0; pl < d.N * d.C; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double s = 0;
        int64_t padded = 0, real = 0;
        for (int64_t i = 0; i < d.kh; ++i)
          for (int64_t j = 0; j < d.kw; ++j) {
            int64_t h = oh * d.stride_h - d.pad_h + i, w = ow * d.stride_w - d.pad_w + j;
            if (h >= -d.pad_h && h < d.H + d.pad_h && w >= -d.pad_w && w < d.W + d.pad_w) ++padded;
            if (h < 0 || h >= d.H || w < 0 || w >= d.W) continue;
            ++real;
            s += x[pl * d.H * d.W + h * d.W + w];
          }
        y[pl * OH * OW + oh * OW + ow] = s / (double)(cip ? padded : real);
      }
  return y;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

TEST_CASE("pool output sizes match PyTorch 1.13, ceil_mode included") {
  // (H, k, s, p, ceil) -> out, printed by torch.nn.functional.max_pool2d
  const int64_t cases[][6] = {{6, 3, 2, 1, 1, 4}, {5, 2, 2, 0, 1, 3}, {7, 3, 2, 1, 1, 4},
                              {8, 3, 3, 1, 1, 3}, {5, 3, 2, 1, 0, 3}, {10, 3, 4, 1, 1, 3}};
  for (auto& c : cases) {
    Pool2dDesc d = pdesc(1, 1, c[0], c[0], c[1], c[1], c[2], c[2], c[3], c[3], 1, 1, c[4] != 0);
    CHECK(d.out_h() == c[5]);
  }
}

TEST_CASE("max_pool2d fwd/bwd match the reference (stride, padding, dilation, ceil_mode)") {
  std::mt19937 g(11);
  const Pool2dDesc cases[] = {
      pdesc(2, 3, 8, 8, 3, 3, 2, 2, 1, 1, 1, 1, false), pdesc(1, 2, 7, 9, 3, 2, 2, 3, 1, 1, 1, 1, true),
      pdesc(2, 2, 9, 8, 3, 3, 1, 2, 1, 0, 2, 2, false), pdesc(1, 1, 5, 5, 2, 2, 2, 2, 0, 0, 1, 1, true),
      pdesc(3, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, false), pdesc(1, 2, 112, 112, 3, 3, 2, 2, 1, 1, 1, 1, false),
      // 2x2 stride 2 without padding: the fast path (odd sizes leave the last row and column out)
      pdesc(2, 3, 7, 9, 2, 2, 2, 2, 0, 0, 1, 1, false), pdesc(1, 2, 28, 28, 2, 2, 2, 2, 0, 0, 1, 1, false)};
  for (const auto& d : cases) {
    auto x = rand_vec(d.N * d.C * d.H * d.W, g);
    std::vector<double> yr;
    std::vector<int64_t> ir;
    ref_max(d, x, yr, ir);
    std::vector<double> y(yr.size());
    std::vector<int64_t> idx(yr.size());
    cpu::max_pool2d_forward<double>(d, x.data(), y.data(), idx.data());
    require_close(y, yr, 0, "max y");
    CHECK(idx == ir);
    std::vector<float> xf(x.begin(), x.end()), yf(y.size());
    cpu::max_pool2d_forward<float>(d, xf.data(), yf.data(), nullptr);
    for (size_t i = 0; i < y.size(); ++i) REQUIRE(yf[i] == (float)yr[i]);
    auto dy = rand_vec(y.size(), g);
    std::vector<double> dxr(x.size(), 0), dx(x.size(), 5);
    for (size_t o = 0; o < dy.size(); ++o) dxr[(o / (d.out_h() * d.out_w())) * d.H * d.W + ir[o]] += dy[o];
    cpu::max_pool2d_backward<double>(d, dy.data(), idx.data(), dx.data());
    require_close(dx, dxr, 1e-15, "max dx");
  }
}

TEST_CASE("max_pool2d propagates NaN and rejects too much padding") {
  Pool2dDesc d = pdesc(1, 1, 2, 2, 2, 2, 2, 2, 0, 0, 1, 1, false);
  std::vector<float> x = {1.f, std::numeric_limits<float>::quiet_NaN(), 3.f, 2.f}, y(1);
  std::vector<int64_t> idx(1);
  cpu::max_pool2d_forward<float>(d, x.data(), y.data(), idx.data());
  CHECK(std::isnan(y[0]));
  CHECK(idx[0] == 1);
  // the 2x2 stride-2 fast path keeps the general rule: the last NaN wins, a window of -inf reports
  // its first tap
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  x = {nan, 1.f, nan, 2.f};
  cpu::max_pool2d_forward<float>(d, x.data(), y.data(), idx.data());
  CHECK(std::isnan(y[0]));
  CHECK(idx[0] == 2);
  x = {-inf, -inf, -inf, -inf};
  cpu::max_pool2d_forward<float>(d, x.data(), y.data(), idx.data());
  CHECK(y[0] == -inf);
  CHECK(idx[0] == 0);
  d = pdesc(1, 1, 4, 4, 2, 2, 1, 1, 2, 2, 1, 1, false);
  CHECK_THROWS_AS(cpu::max_pool2d_forward<float>(d, x.data(), y.data(), nullptr), kiln::Error);
}

TEST_CASE("max_pool2d 2x2 stride 2: the vectorized rows keep PyTorch's rule on NaN, -inf and ties, rows past a chunk") {
  // Rows of 300 outputs (past the fast path's 256-output chunks, odd width: the last column is left out),
  // values drawn from {NaN, -inf, +inf, -1, 0, 1, 2}: many ties and NaNs per window. The reference is the
  // rule itself, tap by tap in row order: a larger value or a NaN takes the place (the last NaN wins), the
  // first tap starts (so a window of -inf, or of ties, reports its first tap).
  std::mt19937 g(21);
  const Pool2dDesc d = pdesc(2, 3, 5, 601, 2, 2, 2, 2, 0, 0, 1, 1, false);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float pool[] = {nan, -inf, inf, -1.f, 0.f, 1.f, 2.f};
  std::vector<float> x((size_t)(d.N * d.C * d.H * d.W));
  for (float& v : x) v = pool[g() % 7];
  const int64_t OH = d.out_h(), OW = d.out_w();
  REQUIRE(OW == 300);
  std::vector<float> y((size_t)(d.N * d.C * OH * OW));
  std::vector<int64_t> idx(y.size());
  cpu::max_pool2d_forward<float>(d, x.data(), y.data(), idx.data());
  std::vector<double> xd(x.begin(), x.end()), yd(y.size());
  std::vector<int64_t> idxd(y.size());
  cpu::max_pool2d_forward<double>(d, xd.data(), yd.data(), idxd.data());
  int64_t nans = 0, wrong = 0;
  for (int64_t pl = 0; pl < d.N * d.C; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        float best = -inf;
        int64_t bi = 2 * oh * d.W + 2 * ow;
        for (int64_t i = 0; i < 2; ++i)
          for (int64_t j = 0; j < 2; ++j) {
            const int64_t t = (2 * oh + i) * d.W + 2 * ow + j;
            const float v = x[(size_t)(pl * d.H * d.W + t)];
            if (v > best || std::isnan(v)) best = v, bi = t;
          }
        const size_t o = (size_t)(pl * OH * OW + oh * OW + ow);
        nans += std::isnan(best);
        const bool same = (std::isnan(best) ? std::isnan(y[o]) && std::isnan(yd[o]) : y[o] == best && yd[o] == best) &&
                          idx[o] == bi && idxd[o] == bi;
        wrong += !same;
      }
  CHECK(wrong == 0);
  CHECK(nans > 100);  // the draw has NaN windows to test
}

TEST_CASE("max_pool2d general windows: the branch-free interior keeps PyTorch's rule on NaN, -inf and ties") {
  // Windows inside the plane take a vectorized path (kernels/cpu/pool.cpp), the border ones the tap
  // loop; values from {NaN, -inf, +inf, -1, 0, 1, 2} make ties, NaN windows and -inf windows common.
  // The reference is the rule, tap by tap in row order, taps outside the plane skipped.
  std::mt19937 g(22);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float pool[] = {nan, -inf, inf, -1.f, 0.f, 1.f, 2.f};
  // ResNet's stem pool (3x3 s2 p1), rows past a 256-output chunk, asymmetric windows and strides,
  // ceil mode, a window larger than the plane, dilation (no interior path)
  const Pool2dDesc cases[] = {pdesc(2, 3, 12, 12, 3, 3, 2, 2, 1, 1, 1, 1, false),
                              pdesc(1, 2, 5, 601, 3, 3, 2, 2, 1, 1, 1, 1, false),
                              pdesc(1, 2, 9, 530, 3, 3, 1, 1, 1, 1, 1, 1, false),
                              pdesc(2, 1, 10, 13, 3, 2, 2, 1, 1, 0, 1, 1, false),
                              pdesc(1, 2, 11, 11, 3, 3, 2, 2, 1, 1, 1, 1, true),
                              pdesc(1, 1, 3, 3, 5, 5, 1, 1, 2, 2, 1, 1, false),
                              pdesc(1, 2, 12, 12, 3, 3, 1, 1, 1, 1, 2, 2, false)};
  int64_t nans = 0, interior = 0;
  for (const Pool2dDesc& d : cases) {
    DOCTEST_INFO("N C H W ", d.N, " ", d.C, " ", d.H, " ", d.W, " k ", d.kh, "x", d.kw, " s ", d.stride_h, ",",
                 d.stride_w, " p ", d.pad_h, ",", d.pad_w, " dil ", d.dil_h, " ceil ", d.ceil_mode);
    std::vector<float> x((size_t)(d.N * d.C * d.H * d.W));
    for (float& v : x) v = pool[g() % 7];
    const int64_t OH = d.out_h(), OW = d.out_w();
    std::vector<float> y((size_t)(d.N * d.C * OH * OW));
    std::vector<int64_t> idx(y.size());
    cpu::max_pool2d_forward<float>(d, x.data(), y.data(), idx.data());
    std::vector<double> xd(x.begin(), x.end()), yd(y.size());
    std::vector<int64_t> idxd(y.size());
    cpu::max_pool2d_forward<double>(d, xd.data(), yd.data(), idxd.data());
    int64_t wrong = 0;
    for (int64_t pl = 0; pl < d.N * d.C; ++pl)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float best = -inf;
          int64_t bi = -1;
          bool all_inside = true;
          for (int64_t i = 0; i < d.kh; ++i)
            for (int64_t j = 0; j < d.kw; ++j) {
              const int64_t h = oh * d.stride_h - d.pad_h + i * d.dil_h, w = ow * d.stride_w - d.pad_w + j * d.dil_w;
              if (h < 0 || h >= d.H || w < 0 || w >= d.W) {
                all_inside = false;
                continue;
              }
              const float v = x[(size_t)(pl * d.H * d.W + h * d.W + w)];
              if (bi < 0) bi = h * d.W + w;
              if (v > best || std::isnan(v)) best = v, bi = h * d.W + w;
            }
          interior += all_inside;
          const size_t o = (size_t)(pl * OH * OW + oh * OW + ow);
          nans += std::isnan(best);
          const bool same = (std::isnan(best) ? std::isnan(y[o]) && std::isnan(yd[o]) : y[o] == best && yd[o] == best) &&
                            idx[o] == bi && idxd[o] == bi;
          wrong += !same;
        }
    CHECK(wrong == 0);
  }
  CHECK(nans > 100);
  CHECK(interior > 1000);
}

TEST_CASE("avg_pool2d fwd matches the reference, bwd is its exact adjoint (count_include_pad both ways)") {
  std::mt19937 g(12);
  const Pool2dDesc cases[] = {
      pdesc(2, 3, 8, 8, 3, 3, 2, 2, 1, 1, 1, 1, false), pdesc(1, 2, 7, 9, 3, 2, 2, 3, 1, 1, 1, 1, true),
      pdesc(2, 1, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, true), pdesc(1, 1, 5, 4, 2, 2, 3, 1, 1, 0, 1, 1, true),
      pdesc(1, 2, 4, 4, 4, 4, 1, 1, 0, 0, 1, 1, false)};
  for (const auto& d : cases)
    for (bool cip : {true, false}) {
      auto x = rand_vec(d.N * d.C * d.H * d.W, g);
      auto yr = ref_avg(d, cip, x);
      std::vector<double> y(yr.size());
      cpu::avg_pool2d_forward<double>(d, cip, x.data(), y.data());
      require_close(y, yr, 1e-14, "avg y");
      // Adjoint: <avg(x), dy> == <x, avg_backward(dy)> for every x (the map is linear).
      auto dy = rand_vec(y.size(), g);
      std::vector<double> dx(x.size());
      cpu::avg_pool2d_backward<double>(d, cip, dy.data(), dx.data());
      for (int probe = 0; probe < 3; ++probe) {
        auto xp = rand_vec(x.size(), g);
        CHECK(std::abs(dot(ref_avg(d, cip, xp), dy) - dot(xp, dx)) < 1e-12);
      }
    }
}

TEST_CASE("adaptive_avg_pool2d matches floor/ceil windows and its adjoint") {
  std::mt19937 g(13);
  const int64_t cases[][4] = {{7, 7, 1, 1}, {10, 7, 3, 4}, {5, 5, 5, 5}, {3, 4, 6, 7}, {13, 11, 4, 3}};
  for (auto& c : cases) {
    int64_t N = 2, C = 3, H = c[0], W = c[1], OH = c[2], OW = c[3];
    auto x = rand_vec(N * C * H * W, g);
    auto ref = [&](const std::vector<double>& xx) {
      std::vector<double> y(N * C * OH * OW);
      for (int64_t pl = 0; pl < N * C; ++pl)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t h0 = (int64_t)std::floor((double)oh * H / OH), h1 = (int64_t)std::ceil((double)(oh + 1) * H / OH);
            int64_t w0 = (int64_t)std::floor((double)ow * W / OW), w1 = (int64_t)std::ceil((double)(ow + 1) * W / OW);
            double s = 0;
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) s += xx[pl * H * W + h * W + w];
            y[pl * OH * OW + oh * OW + ow] = s / (double)((h1 - h0) * (w1 - w0));
          }
      return y;
    };
    std::vector<double> y(N * C * OH * OW), dx(x.size());
    cpu::adaptive_avg_pool2d_forward<double>(N, C, H, W, OH, OW, x.data(), y.data());
    require_close(y, ref(x), 1e-14, "adaptive y");
    auto dy = rand_vec(y.size(), g);
    cpu::adaptive_avg_pool2d_backward<double>(N, C, H, W, OH, OW, dy.data(), dx.data());
    auto xp = rand_vec(x.size(), g);
    CHECK(std::abs(dot(ref(xp), dy) - dot(xp, dx)) < 1e-12);
  }
}

namespace {

// Reference training-mode batch norm forward in double.
std::vector<double> ref_bn(int64_t N, int64_t C, int64_t HW, const std::vector<double>& x, const std::vector<double>& gm,
                           const std::vector<double>& bt, double eps, std::vector<double>* mean = nullptr,
                           std::vector<double>* var = nullptr) {
  std::vector<double> y(x.size()), m(C, 0), v(C, 0);
  double M = (double)(N * HW);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) m[c] += x[(n * C + c) * HW + i] / M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) v[c] += std::pow(x[(n * C + c) * HW + i] - m[c], 2) / M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        size_t k = (n * C + c) * HW + i;
        y[k] = (x[k] - m[c]) / std::sqrt(v[c] + eps) * gm[c] + bt[c];
      }
  }
  if (mean) *mean = m;
  if (var) *var = v;
  return y;
}

}  // namespace

TEST_CASE("batch_norm train forward, running stats (unbiased var, momentum) and backward by central differences") {
  std::mt19937 g(21);
  const int64_t shapes[][3] = {{2, 3, 5}, {1, 4, 7}, {5, 2, 1}, {3, 1, 16}};
  for (auto& s : shapes) {
    int64_t N = s[0], C = s[1], HW = s[2];
    const double eps = 1e-5, mom = 0.1;
    auto x = rand_vec(N * C * HW, g, -2, 3), gm = rand_vec(C, g, 0.5, 1.5), bt = rand_vec(C, g);
    std::vector<double> mr, vr;
    auto yr = ref_bn(N, C, HW, x, gm, bt, eps, &mr, &vr);
    std::vector<double> y(x.size()), sm(C), si(C), rm(C, 0.5), rv(C, 2.0);
    cpu::batch_norm_forward_train<double>(N, C, HW, x.data(), gm.data(), bt.data(), eps, y.data(), sm.data(),
                                          si.data(), rm.data(), rv.data(), mom);
    require_close(y, yr, 1e-12, "bn y");
    for (int64_t c = 0; c < C; ++c) {
      double M = (double)(N * HW);
      CHECK(sm[c] == doctest::Approx(mr[c]).epsilon(1e-12));
      CHECK(si[c] == doctest::Approx(1 / std::sqrt(vr[c] + eps)).epsilon(1e-12));
      CHECK(rm[c] == doctest::Approx(0.9 * 0.5 + 0.1 * mr[c]).epsilon(1e-12));
      CHECK(rv[c] == doctest::Approx(0.9 * 2.0 + 0.1 * vr[c] * M / (M - 1)).epsilon(1e-12));
    }
    // Gradients of L = <bn(x), dy> by central differences of the reference forward.
    auto dy = rand_vec(x.size(), g);
    std::vector<double> dx(x.size()), dgm(C), dbt(C);
    cpu::batch_norm_backward_train<double>(N, C, HW, dy.data(), x.data(), gm.data(), sm.data(), si.data(), dx.data(),
                                           dgm.data(), dbt.data());
    const double h = 1e-6;
    for (size_t i = 0; i < x.size(); ++i) {
      auto xp = x, xm = x;
      xp[i] += h, xm[i] -= h;
      double fd = (dot(ref_bn(N, C, HW, xp, gm, bt, eps), dy) - dot(ref_bn(N, C, HW, xm, gm, bt, eps), dy)) / (2 * h);
      REQUIRE(std::abs(fd - dx[i]) < 1e-6);
    }
    for (int64_t c = 0; c < C; ++c) {
      auto gp = gm, gq = gm, bp = bt, bq = bt;
      gp[c] += h, gq[c] -= h, bp[c] += h, bq[c] -= h;
      CHECK(std::abs((dot(ref_bn(N, C, HW, x, gp, bt, eps), dy) - dot(ref_bn(N, C, HW, x, gq, bt, eps), dy)) / (2 * h) -
                     dgm[c]) < 1e-6);
      CHECK(std::abs((dot(ref_bn(N, C, HW, x, gm, bp, eps), dy) - dot(ref_bn(N, C, HW, x, gm, bq, eps), dy)) / (2 * h) -
                     dbt[c]) < 1e-6);
    }
    // f32 forward/backward agree with the f64 ones.
    std::vector<float> xf(x.begin(), x.end()), gf(gm.begin(), gm.end()), bf(bt.begin(), bt.end()), yf(x.size()),
        smf(C), sif(C), dyf(dy.begin(), dy.end()), dxf(x.size());
    cpu::batch_norm_forward_train<float>(N, C, HW, xf.data(), gf.data(), bf.data(), eps, yf.data(), smf.data(),
                                         sif.data(), nullptr, nullptr, mom);
    cpu::batch_norm_backward_train<float>(N, C, HW, dyf.data(), xf.data(), gf.data(), smf.data(), sif.data(),
                                          dxf.data(), nullptr, nullptr);
    for (size_t i = 0; i < x.size(); ++i) {
      REQUIRE(std::abs(yf[i] - y[i]) < 2e-5 * (1 + std::abs(y[i])));
      REQUIRE(std::abs(dxf[i] - dx[i]) < 1e-4 * (1 + std::abs(dx[i])));
    }
  }
}

TEST_CASE("batch_norm eval forward/backward use the running statistics, training rejects 1 value per channel") {
  std::mt19937 g(22);
  int64_t N = 3, C = 2, HW = 4;
  auto x = rand_vec(N * C * HW, g), gm = rand_vec(C, g), bt = rand_vec(C, g), dy = rand_vec(N * C * HW, g);
  std::vector<double> rm = {0.3, -0.2}, rv = {1.5, 0.7};
  std::vector<double> y(x.size()), dx(x.size()), dgm(C), dbt(C);
  cpu::batch_norm_forward_eval<double>(N, C, HW, x.data(), gm.data(), bt.data(), rm.data(), rv.data(), 1e-5, y.data());
  cpu::batch_norm_backward_eval<double>(N, C, HW, dy.data(), x.data(), gm.data(), rm.data(), rv.data(), 1e-5,
                                        dx.data(), dgm.data(), dbt.data());
  for (int64_t c = 0; c < C; ++c) {
    double inv = 1 / std::sqrt(rv[c] + 1e-5), sg = 0, sb = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        size_t k = (n * C + c) * HW + i;
        CHECK(y[k] == doctest::Approx((x[k] - rm[c]) * inv * gm[c] + bt[c]).epsilon(1e-13));
        CHECK(dx[k] == doctest::Approx(dy[k] * gm[c] * inv).epsilon(1e-13));
        sg += dy[k] * (x[k] - rm[c]) * inv;
        sb += dy[k];
      }
    CHECK(dgm[c] == doctest::Approx(sg).epsilon(1e-12));
    CHECK(dbt[c] == doctest::Approx(sb).epsilon(1e-12));
  }
  std::vector<double> one(2), o(2), s1(2), s2(2);
  CHECK_THROWS_AS(cpu::batch_norm_forward_train<double>(1, 2, 1, one.data(), nullptr, nullptr, 1e-5, o.data(),
                                                        s1.data(), s2.data(), nullptr, nullptr, 0.1),
                  kiln::Error);
}
