// What to change when a `kiln train` step's predicted peak does not fit the memory budget: each
// remedy (a largest --batch, --accum at the same effective batch, --amp, --recompute auto, a
// smaller --image-size) with its own predicted peak reserved bytes, every number from a meta run
// of the same step (tools/lib/mem_predict.h), none from proportional guesses. The searches are
// bounded (doubling + bisection, a few runs each). Must not allocate on the target device and must
// not run a real step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tools/mem_predict.h"

namespace kiln {

struct MemRemedy {
  std::string option;        // e.g. "--batch 20", "--accum 4", "--amp", "--recompute auto (3 segments)"
  std::string note;          // e.g. "--batch 21 would need 65.0 MiB"
  int64_t peak_reserved = 0; // predicted, bytes
  bool fits = false;
};

// The remedies that apply to `c` (image_size_applies: the data is resized, an image folder or a
// CSV list). Each is a single change from `c`.
std::vector<MemRemedy> find_memory_remedies(const MemConfig& c, int64_t budget, bool image_size_applies);

// The stop message: predicted vs budget, the remedies, and --force. `budget_what` names where the
// budget comes from ("--device-memory", "the device's memory").
std::string format_memory_stop(const MemConfig& c, const StepMemory& predicted, int64_t budget,
                               const std::string& budget_what, const std::vector<MemRemedy>& remedies);

}  // namespace kiln
