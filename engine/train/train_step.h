// One optimizer step of training, the single definition that `fit` runs on real tensors and the
// memory predictor runs on meta tensors (shapes only), so the prediction cannot drift from the
// trainer. The step's skeleton (train_step.cpp reads as it):
//   plan the micro-batches (engine/train/step_plan.h; data-parallel: over all ranks);
//   zero grads;
//   per micro-batch (views of the step's batch): [channels-last copy]; under MemoryScope(temporary) and
//     autocast: output = model(x), loss = options.loss(output, y)            -> hooks.after_forward
//     scaler.scale(loss * m / N).backward(); loss (and metric) summed on the device -> hooks.after_backward
//   (data-parallel: DataParallel::end_backward, the gradients summed over the ranks)
//   hooks.on_grad_ready per parameter; unscale (amp); clip (options.clip > 0);
//   the step's ONE host read: loss and metric sums with found_inf (amp) or the sum of every gradient
//     (f32: a non-finite loss or gradient stops the step before anything is updated: hooks.on_non_finite,
//     default throw NonFiniteStep);
//   lr into every parameter group; scaler.step(optimizer step), scaler.update()  -> hooks.on_step_end
// A micro-batch whose loss is undefined by construction (options.loss_undefined: every target ignored) is
// left out (N counts the rows of the others; all left out: no step).
// Data-parallel (options.data_parallel, engine/train/data_parallel.h): `batch` is this rank's shard of the
// global batch (engine/dist/shard.h; it may have no row), and the step's numbers (StepResult) describe the
// global batch, the same on every rank; every rank must call train_step for every step. What differs per
// rank (the global row counts, keyed random rows, --sync-bn's weight-0 micro-batches, the gradient buckets,
// the generator offset) lives in StepPlan and DataParallel's named calls, not in the step.
// It must not read data on the meta device, own any state between steps, or know the CLI.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "engine/train/batch.h"
#include "engine/autograd/anomaly_mode.h"
#include "engine/nn/module.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/optimizer.h"

namespace kiln::train {

class DataParallel;

// The loss of one micro-batch: output of the model and its targets -> a scalar (mean over the
// micro-batch). Classification: cross_entropy_loss(); segmentation: any per-pixel mean loss.
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;
// Mean cross-entropy over (B, K) logits and (B) i64 labels, optionally class-weighted.
LossFn cross_entropy_loss(const Tensor& class_weights = Tensor());
// StepOptions::loss_undefined for that loss: every target is the ignore_index (-100) or has class
// weight 0 (a host copy of the targets is read).
std::function<bool(const Tensor& y)> cross_entropy_undefined(const Tensor& class_weights = Tensor());

// One micro-batch as the hooks see it.
struct MicroBatch {
  int64_t index = 0;     // 0-based micro-batch within the step
  int64_t offset = 0;    // first row within the step's batch
  int64_t size = 0;      // rows
  Tensor x, y;           // views of the step's batch (x after the channels-last copy)
  Tensor output, loss;   // model output and the (unscaled) mean loss of these rows (on the device)
  // The loss as a number: NaN in after_forward / after_backward (it stays on the device until the
  // step's one read; use StepResult::loss), set in on_non_finite.
  double loss_value = std::numeric_limits<double>::quiet_NaN();
};

struct StepResult {
  int64_t samples = 0;        // rows of the step's batch
  int64_t micro_batches = 0;
  double loss = 0;            // mean loss over the step's rows (NaN on the meta device)
  double metric = 0;          // the sum of options.metric over the micro-batches (NaN on meta or without)
  double metric_total = 0;    // the sum of options.metric_total (NaN on meta or without)
  int64_t used_samples = 0;   // rows not left out (loss_undefined): the loss is their mean
  double grad_norm = -1;      // before clipping; -1 without clipping, NaN on the meta device
  bool stepped = true;        // false: no optimizer step (the scaler skipped it, or every micro-batch was left out)
  int64_t undefined_micro_batches = 0;  // left out: loss undefined by construction (options.loss_undefined)
  bool undefined = false;     // every micro-batch was left out: no step, the scaler untouched
  double loss_scale = 1;      // the scaler's scale after update()
};

struct StepHooks {
  std::function<void(const MicroBatch&)> after_forward;   // loss computed, backward not yet run
  std::function<void(const MicroBatch&)> after_backward;  // gradients of this micro-batch added
  // Per parameter, once its gradient is complete for this step (data-parallel buckets).
  std::function<void(size_t index, const Tensor& param)> on_grad_ready;
  // A non-finite loss value without a loss scaler; the default (unset) throws NonFiniteStep.
  std::function<void(const MicroBatch&)> on_non_finite;
  std::function<void(const StepResult&)> on_step_end;
};

struct StepOptions {
  int64_t accum = 1;            // micro-batches per step (1 <= accum <= batch rows)
  double clip = 0;              // max global gradient L2 norm; 0: no clipping
  double lr = -1;               // >= 0: set into every parameter group before the step
  bool autocast = false;        // forward + loss under AutocastGuard(autocast_dtype)
  DType autocast_dtype = DType::f16;
  bool channels_last = false;   // one NHWC copy of 4-d inputs; ops keep the format from there
  LossFn loss;                  // unset: cross_entropy_loss()
  // Optional per-micro-batch scalar on the device (fit: the correct predictions), summed on the
  // device and read back with the loss in the step's one host read (StepResult::metric).
  std::function<Tensor(const MicroBatch&)> metric;
  // Optional: what metric counts out of (segmentation: the pixels that are not ignored, so that
  // metric / metric_total is the pixel accuracy); read back in the same host read.
  std::function<Tensor(const MicroBatch&)> metric_total;
  // True when the loss of these targets is undefined by construction (0/0: every target is the
  // ignore_index or has class weight 0); such a micro-batch is left out and counted. Unset: never.
  std::function<bool(const Tensor& y)> loss_undefined;
  // Without a loss scaler: check that every gradient is finite before the update (one scalar per
  // gradient, one device read).
  bool check_finite = true;
  // Data-parallel training over this group's ranks (see the header comment); null: one process, as before.
  DataParallel* data_parallel = nullptr;
  StepHooks hooks;
};

// A step that met a non-finite loss or gradient without a loss scaler (f32 training), thrown
// before the optimizer, the scaler or any hook after backward saw it: the parameters are unchanged.
class NonFiniteStep : public Error {
 public:
  NonFiniteStep(const std::string& msg, std::string cause) : Error(msg), cause(std::move(cause)) {}
  std::string cause;  // "non-finite loss (NaN)" / "non-finite gradient (fc.weight (2, 16) holds NaN)"
};

// One optimizer step over `batch` (x: (N, ...) and y: (N, ...) on the model's device). The loss of
// a micro-batch of m rows is weighted m / N, so the gradients are those of the full-batch mean.
StepResult train_step(nn::Module& model, optim::Optimizer& optimizer, optim::LossScaler& scaler,
                      const Batch& batch, const StepOptions& options);

// The same forward and backward as train_step (micro-batches, autocast, loss scale) under anomaly
// detection, without clipping, optimizer or scaler update: the NonFiniteError of the first op that
// produced an inf/NaN (forward output or gradient; with the first row of the batch that holds one,
// if any, in row and the message); an empty op when nothing non-finite showed up. Gradients are left in the parameters; the module's buffers
// (BatchNorm statistics) see one more forward. Used by train::fit to locate a non-finite step.
NonFiniteError locate_non_finite(nn::Module& model, optim::LossScaler& scaler, const Batch& batch,
                                 const StepOptions& options);

}  // namespace kiln::train
