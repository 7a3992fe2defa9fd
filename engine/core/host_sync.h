// Process-wide counters of kiln's own host synchronization points, so that a test can assert that
// a training step waits for the device at most once. Two kinds:
//   - host_reads:   item() and to_vector() (the host reading tensor data: on a GPU run the data
//                   had to come back from the device, so each is a sync there; on the CPU it is
//                   the same call, which lets a CPU test count what would be a sync on a GPU);
//   - device_syncs: kiln's CUDA wrappers that block the host (a device -> host copy, a stream or
//                   device synchronize, an event wait).
// Counting only: must not synchronize anything itself, and must stay lock-free (relaxed atomics).
#pragma once
#include <cstdint>

namespace kiln {

enum class HostSyncKind : uint8_t { host_read, device_sync };

void note_host_sync(HostSyncKind kind);

struct HostSyncCounts {
  int64_t host_reads = 0;
  int64_t device_syncs = 0;
  int64_t total() const { return host_reads + device_syncs; }
};
HostSyncCounts host_sync_counts();

// Counts between construction and now (a step's syncs: HostSyncScope s; step(); s.counts()).
class HostSyncScope {
 public:
  HostSyncScope() : start_(host_sync_counts()) {}
  HostSyncCounts counts() const {
    HostSyncCounts now = host_sync_counts();
    return {now.host_reads - start_.host_reads, now.device_syncs - start_.device_syncs};
  }

 private:
  HostSyncCounts start_;
};

}  // namespace kiln
