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
  ++plan_gen_;
  plan_live_.assign(plan_.requests.size(), nullptr);
  stale_planned_ = arena_blocks_.size();
  if (arena_ && arena_->size < plan_.arena_bytes && arena_blocks_.empty()) {
    Segment* a = arena_;
    arena_ = nullptr;
    unmap_segment(a);
  }
}

bool CachingAllocator::map_arena() {
  size_t bytes = std::max(plan_.arena_bytes, cfg_.round);
  if (arena_ && arena_->size >= bytes) return true;
  if (arena_) {
    if (!arena_blocks_.empty()) return false;  // blocks of an older plan still live in it
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
  ++plan_gen_;
  plan_live_.clear();
  stale_planned_ = arena_blocks_.size();
  if (arena_ && arena_blocks_.empty()) {
    Segment* a = arena_;
    arena_ = nullptr;
    unmap_segment(a);
  }
}

void CachingAllocator::drop_planned(Block* b) {
  Block* moved = arena_blocks_.back();
  arena_blocks_[b->arena_pos] = moved;
  moved->arena_pos = b->arena_pos;
  arena_blocks_.pop_back();
  if (b->plan_gen == plan_gen_) plan_live_[(size_t)b->plan_idx] = nullptr;
  else --stale_planned_;
}

std::vector<const CachingAllocator::Block*> CachingAllocator::arena_sorted() const {
  std::vector<const Block*> v(arena_blocks_.begin(), arena_blocks_.end());
  std::sort(v.begin(), v.end(), [](const Block* a, const Block* b) { return a->ptr < b->ptr; });
  return v;
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
    // otherwise be overwritten. Only the requests planned over these bytes can be there, unless
    // blocks of an older plan still live (then all live planned blocks are checked).
    if (stale_planned_ == 0) {
      for (uint32_t k = plan_.conflict_begin[cursor_]; match && k < plan_.conflict_begin[cursor_ + 1]; ++k)
        if (plan_live_[plan_.conflicts[k]]) match = false;
    } else {
      const char* lo = arena_->base + off;
      for (const Block* x : arena_blocks_)
        if (x->ptr < lo + rounded && lo < x->ptr + x->size) {
          match = false;
          break;
        }
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
  b->plan_idx = (int32_t)cursor_;
  b->plan_gen = plan_gen_;
  b->arena_pos = (uint32_t)arena_blocks_.size();
  arena_blocks_.push_back(b);
  plan_live_[cursor_] = b;
  ++cursor_;
  ++plan_stats_.plan_allocs;
  ++stats_.num_plan_allocs;
  return b;
}

}  // namespace kiln
