// install_as_cuda_backend (see install.h).
#include "kernels/cuda_cpu/prelude.h"

#include "kernels/cuda_cpu/install.h"

namespace kiln::cuda_on_cpu {

const CudaBackend& backend_table();  // kernels/cuda/backend_table.cpp, compiled into this library

std::unique_ptr<CudaBackendInstall> install_as_cuda_backend() {
  return std::make_unique<CudaBackendInstall>(&backend_table());
}

}  // namespace kiln::cuda_on_cpu
