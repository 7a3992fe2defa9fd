// Error checks for every CUDA runtime, cuBLAS and cuDNN call of the CUDA backend: a failure throws
// kiln::Error naming the op (with its shapes, built lazily by the caller) and the library's message.
// Host-only; included by .cu and .cpp files of kernels/cuda/. Must not include engine/ops.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "engine/core/error.h"

#if defined(KILN_WITH_CUDNN)
#include <cudnn.h>
#endif

namespace kiln::cuda {

// Throws kiln::Error("<what>: <call> failed: <message> (<code>)").
[[noreturn]] void throw_cuda(const std::string& what, const char* call, cudaError_t e);
[[noreturn]] void throw_cublas(const std::string& what, const char* call, cublasStatus_t s);
#if defined(KILN_WITH_CUDNN)
[[noreturn]] void throw_cudnn(const std::string& what, const char* call, cudnnStatus_t s);
#endif

}  // namespace kiln::cuda

// WHAT is any expression yielding std::string / const char* (evaluated only on failure), e.g.
// KILN_CUDA_CHECK(cudaMemcpyAsync(...), str_cat("to_device ", n, " bytes")).
#define KILN_CUDA_CHECK(call, what)                                                 \
  do {                                                                              \
    cudaError_t kiln_e_ = (call);                                                   \
    if (kiln_e_ != cudaSuccess) ::kiln::cuda::throw_cuda((what), #call, kiln_e_);  \
  } while (0)

#define KILN_CUBLAS_CHECK(call, what)                                                        \
  do {                                                                                       \
    cublasStatus_t kiln_s_ = (call);                                                         \
    if (kiln_s_ != CUBLAS_STATUS_SUCCESS) ::kiln::cuda::throw_cublas((what), #call, kiln_s_); \
  } while (0)

#define KILN_CUDNN_CHECK(call, what)                                                        \
  do {                                                                                      \
    cudnnStatus_t kiln_s_ = (call);                                                         \
    if (kiln_s_ != CUDNN_STATUS_SUCCESS) ::kiln::cuda::throw_cudnn((what), #call, kiln_s_); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here (asynchronous faults surface at
// the next synchronizing call, which is checked too).
#define KILN_CUDA_LAUNCH_CHECK(what) KILN_CUDA_CHECK(cudaGetLastError(), (what))
