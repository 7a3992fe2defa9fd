// What empty_cache() does and does not do, on the CPU's caching allocator (the same allocator code
// kiln uses on a GPU; here its provider is host memory). Prints allocated and reserved bytes after
// each of these steps, for docs/memory-rules-of-thumb.md:
//   8 tensors of 16 MiB; every other one freed (4 holes inside the arena); empty_cache();
//   one 32 MiB tensor (no 16 MiB hole holds it: the arena grows); the last live tensors freed;
//   empty_cache(); everything freed; empty_cache().
// Run it with KILN_ALLOC_CONF=expandable=0 for the mapped-segment policy (a GPU without virtual
// memory management). It only reports; it asserts nothing (tests/unit/test_alloc_* do).
//   rules_empty_cache
#include <cstdio>
#include <string>
#include <vector>

#include "engine/memory/caching_allocator.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

#include "bench/bench_cli.h"

using namespace kiln;

namespace {

double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

void show(CachingAllocator& a, const std::string& what) {
  const MemoryStats s = a.stats();
  std::printf("%-58s allocated %7.1f MiB  reserved %7.1f MiB  cached free %7.1f MiB  largest free block %6.1f MiB\n",
              what.c_str(), mib(s.total.allocated.current), mib(s.total.reserved.current), mib(s.cached_free()),
              mib((int64_t)s.largest_free_block));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rules_empty_cache: what empty_cache() gives back on the CPU caching allocator, and what it cannot"};
  app.name("rules_empty_cache");
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  CachingAllocator* a = caching_allocator_for(Device::cpu());
  if (!a) {
    std::fprintf(stderr, "rules_empty_cache: the CPU has no caching allocator in this build\n");
    return 1;
  }
  a->empty_cache();
  std::printf("CPU caching allocator, policy: %s\n", a->config().expandable ? "expandable arena" : "mapped segments");
  show(*a, "start");
  MemoryScope tag(MemoryTag::other);
  const int64_t n16 = 4 * 1024 * 1024;  // f32 elements in 16 MiB
  std::vector<Tensor> t;
  for (int i = 0; i < 8; ++i) t.push_back(empty({n16}));
  show(*a, "8 tensors of 16 MiB");
  for (int i = 0; i < 8; i += 2) t[(size_t)i] = Tensor();
  show(*a, "tensors 0, 2, 4, 6 freed (4 holes of 16 MiB)");
  a->empty_cache();
  show(*a, "empty_cache()");
  Tensor big = empty({2 * n16});
  show(*a, "one 32 MiB tensor (no hole holds it)");
  t[7] = Tensor();
  big = Tensor();
  show(*a, "tensor 7 and the 32 MiB one freed (the arena's end)");
  a->empty_cache();
  show(*a, "empty_cache()");
  t.clear();
  show(*a, "every tensor freed");
  a->empty_cache();
  show(*a, "empty_cache()");
  return 0;
  });
}
