// CudaDeviceGuard: makes a device current for a scope and restores the previous one, for the CUDA
// code of engine/memory (providers, event source), which must not include kernels/cuda. Never
// throws: a failed cudaSetDevice surfaces at the next checked call on that device.
#pragma once
#ifdef KILN_WITH_CUDA
#include <cuda_runtime.h>

namespace kiln {

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int d) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != d) cudaSetDevice(d);
  }
  ~CudaDeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

}  // namespace kiln
#endif
