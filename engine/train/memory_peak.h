// Peak memory of a device for the training report, read from the caching allocator's stats when
// this build has it (engine/memory/caching_allocator.h); otherwise "unknown". Must not allocate.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace kiln {

// Resets the peak counters of d's allocator (no-op when unavailable).
void reset_peak_memory(Device d);
// Peak allocated bytes since the last reset, or -1 when the allocator keeps no statistics.
int64_t peak_memory_bytes(Device d);
// "123.4 MiB" or "n/a" for negative values.
const char* format_bytes(int64_t bytes, char* buf, int buf_size);

}  // namespace kiln

namespace kiln {
// "peak 85.3 MiB (param 44.6 MiB, grad 44.6 MiB, ...)": the total allocated peak and each tag's
// own peak since the last reset (tags peak at different moments, so they need not add up);
// "peak n/a" when the allocator keeps no statistics.
std::string format_tag_peaks(Device d);
// Bytes allocated now per memory tag (index: MemoryTag), empty when the allocator keeps no statistics.
std::vector<int64_t> live_tag_bytes(Device d);
}  // namespace kiln
