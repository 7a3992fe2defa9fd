// The fused optimizer updates on the CPU: the per-element rules of kernels/common/update_rules.h
// over one parameter tensor, OpenMP over elements for large tensors. Never allocates.
#pragma once
#include <cstdint>

#include "kernels/common/update_rules.h"

namespace kiln::cpu {

#include "kernels/common/api/optim_update.inc"

}  // namespace kiln::cpu
