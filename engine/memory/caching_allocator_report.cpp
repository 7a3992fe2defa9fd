// What CachingAllocator shows about itself: segment/block listing, the JSON snapshot, the event
// ring as Chrome trace JSON and as a replayable text trace, and verify() (every invariant the
// allocator relies on, checked from scratch).
#include <fstream>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

namespace kiln {

const char* trace_kind_name(TraceKind k) {
  switch (k) {
    case TraceKind::alloc: return "alloc";
    case TraceKind::free: return "free";
    case TraceKind::map: return "segment map";
    case TraceKind::unmap: return "segment unmap";
    case TraceKind::oom: return "oom";
    case TraceKind::retag: return "retag";
  }
  return "?";
}

namespace {
const char* state_name(detail::BlockState s) {
  switch (s) {
    case detail::BlockState::free: return "free";
    case detail::BlockState::allocated: return "allocated";
    case detail::BlockState::pending: return "pending";
  }
  return "?";
}
}  // namespace

std::vector<SegmentInfo> CachingAllocator::segments_locked() const {
  std::vector<SegmentInfo> out;
  auto info = [&](const Block* b, const Segment* s) {
    BlockInfo i;
    i.address = (uintptr_t)b->ptr;
    i.offset = (size_t)(b->ptr - s->base);
    i.size = b->size;
    i.requested = b->state == detail::BlockState::allocated ? b->requested : 0;
    i.state = state_name(b->state);
    i.tag = b->tag;
    i.module = b->state == detail::BlockState::allocated ? module_names_[b->module] : "";
    i.stream = b->stream;
    return i;
  };
  for (const Segment* s : segments_) {
    SegmentInfo si;
    si.address = (uintptr_t)s->base;
    si.size = s->size;
    si.pool = s->pool;
    for (const Block* b = s->first; b; b = b->next) si.blocks.push_back(info(b, s));
    out.push_back(std::move(si));
  }
  if (arena_) {
    SegmentInfo si;
    si.address = (uintptr_t)arena_->base;
    si.size = arena_->size;
    si.pool = Pool::plan;
    for (const Block* b : arena_sorted()) si.blocks.push_back(info(b, arena_));
    out.push_back(std::move(si));
  }
  return out;
}

std::vector<SegmentInfo> CachingAllocator::segments() const {
  std::lock_guard<SpinLock> g(mu_);
  return segments_locked();
}

nlohmann::json CachingAllocator::snapshot() const {
  std::lock_guard<SpinLock> g(mu_);
  nlohmann::json j;
  j["device"] = device_.str();
  j["provider"] = provider_->name();
  j["config"] = {{"round", cfg_.round},         {"small_max", cfg_.small_max},
                 {"small_segment", cfg_.small_segment}, {"large_round", cfg_.large_round},
                 {"max_split", cfg_.max_split}, {"debug", cfg_.debug}};
  MemoryStats s = stats_;
  fill_derived(s);
  j["stats"] = stats_to_json(s);
  nlohmann::json segs = nlohmann::json::array();
  for (const SegmentInfo& si : segments_locked()) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const BlockInfo& b : si.blocks)
      blocks.push_back({{"address", b.address}, {"offset", b.offset},   {"size", b.size},
                        {"requested", b.requested}, {"state", b.state}, {"tag", tag_name(b.tag)},
                        {"module", b.module},   {"stream", b.stream}});
    segs.push_back({{"address", si.address}, {"size", si.size}, {"pool", pool_name(si.pool)}, {"blocks", blocks}});
  }
  j["segments"] = segs;
  nlohmann::json mods = nlohmann::json::array();
  for (size_t i = 0; i < module_live_.size(); ++i)
    if (module_live_[i] > 0) mods.push_back({{"module", module_names_[i]}, {"live_bytes", module_live_[i]}});
  j["modules"] = mods;
  j["plan"] = {{"has_plan", has_plan_},
               {"arena_bytes", plan_.arena_bytes},
               {"peak_live_bytes", plan_.peak_live_bytes},
               {"planned_allocs", plan_.requests.size()},
               {"replay_steps", plan_stats_.replay_steps},
               {"diverged_steps", plan_stats_.diverged_steps},
               {"plan_allocs", plan_stats_.plan_allocs},
               {"fallback_allocs", plan_stats_.fallback_allocs}};
  return j;
}

nlohmann::json CachingAllocator::chrome_trace() const {
  std::lock_guard<SpinLock> g(mu_);
  nlohmann::json ev = nlohmann::json::array();
  const int pid = 1;
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid},
                {"args", {{"name", "kiln memory " + device_.str()}}}});
  if (!ring_ || ring_->size() == 0) return {{"traceEvents", ev}, {"displayTimeUnit", "ns"}};
  uint64_t t0 = ring_->at(0).ts_ns;
  auto us = [&](uint64_t ns) { return (double)(ns - t0) / 1000.0; };
  auto counter = [&](int tag, int64_t bytes, double ts) {
    ev.push_back({{"name", std::string(tag_name((MemoryTag)tag)) + " bytes"}, {"ph", "C"}, {"pid", pid},
                  {"ts", ts}, {"args", {{"bytes", bytes}}}});
  };
  // Every tag's level at the start of the window (after its first event), then one counter
  // update per alloc/free for the tag it changed.
  const TraceEvent& first = ring_->at(0);
  for (int t = 0; t < kNumMemoryTags; ++t) counter(t, first.tag_bytes[t], 0.0);
  for (size_t i = 0; i < ring_->size(); ++i) {
    const TraceEvent& e = ring_->at(i);
    double ts = us(e.ts_ns);
    switch (e.kind) {
      case TraceKind::alloc:
      case TraceKind::free:
        counter((int)e.tag, e.tag_bytes[(int)e.tag], ts);
        break;
      case TraceKind::retag:
        counter((int)e.prev_tag, e.tag_bytes[(int)e.prev_tag], ts);
        counter((int)e.tag, e.tag_bytes[(int)e.tag], ts);
        break;
      case TraceKind::map:
      case TraceKind::unmap:
      case TraceKind::oom: {
        nlohmann::json args = {{"bytes", e.size}, {"address", e.addr}};
        if (e.kind == TraceKind::oom) args["tag"] = tag_name(e.tag);
        ev.push_back({{"name", trace_kind_name(e.kind)}, {"ph", "i"}, {"s", "p"}, {"pid", pid}, {"tid", 0},
                      {"ts", ts}, {"args", args}});
        break;
      }
    }
  }
  return {{"traceEvents", ev}, {"displayTimeUnit", "ns"},
          {"otherData", {{"device", device_.str()}, {"dropped_events", ring_->dropped()}, {"t0_ns", t0}}}};
}

void CachingAllocator::write_trace_file(const std::string& path) const {
  std::lock_guard<SpinLock> g(mu_);
  KILN_CHECK(ring_, "write_trace_file(", path, "): tracing is off (enable_trace or KILN_ALLOC_CONF=trace=N)");
  std::ofstream f(path);
  KILN_CHECK(f, "write_trace_file: cannot open '", path, "' for writing");
  f << "# kiln allocation trace: a <id> <bytes> <tag> | f <id>; device " << device_.str() << "\n";
  std::unordered_set<uint64_t> seen;
  for (size_t i = 0; i < ring_->size(); ++i) {
    const TraceEvent& e = ring_->at(i);
    if (e.kind == TraceKind::alloc) {
      seen.insert(e.id);
      f << "a " << e.id << " " << e.size << " " << tag_name(e.tag) << "\n";
    } else if (e.kind == TraceKind::free && seen.count(e.id)) {
      f << "f " << e.id << "\n";
    }
  }
  KILN_CHECK(f.good(), "write_trace_file: writing '", path, "' failed");
}

void CachingAllocator::verify() const {
  std::lock_guard<SpinLock> g(mu_);
  const std::string where = "allocator verify (" + device_.str() + "): ";
  int64_t alloc[kNumPools] = {}, reserved[kNumPools] = {}, requested[kNumPools] = {}, pending[kNumPools] = {};
  int64_t tag_alloc[kNumMemoryTags] = {}, tag_req[kNumMemoryTags] = {};
  std::vector<int64_t> mod(module_live_.size(), 0);
  size_t n_free = 0, n_alloc = 0;
  auto count_alloc = [&](const Block* b, int pool) {
    KILN_CHECK(live_.find(b->ptr) == b, where, "allocated block at ", (const void*)b->ptr, " missing from the map");
    alloc[pool] += (int64_t)b->size;
    requested[pool] += (int64_t)b->requested;
    tag_alloc[(int)b->tag] += (int64_t)b->size;
    tag_req[(int)b->tag] += (int64_t)b->requested;
    mod[b->module] += (int64_t)b->size;
    ++n_alloc;
  };
  for (const Segment* s : segments_) {
    int pool = (int)s->pool;
    reserved[pool] += (int64_t)s->size;
    const char* expect = s->base;
    const Block* prev = nullptr;
    for (const Block* b = s->first; b; prev = b, b = b->next) {
      KILN_CHECK(b->seg == s && b->prev == prev && b->ptr == expect && b->size > 0 && b->size % cfg_.round == 0,
                 where, "blocks do not tile segment ", s->id, " at offset ", (size_t)(expect - s->base));
      expect += b->size;
      if (b->state == detail::BlockState::allocated) {
        count_alloc(b, (int)b->pool);
        KILN_CHECK(b->bin < 0, where, "allocated block in a bin");
      } else if (b->state == detail::BlockState::pending) {
        pending[(int)b->pool] += (int64_t)b->size;
      } else {
        ++n_free;
        KILN_CHECK(b->bin == detail::SizeBins::bin_of(b->size), where, "free block of ", b->size,
                   " bytes is in bin ", b->bin);
        if (prev && prev->state == detail::BlockState::free)
          KILN_CHECK(events_ && prev->stream != b->stream, where, "free neighbours at offset ",
                     (size_t)(b->ptr - s->base), " of segment ", s->id, " were not coalesced");
        if (poison_ && !poison_intact(b->ptr, b->size)) {
          size_t at = 0;
          while (at < b->size && (unsigned char)b->ptr[at] == detail::kPoisonByte) ++at;
          throw Error(str_cat("use-after-free on ", device_.str(), ": freed block at ", (const void*)b->ptr,
                              " (", b->size, " bytes) was written at byte ", at, " after it was freed"));
        }
      }
    }
    KILN_CHECK(s->last == prev, where, "segment ", s->id, " does not know its last block");
    KILN_CHECK(expect == s->base + s->size, where, "blocks of segment ", s->id, " cover ",
               (size_t)(expect - s->base), " of ", s->size, " bytes");
  }
  if (arena_) {
    reserved[(int)Pool::plan] += (int64_t)arena_->size;
    size_t end = 0;
    for (const Block* b : arena_sorted()) {
      size_t off = (size_t)(b->ptr - arena_->base);
      KILN_CHECK(off >= end && off + b->size <= arena_->size, where, "planned blocks overlap at arena offset ", off);
      end = off + b->size;
      count_alloc(b, (int)Pool::plan);
    }
  }
  size_t in_bins = 0;
  for (const auto& bins : bins_)
    for (int bi = bins.next_nonempty(0); bi >= 0; bi = bins.next_nonempty(bi + 1))
      for (const Block* x = bins.head(bi); x; x = x->bin_next) {
        KILN_CHECK(x->state == detail::BlockState::free, where, "non-free block in bin ", bi);
        ++in_bins;
      }
  KILN_CHECK(in_bins == n_free, where, in_bins, " blocks in bins but ", n_free, " free blocks in segments");
  KILN_CHECK(live_.size() == n_alloc, where, live_.size(), " live pointers but ", n_alloc, " allocated blocks");
  int64_t ta = 0, tr = 0, tq = 0, tp = 0;
  for (int p = 0; p < kNumPools; ++p) {
    const PoolStats& ps = stats_.pool[p];
    KILN_CHECK(ps.allocated.current == alloc[p] && ps.reserved.current == reserved[p] &&
                   ps.requested.current == requested[p] && ps.active.current == alloc[p] + pending[p],
               where, "pool ", pool_name((Pool)p), " counters (allocated ", ps.allocated.current, ", reserved ",
               ps.reserved.current, ", requested ", ps.requested.current, ", active ", ps.active.current,
               ") differ from its blocks (", alloc[p], ", ", reserved[p], ", ", requested[p], ", ",
               alloc[p] + pending[p], ")");
    ta += alloc[p];
    tr += reserved[p];
    tq += requested[p];
    tp += pending[p];
  }
  KILN_CHECK(stats_.total.allocated.current == ta && stats_.total.reserved.current == tr &&
                 stats_.total.requested.current == tq && stats_.total.active.current == ta + tp,
             where, "total counters differ from the blocks");
  for (int t = 0; t < kNumMemoryTags; ++t)
    KILN_CHECK(stats_.tag_allocated[t].current == tag_alloc[t] && stats_.tag_requested[t].current == tag_req[t],
               where, "tag ", tag_name((MemoryTag)t), " counters differ from the blocks");
  for (size_t i = 0; i < mod.size(); ++i)
    KILN_CHECK(module_live_[i] == mod[i], where, "module '", module_names_[i], "' counter ", module_live_[i],
               " differs from its blocks ", mod[i]);
}

}  // namespace kiln
