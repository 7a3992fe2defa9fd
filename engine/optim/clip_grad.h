// Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_): if the norm over every
// gradient exceeds max_norm, all gradients are scaled by max_norm / (norm + 1e-6).
#pragma once
#include <vector>

#include "engine/tensor/tensor.h"

namespace kiln::optim {

// Scales the gradients on their device, without reading anything back (no host sync: a training
// step reads the norm in its one read-back), and returns the total norm before clipping as an f64
// scalar tensor on that device; undefined when no parameter has a gradient. Gradients under the
// limit are multiplied by exactly 1.
Tensor clip_grad_norm_on_device(const std::vector<Tensor>& params, double max_norm);

// The same, reading the norm back (one host sync); 0 when no parameter has a gradient. Meta
// gradients: the same temporaries are allocated, and the result is NaN.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace kiln::optim
