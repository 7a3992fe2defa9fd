// The text of kiln::OutOfMemory: what was asked, what the device holds and for what, and what to
// try with the numbers that make each suggestion worth it. A pure function of a report struct so
// it is tested without filling a device. Must not touch allocator state.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/memory/stats.h"

namespace kiln {

struct OomReport {
  std::string device;    // "cuda:0", "cpu"
  std::string provider;  // "cuda", "host"
  size_t requested = 0, rounded = 0;
  bool retried = false;  // the cache was released and the request retried
  MemoryStats stats;     // capacity and largest_free_block filled
  std::vector<std::pair<std::string, int64_t>> top_modules;  // most live bytes first (<= 5)
};

std::string format_oom_message(const OomReport& r);

}  // namespace kiln
