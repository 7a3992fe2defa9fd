// `kiln train` as a function: loads the data, builds the model and optimizer, runs train::fit
// (engine/train/fit.h) with callbacks that print progress and epochs, write training-state files
// (OUT/checkpoint.safetensors, atomic), the final weights (--save) and one line of OUT/runs.jsonl.
// Lives in libkiln so tests can call it in-process; it prints to the streams it is given.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/train/fit.h"
#include "tools/train_config.h"

namespace kiln {

using EpochStats = train::EpochStats;

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
