// The meta device's allocator of a prediction or a plan (see meta_session.h).
#include "engine/train/meta_session.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "engine/core/error.h"
#include "engine/memory/device_present.h"

namespace kiln::train {

AllocatorConfig meta_policy_for(Device target, bool* assumed) {
  if (assumed) *assumed = false;
  const Device policy_of = target.is_meta() ? Device::cpu() : target;
  CachingAllocator* target_alloc = device_present(policy_of) ? caching_allocator_for(policy_of) : nullptr;
  AllocatorConfig cfg = target_alloc ? target_alloc->config() : alloc_config_from_env();
  if (!target_alloc && target.is_cuda()) {
    // No such GPU here to ask (none in this machine, or a build without CUDA): the policy kiln's CUDA
    // provider would give it (provider_cuda.h): the expandable arena over the driver's virtual memory in
    // 2 MiB granules (the minimum granularity of current GPUs), or cudaMalloc segments when KILN_CUDA_VMM=0.
    if (assumed) *assumed = true;
    const char* vmm = std::getenv("KILN_CUDA_VMM");
    if (vmm && std::string(vmm) == "0") cfg.expandable = false;
    else cfg.granule = std::max(cfg.granule, size_t(2) << 20);
  }
  return cfg;
}

namespace {
thread_local MetaAllocationLog* tl_log = nullptr;
}  // namespace

MetaAllocationLog::MetaAllocationLog() {
  KILN_CHECK(tl_log == nullptr, "MetaAllocationLog: logs do not nest");
  tl_log = this;
}
MetaAllocationLog::~MetaAllocationLog() { tl_log = nullptr; }

namespace {
Provider* provider_of(VirtualProvider& v, std::unique_ptr<LimitedProvider>& limited, size_t capacity) {
  if (capacity == 0) return &v;
  limited = std::make_unique<LimitedProvider>(&v, capacity);
  return limited.get();
}
}  // namespace

MetaSession::MetaSession(const AllocatorConfig& cfg, size_t capacity)
    : alloc_(Device::meta(), provider_of(virtual_, limited_, capacity), cfg) {
  set_allocator(Device::meta(), this);
}

MetaSession::~MetaSession() { set_allocator(Device::meta(), nullptr); }

void* MetaSession::allocate(size_t nbytes, StreamId stream) {
  void* p = alloc_.allocate(nbytes, stream);
  if (tl_log) {
    tl_log->events.push_back((int64_t)nbytes);
    tl_log->live[p] = (int64_t)nbytes;
  }
  const MemoryStats s = alloc_.stats();
  const int64_t cur = s.total.allocated.current;
  if (cur > best_) {
    best_ = cur;
    for (int t = 0; t < kNumMemoryTags; ++t) at_best_[t] = s.tag_allocated[t].current;
  }
  if (capture_at_ > 0 && !captured_ && cur == capture_at_) {
    segments_ = alloc_.segments();
    captured_ = true;
  }
  return p;
}

void MetaSession::deallocate(void* p) {
  if (tl_log) {
    auto it = tl_log->live.find(p);
    if (it != tl_log->live.end()) {
      tl_log->events.push_back(-it->second);
      tl_log->live.erase(it);
    }
  }
  alloc_.deallocate(p);
}

void MetaSession::begin_step() {
  alloc_.reset_peak();
  const MemoryStats s = alloc_.stats();
  best_ = s.total.allocated.current;
  for (int t = 0; t < kNumMemoryTags; ++t) at_best_[t] = s.tag_allocated[t].current;
}

StepPeak MetaSession::end_step() const {
  StepPeak p;
  const MemoryStats s = alloc_.stats();
  p.allocated = s.total.allocated.peak;
  p.reserved = s.total.reserved.peak;
  for (int t = 0; t < kNumMemoryTags; ++t) p.tag_peak[t] = s.tag_allocated[t].peak;
  p.at_peak = at_best_;
  return p;
}

uint64_t MetaSession::layout_digest() const {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the numbers
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  for (const SegmentInfo& s : alloc_.segments()) {
    mix(s.size);
    mix((uint64_t)s.pool);
    mix(s.blocks.size());
    for (const BlockInfo& b : s.blocks) {
      mix(b.offset);
      mix(b.size);
      mix(std::hash<std::string>()(b.state));
    }
  }
  return h;
}

}  // namespace kiln::train
