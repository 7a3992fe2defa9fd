// Process-wide choice between vendor (cuBLAS/cuDNN) and kiln kernels; see kernel_select.h.
#include "kernels/cuda/kernel_select.h"

#include <atomic>

#include "engine/core/error.h"

namespace kiln::cuda {

namespace {
std::atomic<KernelSource> g_source{KernelSource::vendor};
}

void set_kernel_source(KernelSource s) { g_source.store(s, std::memory_order_relaxed); }
KernelSource kernel_source() { return g_source.load(std::memory_order_relaxed); }

const char* kernel_source_name(KernelSource s) { return s == KernelSource::kiln ? "kiln" : "vendor"; }

KernelSource parse_kernel_source(const std::string& s) {
  if (s == "vendor") return KernelSource::vendor;
  if (s == "kiln") return KernelSource::kiln;
  throw Error(str_cat("--kernels: expected 'kiln' or 'vendor', got '", s, "'"));
}

}  // namespace kiln::cuda
