// Offline best-fit offset planning for plan mode (see alloc_plan.h).
#include "engine/memory/alloc_plan.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace kiln {

size_t peak_live_bytes(const std::vector<PlanRequest>& reqs) {
  // +size at start, -size at end; ends sort before starts at the same tick (a block freed at t
  // and one allocated at t never coexist: ticks are distinct events anyway).
  std::vector<std::pair<uint64_t, int64_t>> ev;
  ev.reserve(reqs.size() * 2);
  for (const auto& r : reqs) {
    ev.push_back({r.start, (int64_t)r.size});
    ev.push_back({r.end, -(int64_t)r.size});
  }
  std::sort(ev.begin(), ev.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second;
  });
  int64_t live = 0, peak = 0;
  for (const auto& e : ev) {
    live += e.second;
    peak = std::max(peak, live);
  }
  return (size_t)peak;
}

AllocPlan plan_offsets(std::vector<PlanRequest> reqs) {
  AllocPlan plan;
  size_t n = reqs.size();
  plan.offsets.assign(n, 0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (reqs[a].size != reqs[b].size) return reqs[a].size > reqs[b].size;
    return reqs[a].start < reqs[b].start;
  });
  std::vector<size_t> placed;  // indices already given an offset
  placed.reserve(n);
  std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of time-overlapping placed ones
  for (size_t i : order) {
    const PlanRequest& r = reqs[i];
    busy.clear();
    for (size_t j : placed) {
      const PlanRequest& q = reqs[j];
      // Different streams never share bytes: the plan has no events to order them.
      if (q.stream != r.stream || (q.start < r.end && r.start < q.end)) busy.push_back({plan.offsets[j], plan.offsets[j] + q.size});
    }
    std::sort(busy.begin(), busy.end());
    // Walk the gaps between busy ranges; keep the smallest gap that fits.
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& b : busy) {
      if (b.first > cursor) {
        size_t gap = b.first - cursor;
        if (gap >= r.size && gap < best_gap) {
          best_gap = gap;
          best = cursor;
        }
      }
      cursor = std::max(cursor, b.second);
    }
    if (best == SIZE_MAX) best = cursor;  // on top of everything alive with it
    plan.offsets[i] = best;
    plan.arena_bytes = std::max(plan.arena_bytes, best + r.size);
    placed.push_back(i);
  }
  plan.peak_live_bytes = peak_live_bytes(reqs);
  plan.requests = std::move(reqs);
  return plan;
}

}  // namespace kiln
