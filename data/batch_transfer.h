// Where loader batch buffers live and how they reach the training device.
//   - cpu: buffers come from the CPU caching allocator under MemoryTag::data (so --device-memory
//     and the per-tag peaks see them) and are used in place;
//   - cuda with --pin-memory: buffers come from a caching allocator over pinned host memory
//     (cudaHostAlloc) and are copied by cudaMemcpyAsync on the device's copy stream; the compute
//     stream waits on an event, and the pinned buffer stays alive until that event has completed;
//   - cuda without --pin-memory: ordinary host buffers and a synchronous copy.
// Must not know about data sets or decoding: it moves bytes.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include "engine/core/device.h"
#include "engine/tensor/tensor.h"

namespace kiln {

struct BatchMemory {
  std::function<void*(size_t)> alloc;
  std::function<void(void*, size_t)> release;
  bool pinned = false;  // buffers are page-locked and copies are asynchronous
};

// The buffer callbacks for batches that go to `device`. pin: use pinned host memory when the
// device is a GPU (ignored on the CPU: see pin_memory_note()).
BatchMemory batch_memory_for(Device device, bool pin);
// A one-line note when --pin-memory cannot do anything (no CUDA device in use), else "".
std::string pin_memory_note(Device device, bool pin);

// x: host buffer of `shape` f32 (kept alive by `keep` until the copy is done) -> a tensor on
// `device` tagged MemoryTag::data. On the CPU the buffer is wrapped, not copied.
Tensor batch_to_device(void* host, const Shape& shape, std::shared_ptr<void> keep, Device device, bool pinned);

}  // namespace kiln
