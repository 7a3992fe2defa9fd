// The one way kiln launches a kernel: launch_kernel(name, kernel, grid, block, smem, stream, args...)
// replaces every `kernel<<<grid, block, smem, stream>>>(args...)`, so the GPU build and the CPU
// execution mode (kernels/cuda_cpu, KILN_CUDA_ON_CPU) share every call site. Before launching it checks
// what a GPU would reject or silently mis-run, naming the kernel: block size against the kernel's
// __launch_bounds__ (every kernel states one with KILN_KERNEL_BOUNDS), grid.y/z <= 65535, dynamic
// shared memory within what the kernel opted in to. Also the shared-memory declarations
// (KILN_SHARED, KILN_DYNAMIC_SHARED) that the CPU mode turns into per-block, checked buffers.
// Device-side headers only (.cu files); must not include engine/ops.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "engine/core/error.h"
#include "kernels/cuda/check.h"

#if defined(KILN_CUDA_ON_CPU)
#include "kernels/cuda_cpu/grid_runner.h"
#endif

#if defined(KILN_CUDA_ON_CPU)
// The CPU mode reads the bound from a table generated from these declarations (kernel_bounds.cmake).
#define KILN_KERNEL_BOUNDS(threads)
#define KILN_SHARED(T, name, n) \
  static const char name##_site_ = 0; \
  T* const name = ::kiln::cuda_on_cpu::static_shared<T>(&name##_site_, (n), #name)
#define KILN_DYNAMIC_SHARED(T, name) T* const name = ::kiln::cuda_on_cpu::dynamic_shared<T>()
#else
#define KILN_KERNEL_BOUNDS(threads) __launch_bounds__(threads)
#define KILN_SHARED(T, name, n) __shared__ T name[n]
#define KILN_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif

namespace kiln::cuda {

// Shape limits every launch must meet (the CUDA programming guide's, for sm_80 and sm_90).
inline void check_launch_shape(const char* name, dim3 grid, dim3 block, size_t smem) {
  const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64)
    throw Error(str_cat("launch of ", name, ": block (", block.x, ", ", block.y, ", ", block.z,
                        ") is not 1..1024 threads (z <= 64)"));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
    throw Error(str_cat("launch of ", name, ": grid (", grid.x, ", ", grid.y, ", ", grid.z,
                        ") is empty or has y or z above 65535"));
  if (smem > 227u * 1024u)
    throw Error(str_cat("launch of ", name, ": ", smem, " bytes of dynamic shared memory (the most is 227 KiB)"));
}

#if !defined(KILN_CUDA_ON_CPU)
// The kernel's limits from the runtime (its __launch_bounds__ and register use, its shared-memory opt-in),
// queried once per kernel, again when a launch asks for more dynamic shared memory than the cached opt-in
// (cudaFuncSetAttribute may have raised it since). False when they cannot be read (no device): the launch
// itself reports then.
inline bool kernel_limits(const void* kernel, size_t smem, cudaFuncAttributes& out) {
  static std::mutex mu;
  static std::unordered_map<const void*, cudaFuncAttributes> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto it = cache.find(kernel);
  if (it != cache.end() && smem <= (size_t)it->second.maxDynamicSharedSizeBytes) {
    out = it->second;
    return true;
  }
  cudaFuncAttributes a{};
  if (cudaFuncGetAttributes(&a, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  cache[kernel] = a;
  out = a;
  return true;
}
#endif

template <typename... P, typename... A>
void launch_kernel(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "launch_kernel: argument count differs from the kernel's");
  check_launch_shape(name, grid, block, smem);
#if defined(KILN_CUDA_ON_CPU)
  ::kiln::cuda_on_cpu::run_grid(name, (const void*)kernel, grid, block, smem, stream,
                                [&]() { kernel(P(args)...); });
#else
  cudaFuncAttributes attr{};
  if (kernel_limits((const void*)kernel, smem, attr)) {
    const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (threads > (unsigned long long)attr.maxThreadsPerBlock)
      throw Error(str_cat("launch of ", name, ": ", threads, " threads per block, the kernel allows ",
                          attr.maxThreadsPerBlock, " (__launch_bounds__ / registers)"));
    if (smem > (size_t)attr.maxDynamicSharedSizeBytes)
      throw Error(str_cat("launch of ", name, ": ", smem, " bytes of dynamic shared memory, the kernel opted in to ",
                          attr.maxDynamicSharedSizeBytes));
  }
  kernel<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
#endif
}

}  // namespace kiln::cuda
