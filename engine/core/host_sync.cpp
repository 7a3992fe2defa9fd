// Process-wide host synchronization counters (see host_sync.h).
#include "engine/core/host_sync.h"

#include <atomic>

namespace kiln {
namespace {
std::atomic<int64_t> g_host_reads{0}, g_device_syncs{0};
}  // namespace

void note_host_sync(HostSyncKind kind) {
  (kind == HostSyncKind::host_read ? g_host_reads : g_device_syncs).fetch_add(1, std::memory_order_relaxed);
}

HostSyncCounts host_sync_counts() {
  return {g_host_reads.load(std::memory_order_relaxed), g_device_syncs.load(std::memory_order_relaxed)};
}

}  // namespace kiln
