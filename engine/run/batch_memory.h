// A run's --batch-memory BYTES (RunConfig::batch_memory): batches sized by predicted memory over images of
// mixed sizes.
// The data come bucketed by size (data/bucketed_image_source.h: the shorter side rounded down to a
// multiple of 32 px, one square size per bucket, no padding). For each bucket size this finds the
// largest batch whose predicted peak allocated bytes fit the budget: the trainer's own step on the
// meta device (engine/run/mem_predict.h), a doubling then binary search over the batch, capped at the
// bucket's image count, cached per size — never a trial step on the device. Small images get big
// batches, large ones small batches.
// Refused before training, with one error each: a model that does not take every bucket size
// (fixed-size classifiers: small_cnn, a model file whose linear layer is sized for one input), one
// image of a bucket that alone does not fit the budget (naming the size and the budget), --accum,
// --drop-last, --checkpoint auto, and non-image data. Data-parallel (RunConfig::ranks > 1): the budget
// is each rank's, the search finds a rank's batch (its prediction counts the gradient buckets), the
// planned batch of a step is that times the ranks, and each rank decodes its share.
// Learning-rate rule: the loss is the mean over each batch's samples (as with --batch), and --lr is
// used as given for every batch size (not scaled with the batch); printed at the start.
// During training it measures each step's peak allocated bytes (the peak counters are reset before
// every step) beside its bucket's prediction, reports the step's batch in the progress line, and
// writes the buckets, the distribution of samples per step and measured vs predicted peaks to the
// run ledger. Must not change what a step computes.
#pragma once
#include <cstdint>
#include <climits>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/bucketed_image_source.h"
#include "engine/train/fit.h"
#include "engine/train/memory_predict.h"
#include "engine/run/run_config.h"

namespace kiln {

// One bucket size's plan and what the run measured for it.
struct BucketMemory {
  int size = 0;
  int64_t images = 0;           // training images in the bucket
  int64_t batch = 0;            // samples per step and rank (the epoch's last batch of the bucket may be shorter)
  int64_t predicted_first = 0;  // peak allocated of the run's first step (no optimizer state yet)
  int64_t predicted_steady = 0; // peak allocated of a later step
  int64_t predicted_reserved = 0;
  int64_t steps = 0;            // steps measured, full batches only
  int64_t measured_min = -1, measured_max = -1;  // peak allocated of those steps
  int64_t measured_reserved_max = -1;
  int64_t predicted() const { return std::max(predicted_first, predicted_steady); }
};

using train::largest_fitting_batch;  // engine/train/memory_predict.h: the one largest-batch search

class BatchMemoryRun {
 public:
  // Checks, predicts and sets the batch of every bucket of train (and val). Prints the budget, the
  // learning-rate rule and one line per bucket to log.
  BatchMemoryRun(const RunConfig& c, int64_t num_classes, BucketedImageSource& train, BucketedImageSource* val,
                 Device device, std::ostream& log);

  void after_step(const train::FitStep& step);       // measures the step just run
  std::string progress_text() const;                 // "  batch 12 x 96px"
  int64_t take_epoch_peak();                         // the epoch's largest step peak (then restarts)
  // "largest step peak 291.3 MiB allocated, budget 300.0 MiB; measured vs predicted -0.00% to +0.00% over
  // 11 steps" for the epoch just taken (the peak counters restart every step, so per-tag epoch peaks are gone).
  std::string epoch_text() const;
  nlohmann::json to_json() const;                    // the ledger's "batch_memory"
  const std::vector<BucketMemory>& buckets() const { return buckets_; }
  int64_t budget() const { return budget_; }

 private:
  BucketedImageSource& train_;
  Device device_;
  int64_t budget_ = 0;
  int ranks_ = 1;  // data-parallel ranks: the budget and BucketMemory::batch are each rank's
  std::vector<BucketMemory> buckets_;
  std::map<int64_t, int64_t> samples_per_step_;  // samples -> steps
  int64_t steps_ = 0, epoch_peak_ = -1, taken_peak_ = -1, first_step_peak_ = -1, last_samples_ = 0;
  int last_size_ = 0;
  double worst_over_ = 0, worst_under_ = 0;  // (measured - predicted) / predicted over the compared steps
  int64_t compared_ = 0;
  int64_t max_over_budget_ = INT64_MIN;       // the largest measured step peak minus the budget
  // Predicted peak allocated (first step, later steps) by (size, samples): full and short batches.
  std::map<std::pair<int, int64_t>, std::pair<int64_t, int64_t>> short_;
};

}  // namespace kiln
