// The host scratch allocator (see host_scratch.h).
#include "engine/memory/host_scratch.h"

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/provider.h"

namespace kiln {

namespace {

CachingAllocator& scratch() {
  // Never destroyed: a tensor made in a scope may outlive it, and its block goes back here.
  static HostProvider* provider = new HostProvider();
  static CachingAllocator* a = new CachingAllocator(Device::cpu(), provider);
  return *a;
}

bool& active() {
  static bool on = false;
  return on;
}

}  // namespace

HostScratchScope::HostScratchScope() {
  KILN_CHECK(!active(), "HostScratchScope: scopes do not nest");
  active() = true;
  CachingAllocator* own = caching_allocator_for(Device::cpu());
  previous_ = own ? nullptr : allocator_for(Device::cpu());  // an override (a test's) is put back as it was
  set_allocator(Device::cpu(), &scratch());
}

HostScratchScope::~HostScratchScope() {
  set_allocator(Device::cpu(), previous_);
  scratch().empty_cache();
  active() = false;
}

}  // namespace kiln
