// The caching allocator on real GPU memory: a CachingAllocator of its own over CudaProvider (so
// the stats are exact), the capacity-limited wrapper over cudaMalloc producing kiln::OutOfMemory,
// and cross-stream reuse with the real CudaEventSource (a block freed on the copy stream while a
// kernel still keeps that stream busy is not handed to the compute stream until the work is
// done). Without a GPU each test prints one line "cuda tests skipped: <reason>" and passes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

#if defined(KILN_WITH_CUDA)
#include "support/cuda_test.h"
#include <cuda_runtime.h>

#include "engine/memory/event_source_cuda.h"
#include "engine/memory/provider_cuda.h"
#include "kernels/cuda/runtime.h"

using namespace kiln;
using kiln_test::skip_without_gpu;
using kiln_test::kGpu;

namespace {

constexpr size_t MiB = size_t(1) << 20;

bool overlaps(void* a, size_t na, void* b, size_t nb) {
  auto x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + nb && y < x + na;
}

void ok(cudaError_t e, const char* what) {
  INFO(what << ": " << cudaGetErrorString(e));
  REQUIRE(e == cudaSuccess);
}

// Writes a pattern into n bytes of device memory and reads it back: the block is real, writable
// memory of that size.
void check_writable(void* dev, size_t n, unsigned char seed) {
  std::vector<unsigned char> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = (unsigned char)(seed + i * 7);
  ok(cudaMemcpy(dev, in.data(), n, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  ok(cudaMemcpy(out.data(), dev, n, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  CHECK(std::memcmp(in.data(), out.data(), n) == 0);
  ok(cudaMemset(dev, 0xAB, n), "cudaMemset");
  ok(cudaMemcpy(out.data(), dev, n, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  CHECK(std::count(out.begin(), out.end(), (unsigned char)0xAB) == (std::ptrdiff_t)n);
}

}  // namespace

// Mapped segments (cudaMalloc): the policy when the driver has no virtual memory management.
TEST_CASE("cuda alloc: small pool bump, split, coalesce and empty_cache on cudaMalloc memory (exact stats)") {
  if (skip_without_gpu()) return;
  cuda::DeviceGuard dg(0);
  CudaProvider prov(0);
  CachingAllocator a(kGpu, &prov, parse_alloc_conf("expandable=0"));
  void* x = a.allocate(1000);  // rounded to 1024 (round = 512)
  void* y = a.allocate(3000);  // 3072, bumped right behind x in the same 2 MiB segment
  MemoryStats s = a.stats();
  CHECK(s.total.allocated.current == 1024 + 3072);
  CHECK(s.total.requested.current == 1000 + 3000);
  CHECK(s.pool[(int)Pool::small].reserved.current == (int64_t)(2 * MiB));
  CHECK(s.num_segment_maps == 1);
  CHECK((char*)y == (char*)x + 1024);
  check_writable(x, 1000, 1);
  check_writable(y, 3000, 2);

  a.deallocate(x);
  void* z = a.allocate(512);  // best fit: x's 1024-byte block, split
  CHECK(z == x);
  void* w = a.allocate(512);  // the split's rest
  CHECK((char*)w == (char*)x + 512);
  check_writable(w, 512, 3);
  a.verify();
  a.deallocate(z);
  a.deallocate(w);
  a.deallocate(y);
  s = a.stats();
  CHECK(s.total.allocated.current == 0);
  CHECK(s.num_allocs == 4);
  CHECK(s.num_frees == 4);
  auto segs = a.segments();
  REQUIRE(segs.size() == 1);
  CHECK(segs[0].blocks.size() == 1);  // everything coalesced back into one free block
  a.verify();
  a.empty_cache();
  s = a.stats();
  CHECK(s.total.reserved.current == 0);
  CHECK(s.num_segment_unmaps == 1);
  CHECK(s.total.reserved.peak == (int64_t)(2 * MiB));
}

TEST_CASE("cuda alloc: large pool segments on cudaMalloc memory") {
  if (skip_without_gpu()) return;
  CudaProvider prov(0);
  CachingAllocator a(kGpu, &prov, parse_alloc_conf("expandable=0"));
  void* m = a.allocate(5 * MiB);   // below large_segment/2: shares a 20 MiB segment
  void* n = a.allocate(3 * MiB);   // same segment, right behind m
  void* big = a.allocate(30 * MiB);  // its own segment, rounded to 2 MiB
  MemoryStats s = a.stats();
  CHECK(s.pool[(int)Pool::large].reserved.current == (int64_t)(50 * MiB));
  CHECK(s.pool[(int)Pool::large].allocated.current == (int64_t)(38 * MiB));
  CHECK((char*)n == (char*)m + 5 * MiB);
  check_writable(n, 3 * MiB, 4);
  check_writable(big, 30 * MiB, 5);
  a.deallocate(m);
  a.deallocate(big);
  a.empty_cache();  // big's segment goes; m's stays (n lives in it)
  s = a.stats();
  CHECK(s.total.reserved.current == (int64_t)(20 * MiB));
  CHECK(s.total.allocated.current == (int64_t)(3 * MiB));
  a.deallocate(n);
  a.verify();
  a.empty_cache();
  CHECK(a.stats().total.reserved.current == 0);
}

TEST_CASE("cuda alloc: a capacity-limited cuda provider throws kiln::OutOfMemory, and release+retry works") {
  if (skip_without_gpu()) return;
  CudaProvider prov(0);
  LimitedProvider lim(&prov, 8 * MiB);
  CachingAllocator a(kGpu, &lim, parse_alloc_conf("expandable=0"));
  void* p = a.allocate(6 * MiB);  // 20 MiB shared segment does not fit the limit: own 6 MiB segment
  CHECK(lim.mapped() == 6 * MiB);
  check_writable(p, 6 * MiB, 6);
  std::string msg;
  try {
    a.allocate(4 * MiB);
  } catch (const OutOfMemory& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(!msg.empty());
  CHECK(msg.find("cuda:0") != std::string::npos);
  CHECK(a.stats().num_ooms == 1);
  CHECK(lim.mapped() == 6 * MiB);  // the failed attempt left nothing mapped
  a.deallocate(p);
  // 7 MiB needs an 8 MiB segment: only after releasing the cached 6 MiB one (one retry).
  const uint64_t retries = a.stats().num_retries;
  void* q = a.allocate(7 * MiB);
  CHECK(a.stats().num_retries == retries + 1);
  CHECK(lim.mapped() == 8 * MiB);
  check_writable(q, 7 * MiB, 7);
  a.deallocate(q);
  a.verify();
  a.empty_cache();
  CHECK(lim.mapped() == 0);
}

// The expandable arena on the driver's virtual memory (the default on GPUs that have it).
TEST_CASE("cuda alloc: expandable arena on cuMemCreate/cuMemMap memory grows, is writable across granules, shrinks") {
  if (skip_without_gpu()) return;
  CudaProvider prov(0);
  if (prov.granule() == 0) {
    MESSAGE("cuda alloc: this GPU/driver has no virtual memory management: expandable arena not tested");
    return;
  }
  CachingAllocator a(kGpu, &prov, AllocatorConfig{});
  REQUIRE(a.config().expandable);
  const size_t G = a.config().granule;
  CHECK(G >= prov.granule());
  auto up = [&](size_t n) { return (int64_t)((n + G - 1) / G * G); };
  void* x = a.allocate(1000);
  void* y = a.allocate(3 * MiB);  // spans granules: one mapping per granule, contiguous addresses
  CHECK((char*)y == (char*)x + 1024);
  CHECK(a.stats().total.reserved.current == up(1024 + 3 * MiB));
  check_writable(x, 1000, 11);
  check_writable(y, 3 * MiB, 12);
  a.deallocate(y);
  void* z = a.allocate(9 * MiB);  // the free tail grows in place
  CHECK(z == y);
  CHECK(a.stats().total.reserved.current == up(1024 + 9 * MiB));
  check_writable(z, 9 * MiB, 13);
  a.deallocate(x);
  a.deallocate(z);
  a.verify();
  a.empty_cache();  // decommits everything and gives the address range back
  CHECK(a.stats().total.reserved.current == 0);
  CHECK(a.segments().empty());
  void* again = a.allocate(5 * MiB);
  check_writable(again, 5 * MiB, 14);
  a.deallocate(again);
  a.verify();
}

TEST_CASE("cuda alloc: a capacity-limited expandable arena throws kiln::OutOfMemory and recovers") {
  if (skip_without_gpu()) return;
  CudaProvider prov(0);
  if (prov.granule() == 0) {
    MESSAGE("cuda alloc: this GPU/driver has no virtual memory management: expandable arena not tested");
    return;
  }
  LimitedProvider lim(&prov, 8 * MiB);
  CachingAllocator a(kGpu, &lim, AllocatorConfig{});
  void* p = a.allocate(6 * MiB);
  CHECK(lim.mapped() == (size_t)((6 * MiB + a.config().granule - 1) / a.config().granule * a.config().granule));
  bool oom = false;
  try {
    a.allocate(4 * MiB);
  } catch (const OutOfMemory& e) {
    oom = std::string(e.what()).find("cuda:0") != std::string::npos;
  }
  CHECK(oom);
  CHECK(lim.mapped() <= 8 * MiB);  // a failed commit leaves nothing half-mapped
  a.deallocate(p);
  void* q = a.allocate(7 * MiB);  // the free arena holds it (the tail grows within the limit)
  check_writable(q, 7 * MiB, 15);
  a.deallocate(q);
  a.verify();
  a.empty_cache();
  CHECK(lim.mapped() == 0);
}

TEST_CASE("cuda alloc: CudaEventSource reports stream progress and recycles its events") {
  if (skip_without_gpu()) return;
  cuda::DeviceGuard dg(0);
  CudaEventSource ev(0);
  cudaStream_t copy = cuda::copy_stream(0);
  // A busy stream: the event stays unfinished while the kernel sleeps.
  cuda::sleep_on_stream(copy, 200000);  // 200 ms
  EventId busy = ev.record(kCudaCopyStream);
  CHECK(busy != 0);
  CHECK_FALSE(ev.query(busy));
  CHECK(cudaGetLastError() == cudaSuccess);  // "not ready" did not linger as an error
  EventId idle = ev.record(kCudaComputeStream);  // other stream: not blocked by the copy stream
  CHECK(idle > busy);
  ok(cudaStreamSynchronize(cuda::compute_stream(0)), "sync compute");
  CHECK(ev.query(idle));
  ok(cudaStreamSynchronize(copy), "sync copy");
  CHECK(ev.query(busy));
  CHECK(ev.query(busy));  // asking again after recycling still says done
  CHECK(ev.in_flight() == 0);
  // Completed events are reused: a thousand record/query rounds need no new cudaEvent_t.
  const size_t created = ev.created();
  for (int i = 0; i < 1000; ++i) {
    EventId e = ev.record(kCudaCopyStream);
    ok(cudaStreamSynchronize(copy), "sync copy");
    REQUIRE(ev.query(e));
  }
  CHECK(ev.created() == created);
  // Events that nobody queries are reaped by later records once their stream passed them.
  for (int i = 0; i < 100; ++i) ev.record(kCudaComputeStream);
  ok(cudaStreamSynchronize(cuda::compute_stream(0)), "sync compute");
  ev.record(kCudaComputeStream);
  CHECK(ev.in_flight() <= 1);
  CHECK_THROWS_AS(ev.query(1u << 30), Error);  // never recorded
}

TEST_CASE("cuda alloc: a block freed on the copy stream reaches the compute stream only after its work") {
  if (skip_without_gpu()) return;
  cuda::DeviceGuard dg(0);
  CudaProvider prov(0);
  CachingAllocator a(kGpu, &prov, AllocatorConfig{});
  CudaEventSource ev(0);
  a.set_event_source(&ev);
  cudaStream_t copy = cuda::copy_stream(0);
  void* p = a.allocate(4096, kCudaCopyStream);
  void* guard = a.allocate(4096, kCudaCopyStream);  // keeps p from merging with the segment's rest
  // Work on the copy stream that still uses p when the host frees it.
  cuda::sleep_on_stream(copy, 300000);  // 300 ms
  ok(cudaMemsetAsync(p, 0x5A, 4096, copy), "cudaMemsetAsync on the copy stream");
  a.deallocate(p);
  void* q = a.allocate(4096, kCudaComputeStream);
  CHECK(q != p);
  CHECK_FALSE(overlaps(p, 4096, q, 4096));
  CHECK(cudaGetLastError() == cudaSuccess);
  // Same stream: stream order protects the block, reuse is immediate.
  void* same = a.allocate(4096, kCudaCopyStream);
  CHECK(same == p);
  a.deallocate(same);
  ok(cudaStreamSynchronize(copy), "sync copy");
  void* r = a.allocate(4096, kCudaComputeStream);  // best fit: p's block, now finished
  CHECK(r == p);
  a.deallocate(r);
  a.deallocate(q);
  a.deallocate(guard);
  a.verify();
  cuda::synchronize(0);
  a.empty_cache();
  CHECK(a.stats().total.reserved.current == 0);
}

TEST_CASE("cuda alloc: record_stream holds a block until the other stream's work is done") {
  if (skip_without_gpu()) return;
  cuda::DeviceGuard dg(0);
  CudaProvider prov(0);
  CachingAllocator a(kGpu, &prov, AllocatorConfig{});
  CudaEventSource ev(0);
  a.set_event_source(&ev);
  cudaStream_t copy = cuda::copy_stream(0);
  void* x = a.allocate(8192, kCudaComputeStream);
  void* guard = a.allocate(8192, kCudaComputeStream);
  cuda::sleep_on_stream(copy, 300000);
  ok(cudaMemsetAsync(x, 0, 8192, copy), "cudaMemsetAsync on the copy stream");  // the copy stream reads x
  a.record_stream(x, kCudaCopyStream);
  a.deallocate(x);
  CHECK(a.stats().total.active.current == 8192 * 2);  // x pending + guard
  void* y = a.allocate(8192, kCudaComputeStream);
  CHECK_FALSE(overlaps(x, 8192, y, 8192));
  cuda::synchronize(0);
  void* z = a.allocate(8192, kCudaComputeStream);
  CHECK(z == x);
  a.deallocate(y);
  a.deallocate(z);
  a.deallocate(guard);
  a.verify();
}

TEST_CASE("cuda alloc: the registry's cuda:0 allocator has an event source") {
  if (skip_without_gpu()) return;
  cuda::DeviceGuard dg(0);
  CachingAllocator* a = caching_allocator_for(kGpu);
  REQUIRE(a != nullptr);
  cudaStream_t copy = cuda::copy_stream(0);
  void* p = a->allocate(1 << 16, kCudaCopyStream);
  cuda::sleep_on_stream(copy, 300000);
  a->deallocate(p);
  void* q = a->allocate(1 << 16, kCudaComputeStream);
  CHECK_FALSE(overlaps(p, 1 << 16, q, 1 << 16));  // p is still in use by the sleeping copy stream
  a->deallocate(q);
  cuda::synchronize(0);
}

#else  // !KILN_WITH_CUDA

TEST_CASE("cuda alloc: not built") { MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)"); }

#endif
