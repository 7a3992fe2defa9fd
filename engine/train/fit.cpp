// The trainer (see fit.h).
#include "engine/train/fit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "engine/ops/autocast.h"
#include "engine/train/evaluate.h"

namespace kiln::train {

int64_t steps_per_epoch(int64_t samples, int64_t batch, bool drop_last) {
  KILN_CHECK(batch >= 1, "fit: batch must be >= 1, got ", batch);
  return drop_last ? samples / batch : (samples + batch - 1) / batch;
}

FitResult fit(nn::Module& model, optim::Optimizer& optimizer, optim::LossScaler& scaler, DataSource& train,
              DataSource* val, const FitOptions& o) {
  using Clock = std::chrono::steady_clock;
  KILN_CHECK(o.epochs >= 1 && o.batch >= 1 && o.step.accum >= 1, "fit: epochs, batch and accum must be >= 1 (got ",
             o.epochs, ", ", o.batch, ", ", o.step.accum, ")");
  KILN_CHECK(o.step.accum <= o.batch, "fit: accum ", o.step.accum, " is larger than the batch ", o.batch,
             " (each micro-batch needs at least one sample)");
  KILN_CHECK(o.start_epoch >= 0 && o.start_epoch <= o.epochs, "fit: start_epoch ", o.start_epoch,
             " is outside [0, ", o.epochs, "]");
  const int64_t per_epoch = steps_per_epoch(train.size(), o.batch, o.drop_last);
  KILN_CHECK(per_epoch >= 1, "fit: ", train.source(), " has ", train.size(), " samples, fewer than one batch of ",
             o.batch, " with drop_last");
  KILN_CHECK(o.start_step_in_epoch >= 0 && o.start_step_in_epoch < per_epoch &&
                 (o.start_step_in_epoch == 0 || o.start_epoch < o.epochs),
             "fit: start_step_in_epoch ", o.start_step_in_epoch, " is outside [0, ", per_epoch,
             ") steps of an epoch (or the run is already over)");
  const int64_t total_steps = per_epoch * o.epochs;
  FitResult result;
  int64_t step = o.start_step;
  std::optional<MemoryWatch> watch;
  for (int64_t epoch = o.start_epoch; epoch < o.epochs; ++epoch) {
    model.train();
    if (o.callbacks.on_epoch_begin) o.callbacks.on_epoch_begin(epoch, per_epoch);
    const auto t_epoch = Clock::now();
    train.start_epoch(epoch, o.batch, true);
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    EpochStats es;
    es.epoch = epoch + 1;
    StepOptions so = o.step;
    if (!so.loss) so.loss = cross_entropy_loss(o.class_weights);
    int64_t s = 0;
    // Loss and correct predictions stay on the device through the step; train_step reads both
    // back in its one host read per step (a GPU step waits for the device once, not per micro-batch).
    if (o.classification) so.metric = [](const MicroBatch& b) { return count_correct_tensor(b.output, b.y); };
    if (epoch == o.start_epoch && o.start_step_in_epoch > 0) {  // resumed mid-epoch
      train.skip_batches(o.start_step_in_epoch);
      s = es.steps = o.start_step_in_epoch;
      loss_sum = o.start_sums.loss_sum;
      correct = o.start_sums.correct;
      seen = o.start_sums.seen;
    }
    if (!so.hooks.on_non_finite)
      so.hooks.on_non_finite = [&](const MicroBatch& b) {
        throw Error(str_cat("train: loss became ", b.loss_value, " at epoch ", epoch + 1, ", step ", s + 1,
                            " (try a smaller --lr, --clip or --warmup)"));
      };
    SourceBatch batch;
    for (; train.next(&batch); ++s) {
      if (s >= per_epoch) continue;  // drop_last: the short last batch is read and left out
      FitStep fs;
      fs.epoch = epoch;
      fs.step_in_epoch = s;
      fs.global_step = step;
      fs.steps_per_epoch = per_epoch;
      if (o.lr_at) so.lr = o.lr_at(step, per_epoch, total_steps);
      // A short last batch of fewer rows than micro-batches: one row per micro-batch.
      so.accum = std::min<int64_t>(o.step.accum, batch.x.size(0));
      fs.lr = es.lr = so.lr >= 0 ? so.lr : optimizer.param_groups().empty() ? 0.0 : optimizer.param_groups()[0].lr;
      if (o.callbacks.before_step) o.callbacks.before_step(fs);
      const StepResult r =
          train_step(model, optimizer, scaler, Batch{batch.x, batch.y}, so);
      ++step;
      ++es.steps;
      loss_sum += r.loss * (double)r.samples;
      if (o.classification) correct += (int64_t)std::llround(r.metric);
      seen += r.samples;
      fs.result = &r;
      fs.mean_loss = loss_sum / (double)std::max<int64_t>(seen, 1);
      fs.seen = seen;
      fs.loss_sum = loss_sum;
      fs.correct = correct;
      if (o.callbacks.on_step_end) o.callbacks.on_step_end(fs);
      if (o.watch_memory) {
        if (!watch) watch.emplace(batch.x.device(), o.watch);
        // The same point of every step; a new batch shape (short last batch, image-size schedule) restarts.
        const int64_t key = batch.x.size(0) * 1000003 + (batch.x.dim() > 1 ? batch.x.size(batch.x.dim() - 1) : 0);
        if (auto g = watch->observe(key); g && o.callbacks.on_memory_growth) o.callbacks.on_memory_growth(*g);
      }
    }
    batch = SourceBatch();
    es.seconds = std::chrono::duration<double>(Clock::now() - t_epoch).count();
    es.images_per_s = (double)seen / std::max(es.seconds, 1e-9);
    es.train_loss = loss_sum / (double)std::max<int64_t>(seen, 1);
    es.train_acc = o.classification ? (double)correct / (double)std::max<int64_t>(seen, 1) : -1;
    if (scaler.enabled()) {
      es.loss_scale = scaler.current_scale();
      es.skipped_steps = scaler.skipped_steps();
    }
    if (val) {
      AutocastGuard autocast(o.step.autocast, o.step.autocast_dtype);  // evaluate in the training precision
      EvalResult ev = o.evaluate ? o.evaluate(model, *val, epoch)
                                 : evaluate_source(model, *val, o.batch, epoch, o.class_weights);
      es.val_loss = ev.loss;
      es.val_acc = ev.accuracy;
    }
    if (o.callbacks.on_epoch_end) o.callbacks.on_epoch_end(es);
    result.epochs.push_back(es);
  }
  result.steps = step;
  return result;
}

}  // namespace kiln::train
