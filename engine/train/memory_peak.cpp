// Peak-memory queries over the caching allocator when it is part of the build (see memory_peak.h).
#include "engine/train/memory_peak.h"

#include <cstdio>

#if __has_include("engine/memory/caching_allocator.h")
#include "engine/memory/caching_allocator.h"
#define KILN_HAVE_CACHING_ALLOCATOR 1
#endif

namespace kiln {

void reset_peak_memory(Device d) {
#ifdef KILN_HAVE_CACHING_ALLOCATOR
  try {
    if (CachingAllocator* a = caching_allocator_for(d)) a->reset_peak();
  } catch (...) {
  }
#else
  (void)d;
#endif
}

int64_t peak_memory_bytes(Device d) {
#ifdef KILN_HAVE_CACHING_ALLOCATOR
  try {
    if (CachingAllocator* a = caching_allocator_for(d)) return (int64_t)a->stats().total.allocated.peak;
  } catch (...) {
  }
#else
  (void)d;
#endif
  return -1;
}

const char* format_bytes(int64_t b, char* buf, int n) {
  if (b < 0) std::snprintf(buf, (size_t)n, "n/a");
  else if (b >= (int64_t)1 << 30) std::snprintf(buf, (size_t)n, "%.2f GiB", (double)b / (1 << 30));
  else std::snprintf(buf, (size_t)n, "%.1f MiB", (double)b / (1 << 20));
  return buf;
}

}  // namespace kiln

namespace kiln {

std::string format_tag_peaks(Device d) {
  char buf[32];
#ifdef KILN_HAVE_CACHING_ALLOCATOR
  try {
    if (CachingAllocator* a = caching_allocator_for(d)) {
      const MemoryStats s = a->stats();
      std::string out = std::string("peak ") + format_bytes(s.total.allocated.peak, buf, sizeof buf) + " (";
      for (int t = 0; t < kNumMemoryTags; ++t) {
        out += std::string(t ? ", " : "") + tag_name((MemoryTag)t) + " " +
               format_bytes(s.tag_allocated[t].peak, buf, sizeof buf);
      }
      out += std::string("); reserved peak ") + format_bytes(s.total.reserved.peak, buf, sizeof buf);
      return out;
    }
  } catch (...) {
  }
#else
  (void)d;
#endif
  return std::string("peak ") + format_bytes(-1, buf, sizeof buf);
}

}  // namespace kiln

namespace kiln {

std::vector<int64_t> live_tag_bytes(Device d) {
#ifdef KILN_HAVE_CACHING_ALLOCATOR
  try {
    if (CachingAllocator* a = caching_allocator_for(d)) {
      const MemoryStats s = a->stats();
      std::vector<int64_t> out(kNumMemoryTags);
      for (int t = 0; t < kNumMemoryTags; ++t) out[(size_t)t] = s.tag_allocated[t].current;
      return out;
    }
  } catch (...) {
  }
#else
  (void)d;
#endif
  return {};
}

}  // namespace kiln
