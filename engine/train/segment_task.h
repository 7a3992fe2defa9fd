// Segmentation as a training task: the per-pixel loss, the step options that make train_step and
// fit count pixels, and the whole-set validation that gives the metrics of segment_metrics.h. The
// trainer (`kiln train --task segment`), the memory predictor (the same StepOptions on the meta
// device) and a library user's program share these. Conventions: a model's output is (N, K, H, W)
// class scores, a target is (N, H, W) i64 class indices with 255 = ignore (8-bit mask PNGs), so
// K <= 255. Must not read files, print, or know the command line.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "data/data_source.h"
#include "engine/nn/module.h"
#include "engine/train/evaluate.h"
#include "engine/train/train_step.h"
#include "engine/core/op_modes.h"

namespace kiln::train {

constexpr int64_t kSegmentIgnoreIndex = 255;  // a mask pixel that counts nowhere (loss, metrics)
constexpr int64_t kSegmentMaxClasses = 255;   // classes 0..254: an 8-bit mask keeps 255 for ignore

// One error naming `who`, the output's and the target's shapes unless output is (N, K, H, W) with
// 1 <= K <= 255 and target (N, H, W) i64. Runs on meta tensors too.
void check_segmentation_output(const Tensor& output, const Tensor& target, const std::string& who);

// Per-pixel cross-entropy of output (N, K, H, W) against target (N, H, W): torch's
// F.cross_entropy(output, target, weight, ignore_index=255, reduction): mean = sum of w[t] * nll
// over the pixels not ignored / sum of their w[t] (the per-pixel form of engine/ops/segmentation.h).
Tensor segmentation_cross_entropy(const Tensor& output, const Tensor& target, const Tensor& class_weights = Tensor(),
                                  Reduction reduction = Reduction::mean);
// The training loss by name: "ce" (segmentation_cross_entropy, class-weighted), "dice" (the soft
// Dice loss of engine/ops/segmentation.h: 1 - mean over every class of (2 sum p t + 1) / (sum p +
// sum t + 1), 255 masked out; class weights do not apply), "ce+dice" (their sum). Anything else
// is a kiln::Error naming it.
LossFn segmentation_loss(const std::string& kind, const Tensor& class_weights = Tensor());

// The StepOptions of segmentation training on top of `o` (accum, clip, ... kept):
//   loss          = segmentation_loss(loss, class_weights) (mean over the micro-batch);
//   metric        = pixels whose argmax (the first of equal maxima) equals the target;
//   metric_total  = pixels not ignored; so fit's train_acc is the epoch's pixel accuracy;
//   loss_undefined = a micro-batch with no pixel that counts (all 255, or all of class weight 0):
//                    left out and counted, not a 0/0 loss. It reads one device scalar per
//                    micro-batch (the whole targets when a class weight is 0); meta never calls it.
void use_segmentation_step(StepOptions* o, const Tensor& class_weights = Tensor(), const std::string& loss = "ce");

// Loss and metrics over one pass of `data` at `epoch`'s image size, in eval mode without gradients:
// the loss is the mean over every counted pixel of the set (torch's mean with class weights over
// the whole set), the confusion matrix is accumulated on the device over every batch and read once
// at the end. accuracy = pixel accuracy; segment = segment_metrics(confusion, K, ignore_background).
// on_batch (optional) sees each batch's output (CPU, contiguous (B, K, H, W)) and the batch.
EvalResult evaluate_segmentation(nn::Module& model, DataSource& data, int64_t batch, int64_t epoch,
                                 const Tensor& class_weights = Tensor(), bool ignore_background = false,
                                 const std::function<void(const Tensor& output, const SourceBatch&)>& on_batch = nullptr);

}  // namespace kiln::train
