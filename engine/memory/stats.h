// Memory statistics of one CachingAllocator: current and peak bytes per pool and per tag, event
// counts, and derived numbers (fragmentation, cached-but-free). A plain value type: the allocator
// fills it under its lock and hands out copies. Must not know how blocks are stored.
#pragma once
#include <cstddef>
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "engine/memory/tag.h"

namespace kiln {

// Where a block came from: the small pool (<= small_max, shared segments), the large pool (own
// segments) or the plan arena (plan mode).
enum class Pool : uint8_t { small, large, plan };
constexpr int kNumPools = 3;
const char* pool_name(Pool p);

struct StatValue {
  int64_t current = 0;
  int64_t peak = 0;
  void add(int64_t d) {
    current += d;
    if (current > peak) peak = current;
  }
  void reset_peak() { peak = current; }
};

struct PoolStats {
  StatValue allocated;  // bytes of blocks handed out (rounded sizes)
  StatValue reserved;   // bytes of segments mapped from the provider
  StatValue active;     // allocated + freed blocks still waiting on another stream's event
  StatValue requested;  // bytes asked for (before rounding)
  void reset_peak() {
    allocated.reset_peak();
    reserved.reset_peak();
    active.reset_peak();
    requested.reset_peak();
  }
};

struct MemoryStats {
  PoolStats pool[kNumPools];
  PoolStats total;
  StatValue tag_allocated[kNumMemoryTags];
  StatValue tag_requested[kNumMemoryTags];
  uint64_t num_allocs = 0, num_frees = 0;
  uint64_t num_segment_maps = 0, num_segment_unmaps = 0;
  uint64_t num_retries = 0;  // provider failures followed by releasing the cache and retrying
  uint64_t num_ooms = 0;
  // plan mode
  uint64_t num_plan_allocs = 0;       // requests served from the plan arena
  uint64_t num_plan_divergences = 0;  // replayed steps that fell back to the bins
  size_t largest_free_block = 0;      // filled when the stats are read
  size_t capacity = 0;                // the provider's capacity, filled when the stats are read

  // 1 - allocated/reserved (0 when nothing is reserved).
  double fragmentation() const {
    return total.reserved.current > 0
               ? 1.0 - (double)total.allocated.current / (double)total.reserved.current
               : 0.0;
  }
  int64_t cached_free() const { return total.reserved.current - total.allocated.current; }
  void reset_peak();
};

nlohmann::json stats_to_json(const MemoryStats& s);

}  // namespace kiln
