// A training run as one library object: what `kiln train` does, for any program.
//
// Intended usage:
//   kiln::RunConfig c;                     // typed options (engine/run/run_config.h)
//   c.model = "resnet18_small"; c.data = "FOLDER"; c.epochs = 2; c.out = "runs/x";
//   kiln::Run run(c, {&std::cout});        // 1. prepare: checks, data, classes, a --resume state, the memory plan
//   run.plan();                            // 2. the plan of the whole run, phase by phase (fits the budget?)
//   kiln::RunResult r = run.train();       // 3. train: model, resume, data-parallel, fit, checkpoints, ledger
//
// A Run owns what a run is, from one description (RunConfig): its phases (epochs, the image-size schedule,
// validation, a short last batch), resume and its refusals (flags that contradict the saved state),
// training-state files mid-epoch and at epoch ends (atomic; `--resume` continues to the same bytes), the
// final weights with their model card, data-parallel set-up under an MPI launcher (rank 0 writes and
// prints, the other ranks train silently), and the run ledger OUT/runs.jsonl (start, curve points, epochs,
// end; a failure's end line carries its error; a run refused before its first step appends one
// "refused" line). The memory plan is built from the same description and replays the trainer's own
// step on the meta device (engine/run/run_memory.h), so plan and run cannot drift.
// It writes its notes (data, model, resume, memory, warnings) to options.log and tells a program about
// its progress through options.events; it prints no progress line itself and parses no flags.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run/mem_predict.h"
#include "engine/run/run_config.h"
#include "engine/run/run_plan.h"
#include "engine/train/fit.h"

namespace kiln {

using EpochStats = train::EpochStats;

struct RunResult {
  std::vector<EpochStats> epochs;  // those run by this call (after a resume: the remaining ones)
  double wall_s = 0;
  int64_t steps = 0;               // optimizer steps done in total (including before a resume)
  nlohmann::json ledger_line;      // the end record appended to OUT/runs.jsonl
};

// Called with OUT/runs.jsonl and the run's id after a ledger record is appended.
using LedgerHook = std::function<void(const std::string& ledger_path, const std::string& run_id)>;

// A step's progress as a program shows it (the `kiln` command's live line).
struct StepProgress {
  const train::FitStep* step = nullptr;  // epoch, step, running mean loss, samples seen
  std::string status;                    // "  scale 65536  skipped 0  batch 12 x 96px  pixel acc 91.20%"
  bool first = false;                    // the run's first step: its memory notes follow
};

// What a program sees of a run besides its notes; every member is optional.
struct RunEvents {
  std::function<void(int64_t epoch, int64_t epochs, int64_t steps_per_epoch)> on_epoch_begin;  // epoch 1-based
  std::function<void(const train::FitStep&)> before_step;  // the batch is loaded, the step not yet run
  std::function<void(const StepProgress&)> on_step_end;
  // Before the run's epoch notes (memory, data-parallel, bad samples) and its training-state file.
  std::function<void(const EpochStats&)> on_epoch_end;
  // The first step's measured memory beside the plan's step (kiln train --memory-report draws it).
  std::function<void(const MemPrediction& predicted, const MemMeasured& measured)> on_first_step_memory;
  // After each record appended to the ledger (epoch, end): `kiln train --report` re-renders its page.
  LedgerHook on_ledger;
};

struct RunOptions {
  std::ostream* log = nullptr;  // the run's notes, one line each (null: none)
  RunEvents events;
  // Prepare and plan only (`kiln train --dry-run`): no output folder is made, a plan over the budget is not
  // refused (plan().fits() says so, plan_refusal() words it), and train() is refused.
  bool plan_only = false;
};

class Run {
 public:
  // Prepares the run (see the usage above): throws kiln::UsageError for contradicting options and
  // kiln::Error for anything else that stops it before its first step (data, a --resume state, a plan
  // over the memory budget without config.force), after appending the "refused" ledger line.
  explicit Run(const RunConfig& config, RunOptions options = {});
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  const RunConfig& config() const;
  const RunPlan& plan() const;
  // Why the plan does not fit, with the remedies (each a plan of the run with one change); "" when it fits.
  const std::string& plan_refusal() const;
  // Trains to config.epochs (once per Run). Throws what stops it (out of memory, a non-finite step, a
  // data error) after appending the run's end line with the error.
  RunResult train();

  struct State;

 private:
  std::unique_ptr<State> s_;
};

// The ledger line of a run refused before its first step (status "refused", the error, the
// configuration), appended to c.out/runs.jsonl when that folder exists and is writable; never throws
// (a ledger that cannot be written is said on stderr).
void record_refused_run(const RunConfig& c, const std::string& error, const LedgerHook& on_ledger = {});

}  // namespace kiln
