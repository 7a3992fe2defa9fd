// The optimizers' fused per-parameter updates as ops that dispatch by device like every other op:
// the per-element rules of kernels/common/update_rules.h run as a CPU loop or one CUDA kernel per
// parameter. In place over contiguous f32 tensors of one parameter (momentum_buffer may be
// undefined when h.momentum == 0); nothing is allocated, nothing is recorded for autograd, and on
// the meta device nothing happens (no data). The optimizers (engine/optim) decide when to use them.
#pragma once
#include "engine/tensor/tensor.h"
#include "kernels/common/update_rules.h"

namespace kiln {

// p, g, momentum_buffer: the same numel, contiguous f32, one device. first_step: buf = d.
void sgd_fused_(Tensor& p, const Tensor& g, Tensor* momentum_buffer, bool first_step, const optim::SgdParams& h);
// p, g, exp_avg, exp_avg_sq: the same numel, contiguous f32, one device.
void adamw_fused_(Tensor& p, const Tensor& g, Tensor& exp_avg, Tensor& exp_avg_sq, const optim::AdamWParams& h);

}  // namespace kiln
