// Evaluation shared by training (validation) and `kiln predict`: a classifier's loss and accuracy
// over a whole ArrayDataset or one pass of a DataSource, in eval mode without gradients, and the
// correct-count of a batch.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

#include "data/array_dataset.h"
#include "data/data_source.h"
#include "engine/nn/module.h"
#include "engine/train/segment_metrics.h"

namespace kiln {

struct EvalResult {
  double loss = 0, accuracy = 0;  // segmentation: accuracy = pixel accuracy
  int64_t n = 0;                  // samples (images)
  int64_t correct = 0;            // correct predictions (classification; accuracy = correct / n)
  std::optional<train::SegmentMetrics> segment;  // segmentation only (engine/train/segment_task.h)
};

// Argmax of logits (B, K) (any device) equals y (B) i64: how many.
int64_t count_correct(const Tensor& logits, const Tensor& y);
// The same count as a device scalar (f64, no host read): argmax over the classes (the first of
// equal maxima) compared with the labels, summed.
Tensor count_correct_tensor(const Tensor& logits, const Tensor& y);

// Mean cross-entropy (with optional class weights, per-sample mean) and accuracy over `data`, in
// batches of `batch`; leaves the model in eval mode. on_batch (optional) sees each batch's logits
// (CPU, contiguous) and its first sample index.
EvalResult evaluate(nn::Module& model, const ArrayDataset& data, int64_t batch, Device device,
                    const Tensor& class_weights = Tensor(),
                    const std::function<void(const Tensor& logits, int64_t first)>& on_batch = nullptr);

// Mean loss and accuracy over one pass of `data` at `epoch`'s image size, in eval mode without
// gradients. on_batch (optional) sees each batch's logits (CPU, contiguous) and the batch.
EvalResult evaluate_source(nn::Module& model, DataSource& data, int64_t batch, int64_t epoch,
                           const Tensor& class_weights = Tensor(),
                           const std::function<void(const Tensor& logits, const SourceBatch&)>& on_batch = nullptr);

}  // namespace kiln
