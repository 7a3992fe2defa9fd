// Per-device library handles of the CUDA backend, created on first use and bound to the device's
// compute stream: cuBLAS (TF32 off unless enabled: f32 GEMMs are true f32) and cuDNN. Kernels act
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

}  // namespace kiln::cuda
