// CUDA providers: device memory (cudaMalloc on one device index) and pinned host memory
// (cudaHostAlloc). Compiled only with KILN_WITH_CUDA. They must not cache: a failed cudaMalloc
// returns nullptr (the error is cleared) so the caching allocator can release and retry.
#pragma once
#ifdef KILN_WITH_CUDA
#include "engine/memory/provider.h"

namespace kiln {

class CudaProvider : public Provider {
 public:
  explicit CudaProvider(int device) : device_(device) {}
  void* map(size_t bytes) override;
  void unmap(void* p, size_t bytes) override;
  size_t capacity() const override;  // cudaMemGetInfo total
  const char* name() const override { return "cuda"; }
  bool host_accessible() const override { return false; }
  int device() const { return device_; }

 private:
  int device_;
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
