// Scratch device memory for one backend call, from kiln's allocator under the `temporary` tag and
// freed at scope exit (the allocator orders reuse on the compute stream after the call's kernels).
// Used for cuDNN workspaces and for the small f64 partial sums / flags of the loss kernels.
// Host-only; never calls cudaMalloc directly.
#pragma once
#include <cstddef>

#include "engine/core/device.h"
#include "engine/memory/allocator.h"
#include "engine/memory/tag.h"

namespace kiln::cuda {

class Workspace {
 public:
  Workspace(int dev, size_t n) : alloc_(n ? allocator_for(Device::cuda(dev)) : nullptr) {
    if (!n) return;
    MemoryScope s(MemoryTag::temporary);
    ptr_ = alloc_->allocate(n);
  }
  ~Workspace() {
    if (ptr_) alloc_->deallocate(ptr_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return ptr_; }

 private:
  Allocator* alloc_;
  void* ptr_ = nullptr;
};

}  // namespace kiln::cuda
