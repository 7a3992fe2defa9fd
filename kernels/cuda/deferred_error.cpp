// Slots of deferred kernel input errors and their check at the sync points (see deferred_error.h).
#include "kernels/cuda/deferred_error.h"

#include <cuda_runtime.h>

#include <mutex>

#include "engine/core/error.h"
#include "kernels/cuda/check.h"

namespace kiln::cuda {
namespace {

constexpr int kSlots = 64;
DeferredTargetError* g_slots = nullptr;
std::once_flag g_once;

const char* op_name(int32_t op) {
  switch ((DeferredOp)op) {
    case DeferredOp::cross_entropy_forward: return "cross_entropy_forward";
    case DeferredOp::cross_entropy_backward: return "cross_entropy_backward";
    case DeferredOp::nll_loss_forward: return "nll_loss_forward";
    case DeferredOp::nll_loss_backward: return "nll_loss_backward";
    case DeferredOp::one_hot_forward: return "one_hot (dice_loss)";
    case DeferredOp::confusion_matrix: return "confusion_matrix";
    default: return "a cuda kernel";
  }
}

DeferredTargetError* slots() {
  std::call_once(g_once, [] {
    void* p = nullptr;
    KILN_CUDA_CHECK(cudaHostAlloc(&p, sizeof(DeferredTargetError) * kSlots, cudaHostAllocMapped | cudaHostAllocPortable),
                    "cudaHostAlloc of the deferred-error slots");
    g_slots = static_cast<DeferredTargetError*>(p);
    for (int i = 0; i < kSlots; ++i) g_slots[i] = DeferredTargetError{-1, 0, 0, 0, 0, 0, 0};
  });
  return g_slots;
}

}  // namespace

DeferredTargetError* deferred_error_slot(int dev) {
  KILN_CHECK(dev >= 0 && dev < kSlots, "deferred_error_slot: device index ", dev, " out of range");
  return slots() + dev;
}

void check_deferred_errors(int dev, const char* where) {
  if (!g_slots || dev < 0 || dev >= kSlots) return;  // no loss kernel ran yet
  volatile DeferredTargetError* e = g_slots + dev;
  if (e->pos < 0) return;
  const DeferredTargetError copy{e->pos, e->target, e->K, e->ignore_index, e->op, 0, 0};
  e->pos = -1;
  throw Error(str_cat(op_name(copy.op), " (cuda:", dev, "): target ", copy.target, " at position ", copy.pos,
                      " is out of range for K=", copy.K, " classes (ignore_index ", copy.ignore_index,
                      "); found on the device, reported at the next synchronization (", where, ")"));
}

}  // namespace kiln::cuda
