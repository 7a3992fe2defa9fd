// The memory predictor behind `kiln mem` and `kiln train`'s prediction: runs training steps of a
// configuration on the meta device (shapes only, no arithmetic) through a fresh CachingAllocator
// with the target device's policy, and returns the accounts: per-tag bytes, activations saved
// per module path, the predicted peak allocated and reserved bytes of the first step and of the
// steady state, and optionally the step's event timeline and the segment map at the peak.
// The meta step mirrors tools/lib/train_loop.cpp's order of allocations (zero_grad, per
// micro-batch: batch, forward, loss, backward; clip; optimizer step), with --amp (train.amp) under
// autocast and through the loop's LossScaler, so on the CPU the prediction is exact. Must not touch real data or the target device's memory (it builds the model on the
// CPU briefly and returns that memory).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/memory/caching_allocator.h"
#include "engine/memory/tag.h"
#include "tools/lib/train_config.h"

namespace kiln {

using TagBytes = std::array<int64_t, kNumMemoryTags>;

struct MemConfig {
  TrainConfig train;          // model, batch, accum, optimizer, momentum, weight_decay, clip, device, seed
  int64_t image_size = 32;
  int64_t in_channels = 3;
  int64_t num_classes = 10;   // used when train.num_classes is 0
  int checkpoint = 0;         // recompute segments (0: off)
  bool detail = false;        // also record the timeline and the segment map at the peak (one more step)
};

struct StepPeak {
  int64_t allocated = 0, reserved = 0;
  TagBytes tag_peak{};    // each tag's own peak during the step
  TagBytes at_peak{};     // the tags at the moment the total allocated bytes peaked
};

struct MemPrediction {
  MemConfig config;
  std::string target;  // the device imitated ("cpu")
  int num_stages = 0;  // stages the model splits into for --checkpoint
  StepPeak first, steady;
  int64_t peak_allocated = 0, peak_reserved = 0;  // max over the steps
  // Steady-state bytes that live across steps, and the end-of-forward picture.
  int64_t params = 0, grads = 0, optimizer = 0, data = 0;
  int64_t activations = 0;  // saved for backward at the end of the last forward (+ loss)
  int64_t temporaries_at_peak = 0;
  int64_t slack = 0;        // peak reserved - peak allocated
  std::vector<std::pair<std::string, int64_t>> layer_activations;  // module path -> bytes, forward order
  // detail only
  nlohmann::json trace;  // the allocator's Chrome trace of one steady step
  std::vector<SegmentInfo> segments_at_peak;
  nlohmann::json to_json() const;
};

MemPrediction predict_memory(const MemConfig& c);

// The number of recompute stages `model` splits into (0: it cannot be split).
int model_num_stages(const MemConfig& c);

// Chooses the checkpoint segment count (0 = off) with the least recomputation whose predicted peak
// reserved bytes fit `budget`; checks 0, then 2..num_stages. Throws kiln::Error with the smallest
// peak found when none fits. `tried` receives (segments, peak reserved) per candidate.
int choose_checkpoint(const MemConfig& c, int64_t budget, std::vector<std::pair<int, int64_t>>* tried = nullptr);
// Stages re-run in backward with `segments` segments over `stages` stages (all but the last segment).
int recomputed_stages(int stages, int segments);

// Largest batch whose predicted peak reserved bytes are <= budget * (1 - margin): doubling from 1,
// then a binary search, over meta runs. Returns 0 when even batch 1 does not fit.
struct MaxBatchResult {
  int64_t batch = 0;
  int64_t peak_reserved = 0;   // at that batch
  std::vector<std::pair<int64_t, int64_t>> probes;  // (batch, peak reserved) in the order tried
};
MaxBatchResult find_max_batch(const MemConfig& c, int64_t budget, double margin);

// The memory budget of a device: its allocator's capacity (a --device-memory limit if one is set,
// else the device's memory, host RAM for the CPU).
int64_t device_budget(Device d);

}  // namespace kiln
