// CUDA providers: device memory (cudaMalloc on one device index) and pinned host memory
// (cudaHostAlloc). Compiled only with KILN_WITH_CUDA. They must not cache: a failed cudaMalloc
// returns nullptr (the error is cleared) so the caching allocator can release and retry.
#pragma once
#ifdef KILN_WITH_CUDA
#include <mutex>

#include "engine/memory/provider.h"

namespace kiln {

// Segments come from cudaMalloc. Growable ranges (the allocator's expandable arena) use the
// driver's virtual memory management: cuMemAddressReserve, then one cuMemCreate + cuMemMap +
// cuMemSetAccess per granule (the device's allocation granularity, 2 MiB on current GPUs) on
// commit, cuMemUnmap + cuMemRelease per granule on decommit (after cudaDeviceSynchronize: queued
// kernels may still read the memory). The driver entry points are looked up at run time through
// the runtime (no link against libcuda); granule() is 0 (no expandable arena, cudaMalloc segments)
// when they are missing, the device lacks VMM, or KILN_CUDA_VMM=0.
class CudaProvider : public Provider {
 public:
  explicit CudaProvider(int device);
  ~CudaProvider() override;
  void* map(size_t bytes) override;
  void unmap(void* p, size_t bytes) override;
  size_t capacity() const override;  // cudaMemGetInfo total
  const char* name() const override { return "cuda"; }
  bool host_accessible() const override { return false; }
  int device() const { return device_; }

  size_t granule() const override;
  void* reserve(size_t bytes) override;
  bool commit(void* p, size_t bytes) override;
  void decommit(void* p, size_t bytes) override;
  void release(void* p, size_t bytes) override;

 private:
  int device_;
  struct Vmm;
  Vmm* vmm_ = nullptr;  // owned; nullptr until granule() first succeeds in finding VMM support
  bool vmm_checked_ = false;
  mutable std::mutex vmm_mu_;
  Vmm* vmm() const;  // lazily initialized; nullptr when unsupported
};

class PinnedHostProvider : public Provider {
 public:
  void* map(size_t bytes) override;
  void unmap(void* p, size_t bytes) override;
  size_t capacity() const override;
  const char* name() const override { return "pinned"; }
  bool host_accessible() const override { return true; }
};

// Number of CUDA devices visible (0 when the driver or a device is missing).
int cuda_device_count();

}  // namespace kiln
#endif
