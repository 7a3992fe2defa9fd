// kiln's implicit-GEMM convolution on the Tensor Core tile (kernels/cuda/igemm_conv.cu) run in the CPU
// execution mode against an f64 direct convolution of the same f16 values: forward, data gradient and
// weight gradient (split-K with its workspace), NHWC / KRSC, stride, padding and dilation, channel
// counts off the vector width (the element-copy path).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "engine/core/half.h"
#include "cuda_cpu/adversarial.h"
#include "kernels/cuda_cpu/prelude.h"
#include "kernels/cuda/igemm_conv.h"

namespace gpu = kiln::cuda_on_cpu;
using kiln::half;

namespace {

struct Ref {
  std::vector<double> y, dx, dw, y_mag, dx_mag, dw_mag;
};

// x: (N, H, W, C), w: (K, R, S, C), y / dy: (N, P, Q, K).
Ref reference(const kiln::Conv2dDesc& d, const std::vector<half>& x, const std::vector<half>& w,
              const std::vector<half>& dy) {
  const int64_t P = d.out_h(), Q = d.out_w();
  Ref r;
  r.y.assign((size_t)(d.N * P * Q * d.K), 0.0);
  r.y_mag = r.y;
  r.dx.assign(x.size(), 0.0);
  r.dx_mag = r.dx;
  r.dw.assign(w.size(), 0.0);
  r.dw_mag = r.dw;
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q)
        for (int64_t k = 0; k < d.K; ++k)
          for (int64_t rr = 0; rr < d.R; ++rr)
            for (int64_t s = 0; s < d.S; ++s) {
              const int64_t h = p * d.stride_h - d.pad_h + rr * d.dil_h, ww = q * d.stride_w - d.pad_w + s * d.dil_w;
              if (h < 0 || h >= d.H || ww < 0 || ww >= d.W) continue;
              for (int64_t c = 0; c < d.C; ++c) {
                const size_t xi = (size_t)(((n * d.H + h) * d.W + ww) * d.C + c);
                const size_t wi = (size_t)(((k * d.R + rr) * d.S + s) * d.C + c);
                const size_t yi = (size_t)(((n * P + p) * Q + q) * d.K + k);
                const double xv = (float)x[xi], wv = (float)w[wi], gv = (float)dy[yi];
                r.y[yi] += xv * wv;
                r.y_mag[yi] += std::fabs(xv * wv);
                r.dx[xi] += gv * wv;
                r.dx_mag[xi] += std::fabs(gv * wv);
                r.dw[wi] += gv * xv;
                r.dw_mag[wi] += std::fabs(gv * xv);
              }
            }
  return r;
}

int compare_to(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& mag,
               const char* what) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 1e-5 * mag[i] + 1e-6) && ++bad <= 3)
      MESSAGE(what, " element ", i, ": ", got[i], " vs ", want[i]);
  return bad;
}

void conv_case(const kiln::Conv2dDesc& d, uint64_t seed) {
  const int64_t P = d.out_h(), Q = d.out_w();
  std::vector<half> x((size_t)(d.N * d.H * d.W * d.C)), w((size_t)(d.K * d.R * d.S * d.C)), dy((size_t)(d.N * P * Q * d.K));
  const std::vector<float> xv = kiln_test::moderate<float>(x.size(), seed, 1.0), wv = kiln_test::moderate<float>(w.size(), seed + 1, 1.0),
                           gv = kiln_test::moderate<float>(dy.size(), seed + 2, 1.0);
  for (size_t i = 0; i < x.size(); ++i) x[i] = half(xv[i]);
  for (size_t i = 0; i < w.size(); ++i) w[i] = half(wv[i]);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = half(gv[i]);
  const Ref r = reference(d, x, w, dy);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size());
  gpu::igemm_conv_fprop(d, x.data(), w.data(), y.data(), kiln::DType::f32, 1.f, 0.f, nullptr);
  CHECK(compare_to(y, r.y, r.y_mag, "fprop") == 0);
  gpu::igemm_conv_dgrad(d, dy.data(), w.data(), dx.data(), kiln::DType::f32, 1.f, 0.f, nullptr);
  CHECK(compare_to(dx, r.dx, r.dx_mag, "dgrad") == 0);
  std::vector<char> ws(gpu::igemm_conv_workspace_bytes(d, gpu::ConvPass::wgrad) + 16);
  gpu::igemm_conv_wgrad(d, dy.data(), x.data(), dw.data(), kiln::DType::f32, 1.f, 0.f, ws.data(), ws.size(), nullptr);
  CHECK(compare_to(dw, r.dw, r.dw_mag, "wgrad") == 0);
  // f16 outputs (the --amp path's): the same f32 accumulation rounded once on store, so bit for bit the f32
  // output rounded to f16 (values here are moderate: no overflow).
  std::vector<half> yh(y.size()), dxh(dx.size()), dwh(dw.size());
  gpu::igemm_conv_fprop(d, x.data(), w.data(), yh.data(), kiln::DType::f16, 1.f, 0.f, nullptr);
  gpu::igemm_conv_dgrad(d, dy.data(), w.data(), dxh.data(), kiln::DType::f16, 1.f, 0.f, nullptr);
  gpu::igemm_conv_wgrad(d, dy.data(), x.data(), dwh.data(), kiln::DType::f16, 1.f, 0.f, ws.data(), ws.size(), nullptr);
  auto same_as_rounded = [](const std::vector<half>& h, const std::vector<float>& f) {
    int bad = 0;
    for (size_t i = 0; i < h.size(); ++i) bad += h[i].bits != half(f[i]).bits;
    return bad;
  };
  CHECK(same_as_rounded(yh, y) == 0);
  CHECK(same_as_rounded(dxh, dx) == 0);
  CHECK(same_as_rounded(dwh, dw) == 0);
}

}  // namespace

TEST_CASE("CPU mode: implicit-GEMM convolution (fprop, dgrad, wgrad) against an f64 direct convolution") {
  kiln::Conv2dDesc d;
  d.N = 2, d.C = 8, d.H = 7, d.W = 6, d.K = 16, d.R = 3, d.S = 3, d.pad_h = 1, d.pad_w = 1;
  conv_case(d, 1);
  d.C = 3, d.K = 5, d.stride_h = 2, d.dil_w = 2, d.pad_w = 2;  // C off the 8-half vector: element copies
  conv_case(d, 2);
  d = kiln::Conv2dDesc{};
  d.N = 1, d.C = 16, d.H = 4, d.W = 4, d.K = 8, d.R = 1, d.S = 1;
  conv_case(d, 3);
  // N*P*Q = 512 (16 k-tiles) over one output tile: the weight gradient splits K 4 ways (splitk_reduce).
  d = kiln::Conv2dDesc{};
  d.N = 2, d.C = 8, d.H = 16, d.W = 16, d.K = 8, d.R = 3, d.S = 3, d.pad_h = 1, d.pad_w = 1;
  REQUIRE(gpu::igemm_conv_workspace_bytes(d, gpu::ConvPass::wgrad) > 0);
  conv_case(d, 4);
}
