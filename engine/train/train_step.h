// One optimizer step of training, the single definition that `fit` runs on real tensors and the
// memory predictor runs on meta tensors (shapes only), so the prediction cannot drift from the
// trainer. Order of one step (the allocation order the predictor measures):
//   zero grads;
//   per micro-batch (options.accum of them, views of the step's batch):
//     [channels_last copy of the input]; under MemoryScope(temporary) and autocast (when
//     options.autocast): output = model(x), loss = options.loss(output, y);  -> hooks.after_forward
//     scaler.scale(loss * m / N).backward();
//     the loss (and options.metric) added on the device, no host read;          -> hooks.after_backward
//   (not meta) the step's one host read: the summed loss and metric; a non-finite loss goes to
//     hooks.on_non_finite with the first non-finite micro-batch (default: throw);
//   hooks.on_grad_ready per parameter (after the last micro-batch's backward, parameter order);
//   clip (options.clip > 0): scaler.unscale_ then clip_grad_norm;
//   lr (options.lr >= 0) into every parameter group; scaler.step(optimizer step), scaler.update();
//   hooks.on_step_end (per-step metrics; the place to save training state mid-epoch).
// It must not read data on the meta device, own any state between steps, or know the CLI.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "data/array_dataset.h"
#include "engine/nn/module.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/optimizer.h"

namespace kiln::train {

// The loss of one micro-batch: output of the model and its targets -> a scalar (mean over the
// micro-batch). Classification: cross_entropy_loss(); segmentation: any per-pixel mean loss.
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;
// Mean cross-entropy over (B, K) logits and (B) i64 labels, optionally class-weighted.
LossFn cross_entropy_loss(const Tensor& class_weights = Tensor());

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
  double grad_norm = -1;      // before clipping; -1 without clipping, NaN on the meta device
  bool stepped = true;        // false: the scaler skipped the optimizer step (inf/NaN gradient)
  double loss_scale = 1;      // the scaler's scale after update()
};

struct StepHooks {
  std::function<void(const MicroBatch&)> after_forward;   // loss computed, backward not yet run
  std::function<void(const MicroBatch&)> after_backward;  // gradients of this micro-batch added
  // Per parameter, once its gradient is complete for this step (data-parallel buckets).
  std::function<void(size_t index, const Tensor& param)> on_grad_ready;
  // A non-finite loss value; the default (unset) throws kiln::Error naming the micro-batch.
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
  StepHooks hooks;
};

// One optimizer step over `batch` (x: (N, ...) and y: (N, ...) on the model's device). The loss of
// a micro-batch of m rows is weighted m / N, so the gradients are those of the full-batch mean.
StepResult train_step(nn::Module& model, optim::Optimizer& optimizer, optim::LossScaler& scaler,
                      const Batch& batch, const StepOptions& options);

}  // namespace kiln::train
