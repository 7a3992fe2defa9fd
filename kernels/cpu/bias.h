// The per-channel bias add and bias gradient on the CPU (kernels/common/api/bias.inc): the twin of
// kernels/cuda/bias.cu, visiting elements through the same index math (kernels/common/bias_math.h).
// The gradient accumulates in f64 and rounds once on store, so it is the reference the CUDA kernels
// (f32 accumulation) are compared with. Never allocates.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"

namespace kiln::cpu {

#include "kernels/common/api/bias.inc"

}  // namespace kiln::cpu
