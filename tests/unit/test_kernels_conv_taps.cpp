// Valid-tap conv2d (conv2d_taps.h: forward, input gradient, weight gradient) against the im2col path of
// the same kernels (itself checked against a direct f64 reference in test_kernels_conv.cpp), both
// forced with conv2d_set_algo, on odd shapes: non-square kernels, stride 2, padding wider than the
// kernel's reach (output pixels that meet only padding), planes of 1 and 2 pixels, batches of 1 to
// 5, 1, 2 and 3 threads (the channel split: each thread repacks, multiplies and scatters its own share), f32 and f64, NaN and inf inputs. The workspace is exactly
// conv2d_workspace_bytes and filled with garbage. Also: which passes the automatic rule gives taps.
// Tolerance: max |taps - im2col| <= tol * max |im2col| per output, tol = 1e-5 (f32), 1e-12 (f64):
// the same products summed in another order.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_taps.h"
#include "kernels/cpu/threads.h"
#include "support/conv_passes.h"

using namespace kiln;

namespace {

struct AlgoScope {
  cpu::Conv2dAlgo prev;
  int threads;
  AlgoScope() : prev(cpu::conv2d_algo()), threads(cpu::num_threads()) {}
  ~AlgoScope() {
    cpu::conv2d_set_algo(prev);
    cpu::set_num_threads(threads);
  }
};

Conv2dDesc desc(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S, int64_t sh, int64_t sw,
                int64_t ph, int64_t pw) {
  Conv2dDesc d;
  d.N = N, d.C = C, d.H = H, d.W = W, d.K = K, d.R = R, d.S = S;
  d.stride_h = sh, d.stride_w = sw, d.pad_h = ph, d.pad_w = pw;
  return d;
}

template <typename T>
using Outs = test::ConvPasses<T>;

// The three passes with algorithm a forced (left forced: the callers' AlgoScope restores it).
template <typename T>
Outs<T> run(cpu::Conv2dAlgo a, const Conv2dDesc& d, const std::vector<T>& x, const std::vector<T>& w,
            const std::vector<T>& b, const std::vector<T>& dy) {
  cpu::conv2d_set_algo(a);
  for (auto pass : {cpu::Conv2dPass::forward, cpu::Conv2dPass::backward_input, cpu::Conv2dPass::backward_weight})
    CHECK(cpu::conv2d_uses_taps(d, pass) == (a == cpu::Conv2dAlgo::taps));
  return test::conv_passes(d, x, w, b, dy);
}

template <typename T>
double rel_err(const std::vector<T>& got, const std::vector<T>& ref) {
  REQUIRE(got.size() == ref.size());
  double big = 0, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    big = std::max(big, std::abs((double)ref[i]));
    err = std::max(err, std::abs((double)got[i] - (double)ref[i]));
  }
  return big == 0 ? err : err / big;
}

template <typename T>
void check_against_im2col(const Conv2dDesc& d, std::mt19937& g, double tol) {
  std::uniform_real_distribution<double> u(-1, 1);
  auto fill = [&](size_t n) {
    std::vector<T> v(n);
    for (auto& e : v) e = (T)u(g);
    return v;
  };
  const std::vector<T> x = fill(d.N * d.C * d.H * d.W), w = fill(d.K * d.C * d.R * d.S), b = fill(d.K),
                       dy = fill(d.N * d.K * d.out_h() * d.out_w());
  const Outs<T> ref = run(cpu::Conv2dAlgo::im2col, d, x, w, b, dy);
  const Outs<T> got = run(cpu::Conv2dAlgo::taps, d, x, w, b, dy);
  CHECK(rel_err(got.y, ref.y) <= tol);
  CHECK(rel_err(got.dx, ref.dx) <= tol);
  CHECK(rel_err(got.dw, ref.dw) <= tol);
  CHECK(rel_err(got.db, ref.db) <= tol);
  // The outputs were all overwritten (7 would be far from every value here).
  CHECK(std::none_of(got.y.begin(), got.y.end(), [](T v) { return v == T(7); }));
}

}  // namespace

TEST_CASE("conv2d valid taps: forward, input and weight gradients match im2col on odd shapes") {
  AlgoScope scope;
  std::mt19937 g(35);
  const Conv2dDesc cases[] = {
      desc(5, 7, 2, 2, 6, 3, 3, 1, 1, 1, 1),  // ResNet18 layer4 at 64 px in small
      desc(3, 5, 4, 3, 4, 3, 3, 1, 1, 1, 1),  // 4x3 plane: rows with 2 and 3 taps
      desc(4, 3, 5, 4, 5, 3, 3, 2, 2, 1, 1),  // stride 2
      desc(2, 4, 3, 5, 3, 2, 3, 1, 2, 0, 2),  // 2x3 kernel, uneven stride and padding
      desc(3, 3, 2, 3, 4, 1, 1, 1, 1, 2, 1),  // padding beyond the kernel: pixels meeting only padding
      desc(1, 6, 1, 1, 5, 3, 3, 1, 1, 1, 1),  // one pixel, one image
      desc(5, 9, 3, 3, 7, 3, 3, 1, 1, 0, 0),  // no padding: taps == im2col's
  };
  for (int threads : {1, 2, 3})  // 2: the step's count; 3: uneven channel shares (3 to 9 channels)
    for (const Conv2dDesc& d : cases) {
      INFO("threads ", threads, " N=", d.N, " C=", d.C, " H=", d.H, " W=", d.W, " K=", d.K, " R=", d.R, " S=", d.S);
      cpu::set_num_threads(threads);
      check_against_im2col<double>(d, g, 1e-12);
      check_against_im2col<float>(d, g, 1e-5);
    }
}

TEST_CASE("conv2d valid taps: a NaN or inf input reaches exactly the outputs im2col gives it") {
  // x holds NaN at one pixel and inf at another: every output whose window meets them is NaN / inf
  // (or NaN where both meet or inf meets a weight of the other sign), the same set as im2col's; the
  // weight gradient likewise.
  AlgoScope scope;
  cpu::set_num_threads(1);
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(0.5f, 1.0f);  // positive: inf never meets -inf
  const Conv2dDesc d = desc(2, 3, 3, 2, 4, 3, 3, 1, 1, 1, 1);
  std::vector<float> x(d.N * d.C * d.H * d.W), w(d.K * d.C * 9), b(d.K), dy(d.N * d.K * d.out_h() * d.out_w());
  for (auto* v : {&x, &w, &b, &dy})
    for (auto& e : *v) e = u(g);
  x[1] = std::nanf("");                                // image 0, channel 0, pixel (0, 1)
  x[d.C * d.H * d.W + 5] = INFINITY;                   // image 1, channel 0, pixel (2, 1)
  const Outs<float> ref = run(cpu::Conv2dAlgo::im2col, d, x, w, b, dy);
  const Outs<float> got = run(cpu::Conv2dAlgo::taps, d, x, w, b, dy);
  int nonfinite = 0;
  for (size_t i = 0; i < ref.y.size(); ++i) {
    CHECK(std::isnan(got.y[i]) == std::isnan(ref.y[i]));
    CHECK(std::isinf(got.y[i]) == std::isinf(ref.y[i]));
    nonfinite += !std::isfinite(ref.y[i]);
  }
  CHECK(nonfinite > 0);
  CHECK(nonfinite < (int)ref.y.size());
  for (size_t i = 0; i < ref.dw.size(); ++i) CHECK(std::isnan(got.dw[i]) == std::isnan(ref.dw[i]));
}

TEST_CASE("conv2d valid taps: met pairs, workspace, the automatic rule") {
  AlgoScope scope;
  // 3x3 pad 1 on a 2x2 plane: each output pixel meets 4 of its 9 taps.
  const Conv2dDesc l4 = desc(32, 512, 2, 2, 512, 3, 3, 1, 1, 1, 1);
  CHECK(cpu::taps_met_pairs(l4) == 16);
  CHECK(cpu::taps_met_pairs(desc(1, 1, 4, 4, 1, 3, 3, 1, 1, 1, 1)) == 100);  // 10 per axis, squared
  CHECK(cpu::taps_met_pairs(desc(1, 1, 2, 3, 1, 1, 1, 1, 1, 2, 1)) == 6);    // 6x5 outputs, 6 inside
  Conv2dDesc grouped = l4;
  grouped.groups = 2;
  CHECK_FALSE(cpu::taps_applies(grouped));
  cpu::set_num_threads(1);
  cpu::conv2d_set_algo(cpu::Conv2dAlgo::taps);
  CHECK(cpu::conv2d_workspace_bytes(l4, 4) == (size_t)(512 * 9 * 512 + 32 * 512 * 4 + 32 * 512 * 4) * 4);
  cpu::conv2d_set_algo(cpu::Conv2dAlgo::automatic);
  for (auto pass : {cpu::Conv2dPass::forward, cpu::Conv2dPass::backward_input, cpu::Conv2dPass::backward_weight}) {
    CHECK(cpu::conv2d_uses_taps(l4, pass));
    // Wide planes (ResNet18's layer1 at 64 px) keep im2col / Winograd; so do few images per thread.
    CHECK_FALSE(cpu::conv2d_uses_taps(desc(32, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1), pass));
    CHECK_FALSE(cpu::conv2d_uses_taps(desc(8, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1), pass));
    CHECK_FALSE(cpu::conv2d_uses_taps(desc(4, 512, 2, 2, 512, 3, 3, 1, 1, 1, 1), pass));
    // layer4.0 (3x3 stride 2 on 4x4 -> 2x2) skips 11 of 36 pairs: not enough for any pass.
    CHECK_FALSE(cpu::conv2d_uses_taps(desc(32, 256, 4, 4, 512, 3, 3, 2, 2, 1, 1), pass));
  }
  // layer3 (3x3 on 4x4) skips 44 of 144: the weight gradient only; the other passes run Winograd.
  const Conv2dDesc l3 = desc(32, 256, 4, 4, 256, 3, 3, 1, 1, 1, 1);
  CHECK(cpu::conv2d_uses_taps(l3, cpu::Conv2dPass::backward_weight));
  CHECK_FALSE(cpu::conv2d_uses_taps(l3, cpu::Conv2dPass::forward));
  CHECK(cpu::conv2d_uses_winograd(l3, cpu::Conv2dPass::forward));
  // 2 threads: valid taps split the channels, not the images (every GEMM has all 32 images as its
  // columns), so the choice stays; the workspace holds all images' gathers (and the split by images'
  // slices for layer3's Winograd passes).
  cpu::set_num_threads(2);
  CHECK(cpu::conv2d_uses_taps(l4, cpu::Conv2dPass::forward));
  CHECK(cpu::conv2d_workspace_bytes(l4, 4) == (size_t)(512 * 9 * 512 + 32 * 512 * 4 + 32 * 512 * 4) * 4);
  CHECK(cpu::conv2d_uses_taps(l3, cpu::Conv2dPass::backward_weight));
  CHECK(cpu::conv2d_workspace_bytes(l3, 4) >= cpu::taps_workspace_bytes(l3, 4));
}
