// Per-device allocator registry: the default allocator of every device is a CachingAllocator
// (cpu over host memory, meta over fake addresses, cuda:N over the provider of the CUDA runtime hooks
// in force, cudaMalloc or the CPU mode's host memory: cuda_runtime_hooks.h; created on first use),
// each behind a LimitedProvider so a device can be made to look smaller (--device-memory). A cuda
// allocator gets the hooks' event source (CudaEventSource on a GPU), so a block freed on one stream
// is reused on another only once that stream's work has finished.
// set_allocator() overrides a device (tests, tools); nothing here knows the allocator's policy.
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/core/error.h"
#include "engine/memory/allocator.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/device_present.h"
#include "engine/memory/provider.h"
#include "engine/memory/cuda_runtime_hooks.h"

namespace kiln {
namespace {

struct DeviceSlot {
  std::unique_ptr<Provider> base;
  std::unique_ptr<LimitedProvider> limited;
  std::unique_ptr<EventSource> events;  // cuda: stream events for cross-stream reuse
  std::unique_ptr<CachingAllocator> caching;
  Allocator* override_ = nullptr;
};

struct Registry {
  std::mutex mu;
  std::map<std::pair<int, int>, DeviceSlot> slots;  // (type, index)
  std::vector<DeviceSlot> retired;                   // forget_cuda_allocators' allocators still in use
};

Registry& registry() {
  // Never destroyed: tensors with static lifetime may free into it during exit.
  static Registry* r = new Registry();
  return *r;
}

// The slot of a device with its default allocator built; caller holds the registry lock.
DeviceSlot& slot_for(Device d) {
  DeviceSlot& s = registry().slots[{(int)d.type, d.index}];
  if (s.caching) return s;
  switch (d.type) {
    case DeviceType::cpu:
      KILN_CHECK(d.index == 0, "device ", d.str(), " does not exist (only cpu:0)");
      s.base.reset(new HostProvider());
      break;
    case DeviceType::meta:
      s.base.reset(new VirtualProvider());
      break;
    case DeviceType::cuda: {
      const CudaRuntimeHooks* h = cuda_runtime_hooks();
      if (!h) throw Error("device " + d.str() + " is not available in this build (built without CUDA)");
      KILN_CHECK(d.index >= 0 && d.index < h->device_count(), "device ", d.str(), " is not available (",
                 h->device_count(), " CUDA devices visible, ", h->name, ")");
      s.base = h->make_provider(d.index);
      s.events = h->make_event_source(d.index);
      break;
    }
  }
  s.limited.reset(new LimitedProvider(s.base.get(), SIZE_MAX));
  s.caching.reset(new CachingAllocator(d, s.limited.get()));
  if (s.events) s.caching->set_event_source(s.events.get());
  return s;
}

}  // namespace

Allocator* allocator_for(Device d) {
  std::lock_guard<std::mutex> g(registry().mu);
  auto it = registry().slots.find({(int)d.type, d.index});
  if (it != registry().slots.end() && it->second.override_) return it->second.override_;
  return slot_for(d).caching.get();
}

void set_allocator(Device d, Allocator* a) {
  std::lock_guard<std::mutex> g(registry().mu);
  registry().slots[{(int)d.type, d.index}].override_ = a;
}

CachingAllocator* caching_allocator_for(Device d) {
  std::lock_guard<std::mutex> g(registry().mu);
  auto it = registry().slots.find({(int)d.type, d.index});
  if (it != registry().slots.end() && it->second.override_) return nullptr;
  return slot_for(d).caching.get();
}

bool device_present(Device d, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  switch (d.type) {
    case DeviceType::cpu:
      return d.index == 0 || no("device " + d.str() + " does not exist (only cpu:0)");
    case DeviceType::meta:
      return true;
    case DeviceType::cuda: {
      const CudaRuntimeHooks* h = cuda_runtime_hooks();
      if (!h) return no("device " + d.str() + " is not available in this build (built without CUDA)");
      if (d.index >= 0 && d.index < h->device_count()) return true;
      return no("device " + d.str() + " is not available (" + std::to_string(h->device_count()) +
                " CUDA devices visible)");
    }
  }
  return no("device " + d.str() + ": unknown device type");
}

void forget_cuda_allocators() {
  std::lock_guard<std::mutex> g(registry().mu);
  auto& slots = registry().slots;
  for (auto it = slots.begin(); it != slots.end();) {
    if (it->first.first != (int)DeviceType::cuda || !it->second.caching) {
      ++it;
      continue;
    }
    DeviceSlot& s = it->second;
    if (s.caching->stats().total.allocated.current != 0) {
      // Live tensors still point into it: keep every piece alive (and reachable, for the leak checker) in
      // the registry's retired list, never destroyed; only the slot is forgotten.
      registry().retired.push_back(std::move(s));
      s = DeviceSlot();
      s.override_ = registry().retired.back().override_;
    }
    if (s.override_) {  // an override set by a test stays; the default allocator is rebuilt on next use
      s.caching.reset(), s.events.reset(), s.limited.reset(), s.base.reset();
      ++it;
    } else {
      it = slots.erase(it);
    }
  }
}

void set_device_memory_limit(Device d, size_t bytes) {
  std::lock_guard<std::mutex> g(registry().mu);
  slot_for(d).limited->set_limit(bytes);
}

}  // namespace kiln
