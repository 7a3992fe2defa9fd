// CUDA NN kernels against the CPU ones at the kernel level (the op layer for conv, pool, batch
// norm, losses is not merged yet): conv2d forward/backward through cuDNN vs kiln's im2col conv,
// and the dropout mask vs the Philox rule of the CPU. Uses only tensor.h (not ops.h, whose
// Reduction clashes with nn_desc.h for now). Skips with one line when no GPU is present.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/tensor/tensor.h"

#if defined(KILN_WITH_CUDA)
#include "support/cuda_test.h"
#include "engine/core/philox.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cuda/nn_backend.h"
#include "kernels/cuda/runtime.h"

using namespace kiln;
using kiln_test::skip_without_gpu;

namespace {

template <typename T>
std::vector<T> rand_vec(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(n);
  for (auto& x : v) x = (T)u(g);
  return v;
}

// A device buffer holding `v` (an f32/u8 tensor on cuda:0, so it goes through kiln's allocator).
template <typename T>
Tensor upload(const std::vector<T>& v) {
  Tensor t = empty({(int64_t)std::max<size_t>(v.size(), 1) * (int64_t)sizeof(T)}, DType::u8, Device::cuda(0));
  cuda::copy_bytes(t.data_ptr(), t.device(), v.data(), Device::cpu(), v.size() * sizeof(T));
  return t;
}
template <typename T>
std::vector<T> download(const Tensor& t, size_t n) {
  std::vector<T> v(n);
  cuda::copy_bytes(v.data(), Device::cpu(), t.data_ptr(), t.device(), n * sizeof(T));
  return v;
}

template <typename T>
double rel_err(const std::vector<T>& ref, const std::vector<T>& got) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::fabs((double)ref[i] - (double)got[i]));
    den = std::max(den, std::fabs((double)ref[i]));
  }
  return num / den;
}

}  // namespace

TEST_CASE("cuda: conv2d (cuDNN) forward and backward against the CPU kernels") {
  if (skip_without_gpu()) return;
  std::mt19937 g(7);
  struct Case { int64_t N, C, H, W, K, R, S, stride, pad, dil, groups; };
  for (Case k : {Case{2, 3, 17, 19, 8, 3, 3, 1, 1, 1, 1}, Case{4, 16, 14, 14, 32, 3, 3, 2, 1, 1, 1},
                 Case{2, 8, 9, 9, 8, 1, 1, 1, 0, 1, 1}, Case{1, 8, 12, 12, 8, 3, 3, 1, 2, 2, 4},
                 Case{3, 3, 32, 32, 16, 7, 7, 2, 3, 1, 1}}) {
    Conv2dDesc d;
    d.N = k.N; d.C = k.C; d.H = k.H; d.W = k.W; d.K = k.K; d.R = k.R; d.S = k.S;
    d.stride_h = d.stride_w = k.stride; d.pad_h = d.pad_w = k.pad; d.dil_h = d.dil_w = k.dil; d.groups = k.groups;
    const size_t nx = d.N * d.C * d.H * d.W, nw = d.K * (d.C / d.groups) * d.R * d.S;
    const size_t ny = d.N * d.K * d.out_h() * d.out_w();
    auto x = rand_vec<float>(nx, g), w = rand_vec<float>(nw, g), b = rand_vec<float>(d.K, g), dy = rand_vec<float>(ny, g);
    std::vector<float> y(ny), dx(nx), dw(nw), db(d.K);
    std::vector<char> ws(cpu::conv2d_workspace_bytes(d, sizeof(float)) + 1);
    cpu::conv2d_forward<float>(d, x.data(), w.data(), b.data(), y.data(), ws.data());
    cpu::conv2d_backward_input<float>(d, dy.data(), w.data(), dx.data(), ws.data());
    cpu::conv2d_backward_weight<float>(d, x.data(), dy.data(), dw.data(), db.data(), ws.data());

    Tensor xg = upload(x), wg = upload(w), bg = upload(b), dyg = upload(dy);
    Tensor yg = upload(y), dxg = upload(dx), dwg = upload(dw), dbg = upload(db);
    auto f = [](const Tensor& t) { return static_cast<float*>(t.data_ptr()); };
    cuda::conv2d_forward<float>(d, f(xg), f(wg), f(bg), f(yg), nullptr);
    cuda::conv2d_backward_input<float>(d, f(dyg), f(wg), f(dxg), nullptr);
    cuda::conv2d_backward_weight<float>(d, f(xg), f(dyg), f(dwg), f(dbg), nullptr);
    INFO("N C H W K R S = " << d.N << " " << d.C << " " << d.H << " " << d.W << " " << d.K << " " << d.R << " " << d.S
                            << " groups " << d.groups);
    CHECK(rel_err(y, download<float>(yg, ny)) <= 1e-4);
    CHECK(rel_err(dx, download<float>(dxg, nx)) <= 1e-4);
    CHECK(rel_err(dw, download<float>(dwg, nw)) <= 1e-4);
    CHECK(rel_err(db, download<float>(dbg, d.K)) <= 1e-4);
  }
}

TEST_CASE("cuda: dropout mask and values equal the CPU's Philox rule") {
  if (skip_without_gpu()) return;
  std::mt19937 g(3);
  const int64_t n = 10007;
  const double p = 0.3;
  auto x = rand_vec<float>(n, g);
  std::vector<float> y(n);
  std::vector<uint8_t> m(n);
  const float scale = (float)(1.0 / (1.0 - p));
  for (int64_t i = 0; i < n; ++i) {
    m[i] = philox_uniform(99, 5, (uint64_t)i) >= (float)p;
    y[i] = m[i] ? x[i] * scale : 0.0f;
  }
  Tensor xg = upload(x), yg = upload(y), mg = upload(m);
  cuda::dropout_forward<float>(n, static_cast<float*>(xg.data_ptr()), p, 99, 5, static_cast<float*>(yg.data_ptr()),
                               static_cast<uint8_t*>(mg.data_ptr()));
  CHECK(download<uint8_t>(mg, n) == m);
  CHECK(download<float>(yg, n) == y);
}

#else  // !KILN_WITH_CUDA

TEST_CASE("cuda: NN kernels not built") { MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)"); }

#endif
