// kiln's own FP16 Tensor Core kernels on the GPU against CPU references computed in f32 from the
// same f16-rounded inputs: hgemm (4 transpose layouts, f16 and f32 output, alpha/beta, ragged and
// unaligned sizes) and the implicit-GEMM convolution's three passes (stride, padding, dilation,
// channel counts that are and are not multiples of 8). Skips with one line when no GPU is present.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#if defined(KILN_WITH_CUDA)
#include "support/cuda_test.h"
#include "engine/core/half.h"
#include "kernels/common/tile_conv.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/hgemm.h"
#include "kernels/cuda/igemm_conv.h"
#include "kernels/cuda/runtime.h"

using namespace kiln;
using kiln_test::skip_without_gpu;

namespace {

// A device buffer (raw cudaMalloc: these tests exercise kernels, not the allocator).
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t n) : bytes(std::max<size_t>(n, 16)) { KILN_CUDA_CHECK(cudaMalloc(&p, bytes), "test alloc"); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T> void put(const std::vector<T>& v) {
    KILN_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "test upload");
  }
  template <class T> std::vector<T> get(size_t n) const {
    std::vector<T> v(n);
    KILN_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "test download");
    return v;
  }
};

std::vector<uint16_t> rand_half(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_half_bits(u(g));
  return v;
}
float hf(uint16_t h) { return half_bits_to_float(h); }

double rel_err(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num = std::max(num, std::fabs((double)ref[i] - got[i]));
    den = std::max(den, std::fabs((double)ref[i]));
  }
  return num / den;
}

// Output of `n` elements as f32 whatever its dtype.
std::vector<float> get_out(const DevBuf& b, size_t n, DType dt) {
  if (dt == DType::f32) return b.get<float>(n);
  auto h = b.get<uint16_t>(n);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = hf(h[i]);
  return f;
}
void put_out(DevBuf& b, const std::vector<float>& v, DType dt) {
  if (dt == DType::f32) return b.put(v);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = float_to_half_bits(v[i]);
  b.put(h);
}

}  // namespace

TEST_CASE("cuda: kiln hgemm (Tensor Cores) against an f32 CPU GEMM") {
  if (skip_without_gpu()) return;
  std::mt19937 g(3);
  struct Case { int64_t M, N, K; };
  for (Case c : {Case{128, 128, 32}, Case{256, 384, 512}, Case{1, 1, 1}, Case{77, 130, 45}, Case{129, 257, 300},
                 Case{512, 64, 1000}, Case{33, 200, 8}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (DType dt : {DType::f32, DType::f16}) {
          const int64_t lda = ta ? c.M : c.K, ldb = tb ? c.K : c.N, ldc = c.N + 1;
          auto A = rand_half((ta ? c.K : c.M) * lda, g), B = rand_half((tb ? c.N : c.K) * ldb, g);
          std::vector<float> C0(c.M * ldc);
          for (auto& v : C0) v = hf(float_to_half_bits(std::uniform_real_distribution<float>(-1, 1)(g)));
          const float alpha = 0.75f, beta = 0.5f;
          std::vector<float> ref = C0;
          for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < c.N; ++n) {
              double s = 0;
              for (int64_t k = 0; k < c.K; ++k) s += (double)hf(A[ta ? k * lda + m : m * lda + k]) * hf(B[tb ? n * ldb + k : k * ldb + n]);
              ref[m * ldc + n] = (float)(alpha * s + beta * C0[m * ldc + n]);
            }
          DevBuf dA(A.size() * 2), dB(B.size() * 2), dC(C0.size() * (dt == DType::f32 ? 4 : 2));
          dA.put(A); dB.put(B); put_out(dC, C0, dt);
          cuda::hgemm(ta, tb, c.M, c.N, c.K, alpha, dA.p, lda, dB.p, ldb, beta, dC.p, ldc, dt, nullptr);
          KILN_CUDA_CHECK(cudaDeviceSynchronize(), "hgemm test");
          INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << ta << " tb=" << tb << " f16 out=" << (dt == DType::f16));
          CHECK(rel_err(ref, get_out(dC, ref.size(), dt)) < (dt == DType::f32 ? 1e-4 : 2e-3));
        }
}

TEST_CASE("cuda: kiln implicit-GEMM conv fprop/dgrad/wgrad against a direct CPU convolution") {
  if (skip_without_gpu()) return;
  std::mt19937 g(9);
  struct Case { int64_t N, C, H, W, K, R, S, stride, pad, dil; };
  for (Case k : {Case{2, 64, 14, 14, 64, 3, 3, 1, 1, 1}, Case{4, 3, 32, 32, 64, 7, 7, 2, 3, 1},
                 Case{2, 32, 15, 15, 48, 3, 3, 2, 1, 1}, Case{3, 64, 9, 9, 128, 1, 1, 2, 0, 1},
                 Case{1, 12, 11, 13, 20, 3, 3, 1, 2, 2}, Case{8, 128, 7, 7, 256, 3, 3, 1, 1, 1}}) {
    Conv2dDesc desc;
    desc.N = k.N; desc.C = k.C; desc.H = k.H; desc.W = k.W; desc.K = k.K; desc.R = k.R; desc.S = k.S;
    desc.stride_h = desc.stride_w = k.stride; desc.pad_h = desc.pad_w = k.pad; desc.dil_h = desc.dil_w = k.dil;
    const tile::ConvDims d = tile::conv_dims(desc);
    const size_t nx = (size_t)d.N * d.H * d.W * d.C, nw = (size_t)d.K * d.R * d.S * d.C,
                 ny = (size_t)d.N * d.P * d.Q * d.K;
    auto x = rand_half(nx, g), w = rand_half(nw, g), dy = rand_half(ny, g);
    std::vector<double> y(ny, 0), dx(nx, 0), dw(nw, 0);
    for (int n = 0; n < d.N; ++n)
      for (int p = 0; p < d.P; ++p)
        for (int q = 0; q < d.Q; ++q)
          for (int r = 0; r < d.R; ++r)
            for (int s = 0; s < d.S; ++s) {
              const long long xo = tile::x_offset(d, n, p * d.stride_h - d.pad_h + r * d.dil_h,
                                                  q * d.stride_w - d.pad_w + s * d.dil_w, 0);
              if (xo < 0) continue;
              for (int kk = 0; kk < d.K; ++kk) {
                const size_t wo = (((size_t)kk * d.R + r) * d.S + s) * d.C, yo = (((size_t)n * d.P + p) * d.Q + q) * d.K + kk;
                for (int c = 0; c < d.C; ++c) {
                  y[yo] += (double)hf(x[xo + c]) * hf(w[wo + c]);
                  dx[xo + c] += (double)hf(dy[yo]) * hf(w[wo + c]);
                  dw[wo + c] += (double)hf(dy[yo]) * hf(x[xo + c]);
                }
              }
            }
    auto f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
    DevBuf dX(nx * 2), dW(nw * 2), dY(ny * 2), out(std::max({nx, nw, ny}) * 4);
    dX.put(x); dW.put(w); dY.put(dy);
    INFO("N=" << k.N << " C=" << k.C << " H=" << k.H << " K=" << k.K << " R=" << k.R << " stride=" << k.stride);
    for (DType dt : {DType::f32, DType::f16}) {
      const double tol = dt == DType::f32 ? 1e-4 : 2e-3;
      cuda::igemm_conv_fprop(desc, dX.p, dW.p, out.p, dt, 1.f, 0.f, nullptr);
      KILN_CUDA_CHECK(cudaDeviceSynchronize(), "fprop test");
      CHECK(rel_err(f32(y), get_out(out, ny, dt)) < tol);
      cuda::igemm_conv_dgrad(desc, dY.p, dW.p, out.p, dt, 1.f, 0.f, nullptr);
      KILN_CUDA_CHECK(cudaDeviceSynchronize(), "dgrad test");
      CHECK(rel_err(f32(dx), get_out(out, nx, dt)) < tol);
      const size_t wsb = cuda::igemm_conv_workspace_bytes(desc, cuda::ConvPass::wgrad);
      DevBuf ws(wsb);
      cuda::igemm_conv_wgrad(desc, dY.p, dX.p, out.p, dt, 1.f, 0.f, ws.p, wsb, nullptr);
      KILN_CUDA_CHECK(cudaDeviceSynchronize(), "wgrad test");
      CHECK(rel_err(f32(dw), get_out(out, nw, dt)) < tol);
    }
  }
}

#else
TEST_CASE("cuda: kiln Tensor Core kernels") { MESSAGE("cuda tests skipped: kiln built without CUDA"); }
#endif
