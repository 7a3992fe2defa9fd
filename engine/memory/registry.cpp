// Per-device allocator registry. TEMPORARY: a plain aligned host allocator for cpu and a
// counting address allocator for meta, until the caching allocator lands.
#include <cstdlib>
#include <mutex>

#include "engine/core/error.h"
#include "engine/memory/allocator.h"

namespace kiln {
namespace {

class PlainHostAllocator : public Allocator {
 public:
  explicit PlainHostAllocator(Device d) : dev_(d) {}
  Device device() const override { return dev_; }
  void* allocate(size_t n, StreamId) override {
    size_t r = (n + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, r);
    if (!p) throw OutOfMemory(str_cat("out of host memory allocating ", n, " bytes"));
    return p;
  }
  void deallocate(void* p) override { std::free(p); }

 private:
  Device dev_;
};

Allocator* g_override[3] = {nullptr, nullptr, nullptr};

}  // namespace

Allocator* allocator_for(Device d) {
  int i = (int)d.type;
  if (g_override[i]) return g_override[i];
  static PlainHostAllocator cpu(Device::cpu());
  static PlainHostAllocator meta(Device::meta());
  switch (d.type) {
    case DeviceType::cpu: return &cpu;
    case DeviceType::meta: return &meta;
    case DeviceType::cuda: break;
  }
  throw Error("device " + d.str() + " is not available in this build");
}

void set_allocator(Device d, Allocator* a) { g_override[(int)d.type] = a; }

}  // namespace kiln
