// Allocator configuration and registry: parse_bytes / format_bytes, KILN_ALLOC_CONF parsing and
// validation, the policy knobs (large-pool split, max_split), and the per-device registry with
// set_device_memory_limit.
#include <doctest/doctest.h>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

using namespace kiln;

namespace {
const size_t MiB = size_t(1) << 20;
}

TEST_CASE("alloc config: parse_bytes and format_bytes") {
  CHECK(parse_bytes("6G") == 6ull << 30);
  CHECK(parse_bytes("512M") == 512ull << 20);
  CHECK(parse_bytes("64MiB") == 64ull << 20);
  CHECK(parse_bytes("1.5GiB") == 3ull << 29);
  CHECK(parse_bytes("2k") == 2048);
  CHECK(parse_bytes("4096") == 4096);
  CHECK(parse_bytes(" 3 mb ") == 3ull << 20);
  CHECK_THROWS_WITH_AS(parse_bytes("lots"), doctest::Contains("'lots'"), Error);
  CHECK_THROWS_WITH_AS(parse_bytes("5X"), doctest::Contains("unknown unit"), Error);
  CHECK_THROWS_AS(parse_bytes("-1G"), Error);
  CHECK_THROWS_AS(parse_bytes("0.3"), Error);
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(6.0 * (1 << 30)) == "6.00 GiB");
}

TEST_CASE("alloc config: KILN_ALLOC_CONF strings") {
  AllocatorConfig c = parse_alloc_conf("round=1024, small_segment=4M,large_round=4M,max_split=64M,debug");
  CHECK(c.round == 1024);
  CHECK(c.small_segment == 4 * MiB);
  CHECK(c.large_round == 4 * MiB);
  CHECK(c.max_split == 64 * MiB);
  CHECK(c.debug);
  CHECK_THROWS_WITH_AS(parse_alloc_conf("rounds=512"), doctest::Contains("unknown key 'rounds'"), Error);
  CHECK_THROWS_WITH_AS(parse_alloc_conf("round=1000"), doctest::Contains("power of two"), Error);
  CHECK_THROWS_AS(parse_alloc_conf("small_segment=512K"), Error);  // below small_max
  CHECK_THROWS_AS(parse_alloc_conf("round"), Error);
}

// The mapped-segment policy (providers that cannot grow a range: cuda, pinned), forced on the host.
TEST_CASE("alloc policy: rounding, pools, own large segments and splitting") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, parse_alloc_conf("expandable=0,large_segment=0"));
  void* s1 = a.allocate(1);
  void* s2 = a.allocate(700);
  CHECK(a.block_size(s1) == 512);
  CHECK(a.block_size(s2) == 1024);
  CHECK((char*)s2 == (char*)s1 + 512);  // bump: consecutive requests are contiguous
  void* l = a.allocate(3 * MiB);           // own 4 MiB segment, the 1 MiB rest is not worth a split
  CHECK(a.block_size(l) == 4 * MiB);
  void* l2 = a.allocate(5 * MiB + 1);      // 6 MiB segment: the rest (1 MiB - 512) stays whole
  CHECK(a.block_size(l2) == 6 * MiB);
  MemoryStats s = a.stats();
  CHECK(s.pool[(int)Pool::small].reserved.current == (int64_t)(2 * MiB));
  CHECK(s.pool[(int)Pool::large].reserved.current == (int64_t)(10 * MiB));
  CHECK(s.pool[(int)Pool::small].requested.current == 701);
  CHECK(s.num_segment_maps == 3);
  CHECK(s.largest_free_block == 2 * MiB - 1536);
  CHECK(s.fragmentation() == doctest::Approx(1.0 - (1536.0 + 10 * MiB) / (12.0 * MiB)));
  a.deallocate(l2);
  void* l3 = a.allocate(2 * MiB + 512);  // best fit: the free 6 MiB block, split (rest > 1 MiB)
  CHECK(l3 == l2);
  CHECK(a.block_size(l3) == 2 * MiB + 512);
  for (void* p : {s1, s2, l, l3}) a.deallocate(p);
  a.verify();
  a.empty_cache();
  CHECK(a.stats().num_segment_unmaps == 3);
}

TEST_CASE("alloc policy: mid-size large requests share 20 MiB segments and coalesce there") {
  HostProvider host;
  LimitedProvider lim(&host, 32 * MiB);
  CachingAllocator a(Device::cpu(), &lim, parse_alloc_conf("expandable=0"));
  void* x = a.allocate(3 * MiB);
  void* y = a.allocate(5 * MiB + 1);
  CHECK((char*)y == (char*)x + 3 * MiB);  // carved from the same segment
  CHECK(a.block_size(y) == 5 * MiB + 512);
  CHECK(a.stats().pool[(int)Pool::large].reserved.current == (int64_t)(20 * MiB));
  void* w = a.allocate(9 * MiB);  // the segment's rest still holds it
  CHECK((char*)w == (char*)y + 5 * MiB + 512);
  // A second shared segment does not fit the 32 MiB device: the request maps its own size,
  // without releasing the cache.
  void* v = a.allocate(6 * MiB);
  CHECK(a.block_size(v) == 6 * MiB);
  MemoryStats st = a.stats();
  CHECK(st.pool[(int)Pool::large].reserved.current == (int64_t)(26 * MiB));
  CHECK(st.num_retries == 0);
  for (void* p : {x, y, w, v}) a.deallocate(p);
  a.verify();
  for (const SegmentInfo& s : a.segments()) CHECK(s.blocks.size() == 1);
}

TEST_CASE("alloc policy: max_split keeps oversize blocks whole") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, parse_alloc_conf("expandable=0,max_split=4M,large_segment=0"));
  void* big = a.allocate(8 * MiB);
  a.deallocate(big);
  void* mid = a.allocate(2 * MiB);  // must not carve the 8 MiB block
  CHECK(mid != big);
  void* near = a.allocate(7 * MiB);  // within large_round of 8 MiB: may take it whole
  CHECK(near == big);
  CHECK(a.block_size(near) == 8 * MiB);
  a.deallocate(mid);
  a.deallocate(near);
  a.verify();
}

TEST_CASE("alloc registry: default caching allocators, overrides, device memory limit") {
  CachingAllocator* cpu = caching_allocator_for(Device::cpu());
  REQUIRE(cpu != nullptr);
  CHECK(allocator_for(Device::cpu()) == cpu);
  CachingAllocator* meta = caching_allocator_for(Device::meta());
  REQUIRE(meta != nullptr);
  CHECK(std::string(meta->provider()->name()) == "virtual");

  HostProvider host;
  CachingAllocator mine(Device::cpu(), &host, AllocatorConfig{});
  set_allocator(Device::cpu(), &mine);
  CHECK(allocator_for(Device::cpu()) == &mine);
  CHECK(caching_allocator_for(Device::cpu()) == nullptr);
  set_allocator(Device::cpu(), nullptr);
  CHECK(caching_allocator_for(Device::cpu()) == cpu);

  // Meta memory: predicted with the real policy, limited like a 64 MiB card.
  set_device_memory_limit(Device::meta(), parse_bytes("64MiB"));
  void* p = meta->allocate(40 * MiB);
  CHECK_THROWS_WITH_AS(meta->allocate(40 * MiB), doctest::Contains("capacity 64.00 MiB"), OutOfMemory);
  meta->deallocate(p);
  set_device_memory_limit(Device::meta(), SIZE_MAX);
  void* q = meta->allocate(100 * MiB);
  meta->deallocate(q);
  meta->empty_cache();
  meta->verify();
#ifndef KILN_WITH_CUDA
  CHECK_THROWS_AS(allocator_for(Device::cuda(0)), Error);
#endif
}

// The expandable arena (the default where the provider can grow a range: host, meta).
TEST_CASE("alloc expandable: one growable range, the free tail grows, empty_cache gives it back") {
  HostProvider host;
  LimitedProvider lim(&host, 64 * MiB);
  CachingAllocator a(Device::cpu(), &lim, AllocatorConfig{});
  REQUIRE(a.config().expandable);
  const int64_t G = (int64_t)a.config().granule;  // 512 KiB by default
  CHECK(G == 512 * 1024);
  void* x = a.allocate(100);      // small
  void* y = a.allocate(3 * MiB);  // large: same range, right after it
  CHECK((char*)y == (char*)x + 512);
  auto up = [&](int64_t n) { return (n + G - 1) / G * G; };
  CHECK(a.stats().total.reserved.current == up(512 + 3 * MiB));
  CHECK((int64_t)lim.mapped() == up(512 + 3 * MiB));
  a.deallocate(y);
  void* z = a.allocate(5 * MiB);  // no hole holds it: the free tail is extended in place
  CHECK(z == y);
  MemoryStats s = a.stats();
  CHECK(s.total.reserved.current == up(512 + 5 * MiB));
  CHECK(s.pool[(int)Pool::small].allocated.current == 512);
  CHECK(s.pool[(int)Pool::large].allocated.current == (int64_t)(5 * MiB));
  CHECK(s.num_segment_maps == 3);  // three growths of one range (x, y, then z over the tail)
  a.deallocate(x);
  void* w = a.allocate(200);  // best fit: the 512-byte hole at the bottom, not the tail
  CHECK(w == x);
  a.deallocate(w);
  a.deallocate(z);
  a.verify();
  REQUIRE(a.segments().size() == 1);
  CHECK(a.segments()[0].blocks.size() == 1);  // small and large neighbours coalesced
  a.empty_cache();
  CHECK(a.stats().total.reserved.current == 0);
  CHECK(lim.mapped() == 0);
  CHECK(a.segments().empty());
  void* again = a.allocate(MiB);  // a fresh range after the release
  a.deallocate(again);
  a.verify();
}

TEST_CASE("alloc expandable: holes that hold no request give an OOM with the account, the tail shrinks") {
  HostProvider host;
  LimitedProvider lim(&host, 8 * MiB);
  CachingAllocator a(Device::cpu(), &lim, AllocatorConfig{});
  std::vector<void*> v;
  for (int i = 0; i < 8; ++i) v.push_back(a.allocate(MiB));
  CHECK(lim.mapped() == 8 * MiB);
  for (int i = 1; i < 8; i += 2) a.deallocate(v[i]);  // 4 MiB free, in 1 MiB holes
  std::string msg;
  try {
    a.allocate(2 * MiB);
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    msg = e.what();
  }
  // The retry gave back the free 1 MiB at the top: 7 MiB reserved, 3 MiB of it in holes.
  CHECK(msg.find("asked for 2.00 MiB") != std::string::npos);
  CHECK(msg.find("reserved 7.00 MiB, allocated 4.00 MiB, cached but free 3.00 MiB") != std::string::npos);
  CHECK(msg.find("largest free block 1.00 MiB; fragmentation 42.9%") != std::string::npos);
  CHECK(msg.find("short by 1.00 MiB of unreserved capacity") != std::string::npos);
  CHECK(lim.mapped() == 7 * MiB);
  MemoryStats s = a.stats();
  CHECK(s.num_retries == 1);
  CHECK(s.num_ooms == 1);
  a.verify();
  a.deallocate(v[6]);  // 5..8 MiB is now one free tail
  a.empty_cache();
  CHECK(lim.mapped() == 5 * MiB);
  void* big = a.allocate(3 * MiB);  // fits again: the tail regrows
  CHECK((char*)big == (char*)v[5]);
  CHECK(lim.mapped() == 8 * MiB);
  for (int i : {0, 2, 4}) a.deallocate(v[i]);
  a.deallocate(big);
  a.verify();
}

TEST_CASE("alloc expandable: off where the provider cannot grow a range, and by KILN_ALLOC_CONF") {
  struct FixedOnly : HostProvider {
    size_t granule() const override { return 0; }
  } fixed;
  CachingAllocator a(Device::cpu(), &fixed, AllocatorConfig{});
  CHECK_FALSE(a.config().expandable);
  void* s = a.allocate(100);
  void* l = a.allocate(3 * MiB);
  CHECK(a.segments().size() == 2);  // a small and a large segment
  a.deallocate(s);
  a.deallocate(l);
  CHECK_FALSE(parse_alloc_conf("expandable=0").expandable);
  CHECK(parse_alloc_conf("granule=2M").granule == 2 * MiB);
  CHECK(parse_alloc_conf("hole_fit=off").hole_fit_pct == SIZE_MAX);
  CHECK(parse_alloc_conf("hole_fit=50").hole_fit_pct == 50);
  CHECK_THROWS_WITH_AS(parse_alloc_conf("hole_fit=x"), doctest::Contains("hole_fit"), Error);
  CHECK_THROWS_WITH_AS(parse_alloc_conf("granule=3000"), doctest::Contains("granule"), Error);
}

TEST_CASE("alloc expandable: a close hole first, else the free tail, else a loose hole, else grow") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, parse_alloc_conf("granule=4M"));
  void* h1 = a.allocate(2 * MiB);  // becomes a 2 MiB hole
  void* k1 = a.allocate(4096);
  void* h2 = a.allocate(1 * MiB);  // becomes a 1 MiB hole
  void* k2 = a.allocate(4096);
  a.deallocate(h1);
  a.deallocate(h2);
  // committed: 4 MiB; the free tail is 4 MiB - 3 MiB - 8 KiB.
  void* x = a.allocate(900 * 1024);  // the 1 MiB hole is within 25%: taken
  CHECK(x == h2);
  void* y = a.allocate(600 * 1024);  // the 2 MiB hole is loose: the tail takes it (bump)
  CHECK((char*)y == (char*)k2 + 4096);
  // 2 MiB is more than 1.25 x 1.5 MiB (a loose hole), but the tail (~376 KiB) cannot hold it.
  void* z = a.allocate(1536 * 1024);
  CHECK(z == h1);
  CHECK(a.stats().total.reserved.current == (int64_t)(4 * MiB));
  void* g = a.allocate(3 * MiB);  // nothing holds it: grow (the tail extends)
  CHECK((char*)g == (char*)y + 600 * 1024);
  CHECK(a.stats().total.reserved.current == (int64_t)(8 * MiB));
  for (void* p : {k1, k2, x, y, z, g}) a.deallocate(p);
  a.verify();
}

TEST_CASE("alloc expandable: hole_fit=off is plain best fit, the tail included") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, parse_alloc_conf("granule=4M,hole_fit=off"));
  void* h1 = a.allocate(MiB);
  void* k1 = a.allocate(4096);
  void* h2 = a.allocate(2 * MiB + 512 * 1024);
  void* k2 = a.allocate(4096);
  a.deallocate(h1);
  a.deallocate(h2);
  // Holes: 1 MiB and 2.5 MiB; free tail: 4 MiB - 3.5 MiB - 8 KiB.
  void* y = a.allocate(600 * 1024);  // the 1 MiB hole is loose (> 25%) but the closest: taken
  CHECK(y == h1);
  void* z = a.allocate(400 * 1024);  // the 424 KiB rest of that hole is the closest
  CHECK((char*)z == (char*)h1 + 600 * 1024);
  void* w = a.allocate(450 * 1024);  // now the tail (~504 KiB), closer than the 2.5 MiB hole
  CHECK((char*)w == (char*)k2 + 4096);
  for (void* p : {k1, k2, y, z, w}) a.deallocate(p);
  a.verify();
}
