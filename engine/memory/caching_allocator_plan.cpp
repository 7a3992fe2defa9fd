// Plan mode of CachingAllocator: record one step, plan it (alloc_plan.h), replay it by bump
// pointer from one arena, and fall back to the bins for the rest of a step the moment a request
// differs from the plan (size, stream, order) or its planned bytes are still in use.
#include <algorithm>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

namespace kiln {

void CachingAllocator::begin_record() {
  std::lock_guard<SpinLock> g(mu_);
  KILN_CHECK(!replaying_, "begin_record on ", device_.str(), ": a replay is in progress (call end_replay first)");
  recording_ = true;
  ++rec_gen_;
  rec_.clear();
  rec_clock_ = 0;
}

void CachingAllocator::end_record() {
  std::lock_guard<SpinLock> g(mu_);
  KILN_CHECK(recording_, "end_record on ", device_.str(), ": begin_record was not called");
  recording_ = false;
  for (PlanRequest& r : rec_)
    if (r.end == UINT64_MAX) r.end = rec_clock_;  // still alive: lives past the step
  plan_ = plan_offsets(std::move(rec_));
  rec_.clear();
  has_plan_ = true;
  plan_stats_ = PlanReport();
  if (arena_ && arena_->size < plan_.arena_bytes && arena_live_.empty()) {
    Segment* a = arena_;
    arena_ = nullptr;
    unmap_segment(a);
  }
}

bool CachingAllocator::map_arena() {
  size_t bytes = std::max(plan_.arena_bytes, cfg_.round);
  if (arena_ && arena_->size >= bytes) return true;
  if (arena_) {
    if (!arena_live_.empty()) return false;  // blocks of an older plan still live in it
    Segment* a = arena_;
    arena_ = nullptr;
    unmap_segment(a);
  }
  arena_ = map_segment(bytes, Pool::plan);
  if (!arena_) {
    ++stats_.num_retries;
    release_cached();
    arena_ = map_segment(bytes, Pool::plan);
  }
  return arena_ != nullptr;
}

void CachingAllocator::begin_replay() {
  std::lock_guard<SpinLock> g(mu_);
  KILN_CHECK(has_plan_, "begin_replay on ", device_.str(), ": no plan (record a step with begin_record/end_record)");
  KILN_CHECK(!recording_, "begin_replay on ", device_.str(), ": a recording is in progress");
  replaying_ = true;
  cursor_ = 0;
  diverged_ = false;
  ++plan_stats_.replay_steps;
  if (!map_arena()) {  // no room for the arena: this step runs on the bins
    diverged_ = true;
    ++plan_stats_.diverged_steps;
    ++stats_.num_plan_divergences;
  }
}

void CachingAllocator::end_replay() {
  std::lock_guard<SpinLock> g(mu_);
  KILN_CHECK(replaying_, "end_replay on ", device_.str(), ": begin_replay was not called");
  if (!diverged_ && cursor_ != plan_.requests.size()) {  // a shorter step also differs
    ++plan_stats_.diverged_steps;
    ++stats_.num_plan_divergences;
  }
  replaying_ = false;
}

void CachingAllocator::discard_plan() {
  std::lock_guard<SpinLock> g(mu_);
  KILN_CHECK(!replaying_, "discard_plan on ", device_.str(), ": a replay is in progress");
  has_plan_ = false;
  plan_ = AllocPlan();
  if (arena_ && arena_live_.empty()) {
    Segment* a = arena_;
    arena_ = nullptr;
    unmap_segment(a);
  }
}

PlanReport CachingAllocator::plan_report() const {
  std::lock_guard<SpinLock> g(mu_);
  PlanReport r = plan_stats_;
  r.has_plan = has_plan_;
  r.arena_bytes = plan_.arena_bytes;
  r.peak_live_bytes = plan_.peak_live_bytes;
  r.planned_allocs = plan_.requests.size();
  return r;
}

CachingAllocator::Block* CachingAllocator::try_plan(size_t rounded, StreamId stream) {
  bool match = cursor_ < plan_.requests.size() && arena_;
  size_t off = 0;
  if (match) {
    const PlanRequest& r = plan_.requests[cursor_];
    off = plan_.offsets[cursor_];
    match = r.size == rounded && r.stream == stream;
  }
  if (match) {
    // The planned bytes must be free now: a block kept longer than in the recorded step would
    // otherwise be overwritten.
    auto it = arena_live_.lower_bound(off);
    if (it != arena_live_.end() && it->first < off + rounded) match = false;
    if (match && it != arena_live_.begin()) {
      --it;
      if (it->first + it->second->size > off) match = false;
    }
  }
  if (!match) {
    diverged_ = true;
    ++plan_stats_.diverged_steps;
    ++stats_.num_plan_divergences;
    return nullptr;
  }
  Block* b = new_block();
  b->seg = arena_;
  b->ptr = arena_->base + off;
  b->size = rounded;
  b->planned = true;
  arena_live_[off] = b;
  ++cursor_;
  ++plan_stats_.plan_allocs;
  ++stats_.num_plan_allocs;
  return b;
}

}  // namespace kiln
