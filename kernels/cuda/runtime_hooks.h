// The two runtime services only the backend table needs (kernels/cuda/backend_table.cpp), apart from
// runtime.h so the kernel files that include runtime.h do not depend on them: making a device current,
// and the hooks engine/memory builds cuda:N's allocator from (device count, memory provider, event
// source). Defined by runtime.cpp (cudaSetDevice; the cudaMalloc provider and CudaEventSource) and, in
// the CPU execution mode, by kernels/cuda_cpu/runtime_shim.cpp (device 0 only; host memory).
#pragma once
#include "engine/memory/cuda_runtime_hooks.h"

namespace kiln::cuda {

void set_device(int dev);  // checked
const CudaRuntimeHooks* runtime_hooks();

}  // namespace kiln::cuda
