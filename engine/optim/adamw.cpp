// AdamW update: fused per-element rule of kernels/common/update_rules.h (a CPU loop, or one CUDA
// kernel per parameter on a GPU), or in-place tensor ops elsewhere.
#include "engine/optim/adamw.h"

#include <cmath>

#include "engine/memory/tag.h"
#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "kernels/common/update_rules.h"
#ifdef KILN_WITH_CUDA
#include "kernels/cuda/backend.h"
#include "kernels/cuda/runtime.h"
#endif

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
  Tensor* step_t = find_state(name, "step");
  if (!step_t) {
    MemoryScope ms(MemoryTag::optimizer);
    state_[name]["step"] = zeros({}, DType::i64);
    step_t = find_state(name, "step");
  }
  int64_t step = (int64_t)step_t->item() + 1;
  fill_(*step_t, (double)step);

  const double lr = group.lr, wd = group.weight_decay;
  const double bc1 = 1.0 - std::pow(o_.beta1, (double)step);
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(o_.beta2, (double)step));
  const double step_size = lr / bc1;
  if (use_fused(p, g) && m.is_contiguous() && v.is_contiguous()) {
    AdamWParams h{(float)lr, (float)o_.beta1, (float)o_.beta2, (float)o_.eps, (float)wd, (float)step_size,
                  (float)bc2_sqrt};
    if (p.device().is_meta()) return;  // no data, nothing to update
    float* pp = p.data<float>();
    const float* gp = g.data<float>();
    float* mp = m.data<float>();
    float* vp = v.data<float>();
    const int64_t n = p.numel();
    if (p.device().is_cuda()) {
#ifdef KILN_WITH_CUDA
      OpSpanScope span("adamw_fused");
      cuda::DeviceGuard dg(p.device().index);
      cuda::adamw_fused(pp, gp, mp, vp, n, h);
#endif
    } else {
#pragma omp parallel for if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) adamw_update(pp[i], gp[i], mp[i], vp[i], h);
    }
    p.bump_version();
    m.bump_version();
    v.bump_version();
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
