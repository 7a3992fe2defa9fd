// dtype-dispatching batched GEMM for the op layer: f32/f64 through OpenBLAS, f16/bf16 computed
// in f32 and rounded on store (kiln's CPU rule for 16-bit types).
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"

namespace kiln::cpu {

#include "kernels/common/api/matmul.inc"

}  // namespace kiln::cpu
