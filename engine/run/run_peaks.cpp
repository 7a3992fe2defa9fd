// A run's whole peaks (see run_peaks.h).
#include "engine/run/run_peaks.h"

#include <algorithm>

#include "engine/memory/caching_allocator.h"

namespace kiln {

void RunPeaks::start(Device d) {
  d_ = d;
  started_ = true;
  allocated_ = reserved_ = 0;
  if (CachingAllocator* a = caching_allocator_for(d)) {
    a->empty_cache();
    a->reset_peak();
  }
}

void RunPeaks::restart() {
  if (!started_) return;
  CachingAllocator* a = caching_allocator_for(d_);
  if (!a) return;
  const MemoryStats s = a->stats();
  allocated_ = std::max<int64_t>(allocated_, s.total.allocated.peak);
  reserved_ = std::max<int64_t>(reserved_, s.total.reserved.peak);
  a->reset_peak();
}

int64_t RunPeaks::allocated() const {
  CachingAllocator* a = started_ ? caching_allocator_for(d_) : nullptr;
  if (!a) return -1;
  return std::max<int64_t>(allocated_, a->stats().total.allocated.peak);
}

int64_t RunPeaks::reserved() const {
  CachingAllocator* a = started_ ? caching_allocator_for(d_) : nullptr;
  if (!a) return -1;
  return std::max<int64_t>(reserved_, a->stats().total.reserved.peak);
}

}  // namespace kiln
