// The allocator's event ring: the last N alloc / free / segment map / unmap / OOM events with a
// timestamp and the live bytes per tag after each, so a Chrome trace can draw counters without
// the events that fell out of the window. Only storage: formatting lives with the allocator,
// which knows module names.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/memory/allocator.h"

namespace kiln {

// retag: a live block changed attribution (e.g. an op output saved for backward becomes an
// activation, a gradient buffer moves to `grad`): the per-tag levels move without an alloc.
enum class TraceKind : uint8_t { alloc, free, map, unmap, oom, retag };
const char* trace_kind_name(TraceKind k);

struct TraceEvent {
  uint64_t ts_ns = 0;  // steady clock, since the ring was enabled
  uint64_t id = 0;     // allocation id (alloc/free) or segment id (map/unmap)
  uintptr_t addr = 0;
  size_t size = 0;  // requested bytes (alloc/free/oom) or segment bytes
  StreamId stream = 0;
  uint32_t module = 0;
  MemoryTag tag = MemoryTag::other;
  MemoryTag prev_tag = MemoryTag::other;  // retag: the tag before
  TraceKind kind = TraceKind::alloc;
  int64_t tag_bytes[kNumMemoryTags] = {};  // allocated bytes per tag after the event
};

class EventRing {
 public:
  explicit EventRing(size_t capacity) : buf_(capacity) {}
  size_t capacity() const { return buf_.size(); }
  size_t size() const { return count_; }
  uint64_t dropped() const { return dropped_; }
  TraceEvent& push() {
    TraceEvent& e = buf_[head_];
    head_ = (head_ + 1) % buf_.size();
    if (count_ < buf_.size()) ++count_;
    else ++dropped_;
    return e;
  }
  // i-th oldest event still held.
  const TraceEvent& at(size_t i) const { return buf_[(head_ + buf_.size() - count_ + i) % buf_.size()]; }

 private:
  std::vector<TraceEvent> buf_;
  size_t head_ = 0, count_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace kiln
