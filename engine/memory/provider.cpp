// Host, virtual and capacity-limited providers (see provider.h).
#include "engine/memory/provider.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

#include "engine/core/error.h"

namespace kiln {

namespace {
constexpr size_t kPage = 4096;
size_t round_page(size_t n) { return (n + kPage - 1) / kPage * kPage; }
}  // namespace

void* HostProvider::map(size_t bytes) {
  if (bytes == 0 || bytes > (size_t(1) << 62)) return nullptr;
  return std::aligned_alloc(kPage, round_page(bytes));
}

void HostProvider::unmap(void* p, size_t) { std::free(p); }

size_t HostProvider::capacity() const {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || size <= 0) return size_t(1) << 40;
  return (size_t)pages * (size_t)size;
}

void* HostProvider::reserve(size_t bytes) {
  if (bytes == 0 || bytes > (size_t(1) << 46)) return nullptr;
  void* p = mmap(nullptr, round_page(bytes), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

bool HostProvider::commit(void* p, size_t bytes) {
  return mprotect(p, round_page(bytes), PROT_READ | PROT_WRITE) == 0;
}

void HostProvider::decommit(void* p, size_t bytes) {
  // The pages go back to the system now; touching them again would fault (PROT_NONE).
  madvise(p, round_page(bytes), MADV_DONTNEED);
  mprotect(p, round_page(bytes), PROT_NONE);
}

void HostProvider::release(void* p, size_t bytes) { munmap(p, round_page(bytes)); }

void* VirtualProvider::map(size_t bytes) {
  if (bytes == 0 || bytes > capacity_) return nullptr;
  // Addresses are never reused: a stale fake pointer can never alias a newer segment.
  uintptr_t a = next_.fetch_add(round_page(bytes) + kPage);
  return reinterpret_cast<void*>(a);
}

void VirtualProvider::unmap(void*, size_t) {}

void* LimitedProvider::map(size_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  if (bytes > cap_ || mapped_ > cap_ - bytes) return nullptr;
  void* p = base_->map(bytes);
  if (p) mapped_ += bytes;
  return p;
}

void LimitedProvider::unmap(void* p, size_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  KILN_CHECK(bytes <= mapped_, "LimitedProvider(", base_->name(), "): unmap of ", bytes,
             " bytes but only ", mapped_, " are mapped");
  base_->unmap(p, bytes);
  mapped_ -= bytes;
}

bool LimitedProvider::commit(void* p, size_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  if (bytes > cap_ || mapped_ > cap_ - bytes) return false;
  if (!base_->commit(p, bytes)) return false;
  mapped_ += bytes;
  return true;
}

void LimitedProvider::decommit(void* p, size_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  KILN_CHECK(bytes <= mapped_, "LimitedProvider(", base_->name(), "): decommit of ", bytes,
             " bytes but only ", mapped_, " are committed");
  base_->decommit(p, bytes);
  mapped_ -= bytes;
}

size_t LimitedProvider::capacity() const {
  std::lock_guard<std::mutex> g(mu_);
  size_t b = base_->capacity();
  return cap_ < b ? cap_ : b;
}

void LimitedProvider::set_limit(size_t cap) {
  std::lock_guard<std::mutex> g(mu_);
  cap_ = cap;
}

}  // namespace kiln
