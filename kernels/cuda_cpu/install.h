// CPU execution mode as the engine's cuda:0 (tests only): installs the CPU mode's backend table
// (kiln::cuda_on_cpu, filled by kernels/cuda/backend_table.cpp) as the cuda backend in force, so that
// tensors on cuda:0 live in host memory and every op on them runs kiln's CUDA kernels through the CPU
// mode (kernel_launch's fibres), copies are memcpy, events always complete, and any cuBLAS / cuDNN call
// throws naming itself. Returns the guard: destroying it restores the previous backend (the real one in
// a CUDA build, none otherwise) and drops cuda:0's allocator, so other tests of the same binary are
// unaffected. Free every cuda:0 tensor before the guard goes. Not for the real backend's users.
#pragma once
#include <memory>

#include "kernels/common/cuda_backend.h"

namespace kiln::cuda_on_cpu {

std::unique_ptr<CudaBackendInstall> install_as_cuda_backend();

}  // namespace kiln::cuda_on_cpu
