// The device a meta-device run stands in for. `kiln mem` predicts a CPU run by running the same
// step on meta; where kiln takes a device-specific path that changes allocations (the optimizers'
// fused update, a CPU loop or a CUDA kernel, allocates nothing; their generic path allocates
// temporaries), the meta run asks meta_target() and takes the path of the device it imitates.
// Default: cpu.
#pragma once
#include "engine/core/device.h"

namespace kiln {

Device meta_target();

// Sets meta_target() on this thread for its lifetime.
class MetaTargetScope {
 public:
  explicit MetaTargetScope(Device target);
  ~MetaTargetScope();
  MetaTargetScope(const MetaTargetScope&) = delete;
  MetaTargetScope& operator=(const MetaTargetScope&) = delete;

 private:
  Device prev_;
};

}  // namespace kiln
