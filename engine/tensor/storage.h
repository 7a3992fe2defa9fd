// Storage: a ref-counted block from a device allocator plus the version counter that autograd
// uses to detect in-place changes of saved tensors. Tensors are views over a Storage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/core/device.h"
#include "engine/memory/allocator.h"
#include "engine/memory/tag.h"

namespace kiln {

struct StorageImpl {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  Allocator* allocator = nullptr;            // returns the block on destruction (null: external)
  std::function<void(void*)> external_free;  // for memory kiln does not own
  uint64_t version = 0;
  MemoryTag tag = MemoryTag::other;

  StorageImpl() = default;
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;
  ~StorageImpl();

  // Re-attributes the block (e.g. temporary -> activation when saved for backward).
  void retag(MemoryTag t);
};

using Storage = std::shared_ptr<StorageImpl>;

// nbytes from the device's allocator, attributed to the current MemoryScope.
Storage make_storage(size_t nbytes, Device device);
// Wraps memory owned elsewhere; `free_fn` (may be empty) runs when the last view dies.
Storage wrap_storage(void* data, size_t nbytes, Device device, std::function<void(void*)> free_fn);

}  // namespace kiln
