// One optimizer step (see train_step.h).
#include "engine/train/train_step.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "engine/autograd/grad_hook.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/rng_rows.h"
#include "engine/dist/shard.h"
#include "engine/memory/tag.h"
#include "engine/ops/autocast.h"
#include "engine/ops/batch_norm_sync.h"
#include "engine/ops/ops.h"
#include "engine/optim/clip_grad.h"
#include "engine/train/data_parallel.h"
#include "engine/train/step_plan.h"

namespace kiln::train {

LossFn cross_entropy_loss(const Tensor& class_weights) {
  return [class_weights](const Tensor& logits, const Tensor& y) { return cross_entropy(logits, y, class_weights); };
}

std::function<bool(const Tensor& y)> cross_entropy_undefined(const Tensor& class_weights) {
  std::vector<float> w;
  if (class_weights.defined() && !class_weights.device().is_meta())
    w = to_device(class_weights, Device::cpu()).to_vector<float>();
  return [w](const Tensor& y) {
    for (int64_t t : to_device(y, Device::cpu()).to_vector<int64_t>())
      if (t != -100 && (w.empty() || t < 0 || t >= (int64_t)w.size() || w[(size_t)t] != 0.0f)) return false;
    return true;
  };
}

namespace {

// The step's skeleton checks: x and y with the same rows, accum within them.
void check_batch(const Batch& batch, const StepOptions& o) {
  KILN_CHECK(batch.x.defined() && batch.y.defined() && batch.x.dim() >= 1 && batch.y.dim() >= 1 &&
                 batch.x.size(0) == batch.y.size(0),
             "train_step: batch x ", batch.x.defined() ? shape_str(batch.x.sizes()) : "(undefined)", " and y ",
             batch.y.defined() ? shape_str(batch.y.sizes()) : "(undefined)", " must have the same number of rows");
  const int64_t n = batch.x.size(0);
  // A data-parallel rank's shard may have no row (a short last global batch), and batch.micro_rows (its
  // shares of the global micro-batches) may hold empty ones.
  KILN_CHECK(o.accum >= 1 && (n == 0 ? o.data_parallel != nullptr : o.accum <= n || !batch.micro_rows.empty()),
             "train_step: accum ", o.accum, " must be in [1, ", n, "] for a batch of ", n,
             " rows (each micro-batch needs at least one row)");
}

StepPlan plan(const Batch& batch, const StepOptions& o, bool meta) {
  StepPlan p = plan_step(batch, o.accum, o.data_parallel != nullptr, o.loss_undefined, meta);
  if (o.data_parallel) o.data_parallel->plan_step(p);
  KILN_CHECK(!p.join_all || p.size() == 1 || !batch.micro_rows.empty(), "train_step: --sync-bn with accum ", o.accum,
             " needs the batch's micro_rows (engine/dist/shard.h's shard_pieces, as train::fit gives them): else "
             "the ranks' micro-batches would meet other rows than one process's");
  return p;
}

MicroBatch micro_batch(const Batch& batch, const StepPlan& p, int64_t k) {
  const MicroRange& m = p.micro[(size_t)k];
  MicroBatch b;
  b.index = k;
  b.offset = m.offset;
  b.size = m.size;
  b.x = narrow(batch.x, 0, m.offset, m.size);
  b.y = narrow(batch.y, 0, m.offset, m.size);
  return b;
}

// Forward and loss of one micro-batch (under autocast and the temporary tag; its random rows keyed by their
// place in the global micro-batch), as both the step and the anomaly re-run do it. Without a loss function
// only the output (a micro-batch that only joins the batch-norm reductions).
void forward(nn::Module& model, MicroBatch& b, const LossFn* loss_fn, const StepOptions& o, RngRows rows) {
  if (o.channels_last && b.x.dim() == 4) b.x = contiguous(b.x, MemoryFormat::channels_last);
  RngRowsGuard keyed(rows);
  MemoryScope scope(MemoryTag::temporary);
  AutocastGuard autocast(o.autocast, o.autocast_dtype);
  b.output = model(b.x);
  if (loss_fn) b.loss = (*loss_fn)(b.output, b.y);
}

// loss * weight backward (through the loss scaler when `scaled`), with the plan's hook around the last
// backward this rank runs (the gradient buckets start their all-reduce as they complete).
void backward(const Tensor& loss, double weight, bool scaled, const StepPlan& p, int64_t k, optim::LossScaler& scaler) {
  std::optional<GradAccumulatedHookGuard> watch;
  if (k == p.last_run() && p.last_backward_hook) watch.emplace(p.last_backward_hook);
  const Tensor weighted = mul(loss, weight);
  (scaled ? scaler.scale(weighted) : weighted).backward();
}

// A step with nothing to learn from (every micro-batch's loss undefined): no update, the scaler untouched.
StepResult no_step(StepResult r, const StepOptions& o) {
  r.undefined = true;
  r.stepped = false;
  r.loss = r.metric = r.metric_total = std::numeric_limits<double>::quiet_NaN();
  if (o.hooks.on_step_end) o.hooks.on_step_end(r);
  return r;
}

// The step's running sums on the device, f64: [loss * rows (, metric) (, metric_total)], read once after
// the last micro-batch (on a GPU each read waits for the device).
void add_sums(Tensor& sums, const MicroBatch& b, const StepOptions& o) {
  NoGradGuard no_grad;
  Tensor part = reshape(mul(to_dtype(b.loss.detach(), DType::f64), (double)b.size), {1});
  if (o.metric) part = cat({part, reshape(to_dtype(o.metric(b).detach(), DType::f64), {1})});
  if (o.metric_total) part = cat({part, reshape(to_dtype(o.metric_total(b).detach(), DType::f64), {1})});
  sums = sums.defined() ? add(sums, part) : part;
}

// Without a loss scaler: the sum of every gradient element, non-finite whenever one element is (and, rarely,
// when the sum alone overflows; the exact check then decides). One scalar per gradient, no full-size
// temporary; built on meta too.
Tensor gradient_sum(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  Tensor total;
  for (const Tensor& p : params) {
    if (!p.grad().defined() || p.grad().numel() == 0) continue;
    Tensor s = reshape(to_dtype(sum(p.grad()), DType::f64), {1});
    total = total.defined() ? add(total, s) : s;
  }
  return total;
}

// The step's one host read: the loss (and metric) sums with the scaler's found_inf under amp or the
// gradient sum without it; the sums over the ranks. Built on meta too (the memory prediction allocates the
// same); read only off meta (empty on meta).
std::vector<double> read_back(const Tensor& sums, const Tensor& grad_norm, const Tensor& grad_total,
                              optim::LossScaler& scaler, const StepOptions& o, bool meta) {
  Tensor readback = sums;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> parts{sums};
    if (grad_norm.defined()) parts.push_back(reshape(grad_norm, {1}));
    if (scaler.enabled()) parts.push_back(reshape(to_dtype(scaler.found_inf_tensor(), DType::f64), {1}));
    else if (grad_total.defined()) parts.push_back(grad_total);
    if (parts.size() > 1) readback = cat(parts);
  }
  if (meta) return {};
  std::vector<double> v = to_device(readback, Device::cpu()).to_vector<double>();
  if (o.data_parallel) o.data_parallel->sum_step_values(v.data(), sums.numel());  // found_inf / grads: already global
  if (scaler.enabled()) scaler.set_found_inf_read(v.back() != 0.0);
  return v;
}

// The first parameter whose gradient holds inf/NaN, as "fc.weight (2, 16) holds NaN"; "" if none.
std::string first_non_finite_grad(nn::Module& model) {
  for (const auto& [name, p] : model.named_parameters())
    if (p.grad().defined() && !all_finite(p.grad()))
      return str_cat(name, " ", shape_str(p.grad().sizes()), " holds ", non_finite_kind(p.grad()));
  return "";
}

// Without a loss scaler a non-finite loss or gradient stops the step before anything is updated: the
// first non-finite micro-batch goes to hooks.on_non_finite (default: throw NonFiniteStep).
void check_finite(const StepResult& r, std::vector<MicroBatch>& losses, const Batch& batch, bool grads_finite,
                  nn::Module& model, const StepOptions& o) {
  if (!std::isfinite(r.loss)) {
    bool found_here = false;  // the error path reads each micro-batch's loss to name the first non-finite one
    for (MicroBatch& b : losses) {
      b.loss_value = to_device(b.loss, Device::cpu()).item();
      if (std::isfinite(b.loss_value)) continue;
      b.x = narrow(batch.x, 0, b.offset, b.size);
      b.y = narrow(batch.y, 0, b.offset, b.size);
      found_here = true;
      if (o.hooks.on_non_finite) {
        o.hooks.on_non_finite(b);
        break;
      }
      throw NonFiniteStep(str_cat("train_step: loss became ", b.loss_value, " in micro-batch ", b.index + 1, " (rows ",
                                  b.offset, "..", b.offset + b.size - 1, ")"),
                          str_cat("non-finite loss (", std::isnan(b.loss_value) ? "NaN" : b.loss_value > 0 ? "inf" : "-inf",
                                  ")"));
    }
    // Data-parallel: another rank's rows made the global loss non-finite; this rank stops as well.
    if (o.data_parallel && !found_here)
      throw NonFiniteStep(str_cat("train_step: the global loss became ", r.loss, " on another rank's rows"),
                          "non-finite loss (on another rank)");
  }
  if (grads_finite) return;
  const std::string which = first_non_finite_grad(model);
  if (!which.empty())
    throw NonFiniteStep(str_cat("train_step: the gradient of ", which, " (the loss was ", r.loss, ")"),
                        "non-finite gradient (" + which + ")");
}

}  // namespace

StepResult train_step(nn::Module& model, optim::Optimizer& optimizer, optim::LossScaler& scaler, const Batch& batch,
                      const StepOptions& o) {
  check_batch(batch, o);
  const bool meta = batch.x.device().is_meta();  // meta: the memory predictor (no values, no reads)
  const LossFn& loss_fn = o.loss ? o.loss : cross_entropy_loss();
  const StepPlan p = plan(batch, o, meta);  // micro-batches; data-parallel: over all ranks
  StepResult r;
  r.samples = p.samples;
  r.undefined_micro_batches = p.undefined_micro_batches;
  r.used_samples = p.used;
  r.loss_scale = scaler.current_scale();
  model.zero_grad();
  if (o.data_parallel) o.data_parallel->begin_step();
  if (p.used == 0) return no_step(r, o);  // every micro-batch's loss is undefined: nothing to learn from
  Tensor sums;                            // (1 + metric + metric_total) f64 on the device
  std::vector<MicroBatch> losses;         // each micro-batch's rows and loss, for the non-finite report
  for (int64_t k = 0; k < p.size(); ++k) {
    if (!p.runs_here(k)) continue;
    MicroBatch b = micro_batch(batch, p, k);
    if (!p.has_loss(k)) {  // --sync-bn: this rank's rows (maybe none) only join the batch-norm reductions
      forward(model, b, nullptr, o, p.keyed_rows(k));
      backward(sum(b.output), 0.0, false, p, k, scaler);
      continue;
    }
    forward(model, b, &loss_fn, o, p.keyed_rows(k));
    if (o.hooks.after_forward) o.hooks.after_forward(b);
    backward(b.loss, (double)b.size / (double)p.used, true, p, k, scaler);
    add_sums(sums, b, o);
    losses.push_back(MicroBatch{b.index, b.offset, b.size, {}, {}, {}, b.loss.detach()});
    ++r.micro_batches;
    if (o.hooks.after_backward) o.hooks.after_backward(b);
  }
  if (o.data_parallel) o.data_parallel->end_backward(p);  // the global batch's gradients from here on
  if (!sums.defined()) sums = zeros({1 + (o.metric ? 1 : 0) + (o.metric_total ? 1 : 0)}, DType::f64, batch.x.device());
  const std::vector<Tensor> params = model.parameters();
  if (o.hooks.on_grad_ready)
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].grad().defined()) o.hooks.on_grad_ready(i, params[i]);
  const Tensor grad_total = !scaler.enabled() && o.check_finite ? gradient_sum(params) : Tensor();
  if (scaler.enabled()) scaler.unscale_(params);  // found_inf is then final and joins the one read
  const Tensor grad_norm = o.clip > 0 ? optim::clip_grad_norm_on_device(params, o.clip) : Tensor();
  const std::vector<double> v = read_back(sums, grad_norm, grad_total, scaler, o, meta);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (o.clip > 0) r.grad_norm = meta ? nan : grad_norm.defined() ? v[sums.numel()] : 0.0;
  r.loss = meta ? nan : v[0] / (double)p.used;
  r.metric = meta || !o.metric ? nan : v[1];
  r.metric_total = meta || !o.metric_total ? nan : v[o.metric ? 2 : 1];
  // With a loss scaler an inf/NaN is an overflow like any other: its step is skipped.
  if (!meta && !scaler.enabled()) check_finite(r, losses, batch, !grad_total.defined() || std::isfinite(v.back()), model, o);
  losses.clear();
  if (o.lr >= 0)
    for (optim::ParamGroup& g : optimizer.param_groups()) g.lr = o.lr;
  r.stepped = scaler.step(params, [&optimizer] { optimizer.step(); });
  scaler.update();
  r.loss_scale = scaler.current_scale();
  if (o.hooks.on_step_end) o.hooks.on_step_end(r);
  return r;
}

NonFiniteError locate_non_finite(nn::Module& model, optim::LossScaler& scaler, const Batch& batch,
                                 const StepOptions& o) {
  const bool meta = batch.x.device().is_meta();
  const LossFn& loss_fn = o.loss ? o.loss : cross_entropy_loss();
  if (meta) return NonFiniteError("", "", "");
  AnomalyModeGuard on(true);
  // A rank re-runs its own rows alone (the others may not re-run, or have no row): --sync-bn's
  // reductions would wait for ever, so the re-run normalizes with this rank's statistics.
  struct PlainBatchNorm {
    ChannelSumReducer saved = batch_norm_reducer();
    BnParamGrads saved_grads = batch_norm_reducer_param_grads();
    PlainBatchNorm() { set_batch_norm_reducer(nullptr); }
    ~PlainBatchNorm() { set_batch_norm_reducer(saved, saved_grads); }
  } plain_bn;
  model.zero_grad();
  try {
    const StepPlan p = plan_step(batch, o.accum, o.data_parallel != nullptr, o.loss_undefined, false);
    for (int64_t k = 0; k < p.size(); ++k) {
      if (!p.has_loss(k)) continue;
      MicroBatch b = micro_batch(batch, p, k);
      forward(model, b, &loss_fn, o, RngRows{});
      scaler.scale(mul(b.loss, (double)b.size / (double)p.used)).backward();
    }
    // Every op's gradient was finite; a sum of them (accumulation over uses or micro-batches) may
    // still overflow.
    if (const std::string which = first_non_finite_grad(model); !which.empty())
      throw NonFiniteError("gradient accumulation", "", "the accumulated gradient of " + which);
  } catch (const NonFiniteError& e) {
    model.zero_grad();
    // A non-finite batch: the op that first met it says so; name the row as well.
    for (int64_t row = 0; row < batch.x.size(0); ++row)
      if (!all_finite(narrow(batch.x, 0, row, 1)))
        return NonFiniteError(e.op, e.module,
                              str_cat(e.what(), "; the batch's row ", row, " holds ",
                                      non_finite_kind(narrow(batch.x, 0, row, 1))),
                              row);
    return e;
  }
  model.zero_grad();
  return NonFiniteError("", "", "");
}

}  // namespace kiln::train
