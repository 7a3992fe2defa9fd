// CudaRuntimeHooks: what engine/memory needs from a CUDA runtime to give cuda:N an allocator: how many
// devices there are, the device memory provider and the allocator's event source for one device.
// Filled by the real runtime (engine/memory/cuda_runtime_hooks.cpp over cudaMalloc / cudaEvent, in
// KILN_WITH_CUDA builds) or by the CPU execution mode (kernels/cuda_cpu: host memory, always-complete
// events), and installed together with the kernel table (kernels/common/cuda_backend.h), which owns the
// rest of "what the engine calls on a cuda device". The registry (registry.cpp) reads it when it builds
// a cuda:N slot. This file must not include kernels/ or a CUDA header: it exists in every build.
#pragma once
#include <memory>

#include "engine/memory/event_source.h"
#include "engine/memory/provider.h"

namespace kiln {

struct CudaRuntimeHooks {
  const char* name = nullptr;  // "CUDA runtime", "CPU execution mode": named in errors
  int (*device_count)() = nullptr;                                   // never throws
  std::unique_ptr<Provider> (*make_provider)(int device) = nullptr;  // cuda:device's raw memory
  std::unique_ptr<EventSource> (*make_event_source)(int device) = nullptr;
};

// The hooks in force: the real runtime's in a CUDA build until something else is installed; nullptr in a
// build without CUDA when nothing is installed (cuda:N then does not exist).
const CudaRuntimeHooks* cuda_runtime_hooks();
// Installs `h` (nullptr: none) and returns the previous hooks. Test support and the CPU mode's install
// (kernels/common/cuda_backend.h's CudaBackendInstall); not thread-safe against concurrent cuda work.
const CudaRuntimeHooks* set_cuda_runtime_hooks(const CudaRuntimeHooks* h);
// The real CUDA runtime's hooks (cudaMalloc provider, CudaEventSource); nullptr without KILN_WITH_CUDA.
const CudaRuntimeHooks* real_cuda_runtime_hooks();

// Drops the registry's cuda:N allocators so the next use builds them from the hooks then in force (a
// switch of runtime). An allocator that still holds blocks is kept alive but forgotten (leaked), never
// freed under live tensors. Defined in registry.cpp.
void forget_cuda_allocators();

}  // namespace kiln
