// Which implementation runs GEMMs and convolutions on the GPU: the vendor libraries (cuBLAS /
// cuDNN, the default) or kiln's own Tensor Core kernels (hgemm.h, igemm_conv.h). One process-wide
// choice, set by the CLI's `--kernels kiln|vendor`; read by the CUDA backend at each call.
// Note: kernels/cuda/*.cpp is built only with the CUDA backend (KILN_WITH_CUDA).
#pragma once
#include <string>

namespace kiln::cuda {

enum class KernelSource { vendor, kiln };

void set_kernel_source(KernelSource s);
KernelSource kernel_source();  // vendor unless set

// "vendor" / "kiln"; parse throws kiln::Error naming the accepted values for anything else.
const char* kernel_source_name(KernelSource s);
KernelSource parse_kernel_source(const std::string& s);

}  // namespace kiln::cuda
