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
  bool runs() const { return size > 0 && !left_out; }
};

// The step's micro-batches: consecutive rows, batch.micro_rows's counts when given (a data-parallel
// rank's shares of the global micro-batches; some may be empty), else dist::micro_batch_ranges (with
// options.accum entries, some empty, on a data-parallel rank).
std::vector<MicroRange> micro_ranges(const Batch& batch, const StepOptions& o, bool meta) {
  const int64_t n = batch.x.size(0);
  std::vector<MicroRange> out;
  if (!batch.micro_rows.empty()) {
    int64_t offset = 0;
    for (int64_t rows : batch.micro_rows) {
      KILN_CHECK(rows >= 0, "train_step: batch.micro_rows holds ", rows, " rows");
      out.push_back({offset, rows, false});
      offset += rows;
    }
    KILN_CHECK(offset == n, "train_step: batch.micro_rows sums to ", offset, " rows, the batch has ", n);
  } else {
    for (const dist::ShardRange& r : dist::micro_batch_ranges(n, o.accum)) out.push_back({r.offset, r.rows, false});
    // Data-parallel: every rank has options.accum micro-batches (the last ones empty on a rank of few rows),
    // so the ranks' per-micro-batch counts line up.
    if (o.data_parallel)
      while ((int64_t)out.size() < o.accum) out.push_back({n, 0, false});
  }
  for (MicroRange& m : out)
    if (!meta && o.loss_undefined && m.size > 0) m.left_out = o.loss_undefined(narrow(batch.y, 0, m.offset, m.size));
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
  // (batch.micro_rows, a data-parallel rank's shares of the global micro-batches, may hold empty ones)
  KILN_CHECK(o.accum >= 1 && (n == 0 ? dp != nullptr : o.accum <= n || !batch.micro_rows.empty()), "train_step: accum ",
             o.accum, " must be in [1, ", n, "] for a batch of ", n,
             " rows (each micro-batch needs at least one row)");
  const bool meta = batch.x.device().is_meta();
  // meta && dp: the memory predictor's imitated rank (its group's collectives leave the data as it is).
  const LossFn& loss_fn = o.loss ? o.loss : cross_entropy_loss();
  const double nan = std::numeric_limits<double>::quiet_NaN();

  StepResult r;
  r.samples = n;
  const std::vector<MicroRange> ranges = micro_ranges(batch, o, meta);
  const int64_t micro = (int64_t)ranges.size();
  int64_t used = 0;  // rows of the micro-batches that are not left out: the loss is their mean
  for (const MicroRange& m : ranges) {
    if (m.left_out) ++r.undefined_micro_batches;
    else used += m.size;
  }
  // Per micro-batch k, over the ranks: rows (k, rank) and the ranks that run it (rows, not left out).
  // One process: this rank's own.
  const int ranks = dp ? dp->size() : 1, rank = dp ? dp->rank() : 0;
  std::vector<int64_t> rows_of((size_t)(micro * ranks), 0), live((size_t)micro, 0);
  for (int64_t k = 0; k < micro; ++k) {
    rows_of[(size_t)(k * ranks + rank)] = ranges[(size_t)k].size;
    live[(size_t)k] = ranges[(size_t)k].runs() ? 1 : 0;
  }
  bool same_forwards = true;  // every rank runs the same micro-batches (so its generator advances alike)
  if (dp) {
    // The global batch's numbers in one small all-reduce: every rank weights its losses by the same
    // denominator and keys its random rows by their place in the global micro-batch. Every rank has the
    // same number of micro-batches (shard_pieces of the same global batch, or accum of its own rows).
    std::vector<int64_t> counts = {used, n};
    counts.insert(counts.end(), rows_of.begin(), rows_of.end());
    counts.insert(counts.end(), live.begin(), live.end());
    dp->group().all_reduce_sum(counts.data(), (int64_t)counts.size());
    used = counts[0];
    r.samples = counts[1];
    std::copy(counts.begin() + 2, counts.begin() + 2 + micro * ranks, rows_of.begin());
    std::copy(counts.begin() + 2 + micro * ranks, counts.end(), live.begin());
    r.undefined_micro_batches = 0;  // the global micro-batches with rows and no rank to run them
    for (int64_t k = 0; k < micro; ++k) {
      int64_t rows = 0;
      for (int q = 0; q < ranks; ++q) rows += rows_of[(size_t)(k * ranks + q)];
      if (rows > 0 && live[(size_t)k] == 0) ++r.undefined_micro_batches;
      if (live[(size_t)k] != 0 && live[(size_t)k] != ranks) same_forwards = false;
    }
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
  // With --sync-bn every rank runs every micro-batch that some rank runs (its rows, maybe none or left
  // out, with a backward of weight 0), so the ranks make the same batch-norm reductions in the same
  // order; without it, a rank runs its own live micro-batches only.
  const bool sync_bn = dp && dp->syncs_batch_norm();
  KILN_CHECK(!sync_bn || micro == 1 || !batch.micro_rows.empty(), "train_step: --sync-bn with accum ", o.accum,
             " needs the batch's micro_rows (engine/dist/shard.h's shard_pieces, as train::fit gives them): else "
             "the ranks' micro-batches would meet other rows than one process's");
  auto runs_here = [&](int64_t k) { return sync_bn ? live[(size_t)k] > 0 : ranges[(size_t)k].runs(); };
  // The step's running sums on the device, f64: [sum of loss * rows (, metric) (, metric_total)]. Read once
  // after the last micro-batch: on a GPU each read waits for the device.
  Tensor sums;
  std::vector<MicroBatch> kept;  // the micro-batches' rows and losses, for the non-finite report
  int64_t last_run = -1;         // the last micro-batch this rank runs: its backward completes the gradients
  for (int64_t k = 0; k < micro; ++k)
    if (runs_here(k)) last_run = k;
  for (int64_t index = 0; index < micro; ++index) {
    if (!runs_here(index)) continue;
    const MicroRange& m = ranges[(size_t)index];
    // Data-parallel: this rank's rows are rows [first, first + m.size) of the global micro-batch (the
    // shard rule); random per-row draws (dropout) are keyed by those rows (engine/core/rng_rows.h).
    std::optional<RngRowsGuard> keyed;
    if (dp) {
      int64_t first = 0, total = 0;
      for (int q = 0; q < ranks; ++q) {
        if (q < rank) first += rows_of[(size_t)(index * ranks + q)];
        total += rows_of[(size_t)(index * ranks + q)];
      }
      keyed.emplace(RngRows{first, m.size, total});
    }
    // Data-parallel: the last micro-batch's backward starts each gradient bucket's all-reduce as soon as
    // the bucket's gradients are complete (overlap; engine/train/data_parallel.h).
    auto watch_buckets = [&](std::optional<GradAccumulatedHookGuard>& watch) {
      if (dp && index == last_run)
        if (GradAccumulatedHook hook = dp->backward_hook()) watch.emplace(std::move(hook));
    };
    if (!m.runs()) {
      // --sync-bn, a micro-batch that another rank runs: one forward over this rank's rows (maybe none)
      // and a backward of weight 0, to join the batch-norm reductions and generator reservations.
      Tensor output;
      {
        MemoryScope scope(MemoryTag::temporary);
        AutocastGuard autocast(o.autocast, o.autocast_dtype);
        Tensor x = narrow(batch.x, 0, m.offset, m.size);
        output = model(o.channels_last && x.dim() == 4 ? contiguous(x, MemoryFormat::channels_last) : x);
      }
      keyed.reset();
      // The hook too: the buckets must start between the same batch-norm reductions as on the other ranks.
      std::optional<GradAccumulatedHookGuard> watch;
      watch_buckets(watch);
      mul(sum(output), 0.0).backward();
      continue;
    }
    MicroBatch b;
    b.index = index;
    b.offset = m.offset;
    b.size = m.size;
    b.x = narrow(batch.x, 0, m.offset, m.size);
    b.y = narrow(batch.y, 0, m.offset, m.size);
    forward(model, b, loss_fn, o);
    keyed.reset();
    if (o.hooks.after_forward) o.hooks.after_forward(b);
    {
      std::optional<GradAccumulatedHookGuard> watch;
      watch_buckets(watch);
      scaler.scale(mul(b.loss, (double)b.size / (double)used)).backward();
    }
    {
      NoGradGuard no_grad;
      Tensor part = reshape(mul(to_dtype(b.loss.detach(), DType::f64), (double)b.size), {1});
      if (o.metric) part = cat({part, reshape(to_dtype(o.metric(b).detach(), DType::f64), {1})});
      if (o.metric_total) part = cat({part, reshape(to_dtype(o.metric_total(b).detach(), DType::f64), {1})});
      sums = sums.defined() ? add(sums, part) : part;
    }
    MicroBatch kb;
    kb.index = b.index, kb.offset = b.offset, kb.size = b.size, kb.loss = b.loss.detach();
    kept.push_back(std::move(kb));
    ++r.micro_batches;
    if (o.hooks.after_backward) o.hooks.after_backward(b);
  }
  if (dp) {
    dp->all_reduce_gradients();  // gradients of the global batch from here on, the same on every rank
    // Without --sync-bn the ranks may have run different forwards (a rank without rows in a micro-batch
    // or with its loss left out), so dropout may have reserved differently: every rank
    // takes rank 0's generator offset (after the buckets landed: the communication thread is idle).
    if (!sync_bn && !same_forwards) {
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
      if (!m.runs()) continue;
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
