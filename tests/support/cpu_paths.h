// Test helpers for the CPU's instruction-set paths (kernels/cpu/cpu_isa.h, bf16_path.h) and for comparing
// allocation requests: a scope that forces a cpu_isa level, the level that selects a bf16 path (or a printed
// SKIP line where this CPU, build or process cannot run it), and an allocator wrapper that records every
// request (+bytes, -bytes) and the running peak on one device. Test code only.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/memory/allocator.h"
#include "kernels/cpu/bf16_path.h"
#include "kernels/cpu/cpu_isa.h"

namespace kiln::test {

// Forces cpu_isa() to `isa` for a scope.
struct IsaGuard {
  explicit IsaGuard(cpu::CpuIsa isa) : old(cpu::set_cpu_isa(isa)) {}
  ~IsaGuard() { cpu::set_cpu_isa(old); }
  cpu::CpuIsa old;
};

// The level that asks for bf16 path `p`, or false (with a printed SKIP line naming `test`) when this CPU,
// build or process cannot run it.
inline bool bf16_level_for(cpu::Bf16Path p, const char* test, cpu::CpuIsa* level) {
  using cpu::Bf16Path;
  using cpu::CpuIsa;
  if (p == Bf16Path::portable) {
    *level = cpu::cpu_isa_vector(cpu::cpu_isa_supported());  // avx512 at most: below the bf16 levels
    return true;
  }
  const CpuIsa need = p == Bf16Path::onednn_amx ? CpuIsa::amx : CpuIsa::avx512_bf16;
  const std::string name = cpu::bf16_path_name(p);
  if (!cpu::onednn_built()) {
    MESSAGE("SKIP " << std::string(test) << ": this build has no oneDNN, so no " << name);
    return false;
  }
  if ((int)cpu::cpu_isa_supported() < (int)need) {
    MESSAGE("SKIP " << std::string(test) << ": " << cpu::cpu_model_name() << " supports "
                    << std::string(cpu::cpu_isa_name(cpu::cpu_isa_supported())) << " at most, " << name << " needs "
                    << std::string(cpu::cpu_isa_name(need)));
    return false;
  }
  if (cpu::onednn_fixed_path() != Bf16Path::portable && cpu::onednn_fixed_path() != p) {
    MESSAGE("SKIP " << std::string(test) << ": oneDNN's ISA is already "
                    << std::string(cpu::bf16_path_name(cpu::onednn_fixed_path()))
                    << " in this process (ctest runs each case in its own process)");
    return false;
  }
  *level = need;
  return true;
}

// Records the allocation requests (+bytes, -bytes) on one device and their running peak, passing each on
// to the device's allocator; installed for its lifetime.
class RequestRecorder : public Allocator {
 public:
  explicit RequestRecorder(Device d) : dev_(d), inner_(allocator_for(d)) { set_allocator(d, this); }
  ~RequestRecorder() override { set_allocator(dev_, nullptr); }
  Device device() const override { return dev_; }
  void* allocate(size_t n, StreamId s) override {
    void* p = inner_->allocate(n, s);
    sizes_[p] = (int64_t)n;
    events.push_back((int64_t)n);
    live += (int64_t)n, peak = std::max(peak, live);
    return p;
  }
  void deallocate(void* p) override {
    events.push_back(-sizes_[p]);
    live -= sizes_[p];
    sizes_.erase(p);
    inner_->deallocate(p);
  }
  void retag(void* p, MemoryTag t) override { inner_->retag(p, t); }
  void record_stream(void* p, StreamId s) override { inner_->record_stream(p, s); }
  std::vector<int64_t> events;
  int64_t live = 0, peak = 0;

 private:
  Device dev_;
  Allocator* inner_;
  std::unordered_map<void*, int64_t> sizes_;
};

}  // namespace kiln::test
