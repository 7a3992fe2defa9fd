// Per-device allocator registry: the default allocator of every device is a CachingAllocator
// (cpu over host memory, meta over fake addresses, cuda:N over cudaMalloc, created on first use),
// each behind a LimitedProvider so a device can be made to look smaller (--device-memory). A cuda
// allocator gets a CudaEventSource, so a block freed on one stream is reused on another only once
// that stream's work has finished.
// set_allocator() overrides a device (tests, tools); nothing here knows the allocator's policy.
#include <map>
#include <memory>
#include <mutex>

#include "engine/core/error.h"
#include "engine/memory/allocator.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/device_present.h"
#include "engine/memory/provider.h"
#ifdef KILN_WITH_CUDA
#include "engine/memory/event_source_cuda.h"
#include "engine/memory/provider_cuda.h"
#endif

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
    case DeviceType::cuda:
#ifdef KILN_WITH_CUDA
      KILN_CHECK(d.index >= 0 && d.index < cuda_device_count(), "device ", d.str(), " is not available (",
                 cuda_device_count(), " CUDA devices visible)");
      s.base.reset(new CudaProvider(d.index));
      break;
#else
      throw Error("device " + d.str() + " is not available in this build (built without CUDA)");
#endif
  }
  s.limited.reset(new LimitedProvider(s.base.get(), SIZE_MAX));
  s.caching.reset(new CachingAllocator(d, s.limited.get()));
#ifdef KILN_WITH_CUDA
  if (d.is_cuda()) {
    s.events.reset(new CudaEventSource(d.index));
    s.caching->set_event_source(s.events.get());
  }
#endif
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
    case DeviceType::cuda:
#ifdef KILN_WITH_CUDA
      if (d.index >= 0 && d.index < cuda_device_count()) return true;
      return no("device " + d.str() + " is not available (" + std::to_string(cuda_device_count()) +
                " CUDA devices visible)");
#else
      return no("device " + d.str() + " is not available in this build (built without CUDA)");
#endif
  }
  return no("device " + d.str() + ": unknown device type");
}

void set_device_memory_limit(Device d, size_t bytes) {
  std::lock_guard<std::mutex> g(registry().mu);
  slot_for(d).limited->set_limit(bytes);
}

}  // namespace kiln
