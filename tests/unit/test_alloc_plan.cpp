// Plan mode: the offline planner never overlaps allocations alive together and stays near the
// lower bound; a replayed step is served at the planned offsets from one arena without mapping;
// a step that diverges (size, order, a block kept alive) falls back to the bins from that point.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "engine/memory/caching_allocator.h"

using namespace kiln;

TEST_CASE("alloc plan: planner output is valid on random lifetimes") {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 rng(seed);
    std::vector<PlanRequest> reqs;
    std::vector<size_t> open;
    uint64_t clock = 0;
    for (int i = 0; i < 400; ++i) {
      if (!open.empty() && rng() % 2) {
        size_t k = rng() % open.size();
        reqs[open[k]].end = clock++;
        open[k] = open.back();
        open.pop_back();
      } else {
        PlanRequest r;
        r.size = 512 * (1 + rng() % 64);
        r.start = clock++;
        r.end = UINT64_MAX;
        open.push_back(reqs.size());
        reqs.push_back(r);
      }
    }
    for (size_t i : open) reqs[i].end = clock;
    AllocPlan p = plan_offsets(reqs);
    REQUIRE(p.offsets.size() == reqs.size());
    size_t top = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      top = std::max(top, p.offsets[i] + reqs[i].size);
      for (size_t j = i + 1; j < reqs.size(); ++j) {
        bool together = reqs[i].start < reqs[j].end && reqs[j].start < reqs[i].end;
        bool share = p.offsets[i] < p.offsets[j] + reqs[j].size && p.offsets[j] < p.offsets[i] + reqs[i].size;
        REQUIRE_FALSE((together && share));
      }
    }
    CHECK(p.arena_bytes == top);
    CHECK(p.arena_bytes >= p.peak_live_bytes);
    CHECK(p.arena_bytes <= p.peak_live_bytes * 13 / 10);  // greedy by size stays close
  }
}

TEST_CASE("alloc plan: a stack-like step plans to exactly its peak") {
  // a(100) b(50) free b, c(50) free c, free a: peak 150, b and c share an offset.
  std::vector<PlanRequest> r(3);
  r[0] = {100 * 512, 0, 0, 5};
  r[1] = {50 * 512, 0, 1, 2};
  r[2] = {50 * 512, 0, 3, 4};
  AllocPlan p = plan_offsets(r);
  CHECK(p.peak_live_bytes == 150 * 512);
  CHECK(p.arena_bytes == 150 * 512);
  CHECK(p.offsets[1] == p.offsets[2]);
}

namespace {
// A CNN-like step: forward keeps activations and frees a workspace per layer; backward frees the
// activations in reverse, with a gradient temporary per layer. `change` alters one size.
std::vector<void*> run_step(CachingAllocator& a, int change_at = -1) {
  std::vector<void*> ptrs;
  std::vector<void*> acts;
  int n = 0;
  auto alloc = [&](size_t bytes) {
    if (n++ == change_at) bytes += 4096;
    void* p = a.allocate(bytes);
    ptrs.push_back(p);
    return p;
  };
  for (int l = 0; l < 8; ++l) {
    size_t act = (size_t)(1 << 20) >> (l / 2);
    acts.push_back(alloc(act));
    void* ws = alloc(act / 4 + 1000);
    a.deallocate(ws);
  }
  for (int l = 7; l >= 0; --l) {
    void* g = alloc(((size_t)(1 << 20) >> (l / 2)) + 512);
    a.deallocate(acts[(size_t)l]);
    a.deallocate(g);
  }
  return ptrs;
}
}  // namespace

TEST_CASE("alloc plan: replay uses the planned offsets, divergence falls back to the bins") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, AllocatorConfig{});
  a.begin_record();
  std::vector<void*> recorded = run_step(a);
  a.end_record();
  PlanReport rep = a.plan_report();
  REQUIRE(rep.has_plan);
  CHECK(rep.planned_allocs == recorded.size());
  CHECK(rep.arena_bytes >= rep.peak_live_bytes);
  CHECK(rep.arena_bytes <= rep.peak_live_bytes * 102 / 100);

  a.begin_replay();
  uint64_t maps = a.stats().num_segment_maps;  // the arena is mapped by begin_replay
  std::vector<void*> step2 = run_step(a);
  a.end_replay();
  CHECK(a.stats().num_segment_maps == maps);  // nothing new mapped during the step
  rep = a.plan_report();
  CHECK(rep.plan_allocs == step2.size());
  CHECK(rep.diverged_steps == 0);
  CHECK(rep.fallback_allocs == 0);
  SegmentInfo arena;
  for (const SegmentInfo& s : a.segments())
    if (s.pool == Pool::plan) arena = s;
  REQUIRE(arena.size == rep.arena_bytes);
  for (void* p : step2) {
    CHECK((uintptr_t)p >= arena.address);
    CHECK((uintptr_t)p < arena.address + arena.size);
  }
  // a second replay gives the very same addresses: the plan, not the bins, decides
  a.begin_replay();
  std::vector<void*> step3 = run_step(a);
  a.end_replay();
  CHECK(step3 == step2);
  a.verify();

  // divergence at request 5: the first five from the arena, the rest from the bins
  a.begin_replay();
  std::vector<void*> step4 = run_step(a, 5);
  a.end_replay();
  rep = a.plan_report();
  CHECK(rep.diverged_steps == 1);
  CHECK(rep.fallback_allocs == step4.size() - 5);
  for (size_t i = 0; i < step4.size(); ++i) {
    bool in_arena = (uintptr_t)step4[i] >= arena.address && (uintptr_t)step4[i] < arena.address + arena.size;
    CHECK(in_arena == (i < 5));
  }
  CHECK(a.stats().num_plan_divergences == 1);
  a.verify();
  CHECK(a.stats().total.allocated.current == 0);
}

TEST_CASE("alloc plan: a block kept alive past its planned free makes the step diverge safely") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, AllocatorConfig{});
  auto step = [&](bool keep) {
    void* x = a.allocate(1 << 16);
    void* y = nullptr;
    if (!keep) a.deallocate(x);
    y = a.allocate(1 << 16);  // planned at x's offset
    a.deallocate(y);
    if (keep) a.deallocate(x);
    return std::make_pair(x, y);
  };
  a.begin_record();
  step(false);
  a.end_record();
  CHECK(a.plan_report().arena_bytes == (1 << 16));
  a.begin_replay();
  void* x = a.allocate(1 << 16);
  void* y = a.allocate(1 << 16);  // x still alive: must not get x's bytes
  CHECK(y != x);
  a.verify();
  a.deallocate(y);
  a.deallocate(x);
  a.end_replay();
  CHECK(a.plan_report().diverged_steps == 1);
  a.verify();
}
