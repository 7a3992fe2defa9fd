// `kiln train` as a function: loads the data, builds the model and optimizer, runs train::fit
// (engine/train/fit.h) with callbacks that print progress and epochs, write training-state files
// (OUT/checkpoint.safetensors, atomic), the final weights (--save) and the run's records in
// OUT/runs.jsonl (engine/train/run_ledger.h: start, curve points, epochs, end; a failure's end
// line carries its error). A run refused before its first step (a bad flag, an unwritable --save,
// a predicted peak that does not fit, a --resume that contradicts the flags, unreadable data)
// appends one end line with "status":"refused" and the error, when its --out folder exists and
// can be written.
// Lives in libkiln so tests can call it in-process; it prints to the streams it is given.
#pragma once
#include <cstdint>
#include <functional>
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
  nlohmann::json ledger_line;      // the end record appended to OUT/runs.jsonl
};

// Called after each epoch's ledger record and after the end record (kiln train --report).
using LedgerHook = std::function<void(const std::string& ledger_path, const std::string& run_id)>;

// log: per-epoch summaries and notes (stdout); progress: the live line (stderr). progress_tty:
// rewrite the line in place (pass isatty(2) for stderr).
TrainResult run_training(const TrainConfig& c, std::ostream& log, std::ostream& progress, bool progress_tty,
                         const LedgerHook& on_ledger = {});
// The ledger line of a run refused before its first step (status "refused", the error, the
// configuration), appended to c.out/runs.jsonl when that folder exists and is writable; never
// throws (a ledger that cannot be written is said on stderr).
void record_refused_run(const TrainConfig& c, const std::string& error, const LedgerHook& on_ledger = {});
// Same, detecting whether `progress` is a terminal when it is std::cerr.
TrainResult run_training(const TrainConfig& c, std::ostream& log, std::ostream& progress,
                         const LedgerHook& on_ledger = {});

}  // namespace kiln
