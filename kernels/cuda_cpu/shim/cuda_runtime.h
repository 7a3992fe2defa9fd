// CPU execution mode (kernels/cuda_cpu): what kiln's .cu sources use of <cuda_runtime.h>, for the
// same sources compiled as host C++. Types (dim3, streams, errors), the few runtime calls the kernel
// files make (memset/memcpy on "device" memory, which is host memory here, device attributes, the
// shared-memory opt-in), and the device built-ins (kernels/cuda_cpu/device_builtins.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda_cpu/cuda_types.h"

#include "kernels/cuda_cpu/grid_runner.h"

inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "CPU-mode error"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrMultiProcessorCount ? 132 : 9;  // an H100's, so grid sizes match a real launch
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t = nullptr) {
  if (n) std::memset(p, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t = nullptr) {
  if (n) std::memmove(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) {
  *p = std::malloc(n);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
template <typename F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute a, int v) {
  if (a != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return ::kiln::cuda_on_cpu::set_max_dynamic_shared((const void*)kernel, v);
}

#include "kernels/cuda_cpu/device_builtins.h"
