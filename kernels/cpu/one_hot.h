// One-hot encoding of class-index targets on the CPU (kernels/common/api/one_hot.inc): the helper of
// the Dice loss, (N, S) i64 -> (N, K, S). Never allocates.
#pragma once
#include <cstdint>

namespace kiln::cpu {

#include "kernels/common/api/one_hot.inc"

}  // namespace kiln::cpu
