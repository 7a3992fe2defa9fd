// One optimizer step (see train_step.h).
#include "engine/train/train_step.h"

#include <cmath>
#include <limits>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "engine/optim/clip_grad.h"

namespace kiln::train {

LossFn cross_entropy_loss(const Tensor& class_weights) {
  return [class_weights](const Tensor& logits, const Tensor& y) { return cross_entropy(logits, y, class_weights); };
}

StepResult train_step(nn::Module& model, optim::Optimizer& optimizer, optim::LossScaler& scaler, const Batch& batch,
                      const StepOptions& o) {
  KILN_CHECK(batch.x.defined() && batch.y.defined() && batch.x.dim() >= 1 && batch.y.dim() >= 1 &&
                 batch.x.size(0) == batch.y.size(0),
             "train_step: batch x ", batch.x.defined() ? shape_str(batch.x.sizes()) : "(undefined)", " and y ",
             batch.y.defined() ? shape_str(batch.y.sizes()) : "(undefined)", " must have the same number of rows");
  const int64_t n = batch.x.size(0);
  KILN_CHECK(n >= 1 && o.accum >= 1 && o.accum <= n, "train_step: accum ", o.accum, " must be in [1, ", n,
             "] for a batch of ", n, " rows (each micro-batch needs at least one row)");
  const bool meta = batch.x.device().is_meta();
  const LossFn& loss_fn = o.loss ? o.loss : cross_entropy_loss();
  const int64_t micro = (n + o.accum - 1) / o.accum;
  const double nan = std::numeric_limits<double>::quiet_NaN();

  StepResult r;
  r.samples = n;
  // The step's running sums on the device, f64: [sum of loss * rows (, sum of metric)]. Read once
  // after the last micro-batch: on a GPU each read waits for the device.
  Tensor sums;
  std::vector<MicroBatch> kept;  // the micro-batches' rows and losses, for the non-finite report
  model.zero_grad();
  for (int64_t mb = 0, index = 0; mb < n; mb += micro, ++index) {
    MicroBatch b;
    b.index = index;
    b.offset = mb;
    b.size = std::min(n, mb + micro) - mb;
    b.x = narrow(batch.x, 0, mb, b.size);
    b.y = narrow(batch.y, 0, mb, b.size);
    if (o.channels_last && b.x.dim() == 4) b.x = contiguous(b.x, MemoryFormat::channels_last);
    {
      MemoryScope scope(MemoryTag::temporary);
      AutocastGuard autocast(o.autocast, o.autocast_dtype);
      b.output = model(b.x);
      b.loss = loss_fn(b.output, b.y);
    }
    if (o.hooks.after_forward) o.hooks.after_forward(b);
    scaler.scale(mul(b.loss, (double)b.size / (double)n)).backward();
    {
      NoGradGuard no_grad;
      Tensor part = reshape(mul(to_dtype(b.loss.detach(), DType::f64), (double)b.size), {1});
      if (o.metric) part = cat({part, reshape(to_dtype(o.metric(b).detach(), DType::f64), {1})});
      sums = sums.defined() ? add(sums, part) : part;
    }
    MicroBatch k;
    k.index = b.index, k.offset = b.offset, k.size = b.size, k.loss = b.loss.detach();
    kept.push_back(std::move(k));
    ++r.micro_batches;
    if (o.hooks.after_backward) o.hooks.after_backward(b);
  }
  const std::vector<Tensor> params = model.parameters();
  if (o.hooks.on_grad_ready)
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].grad().defined()) o.hooks.on_grad_ready(i, params[i]);
  if (o.clip > 0) {
    if (scaler.enabled()) scaler.unscale_(params);
    r.grad_norm = optim::clip_grad_norm(params, o.clip);
  } else if (scaler.enabled()) {
    scaler.unscale_(params);  // found_inf is then final and joins the step's one read
  }
  // The step's one host read: the loss (and metric) sums, with the scaler's found_inf under amp.
  // The tensors are built on meta too, so the memory prediction allocates what the step does.
  Tensor readback = sums;
  if (scaler.enabled()) {
    NoGradGuard no_grad;
    readback = cat({sums, reshape(to_dtype(scaler.found_inf_tensor(), DType::f64), {1})});
  }
  if (meta) {
    r.loss = r.metric = nan;
  } else {
    const std::vector<double> v = to_device(readback, Device::cpu()).to_vector<double>();
    if (scaler.enabled()) scaler.set_found_inf_read(v.back() != 0.0);
    r.loss = v[0] / (double)n;
    r.metric = o.metric ? v[1] : nan;
    if (!std::isfinite(r.loss)) {
      // The error path reads each micro-batch's loss to name the first non-finite one.
      for (MicroBatch& b : kept) {
        b.loss_value = to_device(b.loss, Device::cpu()).item();
        if (std::isfinite(b.loss_value)) continue;
        b.x = narrow(batch.x, 0, b.offset, b.size);
        b.y = narrow(batch.y, 0, b.offset, b.size);
        if (o.hooks.on_non_finite) {
          o.hooks.on_non_finite(b);
          break;
        }
        throw Error(str_cat("train_step: loss became ", b.loss_value, " in micro-batch ", b.index + 1, " (rows ",
                            b.offset, "..", b.offset + b.size - 1, ")"));
      }
    }
  }
  kept.clear();
  if (o.lr >= 0)
    for (optim::ParamGroup& g : optimizer.param_groups()) g.lr = o.lr;
  r.stepped = scaler.step(params, [&optimizer] { optimizer.step(); });
  scaler.update();
  r.loss_scale = scaler.current_scale();
  if (o.hooks.on_step_end) o.hooks.on_step_end(r);
  return r;
}

}  // namespace kiln::train
