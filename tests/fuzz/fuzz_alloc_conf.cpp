// libFuzzer target: parse_alloc_conf (KILN_ALLOC_CONF, engine/memory/alloc_config.h), and a
// CachingAllocator over the meta device's address-only provider built with every configuration
// that parses, serving a fixed mix of requests. kiln::Error is the expected outcome for bad text;
// any other exception, a sanitizer report or a hang is a finding.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/memory/alloc_config.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/provider.h"
#include "fuzz/fuzz_support.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  AllocatorConfig c;
  try {
    c = parse_alloc_conf(text);
  } catch (const Error&) {
    return 0;
  }
  c.validate();  // what parses is valid
  (void)format_bytes((double)c.small_segment);
  // The trace ring is allocated up front (a user's trace=1G costs that memory, as documented);
  // keep the fuzzer's memory bounded.
  if (c.trace_capacity > (1u << 16)) c.trace_capacity = 1u << 16;
  VirtualProvider virt;
  try {
    CachingAllocator a(Device::meta(), &virt, c);
    std::vector<void*> live;
    const size_t sizes[] = {1, 512, 4096, 100000, size_t(1) << 20, (size_t(3) << 20) + 5, size_t(64) << 20, 7};
    for (int round = 0; round < 3; ++round) {
      for (size_t s : sizes) live.push_back(a.allocate(s * (round + 1)));
      for (size_t i = round % 2; i < live.size(); i += 2) {
        a.deallocate(live[i]);
        live[i] = nullptr;
      }
      std::vector<void*> keep;
      for (void* p : live)
        if (p) keep.push_back(p);
      live.swap(keep);
    }
    for (void* p : live) a.deallocate(p);
  } catch (const Error&) {
  }
  return 0;
}
