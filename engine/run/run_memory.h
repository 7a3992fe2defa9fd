// A run's memory side: resolves its recompute segments (N or auto) and applies them to the model,
// predicts the run's step on the meta device at startup, and prints after the first step and
// after each epoch the measured peak per tag (from the device's caching allocator) beside the
// prediction; writes both to the run ledger and hands the first step's to the caller (the HTML page).
// The training loop calls it at five points; it must not change what the loop computes.
#pragma once
#include <functional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "data/data_source.h"
#include "engine/nn/module.h"
#include "engine/run/mem_predict.h"
#include "engine/run/plan_run.h"
#include "engine/run/run_plan.h"
#include "engine/run/mem_predict.h"
#include "engine/run/plan_run.h"
#include "engine/run/run_plan.h"

namespace kiln {

class TrainMemoryMonitor {
 public:
  // Predicts for images of channels x size x size (no prediction, with a note, for non-square
  // images). Throws kiln::Error for a bad --checkpoint or when auto finds nothing that fits, and,
  // unless c.force, when the predicted peak reserved bytes exceed the device's budget: the message
  // lists the remedies with their predicted peaks (engine/run/mem_remedies.h; image_size_applies:
  // --image-size is among them). With --batch-memory it only keeps --recompute N.
  TrainMemoryMonitor(const RunConfig& c, int64_t num_classes, const DataSource& train, const DataSource* val,
                     int64_t model_size, Device device, bool image_size_applies, std::ostream& log,
                     int64_t start_epoch = 0, int64_t start_step_in_epoch = 0, bool plan_only = false);
  // The refusal of a plan that does not fit (what the constructor throws unless c.force or plan_only); "" when it fits.
  const std::string& stop_message() const { return stop_message_; }
  // The image loader's host batch buffers at most (0: in-memory data): outside kiln's allocator.
  int64_t loader_bytes() const { return loader_bytes_; }
  // Sets the model's recompute segments (--checkpoint).
  void apply(nn::Module& model) const;
  void before_step();
  // After each step; after the first one (with a prediction) it prints the comparison and calls
  // on_first_step with the prediction and the measurement (kiln train --memory-report draws them).
  using FirstStepMemory = std::function<void(const MemPrediction&, const MemMeasured&)>;
  void after_step(std::ostream& log, const FirstStepMemory& on_first_step = {});
  void after_epoch(int64_t epoch, std::ostream& log);
  nlohmann::json to_json() const;
  // The run's memory plan (engine/run/plan_run.h), made at construction.
  const RunPlan& plan() const { return plan_; }
  // After the run ran out of memory at `where` (its plan phase `phase`): the allocator's `account` with the
  // truth about it: the plan's figures for that phase and what kiln held (the gap), the cause (the plan did
  // not fit and the run was forced; or kiln held no more than its plan, so the memory went elsewhere; or kiln
  // held more than its plan, a bug of the plan), and remedies, each a plan of the run with one change, for the
  // budget the device has now. `release` runs after the allocator's numbers are read and before the plans:
  // it frees the real model and optimizer.
  std::string out_of_memory(const std::string& account, const std::string& where, const std::string& phase,
                            const std::function<void()>& release) const;
  int recompute_segments() const { return segments_; }

 private:
  MemMeasured measure(const std::string& when) const;
  void compare(const MemMeasured& m, const StepPeak& predicted, int64_t predicted_reserved, std::ostream& log);

  RunConfig config_;
  Device device_;
  MemConfig mem_config_;  // the predicted configuration (with the resolved checkpoint)
  bool image_size_applies_ = false;
  int segments_ = 0;
  bool have_prediction_ = false;
  bool per_bucket_ = false;  // --batch-memory: predicted and measured per step by engine/run/batch_memory.h
  MemPrediction prediction_;
  RunPlan plan_;
  std::string stop_message_;
  int64_t loader_bytes_ = 0;
  PlanInputs plan_in_;  // the plan's inputs (the sources outlive the monitor)
  // A configuration's whole-run plan within `budget` (< 0: the run's): its peak reserved, or > budget.
  PeakOf plan_peak(int64_t budget) const;
  RunPlan unlimited_plan() const;         // the plan without the budget as capacity: what the run needs
  int64_t config_image_size() const;
  int64_t steps_seen_ = 0;
  MemMeasured first_, last_epoch_;
  nlohmann::json epochs_ = nlohmann::json::array();
};

}  // namespace kiln
