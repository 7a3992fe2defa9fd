// The memory plan of a run: each phase's predicted peak allocated and reserved bytes on the run's
// device, the whole run's peaks, and the budget they are held against. engine/run/run_memory.h builds it
// from the run's own description (RunConfig) by replaying the trainer's step on the meta device; this
// file only holds and words it. Must not run models.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run/cuda_bounds.h"

namespace kiln {

struct PhasePlan {
  std::string name;          // "first step", "steady step", ...
  int64_t batch = 0;         // rows of the step's batch (one rank's)
  int64_t image_size = 0;    // H = W of its inputs
  int64_t peak_allocated = 0, peak_reserved = 0;
};

// The names of a run's phases, the same in the plan and in the run that meets them (its out-of-memory report):
// "first step: batch 16 x 64 px", "steps: ...", "short last batch: batch 12 x 64 px", "validation: ...".
std::string step_phase_name(bool first, bool short_last, int64_t rows, int64_t size);
std::string validation_phase_name(int64_t batch, int64_t size);

struct RunPlan {
  bool planned = false;      // false: no plan was made (why_not says why)
  std::string why_not;
  std::string device;        // the device planned for ("cpu", "cuda:0")
  std::vector<PhasePlan> phases;
  int64_t peak_allocated = 0, peak_reserved = 0;  // the whole run's (the largest over the phases)
  int64_t budget = 0;        // the device's memory budget (bytes)
  int64_t steps_replayed = 0, epochs_replayed = 0;  // what the replay ran (the rest repeats it)
  // false: some epochs were not replayed because the block map never repeated (notes say which)
  bool exact = true;
  std::vector<std::string> notes;  // "epochs 3-10 repeat epoch 2", policy assumptions, ...
  // An out-of-memory in the replay: where ("epoch 1, step 3 (batch 16 x 64 px)") and the allocator's account.
  std::string oom_where, oom_message;
  // A CUDA device (cuda:N): the replay is of the CUDA path's own allocations (exact for the policy, which
  // is assumed when no such GPU is here); what kiln cannot know is stated as bounds and an estimate.
  bool cuda = false;
  bool policy_assumed = false;
  CudaBounds gpu;

  bool fits() const { return !planned || (oom_where.empty() && peak_reserved <= budget); }
  const PhasePlan* phase(const std::string& name) const;  // null: no such phase
  // A few lines: one per phase ("steady step  batch 16 x 64 px  peak allocated 161.00 MiB  reserved
  // 162.00 MiB"), then the whole run against the budget.
  std::string text() const;
  // {"planned", "device", "budget", "peak_allocated", "peak_reserved", "fits", "phases": [...]} (bytes), and
  // "figures": each whole-run figure as {"bytes", "kind": "exact" | "bound" | "estimate", "exact": bool}
  // (a cuda plan adds the kernel scratch, kiln's allocator with it, cuBLAS's pool, the CUDA context and the
  // card's total, and "fits_with_bounds").
  nlohmann::json to_json() const;
};

// The measured whole-run peaks beside the plan's: "memory: whole run: peak allocated X (planned Y, exact), peak
// reserved ..." ("measured - planned = N bytes" where they differ; allocated -1: no statistics on this device).
// The training run and kiln predict print this one line.
std::string measured_vs_planned_line(int64_t allocated, int64_t reserved, const RunPlan& plan);

}  // namespace kiln
