// Inference helpers shared by training (validation) and `kiln predict`: a model's loss and
// accuracy over a whole ArrayDataset in eval mode without gradients, and correct-count of a batch.
#pragma once
#include <cstdint>
#include <functional>

#include "data/array_dataset.h"
#include "engine/nn/module.h"

namespace kiln {

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t n = 0;
};

// Argmax of logits (B, K) (any device) equals y (B) i64: how many.
int64_t count_correct(const Tensor& logits, const Tensor& y);

// Mean cross-entropy (with optional class weights, per-sample mean) and accuracy over `data`, in
// batches of `batch`; leaves the model in eval mode. on_batch (optional) sees each batch's logits
// (CPU, contiguous) and its first sample index.
EvalResult evaluate(nn::Module& model, const ArrayDataset& data, int64_t batch, Device device,
                    const Tensor& class_weights = Tensor(),
                    const std::function<void(const Tensor& logits, int64_t first)>& on_batch = nullptr);

}  // namespace kiln
