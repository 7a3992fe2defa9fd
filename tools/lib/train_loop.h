// `kiln train` as a function: loads the data, builds the model and optimizer, runs the epochs
// (micro-batches, gradient accumulation, clipping, LR schedule), evaluates, writes checkpoints
// (OUT/checkpoint.safetensors, atomic), the final weights (--save) and one line of OUT/runs.jsonl.
// Lives in libkiln so tests can call it in-process; it prints to the streams it is given.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/lib/train_config.h"

namespace kiln {

struct EpochStats {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0, train_acc = 0;
  double val_loss = -1, val_acc = -1;  // -1: no validation data
  double images_per_s = 0;
  double seconds = 0;
  double lr = 0;                 // LR of the epoch's last step
  int64_t peak_memory = -1;      // bytes, -1 unknown
  double loss_scale = -1;        // --amp: the loss scale after the epoch (-1 without --amp)
  int64_t skipped_steps = -1;    // --amp: optimizer steps skipped on inf/NaN so far
};

struct TrainResult {
  std::vector<EpochStats> epochs;  // those run by this invocation (after a resume: the remaining ones)
  double wall_s = 0;
  int64_t steps = 0;               // optimizer steps done in total (including before a resume)
  nlohmann::json ledger_line;      // what was appended to OUT/runs.jsonl
};

// log: per-epoch summaries and notes (stdout); progress: the live line (stderr). progress_tty:
// rewrite the line in place (pass isatty(2) for stderr).
TrainResult run_training(const TrainConfig& c, std::ostream& log, std::ostream& progress, bool progress_tty);
// Same, detecting whether `progress` is a terminal when it is std::cerr.
TrainResult run_training(const TrainConfig& c, std::ostream& log, std::ostream& progress);

}  // namespace kiln
