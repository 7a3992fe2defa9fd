// Which path the CPU's bf16 convolutions (conv2d_bf16.h) and matmuls / linears (matmul_bf16.h) take, and
// oneDNN's ISA setting behind it (one setting for both).
// cpu_isa() (KILN_CPU_ISA, set_cpu_isa) picks the path: amx -> "onednn amx" (AMX-BF16 tiles),
// avx512_bf16 -> "onednn avx512_bf16" (AVX512-BF16 dot products), anything lower or a build without oneDNN
// (KILN_ONEDNN=OFF, the sanitizer build) -> "portable (f32 staging, slow)": engine/ops/nn_conv.cpp copies
// x, w and dy to f32 and runs kiln's f32 kernels. oneDNN takes its maximum ISA once per process, before its
// first primitive (dnnl_set_max_cpu_isa): the first bf16 convolution (or workspace query) fixes it from the
// path then; asking for the other oneDNN path later in the same process is an error naming both (tests
// that need several paths run one ctest case, i.e. one process, per path). The portable path stays
// available in every process. Must not run kernels or know tensors.
#pragma once
#include <string>

namespace kiln::cpu {

enum class Bf16Path { portable = 0, onednn_avx512_bf16 = 1, onednn_amx = 2 };

// The path cpu_isa() asks for (ignores whether oneDNN's ISA is already fixed to another one).
Bf16Path bf16_path_wanted();
// The path bf16 convolutions take now: bf16_path_wanted(), checked against oneDNN's fixed ISA (throws
// kiln::Error naming both when they differ).
Bf16Path bf16_path();
// "onednn amx", "onednn avx512_bf16", "portable (f32 staging, slow)".
const char* bf16_path_name(Bf16Path p);
// True when this build links oneDNN.
bool onednn_built();
// "2.6.3" (the library loaded at run time), or "none (built without oneDNN)".
std::string onednn_version();
// The oneDNN path its ISA was fixed to, or portable while no oneDNN primitive exists yet.
Bf16Path onednn_fixed_path();
// Fixes oneDNN's maximum ISA for `p` (an onednn_* path) if not yet done; throws kiln::Error when it was
// fixed to the other one. conv2d_bf16.cpp calls it before creating any primitive.
void onednn_fix_path(Bf16Path p);

}  // namespace kiln::cpu
