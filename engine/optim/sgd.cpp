// SGD update: the fused op sgd_fused_ (engine/ops/fused_update.h: a CPU loop or one CUDA kernel
// per parameter) for contiguous f32 parameters, or in-place tensor ops elsewhere.
#include "engine/optim/sgd.h"

#include "engine/memory/tag.h"
#include "engine/ops/fused_update.h"
#include "engine/ops/ops.h"

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

std::vector<std::string> SGD::state_keys() const {
  if (o_.momentum == 0) return {};
  return {"momentum_buffer"};
}

void SGD::update(const std::string& name, Tensor& p, const Tensor& g, const ParamGroup& group) {
  const double lr = group.lr, wd = group.weight_decay, m = o_.momentum;
  // The first update of a parameter sets its momentum buffer to the update direction (PyTorch's rule),
  // into the buffer create_state() made, or a new one.
  const bool first = m != 0 && !written(name);
  Tensor* buf = nullptr;
  if (m != 0) {
    buf = find_state(name, "momentum_buffer");
    if (!buf && use_fused(p, g)) buf = &state(name, "momentum_buffer", p);
    mark_written(name);
  }
  if (use_fused(p, g) && (buf == nullptr || buf->is_contiguous())) {
    SgdParams h{(float)lr, (float)m, (float)o_.dampening, (float)wd, o_.nesterov};
    sgd_fused_(p, g, buf, first, h);
    return;
  }
  // Generic path (any device): the same formula with in-place ops.
  Tensor d = wd != 0 ? add(g, p, wd) : g;
  if (m != 0) {
    if (first && buf) {
      copy_(*buf, d);
    } else if (first) {
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
