// Winograd F(2x2, 3x3) conv2d (forward, input gradient and weight gradient) against the im2col path of the same
// kernels (itself checked against a direct f64 reference in test_kernels_conv.cpp), both forced
// with conv2d_set_algo: edge tiles (odd sizes, H or W of 1 and 2), padding 0..2, 1 to 64 channels,
// batches of 1 and 5, f32 and f64, adversarial values (mixed 1e4 / 1e-4 magnitudes, all-equal
// inputs, NaN, inf, huge values: those run im2col, so NaN and inf propagate as the direct sum) and
// the workspace sizes.
// Tolerance: max |winograd - im2col| <= tol * max |im2col| per output tensor, tol = 1e-5 (f32) and
// 1e-12 (f64).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_winograd.h"
#include "kernels/cpu/threads.h"
#include "support/conv_passes.h"

using namespace kiln;

namespace {

// Forces an algorithm for one scope.
struct AlgoScope {
  cpu::Conv2dAlgo prev;
  explicit AlgoScope(cpu::Conv2dAlgo a) : prev(cpu::conv2d_algo()) { cpu::conv2d_set_algo(a); }
  ~AlgoScope() { cpu::conv2d_set_algo(prev); }
};

Conv2dDesc conv3x3(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t ph, int64_t pw) {
  Conv2dDesc d;
  d.N = N, d.C = C, d.H = H, d.W = W, d.K = K, d.R = d.S = 3, d.pad_h = ph, d.pad_w = pw;
  return d;
}

template <typename T>
using Outs = test::ConvPasses<T>;

// y = conv(x, w) + b, dx = conv2d_backward_input(dy, w), dw and db = conv2d_backward_weight(x, dy)
// with algorithm a.
template <typename T>
Outs<T> run(cpu::Conv2dAlgo a, const Conv2dDesc& d, const std::vector<T>& x, const std::vector<T>& w,
            const std::vector<T>& b, const std::vector<T>& dy) {
  AlgoScope scope(a);
  for (auto pass : {cpu::Conv2dPass::forward, cpu::Conv2dPass::backward_input, cpu::Conv2dPass::backward_weight})
    CHECK(cpu::conv2d_uses_winograd(d, pass) == (a == cpu::Conv2dAlgo::winograd));
  return test::conv_passes(d, x, w, b, dy);
}

// NaN where want is NaN, the same inf where want is inf, else within tol * max |finite want|; with
// exact_zeros, 0 wherever want is exactly 0 (the weight gradient: see find_meetings).
template <typename T>
double require_match(const std::vector<T>& got, const std::vector<T>& want, double tol, const char* what,
                     bool exact_zeros = false) {
  REQUIRE(got.size() == want.size());
  double scale = 0, err = 0;
  for (T v : want)
    if (std::isfinite(v)) scale = std::max(scale, std::abs((double)v));
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what, " at ", i, ": winograd ", (double)got[i], " im2col ", (double)want[i]);
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      REQUIRE(std::isnan(got[i]) == std::isnan(want[i]));
      if (std::isinf(want[i])) REQUIRE(got[i] == want[i]);
      continue;
    }
    const double e = std::abs((double)got[i] - (double)want[i]);
    if (exact_zeros && want[i] == T(0)) REQUIRE(got[i] == T(0));
    REQUIRE(e <= tol * std::max(scale, 1e-30));
    err = std::max(err, e / std::max(scale, 1e-30));
  }
  return err;
}

template <typename T>
double compare(const Conv2dDesc& d, const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& b,
               const std::vector<T>& dy, double tol) {
  Outs<T> ref = run(cpu::Conv2dAlgo::im2col, d, x, w, b, dy);
  Outs<T> got = run(cpu::Conv2dAlgo::winograd, d, x, w, b, dy);
  require_match(got.db, ref.db, 0.0, "db");  // the bias gradient is the same code either way: same bits
  return std::max({require_match(got.y, ref.y, tol, "y"), require_match(got.dx, ref.dx, tol, "dx"),
                   require_match(got.dw, ref.dw, tol, "dw", true)});
}

template <typename T>
std::vector<T> uniform(size_t n, std::mt19937& g, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(n);
  for (auto& e : v) e = (T)u(g);
  return v;
}

template <typename T>
double compare_random(const Conv2dDesc& d, std::mt19937& g, double tol) {
  auto x = uniform<T>(d.N * d.C * d.H * d.W, g), w = uniform<T>(d.K * d.C * 9, g), b = uniform<T>(d.K, g);
  auto dy = uniform<T>(d.N * d.K * d.out_h() * d.out_w(), g);
  return compare(d, x, w, b, dy, tol);
}

// dy nonzero only at (even, even) outputs, x zero at (odd, odd) inputs of images [0, dense_from)
// (dense after): in those images the corner taps (r, s in {0, 2}, reading x at (i +- 1, j +- 1))
// never meet, the others do. Each 2x2 tile holds nonzero x and dy, so the corner taps come out of
// G^T dU G as sums of rounded dU that cancel only approximately, unless they are written as 0.
// Compares Winograd with im2col (exact zeros required in dw) and returns how many dw are exactly 0.
int64_t sparse_meetings(const Conv2dDesc& d, std::mt19937& g, int64_t dense_from) {
  const size_t nx = d.N * d.C * d.H * d.W, nw = d.K * d.C * 9, ny = d.N * d.K * d.out_h() * d.out_w();
  auto w = uniform<float>(nw, g), b = uniform<float>(d.K, g);
  std::vector<float> x(nx, 0.0f), dy(ny, 0.0f);
  std::uniform_real_distribution<double> v(-2, 2);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t i = 0; i < d.H; ++i)
        for (int64_t j = 0; j < d.W; ++j)
          if (i % 2 == 0 || j % 2 == 0 || n >= dense_from) x[((n * d.C + c) * d.H + i) * d.W + j] = (float)v(g);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t k = 0; k < d.K; ++k)
      for (int64_t i = 0; i < d.out_h(); i += 2)
        for (int64_t j = 0; j < d.out_w(); j += 2) dy[((n * d.K + k) * d.out_h() + i) * d.out_w() + j] = (float)v(g);
  compare(d, x, w, b, dy, 1e-5);
  Outs<float> ref = run(cpu::Conv2dAlgo::im2col, d, x, w, b, dy);
  int64_t zeros = 0;
  for (float e : ref.dw) zeros += e == 0.0f;
  return zeros;
}

#define DESC_INFO(d)                                                                                      \
  INFO("N=", d.N, " C=", d.C, " H=", d.H, " W=", d.W, " K=", d.K, " pad=", d.pad_h, ",", d.pad_w)

}  // namespace

TEST_CASE("conv2d winograd: which descs it takes") {
  CHECK(cpu::winograd_applies(conv3x3(8, 64, 56, 56, 64, 1, 1)));
  CHECK(cpu::winograd_applies(conv3x3(1, 1, 1, 1, 1, 2, 2)));
  Conv2dDesc d = conv3x3(8, 64, 56, 56, 64, 1, 1);
  d.stride_h = 2;
  CHECK_FALSE(cpu::winograd_applies(d));
  d = conv3x3(8, 64, 56, 56, 64, 1, 1);
  d.dil_w = 2;
  CHECK_FALSE(cpu::winograd_applies(d));
  d = conv3x3(8, 64, 56, 56, 64, 1, 1);
  d.groups = 2;
  CHECK_FALSE(cpu::winograd_applies(d));
  CHECK_FALSE(cpu::winograd_applies(conv3x3(1, 4, 9, 9, 4, 3, 1)));
  d = conv3x3(8, 64, 56, 56, 64, 1, 1);
  d.S = 5;
  CHECK_FALSE(cpu::winograd_applies(d));
  // The automatic choice: ResNet18's 3x3 stride-1 layers, not the few-channel ones; per pass and
  // per thread's share of the images (conv2d.cpp has the measurements behind each line).
  const auto fwd = cpu::Conv2dPass::forward, bwd_in = cpu::Conv2dPass::backward_input,
             bwd_w = cpu::Conv2dPass::backward_weight;
  {
    cpu::ThreadScope one(1);
    for (auto pass : {fwd, bwd_in, bwd_w}) {
      CHECK(cpu::conv2d_winograd_pays(conv3x3(8, 64, 56, 56, 64, 1, 1), pass));
      CHECK(cpu::conv2d_winograd_pays(conv3x3(8, 256, 14, 14, 256, 1, 1), pass));
      CHECK_FALSE(cpu::conv2d_winograd_pays(conv3x3(8, 3, 56, 56, 64, 1, 1), pass));
      // 2x2 planes: one tile per image, the weight transform is not paid back (measured up to 1.8x slower).
      CHECK_FALSE(cpu::conv2d_winograd_pays(conv3x3(32, 512, 2, 2, 512, 1, 1), pass));
    }
    // 7x7 at batch 8 and 4x4 at batch 32: the forward and input grad gain, the weight grad does not.
    for (const Conv2dDesc& d : {conv3x3(8, 512, 7, 7, 512, 1, 1), conv3x3(32, 256, 4, 4, 256, 1, 1)}) {
      CHECK(cpu::conv2d_winograd_pays(d, fwd));
      CHECK(cpu::conv2d_winograd_pays(d, bwd_in));
      CHECK_FALSE(cpu::conv2d_winograd_pays(d, bwd_w));
    }
  }
  {
    // Two threads: each has half the images, so 7x7 at batch 8 no longer pays in any pass.
    cpu::ThreadScope two(2);
    for (auto pass : {fwd, bwd_in, bwd_w}) {
      CHECK_FALSE(cpu::conv2d_winograd_pays(conv3x3(8, 512, 7, 7, 512, 1, 1), pass));
      CHECK(cpu::conv2d_winograd_pays(conv3x3(8, 64, 56, 56, 64, 1, 1), pass));
    }
  }
  AlgoScope im2col(cpu::Conv2dAlgo::im2col);
  for (auto pass : {fwd, bwd_in, bwd_w}) CHECK_FALSE(cpu::conv2d_uses_winograd(conv3x3(8, 64, 56, 56, 64, 1, 1), pass));
}

TEST_CASE("conv2d winograd matches im2col: edge tiles, padding, channels, batch (f32 and f64)") {
  std::mt19937 g(11);
  const int64_t sizes_h[] = {1, 2, 3, 5, 8, 13}, sizes_w[] = {1, 2, 4, 7, 13};
  const int64_t chans[][2] = {{1, 1}, {3, 64}, {64, 3}, {64, 64}, {3, 1}};
  double worst32 = 0, worst64 = 0;
  int n = 0;
  for (int64_t H : sizes_h)
    for (int64_t W : sizes_w)
      for (int64_t ph = 0; ph <= 2; ++ph) {
        const int64_t pw = (ph + H + W) % 3;  // every pair of paddings over the grid, asymmetric too
        Conv2dDesc d = conv3x3(n % 2 ? 5 : 1, chans[n % 5][0], H, W, chans[n % 5][1], ph, pw);
        ++n;
        if (d.out_h() < 1 || d.out_w() < 1) continue;
        DESC_INFO(d);
        worst32 = std::max(worst32, compare_random<float>(d, g, 1e-5));
        worst64 = std::max(worst64, compare_random<double>(d, g, 1e-12));
      }
  MESSAGE("worst error / max |output|: f32 ", worst32, ", f64 ", worst64, " over ", n, " shapes");
}

TEST_CASE("conv2d winograd matches im2col: ResNet-like planes, several blocks of images") {
  std::mt19937 g(3);
  // 7x7 with N = 33: 16 tiles per image, blocks of 16 images, a partial last block.
  const Conv2dDesc cases[] = {conv3x3(33, 16, 7, 7, 24, 1, 1), conv3x3(2, 64, 28, 28, 64, 1, 1),
                              conv3x3(3, 32, 17, 15, 48, 1, 1), conv3x3(5, 64, 2, 2, 64, 1, 1),
                              // the input transform's two ways: several rows of tiles per step up to
                              // 32 tiles a row (64 px), one row in chunks of 64 tiles above
                              conv3x3(2, 16, 5, 64, 16, 1, 1), conv3x3(2, 16, 6, 66, 24, 1, 1),
                              conv3x3(1, 16, 5, 140, 16, 1, 1)};
  for (const auto& d : cases) {
    DESC_INFO(d);
    compare_random<float>(d, g, 1e-5);
    compare_random<double>(d, g, 1e-12);
  }
}

TEST_CASE("conv2d winograd matches im2col: adversarial values") {
  std::mt19937 g(5);
  Conv2dDesc d = conv3x3(5, 64, 9, 11, 64, 1, 1);
  const size_t nx = d.N * d.C * d.H * d.W, nw = d.K * d.C * 9, ny = d.N * d.K * d.out_h() * d.out_w();
  auto w = uniform<float>(nw, g), b = uniform<float>(d.K, g), dy = uniform<float>(ny, g);
  SUBCASE("magnitudes 1e3..1e4 mixed with 1e-4, both signs") {
    auto x = uniform<float>(nx, g), dy2 = uniform<float>(ny, g);
    std::uniform_int_distribution<int> coin(0, 1);
    std::uniform_real_distribution<double> big(1e3, 1e4), tiny(1e-5, 1e-4);
    for (auto* v : {&x, &dy2})
      for (auto& e : *v) e = (float)((coin(g) ? big(g) : tiny(g)) * (coin(g) ? 1 : -1));
    compare(d, x, w, b, dy2, 1e-5);
  }
  SUBCASE("sparse x and dy: the weight gradient is exactly 0 where no nonzero dy meets a nonzero x") {
    CHECK(sparse_meetings(d, g, d.N) == (int64_t)nw * 4 / 9);  // exactly the 4 corner taps are 0
  }
  SUBCASE("all-equal inputs and weights") {
    std::vector<float> x(nx, 0.37f), wc(nw, -1.25f), dyc(ny, 3.5f);
    compare(d, x, wc, b, dyc, 1e-5);
  }
  SUBCASE("NaN in x / dy: NaN exactly in the outputs it touches") {
    auto x = uniform<float>(nx, g), dy2 = dy;
    x[(2 * d.C + 5) * d.H * d.W + 4 * d.W + 10] = std::numeric_limits<float>::quiet_NaN();  // right edge
    dy2[(1 * d.K + 9) * d.out_h() * d.out_w() + 0] = std::numeric_limits<float>::quiet_NaN();  // corner
    compare(d, x, w, b, dy2, 1e-5);
  }
  SUBCASE("inf and huge values in x, dy and w take the im2col path") {
    auto x = uniform<float>(nx, g), dy2 = dy, w2 = w;
    x[(3 * d.C + 1) * d.H * d.W + 5 * d.W + 5] = std::numeric_limits<float>::infinity();
    x[(4 * d.C + 7) * d.H * d.W + 2 * d.W + 3] = 3e30f;
    dy2[7] = -std::numeric_limits<float>::infinity();
    compare(d, x, w, b, dy2, 1e-5);
    w2[100] = std::numeric_limits<float>::infinity();
    compare(d, uniform<float>(nx, g), w2, b, dy, 1e-5);
  }
}

TEST_CASE("conv2d winograd: exact zeros of the weight gradient over several blocks of images") {
  // 150 images of 32x32, one image per Winograd block. The corner taps meet only in the last 5
  // images (dense x there): the check for exact zeros must look at every image, not one block.
  std::mt19937 g(9);
  Conv2dDesc d = conv3x3(150, 2, 32, 32, 2, 1, 1);
  CHECK(sparse_meetings(d, g, 150) == 2 * 2 * 4);  // no dense image: the corner taps are 0
  CHECK(sparse_meetings(d, g, 145) == 0);          // dense images at the end: none is 0
}

TEST_CASE("conv2d winograd: the kernels refuse NaN, inf and huge values and leave the output alone") {
  // inf - inf inside B^T d B would give NaN where the direct sum gives inf: conv2d then runs im2col.
  Conv2dDesc d = conv3x3(1, 2, 6, 6, 3, 1, 1);
  std::vector<float> w(3 * 2 * 9, 0.5f), x(2 * 36, 1.0f), y(3 * 36, 7.0f), dx(x.size(), 7.0f), dy(y.size(), 1.0f);
  std::vector<float> dw(w.size(), 7.0f);
  std::vector<unsigned char> ws(cpu::winograd_workspace_bytes(d, sizeof(float)));
  auto untouched = [](const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float e) { return e == 7.0f; });
  };
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -2e15f}) {
    INFO("value ", bad);
    auto xb = x, wb = w, dyb = dy;
    xb[40] = bad;
    CHECK_FALSE(cpu::winograd_forward<float>(d, xb.data(), w.data(), nullptr, y.data(), ws.data()));
    CHECK_FALSE(cpu::winograd_backward_weight<float>(d, xb.data(), dy.data(), dw.data(), ws.data()));
    wb[20] = bad;
    CHECK_FALSE(cpu::winograd_forward<float>(d, x.data(), wb.data(), nullptr, y.data(), ws.data()));
    CHECK_FALSE(cpu::winograd_backward_input<float>(d, dy.data(), wb.data(), dx.data(), ws.data()));
    dyb[50] = bad;
    CHECK_FALSE(cpu::winograd_backward_input<float>(d, dyb.data(), w.data(), dx.data(), ws.data()));
    CHECK_FALSE(cpu::winograd_backward_weight<float>(d, x.data(), dyb.data(), dw.data(), ws.data()));
    CHECK(untouched(y));
    CHECK(untouched(dx));
    CHECK(untouched(dw));
  }
  x[40] = -9e14f;  // below the limit
  CHECK(cpu::winograd_forward<float>(d, x.data(), w.data(), nullptr, y.data(), ws.data()));
  CHECK(cpu::winograd_backward_input<float>(d, dy.data(), w.data(), dx.data(), ws.data()));
  CHECK(cpu::winograd_backward_weight<float>(d, x.data(), dy.data(), dw.data(), ws.data()));
  CHECK_FALSE(untouched(y));
  CHECK_FALSE(untouched(dw));
  std::vector<double> xd(4, 1e149);
  CHECK(cpu::winograd_values_in_range(xd.data(), 4));
  xd[3] = -1e151;
  CHECK_FALSE(cpu::winograd_values_in_range(xd.data(), 4));
}

TEST_CASE("conv2d winograd workspace: the larger of Winograd's and im2col's buffers") {
  // One thread's buffers (with several, conv2d_workspace_bytes holds one slice per thread: see
  // test_kernels_conv.cpp).
  cpu::ThreadScope one(1);
  // ResNet18 layer4 at 8 x 224: im2col (C*9 + K) * 8*49; Winograd 16*K*C + 16*(C+K) * 8 images * 16 tiles.
  Conv2dDesc d = conv3x3(8, 512, 7, 7, 512, 1, 1);
  const size_t im2col = (size_t)(512 * 9 * 8 * 49 + 512 * 8 * 49) * 4;
  const size_t wino = (size_t)(16 * 512 * 512 + 16 * 1024 * 8 * 16) * 4;
  CHECK(cpu::winograd_workspace_bytes(d, 4) == wino);
  {
    AlgoScope s(cpu::Conv2dAlgo::im2col);
    CHECK(cpu::conv2d_workspace_bytes(d, 4) == im2col);
  }
  {
    AlgoScope s(cpu::Conv2dAlgo::winograd);
    CHECK(cpu::conv2d_workspace_bytes(d, 4) == wino);
  }
  // layer1 at 8 x 224: one image (784 tiles) per block; im2col's column buffer is the larger.
  d = conv3x3(8, 64, 56, 56, 64, 1, 1);
  AlgoScope s(cpu::Conv2dAlgo::winograd);
  CHECK(cpu::winograd_images_per_block(d) == 1);
  CHECK(cpu::winograd_workspace_bytes(d, 4) == (size_t)(16 * 64 * 64 + 16 * 128 * 784) * 4);
  CHECK(cpu::conv2d_workspace_bytes(d, 4) == (size_t)(64 * 9 * 3136) * 4);
  // pad 0: the input gradient tiles the larger input plane (10x10 -> 25 tiles, forward 8x8 -> 16).
  d = conv3x3(1, 4, 10, 10, 4, 0, 0);
  CHECK(cpu::winograd_workspace_bytes(d, 8) == (size_t)(16 * 16 + 16 * 8 * 25) * 8);
}
