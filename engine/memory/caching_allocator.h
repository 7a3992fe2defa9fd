// CachingAllocator: kiln's bump-and-bin allocator over a Provider, with exact accounting.
//   - expandable arena (the default where the provider can grow a range: host, meta, cuda with
//     the driver's virtual memory management): every request is served from one reserved
//     address range whose committed part grows at its end in granule steps; a fresh request that
//     no free block holds bumps the end (extending the free tail block in place), frees coalesce
//     with every free neighbour, empty_cache() decommits the free tail. Requests still count in
//     the small or large pool by size; the arena's reserved bytes count in the large pool.
//     Measured on recorded training steps this keeps reserved within 4-18% of peak live bytes
//     where mapped segments needed 17-47% (bench/bench_alloc.cpp). Otherwise, mapped segments:
//   - small pool: requests <= small_max (1 MiB) share small_segment (2 MiB) segments; large pool:
//     requests below large_segment/2 (10 MiB) share large_segment (20 MiB) segments so their
//     blocks coalesce (falling back to their own size when 20 MiB does not fit), bigger ones map
//     their own segment rounded to large_round (2 MiB);
//   - a fresh segment is one free block that requests carve from its front (bump); freed blocks go
//     to size-class bins (4 per power of two, bitmap, best fit inside the class), are split when
//     the rest is worth keeping and coalesce with free neighbours;
//   - a block remembers its stream; another stream reuses it only after an EventSource event
//     says the old stream's work is done (no event source: work is synchronous, reuse is free);
//   - on provider failure: release the unused cache, retry once, then throw kiln::OutOfMemory with
//     the full account (oom_message.h);
//   - stats per pool, tag and module path; JSON snapshot; an event ring exported as Chrome trace;
//   - plan mode: record one step, plan offsets in one arena, serve identical later steps by bump
//     pointer from the plan, fall back to the bins the moment the sequence diverges.
// Thread-safe (one mutex). It never dereferences memory except for debug poisoning, and only when
// the provider is host-accessible.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/memory/alloc_config.h"
#include "engine/memory/alloc_plan.h"
#include "engine/memory/allocator.h"
#include "engine/memory/block.h"
#include "engine/memory/event_source.h"
#include "engine/memory/event_trace.h"
#include "engine/memory/provider.h"
#include "engine/memory/spin_lock.h"
#include "engine/memory/stats.h"

namespace kiln {

// Plan mode summary: how close the arena is to the lower bound and how replays went.
struct PlanReport {
  bool has_plan = false;
  size_t arena_bytes = 0;       // bytes of the planned arena
  size_t peak_live_bytes = 0;   // most bytes alive at once in the recorded step (lower bound)
  size_t planned_allocs = 0;    // allocations in the recorded step
  uint64_t replay_steps = 0;    // begin_replay() calls
  uint64_t diverged_steps = 0;  // replayed steps that fell back to the bins
  uint64_t plan_allocs = 0;     // requests served from the arena
  uint64_t fallback_allocs = 0; // requests of replayed steps served by the bins after divergence
};

// One live or free block as seen from outside (snapshot, tests).
struct BlockInfo {
  uintptr_t address = 0;
  size_t offset = 0, size = 0, requested = 0;
  std::string state;  // "allocated", "free", "pending"
  MemoryTag tag = MemoryTag::other;
  std::string module;
  StreamId stream = 0;
};
struct SegmentInfo {
  uintptr_t address = 0;
  size_t size = 0;
  Pool pool = Pool::small;
  std::vector<BlockInfo> blocks;  // address order; they tile the segment (plan arena: live ones)
};

class CachingAllocator : public Allocator {
 public:
  // provider: not owned, must outlive the allocator.
  CachingAllocator(Device device, Provider* provider, AllocatorConfig config = alloc_config_from_env());
  ~CachingAllocator() override;  // unmaps every segment (live blocks become invalid)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  Device device() const override { return device_; }
  void* allocate(size_t nbytes, StreamId stream = 0) override;
  void deallocate(void* ptr) override;
  void retag(void* ptr, MemoryTag tag) override;
  void record_stream(void* ptr, StreamId stream) override;

  // Cross-stream reuse waits on events from here (not owned; nullptr: synchronous streams).
  void set_event_source(EventSource* events);
  // Returns every segment with no live block (and no unfinished event) to the provider.
  void empty_cache();

  MemoryStats stats() const;
  void reset_peak();
  // The n module paths with the most live bytes, most first.
  std::vector<std::pair<std::string, int64_t>> top_modules(size_t n) const;
  // Rounded size of a live block (throws for a pointer this allocator did not hand out).
  size_t block_size(const void* ptr) const;
  // Checks every invariant (blocks tile segments, bins hold exactly the settled free blocks,
  // free neighbours that could merge have merged, counters match the blocks) and, in debug mode,
  // that freed memory still holds the poison. Throws kiln::Error describing the first violation.
  void verify() const;

  std::vector<SegmentInfo> segments() const;
  nlohmann::json snapshot() const;

  // Event ring (alloc, free, map, unmap, oom). capacity 0 turns it off.
  void enable_trace(size_t capacity);
  // Chrome trace JSON: counter events per tag (live bytes), instant events for map/unmap/oom.
  nlohmann::json chrome_trace() const;
  // The ring's alloc/free sequence as a text trace: "a <id> <bytes> <tag>" / "f <id>" per line
  // (frees of blocks allocated before the ring's window are left out). bench_alloc replays it.
  void write_trace_file(const std::string& path) const;

  // Plan mode. begin_record()/end_record() around one steady-state step; then each later step
  // between begin_replay()/end_replay() is served from the plan while it matches.
  void begin_record();
  void end_record();
  void begin_replay();
  void end_replay();
  void discard_plan();  // unmaps the arena when nothing lives in it
  PlanReport plan_report() const;

  const AllocatorConfig& config() const { return cfg_; }
  Provider* provider() const { return provider_; }

 private:
  using Block = detail::Block;
  using Segment = detail::Segment;

  size_t round_size(size_t n) const {
    if (n - 1 >= (size_t(1) << 60)) bad_size(n);  // 0 or absurd
    return (n + cfg_.round - 1) & ~(cfg_.round - 1);
  }
  [[noreturn]] void bad_size(size_t n) const;
  Pool pool_for(size_t rounded) const { return rounded <= cfg_.small_max ? Pool::small : Pool::large; }
  uint32_t intern_module(const std::string& m);
  Block* new_block();
  void recycle_block(Block* b);
  Block* alloc_block(size_t rounded, size_t requested, StreamId stream);
  Block* find_free(Pool pool, size_t rounded, StreamId stream, const Block* skip = nullptr);
  Block* find_in_arena(size_t rounded, StreamId stream);
  bool usable(Block* b, size_t rounded, StreamId stream);
  bool settled(Block* b);
  Segment* map_segment(size_t bytes, Pool pool);
  Block* grow_arena(size_t rounded, StreamId stream);
  void shrink_arena(Segment* s);
  // The expandable arena's blocks live in this pool's bins and its reserved bytes count here.
  static constexpr Pool kArenaPool = Pool::large;
  void unmap_segment(Segment* s);
  void split(Block* b, size_t rounded);
  void free_to_bins(Block* b);
  bool try_merge(Block* left, Block* right);
  void coalesce_all();
  void process_pending();
  void release_cached();
  Block* try_plan(size_t rounded, StreamId stream);
  bool map_arena();
  void account_alloc(Block* b, Pool pool);
  void account_free(Block* b, Pool pool);
  TraceEvent& trace(TraceKind kind, uint64_t id, uintptr_t addr, size_t size, StreamId stream, MemoryTag tag,
             uint32_t module);
  [[noreturn]] void throw_oom(size_t requested, size_t rounded);
  void poison(Block* b);
  bool poison_intact(const char* p, size_t n) const;
  void fill_derived(MemoryStats& s) const;
  std::vector<SegmentInfo> segments_locked() const;

  Device device_;
  Provider* provider_;
  AllocatorConfig cfg_;
  bool poison_ = false;  // debug and host-accessible
  mutable SpinLock mu_;
  EventSource* events_ = nullptr;
  bool multi_stream_ = false;  // a stream other than 0 was seen: record events on free

  std::vector<Segment*> segments_;
  Segment* grow_ = nullptr;  // the expandable arena (also in segments_), once reserved
  detail::SizeBins bins_[2];  // small, large
  detail::PtrMap live_;
  std::vector<Block*> spare_blocks_;
  struct Pending {
    Block* block;
    std::vector<EventId> events;
  };
  std::vector<Pending> pending_;
  std::unordered_map<const Block*, std::vector<StreamId>> extra_streams_;
  MemoryStats stats_;
  uint64_t next_alloc_id_ = 1, next_segment_id_ = 1;

  // module paths, interned
  std::unordered_map<std::string, uint32_t> module_ids_;
  std::vector<std::string> module_names_;
  std::vector<int64_t> module_live_;
  std::string last_module_;
  uint32_t last_module_id_ = 0;

  std::unique_ptr<EventRing> ring_;

  // plan mode
  bool recording_ = false, replaying_ = false, diverged_ = false;
  uint64_t rec_clock_ = 0;
  uint32_t rec_gen_ = 0;
  std::vector<PlanRequest> rec_;
  AllocPlan plan_;
  bool has_plan_ = false;
  Segment* arena_ = nullptr;
  size_t cursor_ = 0;
  std::vector<Block*> arena_blocks_;  // live planned blocks, any plan (Block::arena_pos)
  std::vector<Block*> plan_live_;     // the current plan's live blocks by request index
  uint32_t plan_gen_ = 0;             // bumped by each new or discarded plan
  size_t stale_planned_ = 0;          // live planned blocks of older plans: replay checks them all
  void drop_planned(Block* b);
  std::vector<const Block*> arena_sorted() const;  // live planned blocks in address order
  PlanReport plan_stats_;
};

// The CachingAllocator behind a device's default allocator, or nullptr when set_allocator()
// replaced it (tools read stats through this).
CachingAllocator* caching_allocator_for(Device d);
// Makes the device's default allocator behave as if the device had `bytes` of memory (SIZE_MAX:
// no limit). `kiln train --device-memory 6G` calls it with parse_bytes("6G").
void set_device_memory_limit(Device d, size_t bytes);

}  // namespace kiln
