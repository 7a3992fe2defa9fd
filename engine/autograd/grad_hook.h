// A per-thread hook called by the backward engine each time an AccumulateGrad node has added this
// backward's gradient into its leaf's .grad: from then on that leaf's gradient of this backward is
// complete. Data-parallel gradient buckets start their all-reduce from here while backward goes on
// (engine/train/data_parallel.h). The hook runs on the backward's thread, between nodes; it must not
// run ops on the leaf's gradient that record history or change its storage.
#pragma once
#include <functional>

namespace kiln {

struct TensorImpl;

using GradAccumulatedHook = std::function<void(const TensorImpl* leaf)>;

// Installs `hook` on this thread for the guard's lifetime (the previous one is restored after).
class GradAccumulatedHookGuard {
 public:
  explicit GradAccumulatedHookGuard(GradAccumulatedHook hook);
  ~GradAccumulatedHookGuard();
  GradAccumulatedHookGuard(const GradAccumulatedHookGuard&) = delete;
  GradAccumulatedHookGuard& operator=(const GradAccumulatedHookGuard&) = delete;

 private:
  GradAccumulatedHook prev_;
};

// The hook of this thread (null when none): called by AccumulateGrad::apply.
const GradAccumulatedHook& grad_accumulated_hook();

}  // namespace kiln
