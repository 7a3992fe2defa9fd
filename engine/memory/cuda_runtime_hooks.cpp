// The CUDA runtime hooks in force and the real runtime's (see cuda_runtime_hooks.h).
#include "engine/memory/cuda_runtime_hooks.h"

#include <atomic>

#ifdef KILN_WITH_CUDA
#include "engine/memory/event_source_cuda.h"
#include "engine/memory/provider_cuda.h"
#endif

namespace kiln {

namespace {

#ifdef KILN_WITH_CUDA
const CudaRuntimeHooks kReal = {
    "CUDA runtime",
    [] { return cuda_device_count(); },
    [](int device) -> std::unique_ptr<Provider> { return std::make_unique<CudaProvider>(device); },
    [](int device) -> std::unique_ptr<EventSource> { return std::make_unique<CudaEventSource>(device); },
};
#endif

std::atomic<const CudaRuntimeHooks*>& current() {
  static std::atomic<const CudaRuntimeHooks*> h{real_cuda_runtime_hooks()};
  return h;
}

}  // namespace

const CudaRuntimeHooks* real_cuda_runtime_hooks() {
#ifdef KILN_WITH_CUDA
  return &kReal;
#else
  return nullptr;
#endif
}

const CudaRuntimeHooks* cuda_runtime_hooks() { return current().load(); }

const CudaRuntimeHooks* set_cuda_runtime_hooks(const CudaRuntimeHooks* h) { return current().exchange(h); }

}  // namespace kiln
