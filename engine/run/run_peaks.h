// A run's two memory figures on its device, as measured: peak allocated (the most bytes kiln's allocator
// had allocated at once) and peak reserved (the most bytes it held from the device), over the whole run from
// its first kept allocation (RunPeaks::start: the cache emptied, the counters restarted) to its end. Per-epoch
// (and --batch-memory's per-step) figures restart the allocator's counters; every restart in a run goes
// through restart(), which folds the counters first, so the whole-run figures survive them. These are the
// numbers the plan (engine/run/run_plan.h) promises, named the same everywhere: the epoch line, the
// ledger (peak_allocated, peak_reserved), `kiln runs`, the reports, `kiln mem`. Must not allocate.
#pragma once
#include <cstdint>

#include "engine/core/device.h"

namespace kiln {

class RunPeaks {
 public:
  void start(Device d);  // empties d's allocator cache and restarts its peak counters
  void restart();        // folds the counters into the whole-run figures, then restarts them
  int64_t allocated() const;  // the whole run's so far (with the counters now); -1 without statistics
  int64_t reserved() const;

 private:
  Device d_ = Device::cpu();
  bool started_ = false;
  int64_t allocated_ = 0, reserved_ = 0;
};

}  // namespace kiln
