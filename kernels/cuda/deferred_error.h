// Errors that CUDA kernels detect in their input (today: an out-of-range class target of
// cross_entropy / nll_loss / one_hot / confusion_matrix) and that are reported at the next host
// synchronization instead of by a
// stream sync per call. A kernel writes the first bad input into a slot of mapped pinned host
// memory (one slot per device); copy_bytes (device -> host) and synchronize() check the slots
// right after they wait, and throw kiln::Error naming the op, the position, the target and K, as
// the CPU backend does immediately. The kernels also write NaN for the bad samples, so a value
// read without that check is visibly wrong, never silently plausible.
// The slots (64 x 48 bytes, allocated once per process with cudaHostAlloc) are the one host buffer
// outside kiln's caching allocator. Must not synchronize by itself.
#pragma once
#include <cstdint>

namespace kiln::cuda {

enum class DeferredOp : int32_t { none = 0, cross_entropy_forward, cross_entropy_backward, nll_loss_forward,
                                  nll_loss_backward, one_hot_forward, confusion_matrix };

// Written by device code (one thread, only when pos < 0), read by the host after a sync.
struct DeferredTargetError {
  int64_t pos;     // first bad sample, -1 when none
  int64_t target;  // its target
  int64_t K;       // classes
  int64_t ignore_index;
  int32_t op;      // DeferredOp
  int32_t pad_;
  int64_t pad2_;
};

// Device-accessible pointer (unified addressing) of the slot of device `dev`; allocated on first use.
DeferredTargetError* deferred_error_slot(int dev);

// Throws kiln::Error for a recorded error of device `dev` (and clears it); `where` names the sync
// point that found it. Call only after the device's streams have been waited for.
void check_deferred_errors(int dev, const char* where);

}  // namespace kiln::cuda
