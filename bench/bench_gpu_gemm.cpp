// Benchmark: kiln's FP16 Tensor Core GEMM (kernels/cuda/hgemm.h) against cublasGemmEx (f16 in, f32
// accumulate, f16 out) on row-major squares, in the same run. Prints TFLOP/s of both, the ratio
// kiln / cuBLAS and the relative error of kiln's C against cuBLAS's (max |diff| / max |C|), which
// must stay below 1e-2 (exit 1 otherwise). Timing: CUDA events over --reps calls after warm-up.
// Goal: >= 90% of cuBLAS on the large squares. Exits 0 with "no GPU: <reason>" when there is none.
//
// usage: bench_gpu_gemm [--sizes 1024,2048,4096,8192] [--reps R]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_cli.h"

#if defined(KILN_WITH_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "engine/core/half.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/hgemm.h"
#include "kernels/cuda/runtime.h"


using namespace kiln;

namespace {

std::vector<long> parse_list(const char* s) {
  std::vector<long> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtol(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
    else if (*p) break;
  }
  return v;
}

// Milliseconds per call of f, averaged over reps after 3 warm-up calls.
template <class F>
double time_ms(F f, int reps, cudaStream_t s) {
  for (int i = 0; i < 3; ++i) f();
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

double rel_err(const std::vector<uint16_t>& ref, const std::vector<uint16_t>& got) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = half_bits_to_float(ref[i]), g = half_bits_to_float(got[i]);
    if (!std::isfinite(g)) return INFINITY;
    num = std::max(num, std::fabs(r - g));
    den = std::max(den, std::fabs(r));
  }
  return num / den;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gpu_gemm: kiln's FP16 Tensor Core GEMMs against cuBLAS on square sizes (needs a GPU)"};
  app.name("bench_gpu_gemm");
  std::vector<long> sizes = {1024, 2048, 4096, 8192};
  std::string sizes_text;
  int reps = 20;
  app.add_option("--sizes", sizes_text, "square sizes a,b,.. (default 1024,2048,4096,8192)");
  app.add_option("--reps", reps, "timed repetitions")->check(CLI::PositiveNumber)->capture_default_str();
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  if (!sizes_text.empty()) sizes = parse_list(sizes_text.c_str());
  if (cuda::device_count() == 0) {
    std::printf("no GPU: %s\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  try {
    const auto props = cuda::device_properties(0);
    std::printf("bench_gpu_gemm: %s, C = A B row-major, f16 in, f32 accumulate, f16 out, %d reps\n",
                props.name.c_str(), reps);
    std::printf("%-8s %14s %14s %8s %12s\n", "size", "kiln TFLOP/s", "cuBLAS TFLOP/s", "ratio", "rel err");
    cudaStream_t s = cuda::compute_stream(0);
    cublasHandle_t h;
    KILN_CUBLAS_CHECK(cublasCreate(&h), "bench");
    KILN_CUBLAS_CHECK(cublasSetStream(h, s), "bench");
    std::mt19937 g(1);
    std::uniform_real_distribution<float> u(-1, 1);
    int status = 0;
    for (long n : sizes) {
      const size_t nn = (size_t)n * n;
      std::vector<uint16_t> a(nn), b(nn);
      for (auto& x : a) x = float_to_half_bits(u(g));
      for (auto& x : b) x = float_to_half_bits(u(g));
      void *dA, *dB, *dC1, *dC2;
      KILN_CUDA_CHECK(cudaMalloc(&dA, nn * 2), "bench");
      KILN_CUDA_CHECK(cudaMalloc(&dB, nn * 2), "bench");
      KILN_CUDA_CHECK(cudaMalloc(&dC1, nn * 2), "bench");
      KILN_CUDA_CHECK(cudaMalloc(&dC2, nn * 2), "bench");
      KILN_CUDA_CHECK(cudaMemcpy(dA, a.data(), nn * 2, cudaMemcpyHostToDevice), "bench");
      KILN_CUDA_CHECK(cudaMemcpy(dB, b.data(), nn * 2, cudaMemcpyHostToDevice), "bench");
      const float one = 1.f, zero = 0.f;
      auto kiln_call = [&] { cuda::hgemm(false, false, n, n, n, 1.f, dA, n, dB, n, 0.f, dC1, n, DType::f16, s); };
      // Row-major C = A B is column-major C^T = B^T A^T.
      auto cublas_call = [&] {
        KILN_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &one, dB, CUDA_R_16F, (int)n,
                                       dA, CUDA_R_16F, (int)n, &zero, dC2, CUDA_R_16F, (int)n, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
                          "bench cublasGemmEx");
      };
      const double t_kiln = time_ms(kiln_call, reps, s), t_cublas = time_ms(cublas_call, reps, s);
      std::vector<uint16_t> c1(nn), c2(nn);
      KILN_CUDA_CHECK(cudaMemcpy(c1.data(), dC1, nn * 2, cudaMemcpyDeviceToHost), "bench");
      KILN_CUDA_CHECK(cudaMemcpy(c2.data(), dC2, nn * 2, cudaMemcpyDeviceToHost), "bench");
      const double err = rel_err(c2, c1), flop = 2.0 * n * n * n;
      if (!(err < 1e-2)) status = 1;
      std::printf("%-8ld %14.1f %14.1f %7.0f%% %12.2e%s\n", n, flop / t_kiln / 1e9, flop / t_cublas / 1e9,
                  100.0 * t_cublas / t_kiln, err, err < 1e-2 ? "" : "  WRONG");
      for (void* p : {dA, dB, dC1, dC2}) KILN_CUDA_CHECK(cudaFree(p), "bench");
    }
    cublasDestroy(h);
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_gemm: %s\n", e.what());
    return 1;
  }
  });
}

#else
int main(int argc, char** argv) {
  CLI::App app{"bench_gpu_gemm: kiln's FP16 Tensor Core GEMMs against cuBLAS on square sizes (needs a GPU)"};
  app.name("bench_gpu_gemm");
  app.allow_extras();  // the CUDA build's flags: nothing to run them on
  return kiln_bench::run(app, argc, argv, [&]() -> int {
    std::printf("no GPU: kiln was built without CUDA (KILN_CUDA=OFF or no nvcc)\n");
    return 0;
  });
}
#endif
