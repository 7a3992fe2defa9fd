// The trainer (see fit.h).
#include "engine/train/fit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "engine/core/generator.h"
#include "engine/dist/shard.h"
#include "engine/train/data_parallel.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "engine/train/evaluate.h"

namespace kiln::train {

namespace {

// The default cross-entropy's loss is undefined (0/0) for targets that are all the ignore_index
// or of class weight 0. Labels in range make that possible only with a zero class weight, so
// without one no predicate is installed (and no targets are read back).
bool has_zero_weight(const Tensor& class_weights) {
  if (!class_weights.defined() || class_weights.device().is_meta()) return false;
  const std::vector<float> w = to_device(class_weights, Device::cpu()).to_vector<float>();
  return std::find(w.begin(), w.end(), 0.0f) != w.end();
}

// "first non-finite value: conv2d in conv1: ... = sample 17 of x.npy" for the error.
std::string located(const NonFiniteError& e, const SourceBatch& batch, const std::string& source) {
  if (e.op.empty()) return "re-running the step under anomaly detection found no non-finite value (not reproducible)";
  std::string s = "first non-finite value: " + std::string(e.what());
  int64_t row = e.row;
  for (int64_t r = 0; row < 0 && r < batch.x.size(0); ++r)  // --detect-anomaly: the op did not look at rows
    if (!all_finite(narrow(batch.x, 0, r, 1))) {
      row = r;
      s += str_cat("; the batch's row ", r, " holds ", non_finite_kind(narrow(batch.x, 0, r, 1)));
    }
  if (row >= 0 && row < (int64_t)batch.indices.size())
    s += str_cat(" = sample ", batch.indices[(size_t)row], " of ", source);
  return s;
}

// Data-parallel: this rank's rows of the global batch, its shares of `accum` micro-batches
// (engine/dist/shard.h), with their row counts when accum > 1.
SourceBatch take_shard(const SourceBatch& global, int rank, int ranks, int64_t accum) {
  SourceBatch b;
  std::vector<Tensor> xs, ys;
  const bool has_indices = (int64_t)global.indices.size() == global.x.size(0);
  for (const dist::ShardRange& r : dist::shard_pieces(global.x.size(0), rank, ranks, accum)) {
    xs.push_back(narrow(global.x, 0, r.offset, r.rows));
    ys.push_back(narrow(global.y, 0, r.offset, r.rows));
    if (has_indices) b.indices.insert(b.indices.end(), global.indices.begin() + r.offset,
                                      global.indices.begin() + r.offset + r.rows);
    if (accum > 1) b.micro_rows.push_back(r.rows);
  }
  if (xs.size() == 1) {
    b.x = xs[0];
    b.y = ys[0];
  } else if (xs.empty()) {  // no row in the global batch
    b.x = narrow(global.x, 0, 0, 0);
    b.y = narrow(global.y, 0, 0, 0);
  } else {
    b.x = cat(xs);
    b.y = cat(ys);
  }
  return b;
}

}  // namespace

int64_t steps_per_epoch(int64_t samples, int64_t batch, bool drop_last) {
  KILN_CHECK(batch >= 1, "fit: batch must be >= 1, got ", batch);
  return drop_last ? samples / batch : (samples + batch - 1) / batch;
}

namespace {

// An epoch's running sums: the loss over the rows of finite losses (an amp skip aside), the metric.
struct EpochSumsRunning {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0, loss_rows = 0, metric_total = 0, undefined = 0;

  void add(const StepResult& r, bool has_metric, bool has_total) {
    undefined += r.undefined_micro_batches;
    if (r.undefined) return;
    if (std::isfinite(r.loss)) {  // an overflow under a loss scaler: its step is skipped
      loss_sum += r.loss * (double)r.used_samples;
      loss_rows += r.used_samples;
    }
    if (has_metric && std::isfinite(r.metric)) correct += (int64_t)std::llround(r.metric);
    if (has_total && std::isfinite(r.metric_total)) metric_total += (int64_t)std::llround(r.metric_total);
    seen += r.used_samples;
  }
  double mean_loss() const { return loss_sum / (double)std::max<int64_t>(loss_rows, 1); }
};

// What fit does around each step: the data-parallel shard, the step under anomaly checks, and the one
// error that stops the run on a non-finite step or too many skipped ones.
struct Trainer {
  nn::Module& model;
  optim::Optimizer& optimizer;
  optim::LossScaler& scaler;
  DataSource& train;
  const FitOptions& o;
  int ranks = 1, rank = 0;
  bool source_shards = false;  // data-parallel: the source reads only this rank's rows
  int64_t per_epoch = 0, total_steps = 0, step = 0;
  int64_t skipped_in_a_row = 0;  // loss scaler skips
  std::optional<MemoryWatch> watch;

  Trainer(nn::Module& m, optim::Optimizer& opt, optim::LossScaler& sc, DataSource& source, const FitOptions& options)
      : model(m), optimizer(opt), scaler(sc), train(source), o(options) {}
  StepOptions step_options() const;
  StepResult run_step(SourceBatch& batch, const StepOptions& so, int64_t epoch, int64_t s);
  void check_skips(const StepResult& r, const Batch& b, const StepOptions& so, const SourceBatch& batch,
                   const RngState& rng_before, const std::string& where);
  EpochStats run_epoch(int64_t epoch);
  void watch_memory(const SourceBatch& batch);
};

StepOptions Trainer::step_options() const {
  StepOptions so = o.step;
  if (!so.loss) {
    so.loss = cross_entropy_loss(o.class_weights);
    if (!so.loss_undefined && has_zero_weight(o.class_weights))
      so.loss_undefined = cross_entropy_undefined(o.class_weights);
  }
  // Loss and correct predictions stay on the device through the step; train_step reads both back in its
  // one host read per step (a GPU step waits for the device once, not per micro-batch).
  if (o.classification) so.metric = [](const MicroBatch& b) { return count_correct_tensor(b.output, b.y); };
  return so;
}

// One optimizer step over `batch`; a non-finite step becomes one Error naming where (the step, the first op
// and its module, the sample), re-run under anomaly detection with the same random draws to locate it.
StepResult Trainer::run_step(SourceBatch& batch, const StepOptions& so, int64_t epoch, int64_t s) {
  const std::string where =
      str_cat("step ", step + 1, " (epoch ", epoch + 1, ", batch ", s + 1, " of ", per_epoch, ")");
  const RngState rng_before = global_rng();  // a re-run of the step draws the same numbers
  const Batch b(batch);
  StepResult r;
  if (batch.x.size(0) == 0 && !so.data_parallel) {  // every sample of the batch was bad: nothing to learn from
    // (data-parallel: train_step runs anyway, this rank's part of the step's collectives)
    r.stepped = false;
    r.undefined = true;
    r.undefined_micro_batches = 1;
    r.loss = std::nan("");
    r.loss_scale = scaler.current_scale();
    return r;
  }
  try {
    std::optional<AnomalyModeGuard> anomaly;
    if (o.detect_anomaly) anomaly.emplace(true);
    r = train_step(model, optimizer, scaler, b, so);
  } catch (const NonFiniteError& e) {  // detect_anomaly: the op that produced it threw
    throw Error(str_cat("train: a non-finite value at ", where, " (--detect-anomaly); ",
                        located(e, batch, train.source()), " (the parameters were not updated)"));
  } catch (const NonFiniteStep& e) {
    global_rng() = rng_before;
    const NonFiniteError at = locate_non_finite(model, scaler, b, so);
    // An inf/NaN the step was given (batch, parameter) is no matter of --lr.
    const bool given = std::string(at.what()).find("already held") != std::string::npos;
    throw Error(str_cat("train: ", e.cause, " at ", where, "; ", located(at, batch, train.source()),
                        " (the parameters were not updated", given ? "" : "; try a smaller --lr, --clip or --warmup",
                        ")"));
  }
  check_skips(r, b, so, batch, rng_before, where);
  return r;
}

// With a loss scaler, skipping a step is its job; max_skipped_steps in a row end the run.
void Trainer::check_skips(const StepResult& r, const Batch& b, const StepOptions& so, const SourceBatch& batch,
                          const RngState& rng_before, const std::string& where) {
  if (!scaler.enabled() || r.undefined) return;
  if (r.stepped) {
    skipped_in_a_row = 0;
    return;
  }
  ++skipped_in_a_row;
  if (o.max_skipped_steps <= 0 || skipped_in_a_row < o.max_skipped_steps) return;
  global_rng() = rng_before;
  const NonFiniteError at = locate_non_finite(model, scaler, b, so);
  throw Error(str_cat("train: ", skipped_in_a_row,
                      " consecutive steps skipped by the loss scaler (inf/NaN gradients), the last at ", where,
                      ", loss scale now ", scaler.current_scale(), "; in that step the ", located(at, batch, train.source()),
                      " (raise --max-skipped-steps, lower --lr, or train without --amp)"));
}

// The leak watch at the same point of every step; a new batch shape (a short last batch, an image-size
// schedule) restarts it.
void Trainer::watch_memory(const SourceBatch& batch) {
  if (!o.watch_memory) return;
  if (!watch) watch.emplace(batch.x.device(), o.watch);
  const int64_t key = batch.x.size(0) * 1000003 + (batch.x.dim() > 1 ? batch.x.size(batch.x.dim() - 1) : 0);
  if (auto g = watch->observe(key); g && o.callbacks.on_memory_growth) o.callbacks.on_memory_growth(*g);
}

EpochStats Trainer::run_epoch(int64_t epoch) {
  using Clock = std::chrono::steady_clock;
  model.train();
  if (o.callbacks.on_epoch_begin) o.callbacks.on_epoch_begin(epoch, per_epoch);
  const auto t_epoch = Clock::now();
  train.start_epoch(epoch, dist::global_batch(o.batch, ranks), true);
  EpochStats es;
  es.epoch = epoch + 1;
  StepOptions so = step_options();
  const bool has_metric = (bool)so.metric, has_total = (bool)so.metric_total;
  EpochSumsRunning sums;
  int64_t s = 0;
  if (epoch == o.start_epoch && o.start_step_in_epoch > 0) {  // resumed mid-epoch
    train.skip_batches(o.start_step_in_epoch);
    s = es.steps = o.start_step_in_epoch;
    const EpochSums& st = o.start_sums;
    // The state file keeps seen; loss_rows differs only after an --amp skip in this epoch.
    sums = {st.loss_sum, st.correct, st.seen, st.seen, st.metric_total, st.undefined_batches};
  }
  SourceBatch batch;
  for (; train.next(&batch); ++s) {
    if (s >= per_epoch) continue;  // drop_last: the short last batch is read and left out
    if (ranks > 1 && !source_shards) batch = take_shard(batch, rank, ranks, o.step.accum);
    FitStep fs;
    fs.epoch = epoch;
    fs.step_in_epoch = s;
    fs.global_step = step;
    fs.steps_per_epoch = per_epoch;
    fs.rows = batch.x.size(0);
    fs.size = batch.x.dim() > 1 ? batch.x.size(batch.x.dim() - 1) : 0;
    if (o.lr_at) so.lr = o.lr_at(step, per_epoch, total_steps);
    // A short last batch of fewer rows than micro-batches: one row per micro-batch.
    so.accum = std::max<int64_t>(1, std::min<int64_t>(o.step.accum, batch.x.size(0)));
    fs.lr = es.lr = so.lr >= 0 ? so.lr : optimizer.param_groups().empty() ? 0.0 : optimizer.param_groups()[0].lr;
    if (o.callbacks.before_step) o.callbacks.before_step(fs);
    const StepResult r = run_step(batch, so, epoch, s);
    sums.add(r, has_metric, has_total);
    ++step;
    ++es.steps;
    fs.result = &r;
    fs.mean_loss = sums.mean_loss();
    fs.seen = sums.seen;
    fs.loss_sum = sums.loss_sum;
    fs.correct = sums.correct;
    fs.metric_total = sums.metric_total;
    fs.undefined_batches = sums.undefined;
    if (o.callbacks.on_step_end) o.callbacks.on_step_end(fs);
    watch_memory(batch);
  }
  batch = SourceBatch();
  KILN_CHECK(sums.seen > 0 || sums.undefined > 0, "train: epoch ", epoch + 1, " of ", train.source(),
             " delivered no readable sample (every one of its ", train.size(),
             " samples was bad; see the reports above)");
  es.undefined_batches = sums.undefined;
  es.seconds = std::chrono::duration<double>(Clock::now() - t_epoch).count();
  es.images_per_s = (double)sums.seen / std::max(es.seconds, 1e-9);
  es.train_loss = sums.mean_loss();
  es.train_acc = !has_metric ? -1
                 : has_total ? (double)sums.correct / (double)std::max<int64_t>(sums.metric_total, 1)
                             : (double)sums.correct / (double)std::max<int64_t>(sums.seen, 1);
  if (has_metric) {
    es.train_correct = sums.correct;
    es.train_total = has_total ? sums.metric_total : sums.seen;
  }
  if (scaler.enabled()) {
    es.loss_scale = scaler.current_scale();
    es.skipped_steps = scaler.skipped_steps();
  }
  return es;
}

}  // namespace

FitResult fit(nn::Module& model, optim::Optimizer& optimizer, optim::LossScaler& scaler, DataSource& train,
              DataSource* val, const FitOptions& o) {
  KILN_CHECK(o.epochs >= 1 && o.batch >= 1 && o.step.accum >= 1, "fit: epochs, batch and accum must be >= 1 (got ",
             o.epochs, ", ", o.batch, ", ", o.step.accum, ")");
  KILN_CHECK(o.step.accum <= o.batch, "fit: accum ", o.step.accum, " is larger than the batch ", o.batch,
             " (each micro-batch needs at least one sample)");
  KILN_CHECK(o.start_epoch >= 0 && o.start_epoch <= o.epochs, "fit: start_epoch ", o.start_epoch,
             " is outside [0, ", o.epochs, "]");
  Trainer t(model, optimizer, scaler, train, o);
  DataParallel* const dp = o.step.data_parallel;
  t.ranks = dp ? dp->size() : 1;
  t.rank = dp ? dp->rank() : 0;
  const int64_t planned = train.planned_steps_per_epoch();  // a source that sizes its own batches
  t.per_epoch = planned > 0 ? planned : steps_per_epoch(train.size(), dist::global_batch(o.batch, t.ranks), o.drop_last);
  KILN_CHECK(t.per_epoch >= 1, "fit: ", train.source(), " has ", train.size(), " samples, fewer than one batch of ",
             o.batch, " with drop_last");
  KILN_CHECK(o.start_step_in_epoch >= 0 && o.start_step_in_epoch < t.per_epoch &&
                 (o.start_step_in_epoch == 0 || o.start_epoch < o.epochs),
             "fit: start_step_in_epoch ", o.start_step_in_epoch, " is outside [0, ", t.per_epoch,
             ") steps of an epoch (or the run is already over)");
  t.total_steps = t.per_epoch * o.epochs;
  t.source_shards = t.ranks > 1 && train.shard(t.rank, t.ranks, o.step.accum);
  t.step = o.start_step;
  FitResult result;
  for (int64_t epoch = o.start_epoch; epoch < o.epochs; ++epoch) {
    EpochStats es = t.run_epoch(epoch);
    if (val) {
      AutocastGuard autocast(o.step.autocast, o.step.autocast_dtype);  // evaluate in the training precision
      EvalResult ev = o.evaluate ? o.evaluate(model, *val, epoch)
                                 : evaluate_source(model, *val, o.batch, epoch, o.class_weights);
      es.val_loss = ev.loss;
      es.val_acc = ev.accuracy;
      es.val_segment = ev.segment;
      if (ev.segment) {  // pixel accuracy: the confusion matrix's diagonal over the pixels counted
        const SegmentMetrics& m = *ev.segment;
        es.val_correct = 0;
        for (int64_t k = 0; k < m.num_classes; ++k) es.val_correct += m.confusion[(size_t)(k * m.num_classes + k)];
        es.val_total = m.pixels;
      } else if (ev.n > 0) {
        es.val_correct = ev.correct;
        es.val_total = ev.n;
      }
    }
    if (o.callbacks.on_epoch_end) o.callbacks.on_epoch_end(es);
    result.epochs.push_back(es);
  }
  result.steps = t.step;
  return result;
}

}  // namespace kiln::train
