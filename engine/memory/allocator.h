// The allocator interface every tensor Storage goes through, and the per-device registry.
// The caching allocator (caching_allocator.h) implements it on every device; meta tensors go
// through an allocator too (fake addresses, never dereferenced) so memory is predicted by the
// same policy that serves real runs.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/device.h"
#include "engine/memory/tag.h"

namespace kiln {

using StreamId = uint64_t;  // 0 = the device's default (compute) stream

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // nbytes > 0. Attribution (tag, module path) comes from memory_context(). Throws
  // kiln::OutOfMemory with the full account when it cannot serve the request.
  virtual void* allocate(size_t nbytes, StreamId stream = 0) = 0;
  virtual void deallocate(void* ptr) = 0;
  // Re-attributes a live block (an op output saved for backward becomes `activation`).
  virtual void retag(void* /*ptr*/, MemoryTag /*tag*/) {}
  // The block is in use on another stream: reuse must wait for that stream's work.
  virtual void record_stream(void* /*ptr*/, StreamId /*stream*/) {}
};

// The allocator serving a device. Defaults: a caching allocator over the host provider for cpu,
// over a virtual (address-only) provider for meta, over cudaMalloc for cuda:N.
Allocator* allocator_for(Device d);
// Replaces the allocator for a device (not owned; must outlive every tensor allocated by it).
// Passing nullptr restores the default.
void set_allocator(Device d, Allocator* a);

}  // namespace kiln
