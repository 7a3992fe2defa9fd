// AdamW update: the fused op adamw_fused_ (engine/ops/fused_update.h: a CPU loop or one CUDA
// kernel per parameter) for contiguous f32 parameters, or in-place tensor ops elsewhere. The step
// count is a host tensor (as PyTorch's); a meta run imitating the CPU keeps it on meta instead, so
// the memory prediction counts the bytes a CPU run holds for it.
#include "engine/optim/adamw.h"

#include <cmath>

#include "engine/memory/tag.h"
#include "engine/core/meta_target.h"
#include "engine/ops/fused_update.h"
#include "engine/ops/ops.h"

namespace kiln::optim {

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& o) : Optimizer("AdamW", std::move(groups)), o_(o) {
  KILN_CHECK(o.lr >= 0 && o.eps >= 0 && o.weight_decay >= 0, "AdamW: lr ", o.lr, ", eps ", o.eps,
             ", weight_decay ", o.weight_decay, " must be >= 0");
  KILN_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "AdamW: betas (", o.beta1, ", ", o.beta2,
             ") must be in [0, 1)");
}

AdamW::AdamW(const NamedTensors& params, const AdamWOptions& o, const NoDecayFn& no_decay)
    : AdamW(make_param_groups(params, o.lr, o.weight_decay, no_decay), o) {}

void AdamW::update(const std::string& name, Tensor& p, const Tensor& g, const ParamGroup& group) {
  Tensor& m = state(name, "exp_avg", p);
  Tensor& v = state(name, "exp_avg_sq", p);
  Tensor* step_t = &state(name, "step", p);  // on the parameter's host (Optimizer::make_state)
  const int64_t step = step_t->device().is_meta() ? 1 : (int64_t)step_t->item() + 1;  // meta: no value
  fill_(*step_t, (double)step);

  const double lr = group.lr, wd = group.weight_decay;
  const double bc1 = 1.0 - std::pow(o_.beta1, (double)step);
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(o_.beta2, (double)step));
  const double step_size = lr / bc1;
  if (use_fused(p, g) && m.is_contiguous() && v.is_contiguous()) {
    AdamWParams h{(float)lr, (float)o_.beta1, (float)o_.beta2, (float)o_.eps, (float)wd, (float)step_size,
                  (float)bc2_sqrt};
    adamw_fused_(p, g, m, v, h);
    return;
  }
  // Generic path (any device): the same formula with tensor ops.
  if (wd != 0) mul_(p, 1.0 - lr * wd);
  mul_(m, o_.beta1);
  add_(m, g, 1.0 - o_.beta1);
  mul_(v, o_.beta2);
  add_(v, mul(g, g), 1.0 - o_.beta2);
  Tensor denom = add(mul(sqrt(v), 1.0 / bc2_sqrt), o_.eps);
  add_(p, div(m, denom), -step_size);
}

}  // namespace kiln::optim
