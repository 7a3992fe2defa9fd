// SGD update: fused per-element rule of kernels/common/update_rules.h (a CPU loop, or one CUDA
// kernel per parameter on a GPU), or in-place tensor ops elsewhere.
#include "engine/optim/sgd.h"

#include "engine/memory/tag.h"
#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "kernels/common/update_rules.h"
#ifdef KILN_WITH_CUDA
#include "kernels/cuda/backend.h"
#include "kernels/cuda/runtime.h"
#endif

namespace kiln::optim {

static void check_sgd(const SGDOptions& o) {
  KILN_CHECK(o.lr >= 0 && o.momentum >= 0 && o.weight_decay >= 0, "SGD: lr ", o.lr, ", momentum ", o.momentum,
             ", weight_decay ", o.weight_decay, " must be >= 0");
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: nesterov needs momentum > 0 and dampening 0");
}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& opts) : Optimizer("SGD", std::move(groups)), o_(opts) {
  check_sgd(o_);
}

SGD::SGD(const NamedTensors& params, const SGDOptions& opts, const NoDecayFn& no_decay)
    : SGD(make_param_groups(params, opts.lr, opts.weight_decay, no_decay), opts) {}

void SGD::update(const std::string& name, Tensor& p, const Tensor& g, const ParamGroup& group) {
  const double lr = group.lr, wd = group.weight_decay, m = o_.momentum;
  bool first = false;
  Tensor* buf = nullptr;
  if (m != 0) {
    buf = find_state(name, "momentum_buffer");
    first = (buf == nullptr);
    if (first && use_fused(p, g)) buf = &state(name, "momentum_buffer", p);
  }
  if (use_fused(p, g) && (buf == nullptr || buf->is_contiguous())) {
    SgdParams h{(float)lr, (float)m, (float)o_.dampening, (float)wd, o_.nesterov};
    if (p.device().is_meta()) return;  // no data, nothing to update
    float* pp = p.data<float>();
    const float* gp = g.data<float>();
    float* bp = buf ? buf->data<float>() : nullptr;
    const int64_t n = p.numel();
    if (p.device().is_cuda()) {
#ifdef KILN_WITH_CUDA
      OpSpanScope span("sgd_fused");
      cuda::DeviceGuard dg(p.device().index);
      cuda::sgd_fused(pp, gp, bp, n, first, h);
#endif
    } else {
      float dummy = 0.f;
#pragma omp parallel for if (n > (1 << 16)) firstprivate(dummy)
      for (int64_t i = 0; i < n; ++i) sgd_update(pp[i], gp[i], bp ? bp[i] : dummy, first, h);
    }
    p.bump_version();
    if (bp) buf->bump_version();
    return;
  }
  // Generic path (any device): the same formula with in-place ops.
  Tensor d = wd != 0 ? add(g, p, wd) : g;
  if (m != 0) {
    if (first) {
      MemoryScope ms(MemoryTag::optimizer);
      state_[name]["momentum_buffer"] = clone(d);
      buf = find_state(name, "momentum_buffer");
    } else {
      mul_(*buf, m);
      add_(*buf, d, 1.0 - o_.dampening);
    }
    d = o_.nesterov ? add(d, *buf, m) : *buf;
  }
  add_(p, d, -lr);
}

}  // namespace kiln::optim
