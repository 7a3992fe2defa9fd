// The bytes a run holds outside kiln's allocator, which its plan and its two memory figures leave out: the
// image loader's host batch buffers (prefetch + 2 batches, decoded by the workers before the training thread
// copies them in), the set-up's host scratch (engine/memory/host_scratch.h), OpenBLAS's per-thread buffers,
// TurboJPEG's decode buffers, thread stacks, the program and its libraries. The first two are known; the rest
// is measured as the process's peak resident set (Linux VmHWM) minus what kiln's allocator held. Must not
// allocate through kiln's allocator.
#pragma once
#include <cstdint>
#include <string>

#include "engine/core/device.h"

namespace kiln {

// The process's peak resident set in bytes (VmHWM of /proc/self/status); -1 where it cannot be read.
int64_t peak_rss_bytes();

// One line for the end of a run: its peak RSS against the device allocator's peak reserved (counted in the
// RSS only when the device is the CPU), with what the rest is. loader_bytes: the loader's host buffers at
// most (0: in-memory data).
std::string outside_memory_line(Device device, int64_t peak_reserved, int64_t loader_bytes);

// One line for a plan: what it leaves out, with the known part (the loader's host buffers).
std::string outside_memory_note(int64_t loader_bytes);

}  // namespace kiln
