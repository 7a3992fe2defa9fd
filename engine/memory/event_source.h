// EventSource: how the allocator learns that a stream's work has finished, so a block freed on
// one stream may be reused on another. CUDA implements it with cudaEventRecord/Query; tests use
// a fake. Contract: record() returns a nonzero id, ids increase with each call, and an event on a
// stream completes only after every earlier event recorded on that stream.
#pragma once
#include <cstdint>

#include "engine/memory/allocator.h"

namespace kiln {

using EventId = uint64_t;

class EventSource {
 public:
  virtual ~EventSource() = default;
  // Marks the current end of `stream`'s queued work.
  virtual EventId record(StreamId stream) = 0;
  // True once all work queued on the stream before record() has finished. Called under the
  // allocator's lock: must not call back into the allocator.
  // The same id may be queried many times (several blocks can share one event).
  virtual bool query(EventId e) = 0;
};

}  // namespace kiln
