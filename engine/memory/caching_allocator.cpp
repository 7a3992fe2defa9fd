// CachingAllocator core: allocate / free, bins, split and coalesce, segments, streams, the
// release-and-retry path, accounting. Plan mode is in caching_allocator_plan.cpp; snapshot,
// trace, verify and the OOM account in caching_allocator_report.cpp.
#include "engine/memory/caching_allocator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "engine/core/error.h"
#include "engine/memory/oom_message.h"

namespace kiln {

namespace {
constexpr unsigned char kPoison = detail::kPoisonByte;
// Runs a provider call of a release path (unmap, decommit, release) and keeps its error from
// escaping: in ~CachingAllocator an exception would be std::terminate, and a sticky CUDA error
// (a kernel fault earlier in the run) makes every later cudaFree fail. Reports one line on stderr
// naming the call, the device and the error, and returns false; the caller continues.
template <typename F>
bool release_call(const char* call, const Device& dev, const Provider* provider, F f) noexcept {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: %s (%s, %s provider) failed while releasing memory: %s; continuing\n", call,
                 dev.str().c_str(), provider->name(), e.what());
  } catch (...) {
    std::fprintf(stderr, "kiln: %s (%s, %s provider) failed while releasing memory (unknown error); continuing\n",
                 call, dev.str().c_str(), provider->name());
  }
  return false;
}

uint64_t now_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

CachingAllocator::CachingAllocator(Device device, Provider* provider, AllocatorConfig config)
    : device_(device), provider_(provider), cfg_(config) {
  KILN_CHECK(provider_, "CachingAllocator(", device.str(), "): null provider");
  cfg_.validate();
  // The expandable arena needs a provider that can grow a range; the granule is at least the
  // provider's own. config() reports these effective values (the meta predictor copies them).
  if (provider_->granule() == 0) cfg_.expandable = false;
  else cfg_.granule = std::max(cfg_.granule, provider_->granule());
  poison_ = cfg_.debug && provider_->host_accessible();
  module_names_.push_back("");
  module_live_.push_back(0);
  module_ids_[""] = 0;
  if (cfg_.trace_capacity) ring_.reset(new EventRing(cfg_.trace_capacity));
}

CachingAllocator::~CachingAllocator() {
  for (Segment* s : segments_) {
    for (Block* b = s->first; b;) {
      Block* n = b->next;
      delete b;
      b = n;
    }
    // Never throws: a failing provider call is reported and the rest is still released.
    if (s->growable()) {
      if (s->size) release_call("decommit", device_, provider_, [&] { provider_->decommit(s->base, s->size); });
      release_call("release", device_, provider_, [&] { provider_->release(s->base, s->reserved); });
    } else {
      release_call("unmap", device_, provider_, [&] { provider_->unmap(s->base, s->size); });
    }
    delete s;
  }
  for (Block* b : arena_blocks_) delete b;
  if (arena_) {
    delete arena_->first;
    release_call("unmap", device_, provider_, [&] { provider_->unmap(arena_->base, arena_->size); });
    delete arena_;
  }
  for (Block* b : spare_blocks_) delete b;
}

void CachingAllocator::bad_size(size_t n) const {
  KILN_CHECK(n > 0, "allocate on ", device_.str(), ": zero bytes requested");
  throw Error(str_cat("allocate on ", device_.str(), ": ", n, " bytes is not a plausible size"));
}

uint32_t CachingAllocator::intern_module(const std::string& m) {
  if (m == last_module_) return last_module_id_;
  auto it = module_ids_.find(m);
  uint32_t id;
  if (it != module_ids_.end()) {
    id = it->second;
  } else {
    id = (uint32_t)module_names_.size();
    module_ids_.emplace(m, id);
    module_names_.push_back(m);
    module_live_.push_back(0);
  }
  last_module_ = m;
  last_module_id_ = id;
  return id;
}

CachingAllocator::Block* CachingAllocator::new_block() {
  if (spare_blocks_.empty()) return new Block();
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  *b = Block();
  return b;
}

void CachingAllocator::recycle_block(Block* b) { spare_blocks_.push_back(b); }

// ---- allocate / free ------------------------------------------------------------------------

void* CachingAllocator::allocate(size_t nbytes, StreamId stream) {
  const MemoryContext& ctx = memory_context();
  std::lock_guard<SpinLock> g(mu_);
  size_t rounded = round_size(nbytes);
  if (stream != 0) multi_stream_ = true;
  Block* b = nullptr;
  if (replaying_ && !diverged_) b = try_plan(rounded, stream);
  Pool pool = Pool::plan;
  if (!b) {
    if (replaying_) ++plan_stats_.fallback_allocs;
    pool = pool_for(rounded);
    b = alloc_block(rounded, nbytes, stream);
  }
  b->state = detail::BlockState::allocated;
  b->pool = pool;
  b->requested = nbytes;
  b->stream = stream;
  b->event = 0;
  b->tag = ctx.tag;
  b->module = intern_module(ctx.module);
  b->id = next_alloc_id_++;
  b->rec = -1;
  if (recording_) {
    b->rec = (int32_t)rec_.size();
    b->rec_gen = rec_gen_;
    PlanRequest r;
    r.size = rounded;  // the arena serves exactly the rounded size
    r.stream = stream;
    r.start = rec_clock_++;
    r.end = UINT64_MAX;
    rec_.push_back(r);
  }
  live_.insert(b->ptr, b);
  account_alloc(b, pool);
  if (ring_) trace(TraceKind::alloc, b->id, (uintptr_t)b->ptr, nbytes, stream, b->tag, b->module);
  return b->ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard<SpinLock> g(mu_);
  Block* b = live_.erase(ptr);
  KILN_CHECK(b, "free on ", device_.str(), ": pointer ", ptr,
             " was not allocated by this allocator (double free or foreign pointer)");
  if (recording_ && b->rec >= 0 && b->rec_gen == rec_gen_) rec_[(size_t)b->rec].end = rec_clock_++;
  account_free(b, b->pool);
  if (ring_) trace(TraceKind::free, b->id, (uintptr_t)b->ptr, b->requested, b->stream, b->tag, b->module);
  if (b->planned) {
    drop_planned(b);
    recycle_block(b);
    return;
  }
  b->requested = 0;
  if (!extra_streams_.empty()) {
    auto it = extra_streams_.find(b);
    if (it != extra_streams_.end()) {
      std::vector<StreamId> streams = std::move(it->second);
      extra_streams_.erase(it);
      if (events_) {
        // Used on other streams: nobody may reuse it before their queued work has finished.
        Pending p{b, {}};
        for (StreamId s : streams) p.events.push_back(events_->record(s));
        p.events.push_back(events_->record(b->stream));
        b->state = detail::BlockState::pending;
        int64_t sz = (int64_t)b->size;
        stats_.pool[(int)b->pool].active.add(sz);
        stats_.total.active.add(sz);
        pending_.push_back(std::move(p));
        return;
      }
    }
  }
  free_to_bins(b);
}

void CachingAllocator::account_alloc(Block* b, Pool pool) {
  int64_t sz = (int64_t)b->size, rq = (int64_t)b->requested;
  PoolStats& p = stats_.pool[(int)pool];
  p.allocated.add(sz);
  p.active.add(sz);
  p.requested.add(rq);
  stats_.total.allocated.add(sz);
  stats_.total.active.add(sz);
  stats_.total.requested.add(rq);
  stats_.tag_allocated[(int)b->tag].add(sz);
  stats_.tag_requested[(int)b->tag].add(rq);
  module_live_[b->module] += sz;
  ++stats_.num_allocs;
}

void CachingAllocator::account_free(Block* b, Pool pool) {
  int64_t sz = (int64_t)b->size, rq = (int64_t)b->requested;
  PoolStats& p = stats_.pool[(int)pool];
  p.allocated.add(-sz);
  p.active.add(-sz);
  p.requested.add(-rq);
  stats_.total.allocated.add(-sz);
  stats_.total.active.add(-sz);
  stats_.total.requested.add(-rq);
  stats_.tag_allocated[(int)b->tag].add(-sz);
  stats_.tag_requested[(int)b->tag].add(-rq);
  module_live_[b->module] -= sz;
  ++stats_.num_frees;
}

void CachingAllocator::retag(void* ptr, MemoryTag tag) {
  std::lock_guard<SpinLock> g(mu_);
  Block* b = live_.find(ptr);
  KILN_CHECK(b, "retag on ", device_.str(), ": pointer ", ptr, " is not a live block of this allocator");
  if (b->tag == tag) return;
  int64_t sz = (int64_t)b->size, rq = (int64_t)b->requested;
  stats_.tag_allocated[(int)b->tag].add(-sz);
  stats_.tag_requested[(int)b->tag].add(-rq);
  stats_.tag_allocated[(int)tag].add(sz);
  stats_.tag_requested[(int)tag].add(rq);
  const MemoryTag prev = b->tag;
  b->tag = tag;
  if (ring_) trace(TraceKind::retag, b->id, (uintptr_t)b->ptr, b->requested, b->stream, tag, b->module).prev_tag = prev;
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<SpinLock> g(mu_);
  Block* b = live_.find(ptr);
  KILN_CHECK(b, "record_stream on ", device_.str(), ": pointer ", ptr, " is not a live block");
  if (stream == b->stream || b->planned) return;
  multi_stream_ = true;
  auto& v = extra_streams_[b];
  for (StreamId s : v)
    if (s == stream) return;
  v.push_back(stream);
}

size_t CachingAllocator::block_size(const void* ptr) const {
  std::lock_guard<SpinLock> g(mu_);
  Block* b = live_.find(ptr);
  KILN_CHECK(b, "block_size on ", device_.str(), ": pointer ", ptr, " is not a live block");
  return b->size;
}

void CachingAllocator::set_event_source(EventSource* events) {
  std::lock_guard<SpinLock> g(mu_);
  events_ = events;
}

// ---- bins -----------------------------------------------------------------------------------

bool CachingAllocator::settled(Block* b) {
  if (!events_ || b->event == detail::kSettled) return true;
  if (b->event == 0) b->event = events_->record(b->stream);  // lazily: covers all work so far
  if (!events_->query(b->event)) return false;
  b->event = detail::kSettled;
  return true;
}

bool CachingAllocator::usable(Block* b, size_t rounded, StreamId stream) {
  if (b->size >= cfg_.max_split) {
    // Oversize blocks are never split: only requests of nearly their size may take them.
    if (rounded < cfg_.max_split || b->size - rounded >= cfg_.large_round) return false;
  }
  return b->stream == stream || settled(b);
}

CachingAllocator::Block* CachingAllocator::find_free(Pool pool, size_t rounded, StreamId stream, const Block* skip) {
  detail::SizeBins& bins = bins_[(int)pool];
  for (int bi = bins.next_nonempty(detail::SizeBins::bin_of(rounded)); bi >= 0; bi = bins.next_nonempty(bi + 1)) {
    Block* best = nullptr;
    // Best fit; among equal sizes the lowest address, which keeps the expandable arena's top free.
    for (Block* x = bins.head(bi); x; x = x->bin_next) {
      if (x == skip || x->size < rounded ||
          (best && (x->size > best->size || (x->size == best->size && x->ptr > best->ptr))))
        continue;
      if (!usable(x, rounded, stream)) continue;
      best = x;
    }
    if (best) return best;
  }
  return nullptr;
}

// The expandable arena's choice: a hole that fits within hole_fit_pct (25%) over the request (the
// closest), else the free tail (bump allocation), else the closest larger hole; nullptr means
// grow. Taking the tail before a loose hole keeps the holes for the requests that fit them: on
// the recorded training steps in bench/traces this holds reserved bytes to 1.04-1.09x peak live
// in steady state, where plain best fit (hole_fit=off) drifts to 1.18x on the small CNN. Neither
// wins everywhere: on ResNet18's first step with --checkpoint, best fit reserves less
// (docs/memory-tradeoffs.md).
CachingAllocator::Block* CachingAllocator::find_in_arena(size_t rounded, StreamId stream) {
  Block* tail = grow_ && grow_->last && grow_->last->state == detail::BlockState::free ? grow_->last : nullptr;
  Block* best = find_free(kArenaPool, rounded, stream, cfg_.hole_fit_pct == SIZE_MAX ? nullptr : tail);
  if (best && (cfg_.hole_fit_pct == SIZE_MAX ||
               (double)(best->size - rounded) * 100.0 <= (double)rounded * (double)cfg_.hole_fit_pct))
    return best;
  if (tail && tail->size >= rounded && usable(tail, rounded, stream)) return tail;
  return best;
}

void CachingAllocator::split(Block* b, size_t rounded) {
  size_t rest = b->size - rounded;
  // In the expandable arena every remainder is kept (all sizes share it); in mapped segments a
  // large block keeps a remainder only when it could serve a large request.
  bool worth = b->seg->growable() || b->seg->pool == Pool::small ? rest >= cfg_.round : rest > cfg_.small_max;
  if (!worth || b->size >= cfg_.max_split) return;
  Block* r = new_block();
  r->seg = b->seg;
  r->ptr = b->ptr + rounded;
  r->size = rest;
  r->stream = b->stream;
  r->event = b->event;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  else b->seg->last = r;
  b->next = r;
  b->size = rounded;
  bins_[(int)b->seg->pool].insert(r);
}

CachingAllocator::Block* CachingAllocator::alloc_block(size_t rounded, size_t requested, StreamId stream) {
  if (!pending_.empty()) process_pending();
  Pool pool = pool_for(rounded);
  Block* b = cfg_.expandable ? find_in_arena(rounded, stream) : find_free(pool, rounded, stream);
  if (b) {
    if (poison_ && !poison_intact(b->ptr, rounded))
      throw Error(str_cat("use-after-free on ", device_.str(), ": freed memory at ", (const void*)b->ptr,
                          " (", b->size, "-byte free block) was written after it was freed"));
    bins_[(int)b->seg->pool].remove(b);
  } else if (cfg_.expandable) {
    b = grow_arena(rounded, stream);
    if (!b) {
      ++stats_.num_retries;
      release_cached();
      b = grow_arena(rounded, stream);
      if (!b) throw_oom(requested, rounded);
    }
  } else {
    // Own segment rounded to large_round; mid-size large requests prefer a shared
    // large_segment, and fall back to their own size when that does not fit.
    size_t own = pool == Pool::small ? cfg_.small_segment
                                     : (rounded + cfg_.large_round - 1) / cfg_.large_round * cfg_.large_round;
    size_t seg_bytes = pool == Pool::large && rounded < cfg_.large_segment / 2 ? cfg_.large_segment : own;
    Segment* s = map_segment(seg_bytes, pool);
    if (!s && seg_bytes != own) s = map_segment(own, pool);
    if (!s) {
      ++stats_.num_retries;
      release_cached();
      s = map_segment(own, pool);
      if (!s) throw_oom(requested, rounded);
    }
    b = s->first;
  }
  split(b, rounded);
  return b;
}

void CachingAllocator::poison(Block* b) {
  if (poison_) std::memset(b->ptr, kPoison, b->size);
}

bool CachingAllocator::poison_intact(const char* p, size_t n) const {
  for (size_t i = 0; i < n; ++i)
    if ((unsigned char)p[i] != kPoison) return false;
  return true;
}

void CachingAllocator::free_to_bins(Block* b) {
  b->state = detail::BlockState::free;
  b->event = events_ && multi_stream_ ? events_->record(b->stream) : 0;
  poison(b);
  // A merge across streams can change the survivor's stream, which may make the other
  // neighbour mergeable: repeat until nothing merges.
  for (bool merged = true; merged;) {
    merged = false;
    if (b->prev && b->prev->state == detail::BlockState::free && try_merge(b->prev, b)) {
      b = b->prev;
      merged = true;
    }
    if (b->next && b->next->state == detail::BlockState::free && try_merge(b, b->next)) merged = true;
  }
  bins_[(int)b->seg->pool].insert(b);
}

// Merges two address-adjacent free blocks when their streams allow it. Either may be in a bin;
// on success the survivor (left) is out of the bins (the caller inserts it) and right is gone.
bool CachingAllocator::try_merge(Block* left, Block* right) {
  StreamId stream;
  EventId event;
  if (left->stream == right->stream) {
    stream = left->stream;
    EventId a = left->event, c = right->event;
    if (a == 0 || c == 0) event = 0;  // unknown: a lazy record later covers both
    else if (a == detail::kSettled) event = c;
    else if (c == detail::kSettled) event = a;
    else event = a > c ? a : c;  // ids increase: the later one implies the earlier
  } else if (settled(left)) {
    stream = right->stream;
    event = right->event;
  } else if (settled(right)) {
    stream = left->stream;
    event = left->event;
  } else {
    return false;  // both still busy on different streams: keep apart for now
  }
  detail::SizeBins& bins = bins_[(int)left->seg->pool];
  if (left->bin >= 0) bins.remove(left);
  if (right->bin >= 0) bins.remove(right);
  left->size += right->size;
  left->next = right->next;
  if (right->next) right->next->prev = left;
  else left->seg->last = left;
  left->stream = stream;
  left->event = event;
  recycle_block(right);
  return true;
}

// Merges every mergeable pair of free neighbours (events may have finished since the free).
void CachingAllocator::coalesce_all() {
  for (Segment* s : segments_) {
    for (bool merged = true; merged;) {  // repeat: a merge may change a survivor's stream
      merged = false;
      for (Block* b = s->first; b && b->next;) {
        if (b->state == detail::BlockState::free && b->next->state == detail::BlockState::free &&
            try_merge(b, b->next)) {
          bins_[(int)s->pool].insert(b);
          merged = true;
          continue;  // try the new neighbour too
        }
        b = b->next;
      }
    }
  }
}

void CachingAllocator::process_pending() {
  size_t keep = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    bool done = true;
    for (EventId e : p.events)
      if (!events_ || !events_->query(e)) {
        done = false;
        break;
      }
    if (!done) {
      if (keep != i) pending_[keep] = std::move(p);
      ++keep;
      continue;
    }
    Block* b = p.block;
    int64_t sz = (int64_t)b->size;
    stats_.pool[(int)b->pool].active.add(-sz);
    stats_.total.active.add(-sz);
    free_to_bins(b);
  }
  pending_.resize(keep);
}

// ---- segments -------------------------------------------------------------------------------

CachingAllocator::Segment* CachingAllocator::map_segment(size_t bytes, Pool pool) {
  void* p = provider_->map(bytes);
  if (!p) return nullptr;
  Segment* s = new Segment();
  s->base = static_cast<char*>(p);
  s->size = bytes;
  s->pool = pool;
  s->id = next_segment_id_++;
  Block* b = new_block();
  b->seg = s;
  b->ptr = s->base;
  b->size = bytes;
  b->event = detail::kSettled;  // fresh memory: no stream has touched it
  s->first = s->last = b;
  if (poison_) std::memset(s->base, kPoison, bytes);
  if (pool != Pool::plan) segments_.push_back(s);
  stats_.pool[(int)pool].reserved.add((int64_t)bytes);
  stats_.total.reserved.add((int64_t)bytes);
  ++stats_.num_segment_maps;
  if (ring_) trace(TraceKind::map, s->id, (uintptr_t)s->base, bytes, 0, MemoryTag::other, 0);
  return s;
}

void CachingAllocator::unmap_segment(Segment* s) {
  if (ring_) trace(TraceKind::unmap, s->id, (uintptr_t)s->base, s->size, 0, MemoryTag::other, 0);
  // A failed unmap is reported and the segment forgotten (its memory may leak; the allocator stays
  // consistent and the release path goes on).
  release_call("unmap", device_, provider_, [&] { provider_->unmap(s->base, s->size); });
  stats_.pool[(int)s->pool].reserved.add(-(int64_t)s->size);
  stats_.total.reserved.add(-(int64_t)s->size);
  ++stats_.num_segment_unmaps;
  recycle_block(s->first);
  delete s;
}

// The expandable arena: reserved once (as much address space as the device has, up to 1 TiB),
// committed at its end in granule steps. A request no free block holds extends the free tail
// block when there is one (on a compatible stream), else gets a new block at the end.
CachingAllocator::Block* CachingAllocator::grow_arena(size_t rounded, StreamId stream) {
  const size_t g = cfg_.granule;
  Segment* s = grow_;
  if (!s) {
    size_t want = std::min(provider_->capacity(), size_t(1) << 40) / g * g;
    want = std::max(want, (rounded + g - 1) / g * g);
    void* p = provider_->reserve(want);
    if (!p) return nullptr;
    s = new Segment();
    s->base = static_cast<char*>(p);
    s->reserved = want;
    s->pool = kArenaPool;
    s->id = next_segment_id_++;
    grow_ = s;
    segments_.push_back(s);
  }
  Block* tail = s->last;
  bool extend = tail && tail->state == detail::BlockState::free && (tail->stream == stream || settled(tail));
  size_t have = extend ? tail->size : 0;
  size_t grow = (rounded - have + g - 1) / g * g;
  if (grow > s->reserved - s->size) return nullptr;
  char* at = s->base + s->size;
  if (!provider_->commit(at, grow)) return nullptr;
  if (poison_) std::memset(at, kPoison, grow);
  s->size += grow;
  stats_.pool[(int)s->pool].reserved.add((int64_t)grow);
  stats_.total.reserved.add((int64_t)grow);
  ++stats_.num_segment_maps;
  if (ring_) trace(TraceKind::map, s->id, (uintptr_t)at, grow, 0, MemoryTag::other, 0);
  if (extend) {
    bins_[(int)s->pool].remove(tail);
    tail->size += grow;
    return tail;
  }
  Block* b = new_block();
  b->seg = s;
  b->ptr = at;
  b->size = grow;
  b->event = detail::kSettled;  // fresh memory
  b->prev = s->last;
  if (s->last) s->last->next = b;
  else s->first = b;
  s->last = b;
  return b;
}

// Gives the arena's free tail back to the provider, whole granules only.
void CachingAllocator::shrink_arena(Segment* s) {
  Block* t = s->last;
  if (!t || t->state != detail::BlockState::free || !settled(t)) return;
  const size_t g = cfg_.granule;
  char* from = s->base + ((size_t)(t->ptr - s->base) + g - 1) / g * g;
  size_t n = (size_t)(s->base + s->size - from);
  if (n == 0) return;
  // A failed decommit is reported and the tail kept as it is (still committed, still free).
  if (!release_call("decommit", device_, provider_, [&] { provider_->decommit(from, n); })) return;
  if (ring_) trace(TraceKind::unmap, s->id, (uintptr_t)from, n, 0, MemoryTag::other, 0);
  s->size -= n;
  stats_.pool[(int)s->pool].reserved.add(-(int64_t)n);
  stats_.total.reserved.add(-(int64_t)n);
  ++stats_.num_segment_unmaps;
  bins_[(int)s->pool].remove(t);
  if (from == t->ptr) {
    s->last = t->prev;
    if (t->prev) t->prev->next = nullptr;
    else s->first = nullptr;
    recycle_block(t);
  } else {
    t->size -= n;
    bins_[(int)s->pool].insert(t);
  }
}

void CachingAllocator::release_cached() {
  process_pending();
  coalesce_all();
  size_t keep = 0;
  for (size_t i = 0; i < segments_.size(); ++i) {
    Segment* s = segments_[i];
    if (s->growable()) {
      shrink_arena(s);
      if (s->size == 0) {  // nothing left: give the address range back too
        release_call("release", device_, provider_, [&] { provider_->release(s->base, s->reserved); });
        if (grow_ == s) grow_ = nullptr;
        delete s;
      } else {
        segments_[keep++] = s;
      }
      continue;
    }
    Block* b = s->first;
    if (b->next == nullptr && b->state == detail::BlockState::free && settled(b)) {
      bins_[(int)s->pool].remove(b);
      unmap_segment(s);
    } else {
      segments_[keep++] = s;
    }
  }
  segments_.resize(keep);
  if (arena_ && arena_blocks_.empty() && !replaying_) {
    Segment* a = arena_;
    arena_ = nullptr;
    unmap_segment(a);  // its `first` block is the unused whole-arena block from map_segment
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<SpinLock> g(mu_);
  release_cached();
}

// ---- stats ----------------------------------------------------------------------------------

void CachingAllocator::fill_derived(MemoryStats& s) const {
  size_t largest = 0;
  for (const auto& bins : bins_) {
    int bi = bins.last_nonempty();
    if (bi < 0) continue;
    for (Block* x = bins.head(bi); x; x = x->bin_next)
      if (x->size > largest) largest = x->size;
  }
  s.largest_free_block = largest;
  s.capacity = provider_->capacity();
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<SpinLock> g(mu_);
  MemoryStats s = stats_;
  fill_derived(s);
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<SpinLock> g(mu_);
  stats_.reset_peak();
}

std::vector<std::pair<std::string, int64_t>> CachingAllocator::top_modules(size_t n) const {
  std::lock_guard<SpinLock> g(mu_);
  std::vector<std::pair<std::string, int64_t>> v;
  for (size_t i = 0; i < module_live_.size(); ++i)
    if (module_live_[i] > 0) v.push_back({module_names_[i], module_live_[i]});
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (v.size() > n) v.resize(n);
  return v;
}

TraceEvent& CachingAllocator::trace(TraceKind kind, uint64_t id, uintptr_t addr, size_t size, StreamId stream,
                             MemoryTag tag, uint32_t module) {
  TraceEvent& e = ring_->push();
  e.ts_ns = now_ns();
  e.kind = kind;
  e.id = id;
  e.addr = addr;
  e.size = size;
  e.stream = stream;
  e.tag = tag;
  e.module = module;
  for (int t = 0; t < kNumMemoryTags; ++t) e.tag_bytes[t] = stats_.tag_allocated[t].current;
  return e;
}

void CachingAllocator::enable_trace(size_t capacity) {
  std::lock_guard<SpinLock> g(mu_);
  cfg_.trace_capacity = capacity;
  ring_.reset(capacity ? new EventRing(capacity) : nullptr);
}

void CachingAllocator::throw_oom(size_t requested, size_t rounded) {
  ++stats_.num_ooms;
  if (ring_) trace(TraceKind::oom, 0, 0, requested, 0, memory_context().tag, 0);
  OomReport r;
  r.device = device_.str();
  r.provider = provider_->name();
  r.requested = requested;
  r.rounded = rounded;
  r.retried = true;
  r.stats = stats_;
  fill_derived(r.stats);
  for (size_t i = 0; i < module_live_.size(); ++i)
    if (module_live_[i] > 0) r.top_modules.push_back({module_names_[i], module_live_[i]});
  std::sort(r.top_modules.begin(), r.top_modules.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  if (r.top_modules.size() > 5) r.top_modules.resize(5);
  throw OutOfMemory(format_oom_message(r));
}

}  // namespace kiln
