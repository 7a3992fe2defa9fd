// Batch buffers and host-to-device transfer for the loader (see batch_transfer.h).
#include "data/batch_transfer.h"

#include <cstdlib>
#include <deque>
#include <mutex>

#include "engine/memory/caching_allocator.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

#ifdef KILN_WITH_CUDA
#include <cuda_runtime.h>

#include "engine/memory/provider_cuda.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"
#endif

namespace kiln {

namespace {

void* aligned_host(size_t bytes) {
  const size_t r = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, r ? r : 64);
  KILN_CHECK(p != nullptr, "loader: cannot allocate a ", bytes, "-byte batch buffer");
  return p;
}

#ifdef KILN_WITH_CUDA
// One process-wide allocator over pinned host memory (segments are cached: cudaHostAlloc is slow).
CachingAllocator& pinned_allocator() {
  static PinnedHostProvider provider;
  static CachingAllocator alloc(Device::cpu(), &provider);
  return alloc;
}

// Copies in flight: the event that completes them and the pinned buffer they read from.
struct InFlight {
  cudaEvent_t done;
  std::shared_ptr<void> keep;
};
std::mutex g_flight_mu;
std::deque<InFlight> g_flight;

void reap_finished_copies() {
  std::lock_guard<std::mutex> g(g_flight_mu);
  while (!g_flight.empty() && cudaEventQuery(g_flight.front().done) == cudaSuccess) {
    cudaEventDestroy(g_flight.front().done);
    g_flight.pop_front();
  }
  (void)cudaGetLastError();  // a cudaErrorNotReady from the query is not an error
}
#endif

}  // namespace

BatchMemory batch_memory_for(Device device, bool pin) {
  BatchMemory m;
#ifdef KILN_WITH_CUDA
  if (device.is_cuda() && pin) {
    m.pinned = true;
    m.alloc = [](size_t bytes) {
      MemoryScope s(MemoryTag::data);
      return pinned_allocator().allocate(bytes);
    };
    m.release = [](void* p, size_t) { pinned_allocator().deallocate(p); };
    return m;
  }
#else
  (void)pin;
#endif
  if (device.is_cpu()) {
    if (CachingAllocator* a = caching_allocator_for(device)) {
      m.alloc = [a](size_t bytes) {
        MemoryScope s(MemoryTag::data);
        return a->allocate(bytes);
      };
      m.release = [a](void* p, size_t) { a->deallocate(p); };
      return m;
    }
  }
  m.alloc = aligned_host;
  m.release = [](void* p, size_t) { std::free(p); };
  return m;
}

std::string pin_memory_note(Device device, bool pin) {
  if (!pin || device.is_cuda()) return "";
#ifdef KILN_WITH_CUDA
  return "note: --pin-memory does nothing on " + device.str() +
         ": pinning only speeds up copies to a GPU (batches stay in ordinary host memory)";
#else
  return "note: --pin-memory does nothing in this build: it has no CUDA backend, so batches stay in ordinary host "
         "memory";
#endif
}

Tensor batch_to_device(void* host, const Shape& shape, std::shared_ptr<void> keep, Device device, bool pinned) {
  if (device.is_cpu()) return from_blob(host, shape, DType::f32, device, [keep](void*) {});
  Tensor src = from_blob(host, shape, DType::f32, Device::cpu(), [keep](void*) {});
#ifdef KILN_WITH_CUDA
  if (pinned && device.is_cuda()) {
    reap_finished_copies();
    Tensor dst;
    {
      MemoryScope s(MemoryTag::data);
      dst = empty(shape, DType::f32, device);
    }
    const int dev = device.index;
    cuda::DeviceGuard guard(dev);
    cudaStream_t compute = cuda::compute_stream(dev), copy = cuda::copy_stream(dev);
    // The destination block may still be read by queued kernels of its previous owner: the copy
    // stream waits for the compute stream's work so far, and the compute stream for the copy.
    cudaEvent_t before, done;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&before, cudaEventDisableTiming), "batch copy: event");
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "batch copy: event");
    KILN_CUDA_CHECK(cudaEventRecord(before, compute), "batch copy: record");
    KILN_CUDA_CHECK(cudaStreamWaitEvent(copy, before, 0), "batch copy: wait");
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), host, dst.nbytes(), cudaMemcpyHostToDevice, copy),
                    str_cat("batch copy of ", dst.nbytes(), " bytes to ", device.str()));
    KILN_CUDA_CHECK(cudaEventRecord(done, copy), "batch copy: record");
    KILN_CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0), "batch copy: wait");
    cudaEventDestroy(before);
    std::lock_guard<std::mutex> g(g_flight_mu);
    g_flight.push_back({done, std::move(keep)});
    return dst;
  }
#else
  (void)pinned;
#endif
  MemoryScope s(MemoryTag::data);
  return to_device(src, device);
}

}  // namespace kiln
