// CPU elementwise kernels over strided operands: copy/cast, fill, unary, binary, where, random
// fill. Compute in f32 (f64 for f64), round on store; OpenMP over the outer loop.
#pragma once
#include "kernels/common/elementwise_math.h"
#include "kernels/common/strided.h"

namespace kiln::cpu {

#include "kernels/common/api/elementwise.inc"

}  // namespace kiln::cpu
