// Per-device library handles of the CUDA backend, created on first use and bound to the device's
// compute stream: cuBLAS (its math mode is set per GEMM by dtype, matmul.cpp) and cuDNN. Kernels act
// on the current device (cudaGetDevice); the op layer keeps cuda:0 current in single-GPU runs.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#if defined(KILN_WITH_CUDNN)
#include <cudnn.h>
#endif

namespace kiln::cuda {

int current_device();
cublasHandle_t cublas_handle(int dev);
#if defined(KILN_WITH_CUDNN)
cudnnHandle_t cudnn_handle(int dev);
#endif

// TF32 Tensor Core math for f32 GEMMs and convolutions (default off: results within 1e-5 of the
// CPU). Process-wide; takes effect on the next call.
void set_allow_tf32(bool allow);
bool allow_tf32();

// cuDNN benchmark mode (torch.backends.cudnn.benchmark): when on, the first convolution of each
// (shape, dtype, layout, direction) times cuDNN's algorithms with cudnnFind*AlgorithmEx on its own
// buffers (one host sync) and keeps the fastest usable one; when off (default) cuDNN's heuristics
// choose. Process-wide; shapes seen in one mode are cached separately from the other.
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

}  // namespace kiln::cuda
