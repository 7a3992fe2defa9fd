// Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_): if the norm over every
// gradient exceeds max_norm, all gradients are scaled by max_norm / (norm + 1e-6).
#pragma once
#include <vector>

#include "engine/tensor/tensor.h"

namespace kiln::optim {

// Returns the total norm before clipping; parameters without a gradient are ignored. Meta
// gradients: the same temporaries are allocated, nothing is scaled, and the result is NaN.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace kiln::optim
