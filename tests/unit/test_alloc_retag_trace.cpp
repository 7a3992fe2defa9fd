// A retag (e.g. a gradient buffer moving from temporary to grad) is an event of the trace, so the
// Chrome trace and the memory report's timeline show the per-tag levels move at that point.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "engine/memory/caching_allocator.h"
#include "engine/memory/provider.h"

using namespace kiln;

TEST_CASE("alloc: retag is traced with both tags' new levels") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, AllocatorConfig{});
  a.enable_trace(64);
  void* p;
  {
    MemoryScope s(MemoryTag::temporary);
    p = a.allocate(4096);
  }
  a.retag(p, MemoryTag::grad);
  nlohmann::json t = a.chrome_trace();
  int64_t last_temp = -1, last_grad = -1;
  for (const auto& e : t["traceEvents"]) {
    if (e.value("ph", "") != "C") continue;
    if (e["name"] == "temporary bytes") last_temp = e["args"]["bytes"].get<int64_t>();
    if (e["name"] == "grad bytes") last_grad = e["args"]["bytes"].get<int64_t>();
  }
  CHECK(last_temp == 0);
  CHECK(last_grad >= 4096);
  CHECK(a.stats().tag_allocated[(int)MemoryTag::grad].current >= 4096);
  a.deallocate(p);
}
