// A provider whose release calls throw (as CudaProvider's unmap / decommit do once a CUDA error is
// sticky) must not turn ~CachingAllocator or empty_cache() into std::terminate: the allocator
// reports one stderr line naming the call and the error, and continues. CPU-side fake provider
// over host memory (so nothing leaks under ASan: the fake frees the memory, then throws).
// If the destructor let the exception out, this test process would abort.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "engine/memory/alloc_config.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/provider.h"

using namespace kiln;

namespace {

// Host memory whose unmap / decommit / release do their job and then throw.
class ThrowingProvider : public HostProvider {
 public:
  bool throw_on = true;
  int unmaps = 0, decommits = 0, releases = 0;
  void unmap(void* p, size_t bytes) override {
    HostProvider::unmap(p, bytes);
    ++unmaps;
    if (throw_on) throw std::runtime_error("fake cudaFree: an illegal memory access was encountered");
  }
  void decommit(void* p, size_t bytes) override {
    HostProvider::decommit(p, bytes);
    ++decommits;
    if (throw_on) throw std::runtime_error("fake cuMemUnmap: an illegal memory access was encountered");
  }
  void release(void* p, size_t bytes) override {
    HostProvider::release(p, bytes);
    ++releases;
    if (throw_on) throw std::runtime_error("fake cuMemAddressFree: sticky error");
  }
  const char* name() const override { return "throwing-test"; }
};

// Runs f with stderr redirected to a file; returns what was written.
template <typename F>
std::string capture_stderr(F f) {
  char path[] = "/tmp/kiln_stderr_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  f();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(path);
  return ss.str();
}

}  // namespace

TEST_CASE("allocator: a throwing unmap in ~CachingAllocator is reported, not std::terminate (segments)") {
  ThrowingProvider prov;
  const std::string err = capture_stderr([&] {
    auto* a = new CachingAllocator(Device::cpu(), &prov, parse_alloc_conf("expandable=0"));
    void* small = a->allocate(1000);
    void* large = a->allocate(3 << 20);
    a->deallocate(small);
    (void)large;  // live at destruction: still unmapped
    delete a;
  });
  INFO(err);
  CHECK(prov.unmaps == 2);  // both segments, although the first unmap threw
  CHECK(err.find("kiln: unmap (cpu, throwing-test provider) failed while releasing memory") != std::string::npos);
  CHECK(err.find("fake cudaFree: an illegal memory access") != std::string::npos);
  CHECK(err.find("continuing") != std::string::npos);
}

TEST_CASE("allocator: throwing decommit / release in the expandable arena and in empty_cache are reported") {
  ThrowingProvider prov;
  const std::string err = capture_stderr([&] {
    auto* a = new CachingAllocator(Device::cpu(), &prov, parse_alloc_conf("expandable=1"));
    void* p = a->allocate(5 << 20);
    void* q = a->allocate(4096);
    a->deallocate(p);
    a->deallocate(q);
    CHECK_NOTHROW(a->empty_cache());  // release path: decommit throws, reported
    void* r = a->allocate(1 << 20);   // the allocator still works
    CHECK(r != nullptr);
    a->deallocate(r);
    delete a;
  });
  INFO(err);
  CHECK(prov.decommits >= 1);
  CHECK(err.find("kiln: decommit (cpu, throwing-test provider) failed") != std::string::npos);
  CHECK(err.find("fake cuMemUnmap") != std::string::npos);
}

TEST_CASE("allocator: a failing unmap in empty_cache is reported and the allocator goes on") {
  ThrowingProvider prov;
  const std::string err = capture_stderr([&] {
    CachingAllocator a(Device::cpu(), &prov, parse_alloc_conf("expandable=0"));
    void* p = a.allocate(3 << 20);
    a.deallocate(p);
    CHECK_NOTHROW(a.empty_cache());
    CHECK(a.stats().total.reserved.current == 0);
    prov.throw_on = false;
    void* q = a.allocate(3 << 20);
    CHECK(q != nullptr);
    a.deallocate(q);
  });
  INFO(err);
  CHECK(err.find("kiln: unmap (cpu, throwing-test provider) failed") != std::string::npos);
}
