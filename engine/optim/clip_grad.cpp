// Global-norm gradient clipping.
#include "engine/optim/clip_grad.h"

#include <cmath>
#include <limits>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln::optim {

Tensor clip_grad_norm_on_device(const std::vector<Tensor>& params, double max_norm) {
  KILN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  NoGradGuard ng;
  MemoryScope ms(MemoryTag::temporary);
  // Sum of squares accumulated on the gradients' device (f64), nothing read back.
  Tensor sq;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor g64 = to_dtype(g, DType::f64);
    Tensor s = sum(mul(g64, g64));
    sq = sq.defined() ? add(sq, s) : s;
  }
  if (!sq.defined()) return Tensor();
  Tensor norm = sqrt(sq);
  // coef = min(max_norm / (norm + 1e-6), 1): gradients under the limit are multiplied by exactly 1
  // (unchanged); a NaN or inf norm makes them NaN, which the step's finite check then reports.
  Tensor coef = clamp(div(full({}, max_norm, DType::f64, norm.device()), add(norm, 1e-6)), std::nullopt, 1.0);
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) mul_(g, to_dtype(coef, g.dtype()));
  }
  return norm;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const Tensor norm = clip_grad_norm_on_device(params, max_norm);
  if (!norm.defined()) return 0.0;
  // Meta gradients (the memory predictor): the same allocations, no values to read.
  if (norm.device().is_meta()) return std::numeric_limits<double>::quiet_NaN();
  return to_device(norm, Device::cpu()).item();
}

}  // namespace kiln::optim
