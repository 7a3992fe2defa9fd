// Cross-stream reuse: a block freed on one stream is reused on another only after the fake event
// source says that stream's work is done; record_stream holds a block until every stream that
// used it has finished; without an event source streams are synchronous and reuse is immediate.
#include <doctest/doctest.h>

#include "engine/memory/caching_allocator.h"
#include "test_alloc_support.h"

using namespace kiln;

namespace {
bool overlaps(void* a, size_t na, void* b, size_t nb) {
  auto x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + nb && y < x + na;
}
}  // namespace

TEST_CASE("alloc streams: reuse on another stream waits for the event") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, AllocatorConfig{});
  kiln_test::FakeEvents ev;
  a.set_event_source(&ev);
  void* p = a.allocate(4096, 1);
  void* guard = a.allocate(4096, 1);  // keeps p from merging with the rest of the segment
  a.deallocate(p);
  CHECK(ev.recorded() >= 1);  // the free recorded stream 1's position
  void* q = a.allocate(4096, 2);
  CHECK(q != p);
  CHECK_FALSE(overlaps(p, 4096, q, 4096));
  // same stream: no wait needed (stream order protects it)
  void* same = a.allocate(4096, 1);
  CHECK(same == p);
  a.deallocate(same);
  ev.complete(1);
  void* r = a.allocate(4096, 2);  // best fit: p's block, now finished on stream 1
  CHECK(r == p);
  a.deallocate(q);
  a.deallocate(r);
  a.deallocate(guard);
  a.verify();
  ev.complete_all();
  a.empty_cache();
  CHECK(a.stats().total.reserved.current == 0);
}

TEST_CASE("alloc streams: free blocks of busy streams do not merge until their events finish") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, AllocatorConfig{});
  kiln_test::FakeEvents ev;
  a.set_event_source(&ev);
  void* x = a.allocate(8192, 1);
  void* y = a.allocate(8192, 2);
  a.deallocate(x);
  a.deallocate(y);
  auto segs = a.segments();
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].blocks.size() >= 2);  // x and y stay apart: both streams still busy
  a.verify();
  ev.complete_all();
  a.empty_cache();  // merges what finished, then releases the now whole-free segment
  CHECK(a.segments().empty());
}

TEST_CASE("alloc streams: record_stream keeps a block until every user stream is done") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, AllocatorConfig{});
  kiln_test::FakeEvents ev;
  a.set_event_source(&ev);
  void* x = a.allocate(8192, 0);
  a.record_stream(x, 3);
  a.deallocate(x);
  MemoryStats s = a.stats();
  CHECK(s.total.allocated.current == 0);
  CHECK(s.total.active.current == 8192);  // pending: freed, not yet reusable
  void* y = a.allocate(8192, 0);
  CHECK_FALSE(overlaps(x, 8192, y, 8192));
  a.deallocate(y);
  ev.complete(3);
  void* z = a.allocate(8192, 0);
  CHECK(z != x);  // stream 0's own event is still open
  a.deallocate(z);
  ev.complete(0);
  void* w = a.allocate(8192, 0);
  CHECK(w == x);
  CHECK(a.stats().total.active.current == 8192);
  a.deallocate(w);
  a.verify();
}

TEST_CASE("alloc streams: without an event source streams are synchronous") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, AllocatorConfig{});
  void* p = a.allocate(4096, 1);
  a.deallocate(p);
  void* q = a.allocate(4096, 2);
  CHECK(q == p);
  a.record_stream(q, 5);
  a.deallocate(q);
  CHECK(a.stats().total.active.current == 0);
  a.verify();
}
