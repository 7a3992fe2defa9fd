// Per-element optimizer update rules with PyTorch's semantics, shared by the fused CPU loops and
// the fused CUDA kernels (kernels/cuda/optim_update.cu). Pure math over scalars: no tensors, no
// allocation, no branching on devices.
#pragma once
#include <cmath>

#include "engine/core/host_device.h"

namespace kiln::optim {

// torch.optim.SGD (dampening 0 unless given): d = g + wd*p; buf = first ? d : m*buf + (1-damp)*d;
// d = nesterov ? d + m*buf : buf; p -= lr*d. With momentum == 0 the buffer is untouched.
struct SgdParams {
  float lr, momentum, dampening, weight_decay;
  bool nesterov;
};

KILN_HOST_DEVICE void sgd_update(float& p, float g, float& buf, bool first_step, const SgdParams& h) {
  float d = g;
  if (h.weight_decay != 0.f) d += h.weight_decay * p;
  if (h.momentum != 0.f) {
    buf = first_step ? d : h.momentum * buf + (1.f - h.dampening) * d;
    d = h.nesterov ? d + h.momentum * buf : buf;
  }
  p -= h.lr * d;
}

// torch.optim.AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), bc_i = 1 - b_i^step.
struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  float step_size;              // lr / bias_correction1
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
};

KILN_HOST_DEVICE void adamw_update(float& p, float g, float& m, float& v, const AdamWParams& h) {
  p *= 1.f - h.lr * h.weight_decay;
  m = h.beta1 * m + (1.f - h.beta1) * g;
  v = h.beta2 * v + (1.f - h.beta2) * g * g;
  float denom = sqrtf(v) / h.bias_correction2_sqrt + h.eps;
  p -= h.step_size * m / denom;
}

}  // namespace kiln::optim
