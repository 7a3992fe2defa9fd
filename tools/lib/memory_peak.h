// Peak memory of a device for the training report, read from the caching allocator's stats when
// this build has it (engine/memory/caching_allocator.h); otherwise "unknown". Must not allocate.
#pragma once
#include <cstdint>

#include "engine/core/device.h"

namespace kiln {

// Resets the peak counters of d's allocator (no-op when unavailable).
void reset_peak_memory(Device d);
// Peak allocated bytes since the last reset, or -1 when the allocator keeps no statistics.
int64_t peak_memory_bytes(Device d);
// "123.4 MiB" or "n/a" for negative values.
const char* format_bytes(int64_t bytes, char* buf, int buf_size);

}  // namespace kiln
