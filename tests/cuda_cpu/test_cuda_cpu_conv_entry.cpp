// The CUDA backend's 16-bit convolution entry points (kernels/cuda/conv2d.cpp's conv2d_16_*, what the op
// layer calls for every f16 / bf16 conv2d on cuda, the --amp step's three convolution calls) in the CPU
// execution mode: under --kernels kiln an f16 NHWC convolution runs kiln's implicit GEMM, bit for bit what
// igemm_conv_* give called directly (they are checked against f64 in test_cuda_cpu_igemm.cpp), the weight
// gradient's split-K workspace included; an NCHW layout is refused by name; every path that needs cuDNN
// (vendor, bf16, groups > 1, the f32 / f64 convolutions) reaches cuDNN, which cannot run in the CPU mode,
// and fails naming the call instead of computing anything.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "engine/core/half.h"
#include "cuda_cpu/adversarial.h"
// The CPU mode's declarations (namespace kiln::cuda_on_cpu).
#include "kernels/cuda_cpu/prelude.h"
#include <cudnn.h>  // the CPU mode's shim: its failing stubs
#include "kernels/cuda/conv2d_16.h"
#include "kernels/cuda/igemm_conv.h"
#include "kernels/cuda/kernel_select.h"
#include "kernels/cuda/nn_backend.h"

namespace gpu = kiln::cuda_on_cpu;
using kiln::DType;
using kiln::half;

namespace {

struct Restore {
  ~Restore() { gpu::set_kernel_source(gpu::KernelSource::vendor); }
};

std::vector<half> halves(size_t n, uint64_t seed) {
  const std::vector<float> v = kiln_test::moderate<float>(n, seed, 1.0);
  std::vector<half> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = half(v[i]);
  return h;
}

bool same_bits(const std::vector<half>& a, const std::vector<half>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(half)) == 0;
}

// What a path that needs cuDNN answers in this build: the handle's refusal (cuDNN found at configure
// time), or the no-cuDNN build's own error.
#if defined(KILN_WITH_CUDNN)
const char* const kNoCudnn = "cudnn_handle: a cuDNN call in the CPU mode";
#else
const char* const kNoCudnn = "built without cuDNN";
#endif

kiln::Conv2dDesc small_desc() {
  kiln::Conv2dDesc d;
  d.N = 2, d.C = 8, d.H = 16, d.W = 16, d.K = 8, d.R = 3, d.S = 3, d.pad_h = 1, d.pad_w = 1;  // wgrad splits K
  return d;
}

}  // namespace

TEST_CASE("CPU mode: conv2d_16 entry points under --kernels kiln are kiln's implicit GEMM (f16 NHWC), bit for bit") {
  Restore restore;
  gpu::set_kernel_source(gpu::KernelSource::kiln);
  const kiln::Conv2dDesc d = small_desc();
  REQUIRE(gpu::conv2d_16_uses_kiln(d, DType::f16));
  const int64_t P = d.out_h(), Q = d.out_w();
  // x: (N, H, W, C), w: (K, R, S, C), dy: (N, P, Q, K), all NHWC f16
  const std::vector<half> x = halves((size_t)(d.N * d.H * d.W * d.C), 1), w = halves((size_t)(d.K * d.R * d.S * d.C), 2),
                          dy = halves((size_t)(d.N * P * Q * d.K), 3);
  const half nan_h(NAN);
  std::vector<half> y(dy.size(), nan_h), y2 = y, dx(x.size(), nan_h), dx2 = dx, dw(w.size(), nan_h), dw2 = dw;
  const auto nhwc = gpu::ConvLayout::nhwc;
  gpu::conv2d_16_forward(d, DType::f16, nhwc, x.data(), w.data(), y.data());
  gpu::igemm_conv_fprop(d, x.data(), w.data(), y2.data(), DType::f16, 1.f, 0.f, nullptr);
  CHECK(same_bits(y, y2));
  gpu::conv2d_16_backward_input(d, DType::f16, nhwc, dy.data(), w.data(), dx.data());
  gpu::igemm_conv_dgrad(d, dy.data(), w.data(), dx2.data(), DType::f16, 1.f, 0.f, nullptr);
  CHECK(same_bits(dx, dx2));
  const size_t ws_bytes = gpu::igemm_conv_workspace_bytes(d, gpu::ConvPass::wgrad);
  REQUIRE(ws_bytes > 0);  // the entry point allocates this split-K workspace itself
  std::vector<char> ws(ws_bytes);
  gpu::conv2d_16_backward_weight(d, DType::f16, nhwc, x.data(), dy.data(), dw.data());
  gpu::igemm_conv_wgrad(d, dy.data(), x.data(), dw2.data(), DType::f16, 1.f, 0.f, ws.data(), ws.size(), nullptr);
  CHECK(same_bits(dw, dw2));
  int nans = 0;  // every output written
  for (const auto* v : {&y, &dx, &dw})
    for (half h : *v) nans += std::isnan((float)h);
  CHECK(nans == 0);
  // kiln's kernels need NHWC: an NCHW call is refused, naming the shapes and the reason.
  CHECK_THROWS_WITH_AS(gpu::conv2d_16_forward(d, DType::f16, gpu::ConvLayout::nchw, x.data(), w.data(), y.data()),
                       doctest::Contains("needs NHWC"), kiln::Error);
}

TEST_CASE("CPU mode: convolution entry points that need cuDNN fail naming the call (vendor, bf16, groups, f32)") {
  Restore restore;
  kiln::Conv2dDesc d = small_desc();
  std::vector<half> h(4096, half(1.0f));
  std::vector<float> f(8192, 1.0f), bias(8, 0.5f);
  const auto nhwc = gpu::ConvLayout::nhwc;
  // vendor f16
  CHECK_THROWS_WITH_AS(gpu::conv2d_16_forward(d, DType::f16, nhwc, h.data(), h.data(), h.data()),
                       doctest::Contains(kNoCudnn), kiln::Error);
  gpu::set_kernel_source(gpu::KernelSource::kiln);
  // bf16 and grouped convolutions have no kiln kernel: cuDNN even under --kernels kiln
  CHECK_FALSE(gpu::conv2d_16_uses_kiln(d, DType::bf16));
  CHECK_THROWS_WITH_AS(gpu::conv2d_16_backward_input(d, DType::bf16, nhwc, h.data(), h.data(), h.data()),
                       doctest::Contains(kNoCudnn), kiln::Error);
  d.groups = 2;
  CHECK_FALSE(gpu::conv2d_16_uses_kiln(d, DType::f16));
  CHECK_THROWS_WITH_AS(gpu::conv2d_16_backward_weight(d, DType::f16, nhwc, h.data(), h.data(), h.data()),
                       doctest::Contains(kNoCudnn), kiln::Error);
  d.groups = 1;
  // f32: the convolution is cuDNN's (kiln's bias kernels only replace its bias add / gradient)
  CHECK_THROWS_WITH_AS(gpu::conv2d_forward<float>(d, f.data(), f.data(), bias.data(), f.data(), nullptr),
                       doctest::Contains(kNoCudnn), kiln::Error);
  CHECK(f == std::vector<float>(8192, 1.0f));  // nothing computed, the bias not added either
  // The stubs behind the handle name their call.
  CHECK_THROWS_WITH_AS(cudnnAddTensor(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("cudnnAddTensor: a cuDNN call in the CPU mode"), kiln::Error);
  CHECK_THROWS_WITH_AS(cudnnConvolutionBackwardBias(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
                       doctest::Contains("cudnnConvolutionBackwardBias: a cuDNN call"), kiln::Error);
}
