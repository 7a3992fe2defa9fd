// What to change when a run's predicted peak does not fit the memory budget: each
// remedy (a largest --batch, --accum at the same effective batch, --amp, --recompute auto, a
// smaller --image-size) with its own predicted peak reserved bytes, every number from a meta run
// of the same step (engine/run/mem_predict.h), none from proportional guesses. The searches are
// bounded (doubling + bisection, a few runs each). Must not allocate on the target device and must
// not run a real step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/run/mem_predict.h"
#include "engine/run/run_plan.h"

namespace kiln {

struct MemRemedy {
  std::string option;        // e.g. "--batch 20", "--accum 4", "--amp", "--recompute auto (3 segments)"
  std::string note;          // e.g. "--batch 21 would need 65.0 MiB"
  int64_t peak_reserved = 0; // predicted, bytes
  bool fits = false;
};

// The remedies that apply to `c` (image_size_applies: the data is resized, an image folder or a
// CSV list). Each is a single change from `c`. `predicted` (c's own prediction, optional): when its
// parameters + gradients + optimizer state alone exceed the budget, no remedy here can fit (each
// keeps them), so none is searched and one entry says so.
// peak_of: how a candidate is predicted (default: one step, predict_memory; a run: its whole plan). Never
// offers `c` itself: the largest batch is searched below c's batch, --recompute auto only when it changes c's
// segments.
std::vector<MemRemedy> find_memory_remedies(const MemConfig& c, int64_t budget, bool image_size_applies,
                                            const StepMemory* predicted = nullptr, const PeakOf& peak_of = step_peak_of);

// The stop message: predicted vs budget, the remedies, and --force. `budget_what` names where the
// budget comes from ("--device-memory", "the device's memory").
std::string format_memory_stop(const MemConfig& c, const StepMemory& predicted, int64_t budget,
                               const std::string& budget_what, const std::vector<MemRemedy>& remedies);

// The stop message of a run whose plan (engine/run/plan_run.h) does not fit: where it would run out (the
// replay's out-of-memory, or the phase whose reserved bytes pass the budget), the plan, the remedies, --force.
// "\n  --batch 12: 160.00 MiB (fits); ..." one line per remedy.
std::string remedies_text(const std::vector<MemRemedy>& remedies, int64_t budget);

// `needs`: the same plan without the budget as capacity (what the run would take).
std::string format_plan_stop(const RunPlan& plan, const std::string& budget_what,
                             const std::vector<MemRemedy>& remedies, const RunPlan& needs);

}  // namespace kiln
