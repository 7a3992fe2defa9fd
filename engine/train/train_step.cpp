// One optimizer step (see train_step.h).
#include "engine/train/train_step.h"

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

struct MicroRange {
  int64_t offset = 0, size = 0;
  bool left_out = false;  // loss undefined by construction
};

// The step's micro-batches: consecutive rows, ceil(n / accum) each, the last one shorter.
std::vector<MicroRange> micro_ranges(const Batch& batch, const StepOptions& o, bool meta) {
  const int64_t n = batch.x.size(0), micro = (n + o.accum - 1) / o.accum;
  std::vector<MicroRange> out;
  for (int64_t mb = 0; mb < n; mb += micro) {
    MicroRange m{mb, std::min(n, mb + micro) - mb, false};
    if (!meta && o.loss_undefined) m.left_out = o.loss_undefined(narrow(batch.y, 0, m.offset, m.size));
    out.push_back(m);
  }
  return out;
}

// Forward and loss of one micro-batch (under autocast and the temporary tag), as both the step and
// the anomaly re-run do it.
void forward(nn::Module& model, MicroBatch& b, const LossFn& loss_fn, const StepOptions& o) {
  if (o.channels_last && b.x.dim() == 4) b.x = contiguous(b.x, MemoryFormat::channels_last);
  MemoryScope scope(MemoryTag::temporary);
  AutocastGuard autocast(o.autocast, o.autocast_dtype);
  b.output = model(b.x);
  b.loss = loss_fn(b.output, b.y);
}

// The first parameter whose gradient holds inf/NaN, as "fc.weight (2, 16) holds NaN"; "" if none.
std::string first_non_finite_grad(nn::Module& model) {
  for (const auto& [name, p] : model.named_parameters())
    if (p.grad().defined() && !all_finite(p.grad()))
      return str_cat(name, " ", shape_str(p.grad().sizes()), " holds ", non_finite_kind(p.grad()));
  return "";
}

}  // namespace

StepResult train_step(nn::Module& model, optim::Optimizer& optimizer, optim::LossScaler& scaler, const Batch& batch,
                      const StepOptions& o) {
  KILN_CHECK(batch.x.defined() && batch.y.defined() && batch.x.dim() >= 1 && batch.y.dim() >= 1 &&
                 batch.x.size(0) == batch.y.size(0),
             "train_step: batch x ", batch.x.defined() ? shape_str(batch.x.sizes()) : "(undefined)", " and y ",
             batch.y.defined() ? shape_str(batch.y.sizes()) : "(undefined)", " must have the same number of rows");
  const int64_t n = batch.x.size(0);
  DataParallel* const dp = o.data_parallel;  // a rank's shard may have no row (a short last global batch)
  KILN_CHECK(o.accum >= 1 && (n == 0 ? dp != nullptr : o.accum <= n), "train_step: accum ", o.accum,
             " must be in [1, ", n, "] for a batch of ", n, " rows (each micro-batch needs at least one row)");
  const bool meta = batch.x.device().is_meta();
  // meta && dp: the memory predictor's imitated rank (its group's collectives leave the data as it is).
  const LossFn& loss_fn = o.loss ? o.loss : cross_entropy_loss();
  const double nan = std::numeric_limits<double>::quiet_NaN();

  StepResult r;
  r.samples = n;
  const std::vector<MicroRange> ranges = micro_ranges(batch, o, meta);
  int64_t used = 0;  // rows of the micro-batches that are not left out: the loss is their mean
  for (const MicroRange& m : ranges) {
    if (m.left_out) ++r.undefined_micro_batches;
    else used += m.size;
  }
  if (dp) {  // the global batch's numbers: every rank weights its losses by the same denominator
    int64_t counts[3] = {used, n, r.undefined_micro_batches};
    dp->group().all_reduce_sum(counts, 3);
    used = counts[0];
    r.samples = counts[1];
    r.undefined_micro_batches = counts[2];
  }
  model.zero_grad();
  if (dp) dp->begin_step();
  if (used == 0) {  // every micro-batch's loss is undefined: nothing to learn from, no step
    r.undefined = true;
    r.stepped = false;
    r.loss = r.metric = r.metric_total = nan;
    r.loss_scale = scaler.current_scale();
    if (o.hooks.on_step_end) o.hooks.on_step_end(r);
    return r;
  }
  r.used_samples = used;
  // Data-parallel: this rank's rows are rows [first_row, first_row + n) of the global batch (the shard
  // rule); random per-row draws (dropout) are keyed by those global rows (engine/core/rng_rows.h).
  const int64_t first_row = dp ? dist::shard_range(r.samples, dp->rank(), dp->size()).offset : 0;
  const bool sync_bn = dp && dp->syncs_batch_norm();
  KILN_CHECK(!sync_bn || o.accum == 1, "train_step: --sync-bn needs --accum 1 (got ", o.accum,
             "): the ranks' micro-batches would differ in number and rows");
  // The step's running sums on the device, f64: [sum of loss * rows (, metric) (, metric_total)]. Read once
  // after the last micro-batch: on a GPU each read waits for the device.
  Tensor sums;
  std::vector<MicroBatch> kept;  // the micro-batches' rows and losses, for the non-finite report
  int64_t last_kept = -1;        // the last micro-batch that is not left out: its backward completes the gradients
  for (int64_t index = 0; index < (int64_t)ranges.size(); ++index)
    if (!ranges[index].left_out) last_kept = index;
  for (int64_t index = 0; index < (int64_t)ranges.size(); ++index) {
    const MicroRange& m = ranges[index];
    if (m.left_out) continue;
    MicroBatch b;
    b.index = index;
    b.offset = m.offset;
    b.size = m.size;
    b.x = narrow(batch.x, 0, m.offset, m.size);
    b.y = narrow(batch.y, 0, m.offset, m.size);
    {
      std::optional<RngRowsGuard> keyed;
      if (dp) keyed.emplace(RngRows{first_row + m.offset, m.size, r.samples});
      forward(model, b, loss_fn, o);
    }
    if (o.hooks.after_forward) o.hooks.after_forward(b);
    {
      // Data-parallel: the last micro-batch's backward starts each gradient bucket's all-reduce as soon
      // as the bucket's gradients are complete (overlap; engine/train/data_parallel.h).
      std::optional<GradAccumulatedHookGuard> watch;
      if (dp && index == last_kept)
        if (GradAccumulatedHook hook = dp->backward_hook()) watch.emplace(std::move(hook));
      scaler.scale(mul(b.loss, (double)b.size / (double)used)).backward();
    }
    {
      NoGradGuard no_grad;
      Tensor part = reshape(mul(to_dtype(b.loss.detach(), DType::f64), (double)b.size), {1});
      if (o.metric) part = cat({part, reshape(to_dtype(o.metric(b).detach(), DType::f64), {1})});
      if (o.metric_total) part = cat({part, reshape(to_dtype(o.metric_total(b).detach(), DType::f64), {1})});
      sums = sums.defined() ? add(sums, part) : part;
    }
    MicroBatch k;
    k.index = b.index, k.offset = b.offset, k.size = b.size, k.loss = b.loss.detach();
    kept.push_back(std::move(k));
    ++r.micro_batches;
    if (o.hooks.after_backward) o.hooks.after_backward(b);
  }
  if (sync_bn && last_kept < 0) {
    // --sync-bn, no micro-batch here (no row of a short last global batch, or its loss left out): one
    // forward over this rank's rows (maybe none) and a backward of weight 0, so this rank makes the same
    // batch-norm reductions and generator reservations (dropout) as the others.
    Tensor output;
    {
      RngRowsGuard keyed(RngRows{first_row, n, r.samples});
      MemoryScope scope(MemoryTag::temporary);
      AutocastGuard autocast(o.autocast, o.autocast_dtype);
      output = model(o.channels_last && batch.x.dim() == 4 ? contiguous(batch.x, MemoryFormat::channels_last) : batch.x);
    }
    // The hook too: the buckets must start between the same batch-norm reductions as on the other ranks.
    std::optional<GradAccumulatedHookGuard> watch;
    if (GradAccumulatedHook hook = dp->backward_hook()) watch.emplace(std::move(hook));
    mul(sum(output), 0.0).backward();
  }
  if (dp) {
    dp->all_reduce_gradients();  // gradients of the global batch from here on, the same on every rank
    // Without --sync-bn the ranks may have run different numbers of forwards (a rank without rows or
    // with its loss left out, uneven micro-batches), so dropout may have reserved differently: every rank
    // takes rank 0's generator offset (after the buckets landed: the communication thread is idle).
    if (!sync_bn && (o.accum > 1 || r.samples % dp->size() != 0 || r.undefined_micro_batches > 0)) {
      int64_t offset = dp->rank() == 0 ? (int64_t)global_rng().offset : 0;
      dp->group().all_reduce_sum(&offset, 1);
      global_rng().offset = (uint64_t)offset;
    }
    if (!sums.defined()) {       // no row here: this rank adds zeros to the step's sums
      NoGradGuard no_grad;
      sums = zeros({1 + (o.metric ? 1 : 0) + (o.metric_total ? 1 : 0)}, DType::f64, batch.x.device());
    }
  }
  const std::vector<Tensor> params = model.parameters();
  if (o.hooks.on_grad_ready)
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].grad().defined()) o.hooks.on_grad_ready(i, params[i]);
  // Without a loss scaler (f32): the sum of every gradient element joins the step's one read. It is
  // non-finite whenever one element is (and, rarely, when the sum alone overflows; the exact check
  // then decides). One scalar per gradient, no full-size temporary; built on meta too.
  const bool check_grads = !scaler.enabled() && o.check_finite;
  Tensor grad_total;
  if (check_grads) {
    NoGradGuard no_grad;
    for (const Tensor& p : params) {
      if (!p.grad().defined() || p.grad().numel() == 0) continue;
      Tensor s = reshape(to_dtype(sum(p.grad()), DType::f64), {1});
      grad_total = grad_total.defined() ? add(grad_total, s) : s;
    }
  }
  if (o.clip > 0) {
    if (scaler.enabled()) scaler.unscale_(params);
    r.grad_norm = optim::clip_grad_norm(params, o.clip);
  } else if (scaler.enabled()) {
    scaler.unscale_(params);  // found_inf is then final and joins the step's one read
  }
  // The step's one host read: the loss (and metric) sums, with the scaler's found_inf under amp or
  // the gradient sum without it. Built on meta too, so the memory prediction allocates the same.
  Tensor readback = sums;
  {
    NoGradGuard no_grad;
    if (scaler.enabled()) readback = cat({sums, reshape(to_dtype(scaler.found_inf_tensor(), DType::f64), {1})});
    else if (grad_total.defined()) readback = cat({sums, grad_total});
  }
  if (meta) {
    r.loss = r.metric = r.metric_total = nan;
  } else {
    std::vector<double> v = to_device(readback, Device::cpu()).to_vector<double>();
    // The loss and metric sums over the ranks (the found_inf / gradient sum after them is already global).
    if (dp) dp->group().all_reduce_sum(v.data(), (int64_t)sums.numel());
    if (scaler.enabled()) scaler.set_found_inf_read(v.back() != 0.0);
    r.loss = v[0] / (double)used;
    r.metric = o.metric ? v[1] : nan;
    r.metric_total = o.metric_total ? v[o.metric ? 2 : 1] : nan;
    // With a loss scaler an inf/NaN loss is an overflow like any other: its step is skipped.
    if (!std::isfinite(r.loss) && !scaler.enabled()) {
      // The error path reads each micro-batch's loss to name the first non-finite one.
      bool found_here = false;
      for (MicroBatch& b : kept) {
        b.loss_value = to_device(b.loss, Device::cpu()).item();
        if (std::isfinite(b.loss_value)) continue;
        b.x = narrow(batch.x, 0, b.offset, b.size);
        b.y = narrow(batch.y, 0, b.offset, b.size);
        found_here = true;
        if (o.hooks.on_non_finite) {
          o.hooks.on_non_finite(b);
          break;
        }
        throw NonFiniteStep(str_cat("train_step: loss became ", b.loss_value, " in micro-batch ", b.index + 1,
                                    " (rows ", b.offset, "..", b.offset + b.size - 1, ")"),
                            str_cat("non-finite loss (",
                                    std::isnan(b.loss_value) ? "NaN" : b.loss_value > 0 ? "inf" : "-inf", ")"));
      }
      // Data-parallel: another rank's rows made the global loss non-finite; this rank stops as well.
      if (dp && !found_here)
        throw NonFiniteStep(str_cat("train_step: the global loss became ", r.loss, " on another rank's rows"),
                            "non-finite loss (on another rank)");
    }
    if (grad_total.defined() && !std::isfinite(v.back())) {
      const std::string which = first_non_finite_grad(model);
      if (!which.empty())
        throw NonFiniteStep(str_cat("train_step: the gradient of ", which, " (the loss was ", r.loss, ")"),
                            "non-finite gradient (" + which + ")");
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
    const std::vector<MicroRange> ranges = micro_ranges(batch, o, false);
    int64_t used = 0;
    for (const MicroRange& m : ranges)
      if (!m.left_out) used += m.size;
    for (int64_t index = 0; index < (int64_t)ranges.size(); ++index) {
      const MicroRange& m = ranges[index];
      if (m.left_out) continue;
      MicroBatch b;
      b.x = narrow(batch.x, 0, m.offset, m.size);
      b.y = narrow(batch.y, 0, m.offset, m.size);
      forward(model, b, loss_fn, o);
      scaler.scale(mul(b.loss, (double)b.size / (double)used)).backward();
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
