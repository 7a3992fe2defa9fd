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
// Under kiln, the conv bias (forward add and gradient) runs on kiln's bias kernels (bias.cu) instead of
// cuDNN (cudnnAddTensor, cudnnConvolutionBackwardBias: f32/f64) or the generic broadcast add and
// sum (16-bit); the convolution itself still goes to cuDNN where kiln has no kernel (f32, f64, bf16).
inline bool bias_uses_kiln() { return kernel_source() == KernelSource::kiln; }

// "vendor" / "kiln"; parse throws kiln::Error naming the accepted values for anything else.
const char* kernel_source_name(KernelSource s);
KernelSource parse_kernel_source(const std::string& s);

}  // namespace kiln::cuda
