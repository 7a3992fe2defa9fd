// Loss kernels on the CPU with PyTorch 1.13 semantics: cross_entropy over class-index targets
// (class weights, label smoothing, ignore_index), nll_loss on log-probs, mse_loss. Inputs are
// contiguous (N, K) logits / log-probs; the op layer moves the class dim of (N, K, d...) inputs
// last and flattens. Never allocates.
#pragma once
#include <cstdint>

#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

#include "kernels/common/api/loss.inc"

}  // namespace kiln::cpu
