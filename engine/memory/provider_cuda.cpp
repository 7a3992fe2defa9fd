// cudaMalloc / cudaHostAlloc providers (see provider_cuda.h). Never run on the build machines
// (no GPU): only compiled there.
#ifdef KILN_WITH_CUDA
#include "engine/memory/provider_cuda.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include "engine/core/error.h"
#include "engine/memory/cuda_device_guard.h"

namespace kiln {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

void* CudaProvider::map(size_t bytes) {
  CudaDeviceGuard g(device_);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so the retry can succeed
    return nullptr;
  }
  return p;
}

void CudaProvider::unmap(void* p, size_t) {
  CudaDeviceGuard g(device_);
  cudaError_t e = cudaFree(p);
  KILN_CHECK(e == cudaSuccess, "cudaFree on cuda:", device_, ": ", cudaGetErrorString(e));
}

size_t CudaProvider::capacity() const {
  CudaDeviceGuard g(device_);
  size_t free_b = 0, total = 0;
  if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return total;
}

void* PinnedHostProvider::map(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void PinnedHostProvider::unmap(void* p, size_t) {
  cudaError_t e = cudaFreeHost(p);
  KILN_CHECK(e == cudaSuccess, "cudaFreeHost: ", cudaGetErrorString(e));
}

size_t PinnedHostProvider::capacity() const {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? (size_t)pages * (size_t)size : 0;
}

}  // namespace kiln
#endif
