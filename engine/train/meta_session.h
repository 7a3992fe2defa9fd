// The meta device's allocator for a memory prediction or a run's plan: a fresh CachingAllocator over
// virtual addresses with the target device's policy, installed with set_allocator(meta) while it lives.
// With a capacity (the run's memory budget) its provider fails like the real one, so release-and-retry and
// an out-of-memory replay as on the device. It watches every allocation for the moment the total allocated
// bytes peak (the tags then) and, when asked, snapshots the segment map the first time the total reaches a
// known peak. Sessions do not nest. Not part of the public API.
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/memory/caching_allocator.h"
#include "engine/memory/provider.h"
#include "engine/train/memory_predict.h"

namespace kiln::train {

// The allocator policy of `target` (the meta device imitates the CPU): its allocator's configuration when
// it is in this machine, else the policy kiln's CUDA provider would give a GPU (expandable arena in 2 MiB
// granules; cudaMalloc segments with KILN_CUDA_VMM=0), with *assumed set.
AllocatorConfig meta_policy_for(Device target, bool* assumed = nullptr);

// While alive, every allocation a MetaSession serves on this thread is appended to `events` as +bytes
// (the bytes requested) and every free as -bytes: the request sequence of a replay, independent of the
// policy (tests/unit/test_cuda_plan_diff.cpp compares a cpu and a cuda replay with it). Does not nest.
class MetaAllocationLog {
 public:
  MetaAllocationLog();
  ~MetaAllocationLog();
  MetaAllocationLog(const MetaAllocationLog&) = delete;
  MetaAllocationLog& operator=(const MetaAllocationLog&) = delete;
  std::vector<int64_t> events;
  std::unordered_map<void*, int64_t> live;  // pointer -> bytes requested
};

class MetaSession : public Allocator {
 public:
  // capacity 0: no limit (the virtual provider's address space).
  explicit MetaSession(const AllocatorConfig& cfg, size_t capacity = 0);
  ~MetaSession() override;

  Device device() const override { return Device::meta(); }
  void* allocate(size_t nbytes, StreamId stream) override;
  void deallocate(void* p) override;
  void retag(void* p, MemoryTag t) override { alloc_.retag(p, t); }
  void record_stream(void* p, StreamId s) override { alloc_.record_stream(p, s); }

  // Starts a step (a phase): peaks restart from the live bytes.
  void begin_step();
  StepPeak end_step() const;
  void capture_segments_at(int64_t allocated) { capture_at_ = allocated, captured_ = false; }
  // A digest of the allocator's block map (segments, and each block's offset, size and state): two equal
  // digests after two steps mean the same free and used blocks, so an identical next request sequence
  // gets identical answers (the allocator's choices depend on the map alone: best fit, lowest address).
  uint64_t layout_digest() const;

  VirtualProvider virtual_;
  std::unique_ptr<LimitedProvider> limited_;
  CachingAllocator alloc_;
  int64_t best_ = 0;
  TagBytes at_best_{};
  int64_t capture_at_ = 0;
  bool captured_ = false;
  std::vector<SegmentInfo> segments_;
};

}  // namespace kiln::train
