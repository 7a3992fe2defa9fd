// LossScaler: GradScaler's dynamic loss scaling with its state on the device (see loss_scaler.h).
#include "engine/optim/loss_scaler.h"

#include <cfloat>
#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"
#include "engine/optim/optimizer.h"

namespace kiln::optim {
namespace {

constexpr double kF16Max = 65504.0;  // the largest finite f16 value

std::vector<Tensor> params_of(Optimizer& opt) {
  std::vector<Tensor> ps;
  for (const ParamGroup& g : opt.param_groups())
    for (const auto& e : g.params) ps.push_back(e.second);
  return ps;
}

}  // namespace

LossScaler::LossScaler(const LossScalerOptions& o, Device device) : o_(o), device_(device) {
  KILN_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale) && o.init_scale <= FLT_MAX, "LossScaler: init_scale ",
             o.init_scale, " must be a positive finite f32 value");
  KILN_CHECK(o.growth_factor > 1.0, "LossScaler: growth_factor ", o.growth_factor, " must be > 1");
  KILN_CHECK(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, "LossScaler: backoff_factor ", o.backoff_factor,
             " must be in (0, 1)");
  KILN_CHECK(o.growth_interval >= 1, "LossScaler: growth_interval ", o.growth_interval, " must be >= 1");
  if (!o_.enabled) return;
  MemoryScope ms(MemoryTag::optimizer);
  scale_ = full({}, o.init_scale, DType::f32, device);
  tracker_ = zeros({}, DType::f32, device);
  found_inf_ = zeros({}, DType::f32, device);
  scale_host_ = (double)(float)o.init_scale;
}

Tensor LossScaler::scale(const Tensor& loss) {
  if (!o_.enabled) return loss;
  KILN_CHECK(loss.defined() && is_floating(loss.dtype()), "LossScaler.scale: expected a floating loss tensor");
  KILN_CHECK(loss.device() == device_, "LossScaler.scale: loss on ", loss.device().str(), ", scaler on ",
             device_.str());
  // An f16 loss cannot carry a scale above f16's largest value (65504): the default 2^16 would
  // turn it into inf and skip every step until the back-offs brought it down. The scale backs off
  // here instead, by the same factor a skipped step applies, before anything is scaled (device
  // and host mirror together: fills, no read). A bf16 or f32 loss carries any f32 scale.
  if (loss.dtype() == DType::f16 && scale_host_ > kF16Max) {
    double s = scale_host_;
    while (s > kF16Max) s = (double)(float)(s * o_.backoff_factor);
    NoGradGuard ng;
    fill_(scale_, s);
    fill_(tracker_, 0.0);
    scale_host_ = s;
    tracker_host_ = 0;
    ++f16_backoffs_;
  }
  Tensor s = loss.dtype() == DType::f32 ? scale_ : to_dtype(scale_, loss.dtype());
  return mul(loss, s);
}

void LossScaler::unscale_(const std::vector<Tensor>& params) {
  if (!o_.enabled) return;
  KILN_CHECK(!unscaled_, "LossScaler.unscale_: already called since the last update()");
  NoGradGuard ng;
  MemoryScope ms(MemoryTag::temporary);
  Tensor inv = div(ones({}, DType::f32, device_), scale_);
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    KILN_CHECK(g.device() == device_, "LossScaler.unscale_: gradient on ", g.device().str(), ", scaler on ",
               device_.str());
    // found_inf = max(found_inf, 1 - all_finite(g)), all on the device.
    Tensor bad = rsub(to_dtype(isfinite_all(g), DType::f32), 1.0);
    Tensor merged = maximum(found_inf_, bad);
    copy_(found_inf_, merged);
    Tensor inv_g = g.dtype() == DType::f32 ? inv : to_dtype(inv, g.dtype());
    mul_(g, inv_g);
  }
  unscaled_ = true;
}

void LossScaler::unscale_(Optimizer& opt) { unscale_(params_of(opt)); }

bool LossScaler::read_found_inf() {
  if (!found_read_) {
    // The meta device (memory prediction) has shapes but no values: its steps are clean.
    // (item() reads host memory only: a device's found_inf comes back with one copy, the sync.)
    found_host_ = device_.is_meta() ? false : to_device(found_inf_, Device::cpu()).item() != 0.0;
    found_read_ = true;
    ++syncs_;
  }
  return found_host_;
}

void LossScaler::set_found_inf_read(bool found) {
  if (!o_.enabled) return;
  KILN_CHECK(unscaled_ && !found_read_, "LossScaler.set_found_inf_read: call once per step, after unscale_");
  found_host_ = found;
  found_read_ = true;
  ++syncs_;
}

bool LossScaler::step(const std::vector<Tensor>& params, const std::function<void()>& optimizer_step) {
  if (!o_.enabled) {
    optimizer_step();
    return true;
  }
  if (!unscaled_) unscale_(params);
  last_skipped_ = read_found_inf();
  if (last_skipped_) {
    ++skipped_;
    return false;
  }
  optimizer_step();
  return true;
}

bool LossScaler::step(Optimizer& opt) {
  return step(params_of(opt), [&opt] { opt.step(); });
}

void LossScaler::load_state(double scale, int64_t growth_tracker, int64_t skipped_steps) {
  KILN_CHECK(scale > 0 && std::isfinite(scale) && scale <= FLT_MAX, "LossScaler.load_state: scale ", scale,
             " must be a positive finite f32 value");
  KILN_CHECK(growth_tracker >= 0 && skipped_steps >= 0, "LossScaler.load_state: negative counters (",
             growth_tracker, ", ", skipped_steps, ")");
  if (!o_.enabled) return;
  NoGradGuard ng;
  fill_(scale_, scale);
  fill_(tracker_, (double)growth_tracker);
  fill_(found_inf_, 0.0);
  scale_host_ = (double)(float)scale;
  tracker_host_ = growth_tracker;
  skipped_ = skipped_steps;
  unscaled_ = found_read_ = found_host_ = last_skipped_ = false;
}

void LossScaler::update() {
  if (!o_.enabled) return;
  const bool found = read_found_inf();
  {
    // Device update, the same arithmetic as the host mirror below:
    //   found:  scale *= backoff, tracker = 0
    //   clean:  tracker += 1; if tracker >= interval: (scale *= growth if finite), tracker = 0
    NoGradGuard ng;
    MemoryScope ms(MemoryTag::temporary);
    Tensor zero = zeros({}, DType::f32, device_);
    Tensor found_m = gt(found_inf_, 0.5);
    Tensor next = add(tracker_, 1.0);
    Tensor grow = gt(next, (double)o_.growth_interval - 0.5);
    Tensor grown = mul(scale_, o_.growth_factor);
    Tensor grown_ok = where(isfinite_all(grown), grown, scale_);
    Tensor clean_scale = where(grow, grown_ok, scale_);
    Tensor clean_tracker = where(grow, zero, next);
    Tensor new_scale = where(found_m, mul(scale_, o_.backoff_factor), clean_scale);
    Tensor new_tracker = where(found_m, zero, clean_tracker);
    copy_(scale_, new_scale);
    copy_(tracker_, new_tracker);
    fill_(found_inf_, 0.0);
  }
  if (found) {
    scale_host_ = (double)(float)(scale_host_ * o_.backoff_factor);
    tracker_host_ = 0;
  } else if (++tracker_host_ >= o_.growth_interval) {
    const float g = (float)(scale_host_ * o_.growth_factor);
    if (std::isfinite(g)) scale_host_ = (double)g;
    tracker_host_ = 0;
  }
  unscaled_ = found_read_ = found_host_ = false;
}

}  // namespace kiln::optim
