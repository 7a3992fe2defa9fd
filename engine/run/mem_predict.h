// The memory predictor of a run's step by model name (the plan of a Run, `kiln mem`): turns a configuration into
// engine/train's predict_step_memory (engine/train/memory_predict.h), which runs the training
// step on the meta device through a fresh CachingAllocator with the target device's policy.
// The meta step is the trainer's own train::train_step (engine/train/train_step.h) on a batch
// allocated like the loader's, with --amp (train.amp) under autocast and through the loop's
// LossScaler, so on the CPU the prediction is exact by construction.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/train/memory_predict.h"
#include "engine/run/run_config.h"

namespace kiln {

struct MemConfig {
  RunConfig train;          // model, batch, accum, optimizer, momentum, weight_decay, clip, device, seed
  int64_t image_size = 32;
  int64_t in_channels = 3;
  int64_t num_classes = 10;   // used when train.num_classes is 0
  int recompute = 0;         // recompute segments (0: off)
  bool detail = false;        // also record the timeline and the segment map at the peak (one more step)
  int ranks = 1;              // data-parallel ranks: the prediction is one rank's (batch per rank + buckets)
};

// The prediction of a `kiln mem` / `kiln train` configuration: engine/train's accounts plus the
// configuration they are for.
struct MemPrediction : StepMemory {
  MemConfig config;
  int cpu_threads = 0;  // the CPU thread count the prediction assumed (0: not a CPU target)
  nlohmann::json to_json() const;
};

// What a real run measured (kiln train); absent for kiln mem.
struct MemMeasured {
  bool present = false;
  std::string when;  // "first step", "epoch 1"
  int64_t peak_allocated = 0, peak_reserved = 0;
  TagBytes tag_peak{};
  nlohmann::json trace;  // the measured step's Chrome trace (may be null: the predicted one is drawn)
};

MemPrediction predict_memory(const MemConfig& c);

// The predicted peak reserved bytes of a configuration, for the searches below (recompute auto, the largest
// batch, the remedies): by default predict_memory's (one step); a run gives its whole plan's
// (engine/run/run_memory.h), a value above the budget meaning "does not fit".
using PeakOf = std::function<int64_t(const MemConfig& c)>;
int64_t step_peak_of(const MemConfig& c);

// The number of recompute stages `model` splits into (0: it cannot be split).
int model_num_stages(const MemConfig& c);

// Chooses the checkpoint segment count (0 = off) with the least recomputation whose predicted peak
// reserved bytes fit `budget`; checks 0, then 2..num_stages. Throws kiln::Error with the smallest
// peak found when none fits. `tried` receives (segments, peak reserved) per candidate.
int choose_recompute(const MemConfig& c, int64_t budget, std::vector<std::pair<int, int64_t>>* tried = nullptr,
                     const PeakOf& peak_of = step_peak_of);
// Stages re-run in backward with `segments` segments over `stages` stages (all but the last segment).
int recomputed_stages(int stages, int segments);

// Largest batch whose predicted peak reserved bytes are <= budget * (1 - margin) (meta runs of c
// at other batch sizes; engine/train's max_batch_for_budget).
using MaxBatchResult = train::MaxBatchResult;
MaxBatchResult find_max_batch(const MemConfig& c, int64_t budget, double margin, const PeakOf& peak_of = step_peak_of,
                              int64_t cap = int64_t(1) << 24);

using train::device_budget;

// True for the error of a training-mode batch norm given 1 value per channel (a batch too small for the
// model at its image size): the batch searches skip such batches instead of failing.
bool is_batch_too_small_for_batch_norm(const Error& e);

}  // namespace kiln
