// Randomized alloc/free sequences against a reference model: tens of thousands of operations over
// many seeds, mixed sizes (small, medium, large), several streams and tags. Checks after every
// allocation that no two live blocks overlap, that every block keeps the bytes written into it,
// and periodically that the allocator's counters equal the model's and its invariants hold; at
// the end that coalescing is complete (each segment one free block) and the cache empties fully.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "engine/memory/caching_allocator.h"
#include "test_alloc_support.h"

using namespace kiln;

namespace {

struct LiveBlock {
  char* p;
  size_t n;
  size_t block;
  unsigned char fill;
  MemoryTag tag;
};

size_t random_size(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  double k = u(rng);
  double lo, hi;
  if (k < 0.70) lo = 0, hi = 16;          // 1 B .. 64 KiB
  else if (k < 0.95) lo = 16, hi = 20;    // 64 KiB .. 1 MiB (small pool edge)
  else lo = 20, hi = 23;                  // 1 .. 8 MiB (large pool)
  return std::max<size_t>(1, (size_t)std::exp2(lo + (hi - lo) * u(rng)));
}

// Writes the fill byte where the test can afford it: all of a small block, the ends of a big one.
void stamp(const LiveBlock& b) {
  if (b.n <= 65536) std::memset(b.p, b.fill, b.n);
  else {
    std::memset(b.p, b.fill, 4096);
    std::memset(b.p + b.n - 4096, b.fill, 4096);
  }
}
bool intact(const LiveBlock& b) {
  auto ok = [&](size_t from, size_t len) {
    for (size_t i = from; i < from + len; ++i)
      if ((unsigned char)b.p[i] != b.fill) return false;
    return true;
  };
  return b.n <= 65536 ? ok(0, b.n) : ok(0, 4096) && ok(b.n - 4096, 4096);
}

void run_seed(uint64_t seed, int ops, bool with_events, bool expandable) {
  HostProvider host;
  LimitedProvider lim(&host, SIZE_MAX);
  AllocatorConfig cfg;
  cfg.expandable = expandable;
  CachingAllocator a(Device::cpu(), &lim, cfg);
  kiln_test::FakeEvents events;
  if (with_events) a.set_event_source(&events);
  std::mt19937_64 rng(seed);
  std::vector<LiveBlock> live;
  std::map<uintptr_t, size_t> ranges;  // start -> end of every live block (its rounded size)
  const char* modules[] = {"", "stem", "layer1.0.conv1", "layer2.1.bn2", "fc"};
  int64_t req_cur = 0, req_peak = 0;
  int64_t tag_req[kNumMemoryTags] = {};
  std::uniform_int_distribution<int> pct(0, 99);
  for (int op = 0; op < ops; ++op) {
    bool do_alloc = live.empty() || (live.size() < 300 && pct(rng) < 55);
    if (do_alloc) {
      size_t n = random_size(rng);
      MemoryTag tag = (MemoryTag)(rng() % kNumMemoryTags);
      StreamId stream = rng() % 3;
      MemoryScope scope(tag, modules[rng() % 5]);
      char* p = static_cast<char*>(a.allocate(n, stream));
      REQUIRE(((uintptr_t)p % cfg.round) == 0);
      size_t bs = a.block_size(p);
      REQUIRE(bs >= n);
      // no overlap with any live block
      auto it = ranges.lower_bound((uintptr_t)p);
      if (it != ranges.end()) REQUIRE((uintptr_t)p + bs <= it->first);
      if (it != ranges.begin()) REQUIRE(std::prev(it)->second <= (uintptr_t)p);
      ranges[(uintptr_t)p] = (uintptr_t)p + bs;
      LiveBlock b{p, n, bs, (unsigned char)(rng() % 255 + 1), tag};
      stamp(b);
      live.push_back(b);
      req_cur += (int64_t)n;
      req_peak = std::max(req_peak, req_cur);
      tag_req[(int)tag] += (int64_t)n;
    } else {
      size_t i = rng() % live.size();
      LiveBlock b = live[i];
      REQUIRE(intact(b));  // nobody else wrote into it
      a.deallocate(b.p);
      ranges.erase((uintptr_t)b.p);
      live[i] = live.back();
      live.pop_back();
      req_cur -= (int64_t)b.n;
      tag_req[(int)b.tag] -= (int64_t)b.n;
    }
    if (with_events && pct(rng) < 10) events.complete(rng() % 3);
    if (pct(rng) == 0) a.empty_cache();
    if (op % 500 == 499) {
      a.verify();
      MemoryStats s = a.stats();
      int64_t alloc = 0;
      for (const auto& b : live) alloc += (int64_t)b.block;
      REQUIRE(s.total.requested.current == req_cur);
      REQUIRE(s.total.requested.peak == req_peak);
      REQUIRE(s.total.allocated.current == alloc);
      REQUIRE(s.total.reserved.current == (int64_t)lim.mapped());
      for (int t = 0; t < kNumMemoryTags; ++t) REQUIRE(s.tag_requested[t].current == tag_req[t]);
      REQUIRE(s.num_allocs - s.num_frees == live.size());
    }
  }
  for (const auto& b : live) {
    REQUIRE(intact(b));
    a.deallocate(b.p);
  }
  events.complete_all();
  a.verify();
  MemoryStats s = a.stats();
  CHECK(s.total.allocated.current == 0);
  CHECK(s.total.requested.current == 0);
  if (with_events) a.empty_cache();  // also merges neighbours whose events finished meanwhile
  // coalescing complete: each remaining segment is one free block
  for (const SegmentInfo& seg : a.segments()) {
    REQUIRE(seg.blocks.size() == 1);
    CHECK(seg.blocks[0].state == "free");
    CHECK(seg.blocks[0].size == seg.size);
  }
  a.empty_cache();
  CHECK(a.stats().total.reserved.current == 0);
  CHECK(lim.mapped() == 0);
  CHECK(a.segments().empty());
}

}  // namespace

TEST_CASE("alloc random: sequences match the reference model (synchronous streams)") {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    run_seed(seed, 8000, false, true);
    run_seed(seed, 8000, false, false);
  }
}

TEST_CASE("alloc random: sequences match the reference model (fake events)") {
  for (uint64_t seed = 100; seed < 106; ++seed) {
    CAPTURE(seed);
    run_seed(seed, 8000, true, true);
    run_seed(seed, 8000, true, false);
  }
}

TEST_CASE("alloc random: concurrent threads keep the allocator consistent") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, AllocatorConfig{});
  auto worker = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<LiveBlock> live;
    for (int op = 0; op < 3000; ++op) {
      if (live.empty() || (live.size() < 64 && rng() % 2)) {
        size_t n = 1 + rng() % 200000;
        LiveBlock b{static_cast<char*>(a.allocate(n)), n, 0, (unsigned char)(seed & 0xff), MemoryTag::other};
        stamp(b);
        live.push_back(b);
      } else {
        size_t i = rng() % live.size();
        if (!intact(live[i])) throw std::runtime_error("block overwritten by another thread");
        a.deallocate(live[i].p);
        live[i] = live.back();
        live.pop_back();
      }
    }
    for (auto& b : live) a.deallocate(b.p);
  };
  std::vector<std::thread> ts;
  for (uint64_t t = 1; t <= 4; ++t) ts.emplace_back(worker, t * 7919);
  for (auto& t : ts) t.join();
  a.verify();
  CHECK(a.stats().total.allocated.current == 0);
  CHECK(a.stats().num_allocs == 4u * a.stats().num_frees / 4u);
}
