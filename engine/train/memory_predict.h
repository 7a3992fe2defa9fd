// Memory prediction of a training step of any model: builds the model (on the CPU, through the
// caller's factory), moves it to the meta device (shapes and dtypes, no storage), and runs the
// trainer's own train::train_step on a meta batch through a fresh CachingAllocator with the
// target device's policy, twice (the first step creates optimizer state; the second is the steady
// state). Returns the accounts: per-tag bytes, activations saved per module path, peak allocated
// and reserved bytes, optionally the event timeline and the segment map at the peak. Because the
// step is the trainer's own function, on the CPU the prediction is the trainer's allocation
// sequence. Must not touch real data or the target device's memory, and restores the global RNG.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/memory/caching_allocator.h"
#include "engine/memory/tag.h"
#include "engine/nn/module.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/optimizer.h"
#include "engine/train/data_parallel.h"
#include "engine/train/train_step.h"

namespace kiln {

using TagBytes = std::array<int64_t, kNumMemoryTags>;

struct StepPeak {
  int64_t allocated = 0, reserved = 0;
  TagBytes tag_peak{};    // each tag's own peak during the step
  TagBytes at_peak{};     // the tags at the moment the total allocated bytes peaked
};

// What one prediction found (engine/train's part of tools' MemPrediction).
struct StepMemory {
  std::string target;  // the device imitated ("cpu")
  // The imitated allocator's policy in words ("expandable arena, granule 2.00 MiB"), and whether it
  // was assumed (a cuda target that is not in this machine: kiln's CUDA default, not the device's).
  std::string policy;
  bool policy_assumed = false;
  bool expandable = true;
  int64_t granule = 0;  // the arena's commit step (expandable) or 0
  int num_stages = 0;  // stages the model splits into for recompute segments
  StepPeak first, steady;
  int64_t peak_allocated = 0, peak_reserved = 0;  // max over the steps
  // Steady-state bytes that live across steps, and the end-of-forward picture.
  int64_t params = 0, grads = 0, optimizer = 0, data = 0;
  int64_t activations = 0;  // saved for backward at the end of the last forward (+ loss)
  int64_t temporaries_at_peak = 0;
  int64_t slack = 0;        // peak reserved - peak allocated
  std::vector<std::pair<std::string, int64_t>> layer_activations;  // module path -> bytes, forward order
  // Data-parallel (ranks > 1): one rank's gradient buckets (data_parallel.h): tensors from the allocator,
  // tagged grad, that hold the gradients themselves (already in `grads` and every number above).
  int ranks = 1;
  int64_t buckets = 0;
  // detail only
  nlohmann::json trace;  // the allocator's Chrome trace of one steady step
  std::vector<SegmentInfo> segments_at_peak;
};

namespace train {

using ModelFactory = std::function<nn::ModulePtr()>;  // a fresh model, on the CPU
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(nn::Module& model)>;

struct PredictOptions {
  int64_t batch = 1;                  // rows of the step's batch
  std::vector<int64_t> input_shape;   // one sample's shape, e.g. {C, H, W} (f32)
  std::vector<int64_t> target_shape;  // one sample's target shape ({}: a class index, i64)
  DType target_dtype = DType::i64;
  int64_t loss_weight_classes = 0;    // > 0: a (K) class-weight tensor like the trainer's
  int recompute = 0;                  // recompute segments (0: off)
  bool amp = false;                   // autocast in amp_dtype, as the trainer's --amp [f16|bf16]
  DType amp_dtype = DType::f16;       // f16: with the loss scaler; bf16: without (a pass-through, as the trainer's)
  optim::LossScalerOptions scaler;    // the scaler's options under amp f16 (its `enabled` is ignored)
  StepOptions step;                   // accum, clip, lr, channels_last, loss (as the trainer's)
  // Segmentation (engine/train/segment_task.h): the step's loss, pixel metric and pixel count are
  // use_segmentation_step's with the class weights above; target_shape is then {H, W}.
  bool segmentation = false;
  std::string segmentation_loss = "ce";  // ce | dice | ce+dice (segment_task.h's segmentation_loss)
  Device target = Device::cpu();      // whose allocator policy is imitated
  bool detail = false;                // also the timeline and the segment map at the peak (one more step)
  // The optimizer's state made when it is built (optim::Optimizer::create_state, as a kiln::Run makes it),
  // not by its first update (a plain loop's, the default).
  bool create_state = false;
  // Data-parallel: the step of one rank of `ranks` (batch is the per-rank batch) with its gradient buckets.
  int ranks = 1;
  DataParallelOptions data_parallel;
};

StepMemory predict_step_memory(const ModelFactory& make_model, const OptimizerFactory& make_optimizer,
                               const PredictOptions& options);

// The one search for "the largest batch that fits" (--max-batch, the memory remedies, --batch-memory's
// buckets): the largest batch in [1, cap] with fits(batch) true, for a fits that is true up to some batch
// and false after: from the guess, galloping (steps 1, 2, 4, ...) up while it fits or down until it
// does, then bisection. 0 when fits(1) is false. A good guess costs two probes (guess, guess + 1).
int64_t largest_fitting_batch(int64_t cap, const std::function<bool(int64_t)>& fits, int64_t guess = 1);

// Largest batch whose peak (peak_of(batch), bytes) is <= budget * (1 - margin), by largest_fitting_batch.
struct MaxBatchResult {
  int64_t batch = 0;
  int64_t peak_reserved = 0;   // at that batch
  std::vector<std::pair<int64_t, int64_t>> probes;  // (batch, peak reserved) in the order tried
};
MaxBatchResult max_batch_for_budget(const std::function<int64_t(int64_t batch)>& peak_of, int64_t budget,
                                    double margin);

// The memory budget of a device: its allocator's capacity (a device-memory limit if one is set,
// else the device's memory, host RAM for the CPU).
int64_t device_budget(Device d);

}  // namespace train
}  // namespace kiln
