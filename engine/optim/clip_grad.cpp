// Global-norm gradient clipping.
#include "engine/optim/clip_grad.h"

#include <cmath>
#include <limits>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln::optim {

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  KILN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  NoGradGuard ng;
  MemoryScope ms(MemoryTag::temporary);
  // Sum of squares accumulated on the gradients' device; one read back for the norm (not one
  // per parameter: each would be a host sync on a GPU).
  Tensor sq_t;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor g64 = to_dtype(g, DType::f64);
    Tensor s = sum(mul(g64, g64));
    sq_t = sq_t.defined() ? add(sq_t, s) : s;
  }
  // Meta gradients (the memory predictor): the same allocations, no values to read or scale.
  if (sq_t.defined() && sq_t.device().is_meta()) return std::numeric_limits<double>::quiet_NaN();
  const double sq = sq_t.defined() ? to_device(sq_t, Device::cpu()).item() : 0.0;
  double norm = std::sqrt(sq);
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) mul_(g, coef);
    }
  return norm;
}

}  // namespace kiln::optim
