// The trainer: epochs of train::train_step over a DataSource, with evaluation on an optional
// validation source, and callbacks where a program adds progress output, training-state files,
// the run ledger, memory monitoring or curves. Typed options only (no command-line text); the
// `kiln train` command (tools/) is one caller, a library user's program another.
// Order of an epoch: model.train(); on_epoch_begin; per batch: before_step, train_step (its hooks
// from options.step), on_step_end, the leak watch; then evaluation (validation is never shuffled or augmented,
// under autocast when training uses it), and on_epoch_end with the epoch's numbers.
// Data-parallel (options.step.data_parallel set): `batch` is the per-rank batch; each step cuts a
// global batch of batch * ranks rows from the epoch's permutation (the same on every rank) and keeps
// this rank's shard (engine/dist/shard.h); steps per epoch count global batches, and the step results
// (loss, metric, samples) are the global batch's, so every rank's EpochStats are those of one process
// at the global batch. Every rank runs every step, also one where its shard is empty.
// It must not print, write files, or choose models, optimizers or devices.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "data/data_source.h"
#include "engine/train/evaluate.h"
#include "engine/train/memory_watch.h"
#include "engine/train/train_step.h"

namespace kiln::train {

struct EpochStats {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0, train_acc = 0;  // train_acc: classification accuracy, or the metric's
                                          // share (segmentation: pixel accuracy); -1 without a metric
  double val_loss = -1, val_acc = -1;  // -1: no validation data (segmentation: val_acc = pixel accuracy)
  // The counts behind train_acc and val_acc (correct predictions or pixels, and of how many), -1 unknown:
  // what every printed percentage is computed from (engine/core/percent.h).
  int64_t train_correct = -1, train_total = -1, val_correct = -1, val_total = -1;
  // Segmentation (FitOptions::evaluate that fills EvalResult::segment): the validation set's metrics.
  std::optional<SegmentMetrics> val_segment;
  double images_per_s = 0;
  double seconds = 0;
  double lr = 0;                 // LR of the epoch's last step
  int64_t steps = 0;             // optimizer steps of this epoch
  int64_t peak_memory = -1;      // bytes allocated at most in this epoch, -1 unknown (set by a caller's on_epoch_end)
  // A run's two memory figures so far (kiln::RunPeaks: the whole run up to this epoch's end), -1 unknown.
  int64_t run_peak_allocated = -1, run_peak_reserved = -1;
  double loss_scale = -1;        // with a loss scaler: its scale after the epoch (-1 without)
  int64_t skipped_steps = -1;    // with a loss scaler: optimizer steps skipped on inf/NaN so far
  // (Micro-)batches left out of this epoch because their loss is undefined by construction: empty,
  // every target the ignore_index or of class weight 0 (StepOptions::loss_undefined).
  int64_t undefined_batches = 0;
};

// Where training is, as the callbacks see it.
struct FitStep {
  int64_t epoch = 0;            // 0-based
  int64_t step_in_epoch = 0;    // 0-based
  int64_t global_step = 0;      // optimizer steps done before this one (includes a resumed run's)
  int64_t steps_per_epoch = 0;
  int64_t rows = 0;             // this rank's rows of the step's batch (one process: the batch's)
  int64_t size = 0;             // the batch's last dimension (the image width; 0 for 1-d inputs)
  double lr = 0;
  const StepResult* result = nullptr;  // on_step_end only
  double mean_loss = 0;         // running mean over the epoch so far (on_step_end)
  int64_t seen = 0;             // samples of the epoch so far (on_step_end)
  // The epoch's sums so far (on_step_end): what a mid-epoch training-state file saves so that a
  // resumed epoch reports the numbers of an uninterrupted one (FitOptions::start_sums).
  double loss_sum = 0;          // sum of loss * samples
  int64_t correct = 0;          // sum of the step metric (correct predictions or pixels)
  int64_t metric_total = 0;     // sum of StepOptions::metric_total (segmentation: pixels counted)
  int64_t undefined_batches = 0;  // batches left out so far (empty, or a loss undefined by construction)
};

// The sums of an epoch's first steps, for a run resumed mid-epoch.
struct EpochSums {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  int64_t undefined_batches = 0;
  int64_t metric_total = 0;
};

struct FitCallbacks {
  std::function<void(int64_t epoch, int64_t steps_per_epoch)> on_epoch_begin;  // epoch 0-based
  std::function<void(const FitStep&)> before_step;  // the batch is loaded, the step not yet run
  // After the optimizer step: progress, per-step curves, saving training state mid-epoch.
  std::function<void(const FitStep&)> on_step_end;
  // The leak watch fired (engine/train/memory_watch.h): live memory grew in consecutive steps.
  std::function<void(const MemoryGrowth&)> on_memory_growth;
  // After training and evaluation of an epoch: printing, training-state files, the ledger. The
  // stats may be completed here (peak_memory); fit keeps what the callback leaves.
  std::function<void(EpochStats&)> on_epoch_end;
};

struct FitOptions {
  int64_t epochs = 1;
  int64_t batch = 64;           // a source that plans its own batches (planned_steps_per_epoch) ignores it
  bool drop_last = false;       // drop an epoch's last batch when it is short (PyTorch's drop_last)
  int64_t start_epoch = 0;      // a resumed run: epochs already done
  int64_t start_step = 0;       // a resumed run: optimizer steps already done
  // A run resumed mid-epoch: steps of epoch start_epoch already done (their batches are skipped,
  // DataSource::skip_batches, so the rest of the epoch sees the same batches) and their sums.
  int64_t start_step_in_epoch = 0;
  EpochSums start_sums;
  // LR of optimizer step `step` (0-based over the run); unset: the optimizer's own LR is kept.
  std::function<double(int64_t step, int64_t steps_per_epoch, int64_t total_steps)> lr_at;
  Tensor class_weights;         // classification loss and validation (optional, (K) on the device)
  // true: accuracy from argmax of (B, K) outputs. false: step.metric (when set) summed over the
  // epoch, divided by the sum of step.metric_total when that is set, else by the samples
  // (segmentation: correct pixels / pixels counted); without step.metric, loss only.
  bool classification = true;
  // Validation of one epoch; unset: evaluate_source (classification loss and accuracy).
  std::function<EvalResult(nn::Module& model, DataSource& val, int64_t epoch)> evaluate;
  StepOptions step;             // accum, clip, autocast, channels_last, loss, step hooks
  // Non-finite values. Without a loss scaler (f32) a step whose loss or gradient holds inf/NaN
  // stops the run with one kiln::Error naming the step, the first op and its module path: with
  // detect_anomaly every op of every step is checked as it runs (engine/autograd/anomaly_mode.h);
  // without, the failing step is re-run under anomaly detection (same batch, same random draws)
  // to locate it. Either way it is thrown before the optimizer step, so no callback sees a
  // non-finite model. With a loss scaler, skipping a step is its job, but max_skipped_steps
  // consecutive skipped steps (0: no limit) end the run the same way (detect_anomaly with a scaler
  // stops at the first overflow it would have skipped). An empty batch, or one whose loss is
  // undefined by construction, is left out and counted (EpochStats::undefined_batches); an epoch
  // that delivers no sample at all is an error.
  bool detect_anomaly = false;
  int64_t max_skipped_steps = 50;
  bool watch_memory = true;     // the leak watch after every step (restarts when the batch shape changes)
  MemoryWatchOptions watch;
  FitCallbacks callbacks;
};

struct FitResult {
  std::vector<EpochStats> epochs;  // those run by this call
  int64_t steps = 0;               // optimizer steps done in total (including start_step)
};

// Optimizer steps of an epoch over `samples` samples in batches of `batch`.
int64_t steps_per_epoch(int64_t samples, int64_t batch, bool drop_last);

FitResult fit(nn::Module& model, optim::Optimizer& optimizer, optim::LossScaler& scaler, DataSource& train,
              DataSource* val, const FitOptions& options);

}  // namespace kiln::train
