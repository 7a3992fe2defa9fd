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

  // Growable ranges (the allocator's expandable arena). A provider that supports them returns its
  // commit granularity (> 0) from granule(); the default returns 0 and the rest is never called.
  //   reserve(bytes): an address range with no memory behind it (nullptr when refused);
  //   commit(p, n):   memory behind [p, p+n) inside a reserved range, p and n multiples of the
  //                   granule; false when the memory is not there (counts toward capacity);
  //   decommit(p, n): gives committed memory back; the addresses stay reserved;
  //   release(p, bytes): returns a whole reserved range (everything in it decommitted first).
  virtual size_t granule() const { return 0; }
  virtual void* reserve(size_t) { return nullptr; }
  virtual bool commit(void*, size_t) { return false; }
  virtual void decommit(void*, size_t) {}
  virtual void release(void*, size_t) {}
};

// Aligned host memory (aligned_alloc, 4 KiB alignment so segments start on a page).
class HostProvider : public Provider {
 public:
  void* map(size_t bytes) override;
  void unmap(void* p, size_t bytes) override;
  size_t capacity() const override;
  const char* name() const override { return "host"; }
  bool host_accessible() const override { return true; }
  // mmap(PROT_NONE) reservations, committed with mprotect, decommitted with madvise(DONTNEED).
  size_t granule() const override { return 4096; }
  void* reserve(size_t bytes) override;
  bool commit(void* p, size_t bytes) override;
  void decommit(void* p, size_t bytes) override;
  void release(void* p, size_t bytes) override;
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
  size_t granule() const override { return 4096; }
  void* reserve(size_t bytes) override { return map(bytes); }
  bool commit(void*, size_t) override { return true; }
  void decommit(void*, size_t) override {}
  void release(void*, size_t) override {}

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
  // Committed bytes count toward the limit like mapped ones.
  size_t granule() const override { return base_->granule(); }
  void* reserve(size_t bytes) override { return base_->reserve(bytes); }
  bool commit(void* p, size_t bytes) override;
  void decommit(void* p, size_t bytes) override;
  void release(void* p, size_t bytes) override { base_->release(p, bytes); }

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
