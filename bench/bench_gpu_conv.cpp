// Benchmark: kiln's implicit-GEMM convolution (kernels/cuda/igemm_conv.h) against cuDNN, both NHWC
// f16 with f32 accumulation (cuDNN: Tensor Core math, algorithm from its v7 heuristic), on
// ResNet18's convolution shapes at batch 256 x 224, in the same run: forward, input gradient and
// weight gradient. Prints TFLOP/s per pass, the ratio kiln / cuDNN (time) and kiln's relative error
// against cuDNN's output (max |diff| / max |out|, must stay < 1e-2; exit 1 otherwise).
// Exits 0 with "no GPU: <reason>" when there is none. Without cuDNN only kiln's numbers print.
//
// usage: bench_gpu_conv [--batch B] [--size S] [--reps R] [--only NAME-substring]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_cli.h"

#if defined(KILN_WITH_CUDA)
#include <cuda_runtime.h>

#include "engine/core/half.h"
#include "kernels/common/nn_desc.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/igemm_conv.h"
#include "kernels/cuda/runtime.h"


using namespace kiln;

namespace {

struct Shape {
  const char* name;
  int64_t C, H, K, R, stride, pad;
};
// ResNet18 (torchvision) at 224: H is the input size of the conv.
const Shape kShapes[] = {
    {"conv1 7x7/2", 3, 224, 64, 7, 2, 3},     {"layer1 3x3", 64, 56, 64, 3, 1, 1},
    {"layer2.0 3x3/2", 64, 56, 128, 3, 2, 1}, {"layer2 3x3", 128, 28, 128, 3, 1, 1},
    {"layer2 ds 1x1/2", 64, 56, 128, 1, 2, 0}, {"layer3.0 3x3/2", 128, 28, 256, 3, 2, 1},
    {"layer3 3x3", 256, 14, 256, 3, 1, 1},    {"layer3 ds 1x1/2", 128, 28, 256, 1, 2, 0},
    {"layer4.0 3x3/2", 256, 14, 512, 3, 2, 1}, {"layer4 3x3", 512, 7, 512, 3, 1, 1},
    {"layer4 ds 1x1/2", 256, 14, 512, 1, 2, 0},
};

template <class F>
double time_ms(F f, int reps, cudaStream_t s) {
  f();
  cudaEvent_t a, b;
  KILN_CUDA_CHECK(cudaEventCreate(&a), "bench");
  KILN_CUDA_CHECK(cudaEventCreate(&b), "bench");
  KILN_CUDA_CHECK(cudaEventRecord(a, s), "bench");
  for (int i = 0; i < reps; ++i) f();
  KILN_CUDA_CHECK(cudaEventRecord(b, s), "bench");
  KILN_CUDA_CHECK(cudaEventSynchronize(b), "bench");
  float ms = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b), "bench");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / reps;
}

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { KILN_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "bench alloc"); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

std::vector<float> download_half(const void* p, size_t n) {
  std::vector<uint16_t> h(n);
  KILN_CUDA_CHECK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost), "bench");
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = half_bits_to_float(h[i]);
  return f;
}

double rel_err(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num = std::max(num, std::fabs((double)ref[i] - got[i]));
    den = std::max(den, std::fabs((double)ref[i]));
  }
  return num / den;
}

#if defined(KILN_WITH_CUDNN)
// cuDNN descriptors of one NHWC f16 convolution (f32 compute, Tensor Core math) and its algorithms.
struct CudnnConv {
  cudnnHandle_t h = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t ws_bytes = 0;
  CudnnConv(cudnnHandle_t handle, const Conv2dDesc& d) : h(handle) {
    const char* what = "bench cudnn";
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x), what);
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y), what);
    KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w), what);
    KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv), what);
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, (int)d.N, (int)d.C, (int)d.H,
                                                (int)d.W), what);
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, (int)d.N, (int)d.K,
                                                (int)d.out_h(), (int)d.out_w()), what);
    KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, (int)d.K, (int)d.C, (int)d.R,
                                                (int)d.S), what);
    KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, (int)d.pad_h, (int)d.pad_w, (int)d.stride_h,
                                                     (int)d.stride_w, (int)d.dil_h, (int)d.dil_w,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT), what);
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_TENSOR_OP_MATH), what);
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t pf;
    KILN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, 1, &n, &pf), what);
    fwd = pf.algo;
    cudnnConvolutionBwdDataAlgoPerf_t pd;
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w, y, conv, x, 1, &n, &pd), what);
    bwd_data = pd.algo;
    cudnnConvolutionBwdFilterAlgoPerf_t pw;
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, y, conv, w, 1, &n, &pw), what);
    bwd_filter = pw.algo;
    size_t b1 = 0, b2 = 0, b3 = 0;
    KILN_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, x, w, conv, y, fwd, &b1), what);
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, w, y, conv, x, bwd_data, &b2), what);
    KILN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, conv, w, bwd_filter, &b3), what);
    ws_bytes = std::max({b1, b2, b3});
  }
  ~CudnnConv() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  CudnnConv(const CudnnConv&) = delete;
  CudnnConv& operator=(const CudnnConv&) = delete;
};
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gpu_conv: kiln's Tensor Core convolutions against cuDNN on ResNet shapes (needs a GPU)"};
  app.name("bench_gpu_conv");
  int64_t batch = 256, size = 224;
  int reps = 10;
  std::string only;
  app.add_option("--batch", batch, "batch")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--size", size, "input height = width")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--only", only, "run only shapes whose name contains this");
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  if (cuda::device_count() == 0) {
    std::printf("no GPU: %s\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  try {
    const auto props = cuda::device_properties(0);
    std::printf("bench_gpu_conv: %s, ResNet18 convs, batch %ld x %ld, NHWC f16, f32 accumulate, %d reps\n",
                props.name.c_str(), (long)batch, (long)size, reps);
#if defined(KILN_WITH_CUDNN)
    const char* peer = "cuDNN";
#else
    const char* peer = "(no cuDNN)";
#endif
    std::printf("%-17s %-6s %12s %12s %8s %10s   [peer: %s]\n", "shape", "pass", "kiln TF/s", "peer TF/s", "ratio",
                "rel err", peer);
    cudaStream_t s = cuda::compute_stream(0);
#if defined(KILN_WITH_CUDNN)
    cudnnHandle_t h;
    KILN_CUDNN_CHECK(cudnnCreate(&h), "bench");
    KILN_CUDNN_CHECK(cudnnSetStream(h, s), "bench");
#endif
    std::mt19937 g(2);
    std::uniform_real_distribution<float> u(-1, 1);
    int status = 0;
    double sum_kiln = 0, sum_peer = 0;  // ms over all shapes and passes
    for (const Shape& sh : kShapes) {
      if (!only.empty() && std::string(sh.name).find(only) == std::string::npos) continue;
      Conv2dDesc d;
      d.N = batch; d.C = sh.C; d.H = d.W = sh.H * size / 224; d.K = sh.K; d.R = d.S = sh.R;
      d.stride_h = d.stride_w = sh.stride; d.pad_h = d.pad_w = sh.pad;
      const size_t nx = d.N * d.H * d.W * d.C, nw = d.K * d.R * d.S * d.C, ny = d.N * d.K * d.out_h() * d.out_w();
      Dev x(nx * 2), w(nw * 2), dy(ny * 2), out(std::max({nx, nw, ny}) * 2), ref(std::max({nx, nw, ny}) * 2);
      for (auto [p, n] : {std::pair<void*, size_t>{x.p, nx}, {w.p, nw}, {dy.p, ny}}) {
        std::vector<uint16_t> v(n);
        for (auto& e : v) e = float_to_half_bits(u(g));
        KILN_CUDA_CHECK(cudaMemcpy(p, v.data(), n * 2, cudaMemcpyHostToDevice), "bench");
      }
      const size_t kws = cuda::igemm_conv_workspace_bytes(d, cuda::ConvPass::wgrad);
      Dev kw(kws);
      const double flop = 2.0 * d.forward_macs();
      const float one = 1.f, zero = 0.f;
      (void)one; (void)zero;
#if defined(KILN_WITH_CUDNN)
      CudnnConv cd(h, d);
      Dev cws(cd.ws_bytes);
#endif
      for (int pass = 0; pass < 3; ++pass) {
        const char* pname = pass == 0 ? "fprop" : pass == 1 ? "dgrad" : "wgrad";
        const size_t n_out = pass == 0 ? ny : pass == 1 ? nx : nw;
        auto kiln_call = [&] {
          if (pass == 0) cuda::igemm_conv_fprop(d, x.p, w.p, out.p, DType::f16, 1.f, 0.f, s);
          else if (pass == 1) cuda::igemm_conv_dgrad(d, dy.p, w.p, out.p, DType::f16, 1.f, 0.f, s);
          else cuda::igemm_conv_wgrad(d, dy.p, x.p, out.p, DType::f16, 1.f, 0.f, kw.p, kws, s);
        };
        const double t_kiln = time_ms(kiln_call, reps, s);
        double t_peer = 0, err = 0;
        sum_kiln += t_kiln;
#if defined(KILN_WITH_CUDNN)
        auto peer_call = [&] {
          if (pass == 0)
            KILN_CUDNN_CHECK(cudnnConvolutionForward(h, &one, cd.x, x.p, cd.w, w.p, cd.conv, cd.fwd, cws.p,
                                                     cd.ws_bytes, &zero, cd.y, ref.p), "bench cudnn fprop");
          else if (pass == 1)
            KILN_CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, cd.w, w.p, cd.y, dy.p, cd.conv, cd.bwd_data, cws.p,
                                                          cd.ws_bytes, &zero, cd.x, ref.p), "bench cudnn dgrad");
          else
            KILN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, cd.x, x.p, cd.y, dy.p, cd.conv, cd.bwd_filter,
                                                            cws.p, cd.ws_bytes, &zero, cd.w, ref.p), "bench cudnn wgrad");
        };
        t_peer = time_ms(peer_call, reps, s);
        sum_peer += t_peer;
        err = rel_err(download_half(ref.p, n_out), download_half(out.p, n_out));
        if (!(err < 1e-2)) status = 1;
#else
        (void)n_out;
#endif
        std::printf("%-17s %-6s %12.1f %12.1f %7.0f%% %10.2e%s\n", sh.name, pname, flop / t_kiln / 1e9,
                    t_peer > 0 ? flop / t_peer / 1e9 : 0.0, t_peer > 0 ? 100.0 * t_peer / t_kiln : 0.0, err,
                    err < 1e-2 ? "" : "  WRONG");
      }
    }
#if defined(KILN_WITH_CUDNN)
    cudnnDestroy(h);
#endif
    std::printf("total: kiln %.2f ms, %s %.2f ms (kiln at %.0f%% of its speed)%s\n", sum_kiln, peer, sum_peer,
                sum_kiln > 0 ? 100.0 * sum_peer / sum_kiln : 0.0, status ? ", WRONG results above" : "");
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_conv: %s\n", e.what());
    return 1;
  }
  });
}

#else
int main(int argc, char** argv) {
  CLI::App app{"bench_gpu_conv: kiln's Tensor Core convolutions against cuDNN on ResNet shapes (needs a GPU)"};
  app.name("bench_gpu_conv");
  app.allow_extras();  // the CUDA build's flags: nothing to run them on
  return kiln_bench::run(app, argc, argv, [&]() -> int {
    std::printf("no GPU: kiln was built without CUDA (KILN_CUDA=OFF or no nvcc)\n");
    return 0;
  });
}
#endif
