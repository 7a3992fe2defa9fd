// `--kernels kiln|vendor` (kiln train, bench): which implementation runs GEMMs and convolutions on the GPU
// (kernels/cuda/kernel_select.h). The option is parsed and validated in every build; with the
// CUDA backend it sets kiln::cuda::set_kernel_source, without it `kiln` only notes that the
// choice affects CUDA kernels alone (the CPU backend has one implementation).
#pragma once
#include <ostream>
#include <string>

namespace kiln {

// "vendor" or "kiln" (returned as given); throws kiln::Error naming the accepted values otherwise.
const std::string& check_kernels_option(const std::string& text);

// Validates and applies the choice for this process; writes a note to log when it has no effect.
void apply_kernels_option(const std::string& text, std::ostream& log);

}  // namespace kiln
