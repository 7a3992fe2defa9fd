// CUDA runtime services for kiln: device discovery (and why none is usable), device properties
// for `kiln devices`, one compute and one copy stream per device, byte copies between devices, and
// the per-device cuBLAS / cuDNN handles bound to the compute stream. Kernels launch on
// compute_stream(dev). Nothing here allocates tensor memory (that is engine/memory's job).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/core/device.h"

namespace kiln::cuda {

// Number of usable CUDA devices; 0 when there is no driver, no device, or CUDA_VISIBLE_DEVICES
// hides them all. Never throws.
int device_count();
// Why device_count() is 0, in one sentence ("no NVIDIA driver ...", "CUDA_VISIBLE_DEVICES is
// empty", ...); empty when a device is usable.
std::string unavailable_reason();

struct DeviceProps {
  int index = 0;
  std::string name;
  size_t total_memory = 0;  // bytes
  size_t free_memory = 0;   // bytes, at query time
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  int driver_version = 0;   // e.g. 12040 = 12.4
  int runtime_version = 0;
};
// Properties of cuda:index; throws kiln::Error if the index is not a usable device.
DeviceProps device_properties(int index);

// Per-device streams (created on first use, non-blocking with respect to the legacy stream). The
// device's caching allocator knows them as stream ids 0 (compute) and 1 (copy):
// engine/memory/event_source_cuda.h.
cudaStream_t compute_stream(int dev);
cudaStream_t copy_stream(int dev);

// Makes `dev` current for its lifetime and restores the previous device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int dev);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// Copies n bytes between any two of cpu and cuda:N (used by to_device). Host<->device copies run on
// the device's copy stream after the compute stream's pending work and are complete on return
// (the host buffer may be pageable); a copy within one device runs on its compute stream; a copy between
// devices runs on the source's compute stream after the destination's pending work, and the destination's
// later work waits for it (each allocator sees its blocks used on its own stream only).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n);

// Waits for all work on the device's compute and copy streams.
void synchronize(int dev);

// Test support (stream_sleep.cu): queues one kernel that keeps `stream` busy for about
// `microseconds` (the GPU's global timer), on the current device.
void sleep_on_stream(cudaStream_t stream, int64_t microseconds);

}  // namespace kiln::cuda
