// conv2d forward / backward (cpu) against a direct-loop f64 reference on random shapes: stride,
// padding, dilation, groups, odd sizes, batch 1, blocked images (small planes), the 1x1 path; the
// reference backward itself is checked by central differences of the reference forward.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/threads.h"

using namespace kiln;

namespace {

std::vector<double> rand_vec(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// Calls f(n, k, oh, ow, c, r, s, ih, iw) for every in-bounds tap of the convolution.
template <typename F>
void for_each_tap(const Conv2dDesc& d, F f) {
  const int64_t Cg = d.C / d.groups, Kg = d.K / d.groups;
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t k = 0; k < d.K; ++k)
      for (int64_t oh = 0; oh < d.out_h(); ++oh)
        for (int64_t ow = 0; ow < d.out_w(); ++ow)
          for (int64_t cg = 0; cg < Cg; ++cg)
            for (int64_t r = 0; r < d.R; ++r)
              for (int64_t s = 0; s < d.S; ++s) {
                int64_t ih = oh * d.stride_h - d.pad_h + r * d.dil_h;
                int64_t iw = ow * d.stride_w - d.pad_w + s * d.dil_w;
                if (ih < 0 || ih >= d.H || iw < 0 || iw >= d.W) continue;
                int64_t c = (k / Kg) * Cg + cg;
                f(((n * d.K + k) * d.out_h() + oh) * d.out_w() + ow, ((n * d.C + c) * d.H + ih) * d.W + iw,
                  ((k * Cg + cg) * d.R + r) * d.S + s, k);
              }
}

struct Ref {
  std::vector<double> y, dx, dw, db;
};

Ref reference(const Conv2dDesc& d, const std::vector<double>& x, const std::vector<double>& w,
              const std::vector<double>& b, const std::vector<double>& dy) {
  Ref r;
  int64_t ny = d.N * d.K * d.out_h() * d.out_w();
  r.y.assign(ny, 0);
  for (int64_t i = 0; i < ny; ++i) r.y[i] = b[(i / (d.out_h() * d.out_w())) % d.K];
  r.dx.assign(x.size(), 0);
  r.dw.assign(w.size(), 0);
  r.db.assign(d.K, 0);
  for_each_tap(d, [&](int64_t yi, int64_t xi, int64_t wi, int64_t) {
    r.y[yi] += x[xi] * w[wi];
    r.dx[xi] += w[wi] * dy[yi];
    r.dw[wi] += x[xi] * dy[yi];
  });
  for (int64_t i = 0; i < ny; ++i) r.db[(i / (d.out_h() * d.out_w())) % d.K] += dy[i];
  return r;
}

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
void require_close(const std::vector<T>& got, const std::vector<double>& want, double tol, const char* what) {
  REQUIRE(got.size() == want.size());
  double scale = 1e-30;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what, " at ", i, ": got ", (double)got[i], " want ", want[i]);
    REQUIRE(std::abs((double)got[i] - want[i]) <= tol * scale);
  }
}

template <typename T>
void check_conv(const Conv2dDesc& d, std::mt19937& g, double tol, bool with_bias) {
  auto x = rand_vec(d.N * d.C * d.H * d.W, g);
  auto w = rand_vec(d.K * (d.C / d.groups) * d.R * d.S, g);
  auto b = with_bias ? rand_vec(d.K, g) : std::vector<double>(d.K, 0.0);
  auto dy = rand_vec(d.N * d.K * d.out_h() * d.out_w(), g);
  Ref ref = reference(d, x, w, b, dy);

  // Workspace filled with garbage: kernels must not depend on its contents.
  std::vector<unsigned char> ws(cpu::conv2d_workspace_bytes(d, sizeof(T)) + 1, 0xAB);
  auto xt = cast<T>(x), wt = cast<T>(w), bt = cast<T>(b), dyt = cast<T>(dy);
  std::vector<T> y(ref.y.size(), T(7)), dx(x.size(), T(7)), dw(w.size(), T(7)), db(d.K, T(7));
  cpu::conv2d_forward<T>(d, xt.data(), wt.data(), with_bias ? bt.data() : nullptr, y.data(), ws.data());
  require_close(y, ref.y, tol, "y");
  cpu::conv2d_backward_input<T>(d, dyt.data(), wt.data(), dx.data(), ws.data());
  require_close(dx, ref.dx, tol, "dx");
  cpu::conv2d_backward_weight<T>(d, xt.data(), dyt.data(), dw.data(), with_bias ? db.data() : nullptr,
                                 ws.data());
  require_close(dw, ref.dw, tol, "dw");
  if (with_bias) require_close(db, ref.db, tol, "db");
}

Conv2dDesc make(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S, int64_t sh,
                int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t G) {
  Conv2dDesc d;
  d.N = N, d.C = C, d.H = H, d.W = W, d.K = K, d.R = R, d.S = S;
  d.stride_h = sh, d.stride_w = sw, d.pad_h = ph, d.pad_w = pw, d.dil_h = dh, d.dil_w = dw, d.groups = G;
  return d;
}

}  // namespace

TEST_CASE("conv2d output size follows torch's formula") {
  Conv2dDesc d = make(1, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, 1, 1, 1);
  CHECK(d.out_h() == 112);
  CHECK(d.out_w() == 112);
  d = make(1, 1, 10, 9, 1, 3, 2, 3, 2, 1, 0, 2, 3, 1);  // (10+2-4-1)/3+1 = 3, (9-3-1)/2+1 = 3
  CHECK(d.out_h() == 3);
  CHECK(d.out_w() == 3);
}

TEST_CASE("conv2d fwd/bwd match the direct reference: hand-picked shapes (f64 and f32)") {
  std::mt19937 g(7);
  const Conv2dDesc cases[] = {
      make(1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1),      // trivial
      make(2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1),      // 3x3 same, small planes -> blocked
      make(3, 4, 9, 11, 6, 3, 2, 2, 3, 1, 2, 1, 1, 2),     // stride, asym pad, groups
      make(2, 6, 10, 8, 6, 3, 3, 1, 2, 2, 1, 2, 3, 3),     // dilation + groups
      make(2, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4),      // depthwise
      make(1, 3, 25, 27, 5, 7, 7, 2, 2, 3, 3, 1, 1, 1),    // stem-like, batch 1
      make(3, 8, 6, 6, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1),      // 1x1 blocked
      make(2, 8, 24, 24, 6, 1, 1, 1, 1, 0, 0, 1, 1, 2),    // 1x1 direct (P >= 512), groups
      make(3, 8, 9, 9, 6, 1, 1, 2, 2, 0, 0, 1, 1, 1),      // 1x1 stride 2 (downsample)
      make(5, 3, 4, 4, 2, 3, 3, 1, 1, 0, 0, 1, 1, 1),      // 2x2 planes, N not a multiple of the block
      make(2, 2, 5, 5, 3, 5, 5, 1, 1, 0, 0, 1, 1, 1),      // kernel == input -> 1x1 output
      make(2, 2, 3, 3, 3, 2, 2, 3, 3, 2, 2, 1, 1, 1),      // stride > kernel, pad-only windows
      // unfolded in chunks of output rows (one image per block, C*R*S*P values above 512 KiB, chunks of
      // at least 1024 columns): 34 x 81 outputs in chunks of 13 rows (the last 8), then 90 x 36 in
      // chunks of 29 (the last 3) with groups and a dilation
      make(2, 3, 67, 161, 5, 7, 7, 2, 2, 3, 3, 1, 1, 1),   // stem-like, chunked
      make(2, 16, 90, 36, 8, 3, 3, 1, 1, 2, 1, 2, 1, 2),   // chunked, groups, dilation
  };
  for (const auto& d : cases) {
    INFO("N=", d.N, " C=", d.C, " H=", d.H, " W=", d.W, " K=", d.K, " R=", d.R, " S=", d.S, " G=", d.groups);
    check_conv<double>(d, g, 1e-12, true);
    check_conv<float>(d, g, 2e-5, false);
    check_conv<float>(d, g, 2e-5, true);
  }
}

TEST_CASE("conv2d fwd/bwd match the direct reference: random shapes") {
  std::mt19937 g(2024);
  auto pick = [&](int lo, int hi) { return (int64_t)std::uniform_int_distribution<int>(lo, hi)(g); };
  int done = 0;
  while (done < 40) {
    int64_t G = pick(1, 3);
    Conv2dDesc d = make(pick(1, 4), G * pick(1, 3), pick(1, 13), pick(1, 13), G * pick(1, 3), pick(1, 4),
                        pick(1, 4), pick(1, 3), pick(1, 3), pick(0, 2), pick(0, 2), pick(1, 2), pick(1, 2), G);
    if (d.out_h() < 1 || d.out_w() < 1) continue;
    INFO("N=", d.N, " C=", d.C, " H=", d.H, " W=", d.W, " K=", d.K, " R=", d.R, " S=", d.S, " s=", d.stride_h,
         ",", d.stride_w, " p=", d.pad_h, ",", d.pad_w, " d=", d.dil_h, ",", d.dil_w, " G=", G);
    check_conv<double>(d, g, 1e-12, done % 2 == 0);
    ++done;
  }
}

TEST_CASE("conv2d reference backward agrees with central differences of the reference forward") {
  std::mt19937 g(5);
  Conv2dDesc d = make(2, 4, 5, 6, 4, 3, 2, 2, 1, 1, 1, 2, 1, 2);
  auto x = rand_vec(d.N * d.C * d.H * d.W, g), w = rand_vec(d.K * 2 * d.R * d.S, g), b = rand_vec(d.K, g);
  auto dy = rand_vec(d.N * d.K * d.out_h() * d.out_w(), g);
  Ref r = reference(d, x, w, b, dy);
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
    Ref q = reference(d, xx, ww, bb, dy);
    double s = 0;
    for (size_t i = 0; i < q.y.size(); ++i) s += q.y[i] * dy[i];
    return s;
  };
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); i += 3) {
    auto xp = x, xm = x;
    xp[i] += h, xm[i] -= h;
    CHECK(std::abs((loss(xp, w, b) - loss(xm, w, b)) / (2 * h) - r.dx[i]) < 1e-7);
  }
  for (size_t i = 0; i < w.size(); ++i) {
    auto wp = w, wm = w;
    wp[i] += h, wm[i] -= h;
    CHECK(std::abs((loss(x, wp, b) - loss(x, wm, b)) / (2 * h) - r.dw[i]) < 1e-7);
  }
  for (size_t i = 0; i < b.size(); ++i) {
    auto bp = b, bm = b;
    bp[i] += h, bm[i] -= h;
    CHECK(std::abs((loss(x, w, bp) - loss(x, w, bm)) / (2 * h) - r.db[i]) < 1e-7);
  }
}

TEST_CASE("conv2d rejects bad descriptors with the op name and shapes") {
  Conv2dDesc d = make(1, 3, 8, 8, 4, 3, 3, 1, 1, 0, 0, 1, 1, 2);  // 3 channels, 2 groups
  std::vector<float> buf(1024);
  try {
    cpu::conv2d_forward<float>(d, buf.data(), buf.data(), nullptr, buf.data(), nullptr);
    FAIL("expected kiln::Error");
  } catch (const kiln::Error& e) {
    std::string m = e.what();
    CHECK(m.find("conv2d_forward") != std::string::npos);
    CHECK(m.find("groups") != std::string::npos);
    CHECK(m.find("(1, 3, 8, 8)") != std::string::npos);
  }
  d = make(1, 2, 2, 2, 2, 5, 5, 1, 1, 0, 0, 1, 1, 1);  // kernel larger than input
  CHECK_THROWS_AS(cpu::conv2d_workspace_bytes(d, 4), kiln::Error);
}

TEST_CASE("conv2d workspace: none for 1x1 stride 1 on a wide plane, blocked images for small planes") {
  const int threads = cpu::num_threads();
  cpu::set_num_threads(1);
  Conv2dDesc d = make(8, 64, 56, 56, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1);
  CHECK(cpu::conv2d_images_per_block(d) == 1);
  CHECK(cpu::conv2d_workspace_bytes(d, 4) == 0);
  Conv2dDesc d3 = make(8, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1, 1, 1, 1);
  CHECK(cpu::conv2d_images_per_block(d3) == 8);
  // The im2col path's buffer (with Winograd chosen it is the larger of the two, see
  // test_kernels_conv_winograd.cpp).
  const cpu::Conv2dAlgo prev = cpu::conv2d_algo();
  cpu::conv2d_set_algo(cpu::Conv2dAlgo::im2col);
  CHECK(cpu::conv2d_workspace_bytes(d3, 4) == (size_t)(512 * 9 * 8 * 49 + 512 * 8 * 49) * 4);
  // 2 threads: each its 4 images in its own slice (64-byte multiples), and thread 1's weight
  // gradient partial (K * C * R * S).
  cpu::set_num_threads(2);
  CHECK(cpu::conv2d_workspace_bytes(d, 4) == (size_t)(64 * 64) * 4);
  CHECK(cpu::conv2d_workspace_bytes(d3, 4) == 2 * (size_t)(512 * 9 * 4 * 49 + 512 * 4 * 49) * 4 + 512 * 4608 * 4);
  // One image: no split.
  CHECK(cpu::conv2d_workspace_bytes(make(1, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1, 1, 1, 1), 4) ==
        (size_t)(512 * 9 * 49) * 4);
  cpu::conv2d_set_algo(prev);
  cpu::set_num_threads(threads);
}

TEST_CASE("conv2d split by images: 1, 2 and 3 threads match the direct reference, both algorithms") {
  // With several threads each convolves its own images in its own workspace slice and the weight
  // gradient adds the threads' partials (conv2d.cpp); one image, or one thread, runs unsplit.
  // 3 threads on 5 and 2 images: uneven shares, and fewer images than threads.
  std::mt19937 g(21);
  const int before = cpu::num_threads();
  const cpu::Conv2dAlgo prev = cpu::conv2d_algo();
  const Conv2dDesc cases[] = {
      make(5, 16, 9, 7, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1),   // Winograd-able (when forced)
      make(2, 16, 6, 6, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1),   // two images
      make(5, 6, 11, 9, 8, 3, 3, 2, 2, 1, 1, 1, 1, 2),    // stride 2, groups
      make(4, 8, 5, 5, 12, 1, 1, 1, 1, 0, 0, 1, 1, 1),    // 1x1: x is the column matrix
      make(1, 8, 12, 12, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1)};  // one image: no split
  for (int threads : {1, 2, 3})
    for (cpu::Conv2dAlgo a : {cpu::Conv2dAlgo::im2col, cpu::Conv2dAlgo::winograd})
      for (const auto& d : cases) {
        INFO("threads ", threads, " winograd ", a == cpu::Conv2dAlgo::winograd, " N=", d.N, " C=", d.C, " K=", d.K);
        cpu::set_num_threads(threads);
        cpu::conv2d_set_algo(a);
        check_conv<double>(d, g, 1e-12, true);
        check_conv<float>(d, g, 2e-5, true);
      }
  cpu::conv2d_set_algo(prev);
  cpu::set_num_threads(before);
}
