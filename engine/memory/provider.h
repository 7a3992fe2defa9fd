// Providers: where the caching allocator gets raw memory (segments) from. host (aligned heap),
// virtual (fake, never-dereferenced addresses for the meta device), and a capacity-limited
// wrapper that makes any provider behave like a device of N bytes. CUDA providers live in
// provider_cuda.h. Providers do no caching and no accounting beyond their own mapped bytes:
// policy belongs to CachingAllocator.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace kiln {

class Provider {
 public:
  virtual ~Provider() = default;
  // A region of exactly `bytes` (>0), aligned to at least 512 bytes; nullptr when the memory is not
  // there (the allocator then releases its cache and retries, then reports OOM).
  virtual void* map(size_t bytes) = 0;
  // Returns a region obtained from map() with the same size.
  virtual void unmap(void* p, size_t bytes) = 0;
  // Total bytes this provider could ever hand out (device size, simulated limit, host RAM).
  virtual size_t capacity() const = 0;
  virtual const char* name() const = 0;
  // True when the CPU may read and write the memory (debug poisoning needs it).
  virtual bool host_accessible() const = 0;
};

// Aligned host memory (aligned_alloc, 4 KiB alignment so segments start on a page).
class HostProvider : public Provider {
 public:
  void* map(size_t bytes) override;
  void unmap(void* p, size_t bytes) override;
  size_t capacity() const override;
  const char* name() const override { return "host"; }
  bool host_accessible() const override { return true; }
};

// Address-only provider for the meta device: hands out non-overlapping, 4 KiB-aligned fake
// addresses from a counter. The memory does not exist; nothing may dereference it.
class VirtualProvider : public Provider {
 public:
  explicit VirtualProvider(size_t capacity = size_t(1) << 50) : capacity_(capacity) {}
  void* map(size_t bytes) override;
  void unmap(void* p, size_t bytes) override;
  size_t capacity() const override { return capacity_; }
  const char* name() const override { return "virtual"; }
  bool host_accessible() const override { return false; }

 private:
  std::atomic<uintptr_t> next_{uintptr_t(1) << 44};  // far from any real heap address
  size_t capacity_;
};

// Wraps a provider and fails any map() that would take its mapped bytes over `cap`: a CPU run
// then behaves like a GPU of `cap` bytes (kiln train --device-memory 6G). cap = SIZE_MAX means
// no limit (the base provider's capacity applies). Not owning.
class LimitedProvider : public Provider {
 public:
  LimitedProvider(Provider* base, size_t cap) : base_(base), cap_(cap) {}
  void* map(size_t bytes) override;
  void unmap(void* p, size_t bytes) override;
  size_t capacity() const override;
  const char* name() const override { return base_->name(); }
  bool host_accessible() const override { return base_->host_accessible(); }

  void set_limit(size_t cap);
  size_t limit() const { return cap_; }
  size_t mapped() const { return mapped_; }
  Provider* base() const { return base_; }

 private:
  Provider* base_;
  mutable std::mutex mu_;
  size_t cap_;
  size_t mapped_ = 0;
};

}  // namespace kiln
