// `--kernels kiln|vendor` (see kernel_option.h).
#include "engine/train/kernel_option.h"

#include "engine/core/error.h"

#include "kernels/common/cuda_backend.h"

namespace kiln {

const std::string& check_kernels_option(const std::string& text) {
  KILN_CHECK(text == "vendor" || text == "kiln", "--kernels: '", text,
             "' is not a kernel source (expected vendor: cuBLAS/cuDNN, or kiln: kiln's Tensor Core kernels)");
  return text;
}

void apply_kernels_option(const std::string& text, std::ostream& log) {
  check_kernels_option(text);
  if (const CudaBackend* b = cuda_backend()) {  // the cuda backend in force (kernels/common/cuda_backend.h)
    b->set_kernels_kiln(text == "kiln");
    if (text == "kiln") log << "kernels: kiln's own Tensor Core GEMM and convolution kernels on CUDA devices\n";
  } else if (text == "kiln") {
    log << "kernels: --kernels kiln only affects CUDA kernels; this build has no CUDA backend, so the CPU "
           "kernels run as usual\n";
  }
}

}  // namespace kiln
