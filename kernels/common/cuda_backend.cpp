// The cuda backend table in force (see cuda_backend.h).
#include "kernels/common/cuda_backend.h"

#include <atomic>

#include "engine/core/error.h"

#if defined(KILN_WITH_CUDA)
// Defined by the real backend, kernels/cuda/backend_table.cpp (declared here, as engine/memory declares
// cuda_stream_for_id for kernels/cuda/runtime.cpp to define: this layer does not include kernels/cuda).
namespace kiln::cuda {
const CudaBackend& backend_table();
}  // namespace kiln::cuda
#endif

namespace kiln {

namespace {

std::atomic<const CudaBackend*>& current() {
  static std::atomic<const CudaBackend*> b{real_cuda_backend()};
  return b;
}

}  // namespace

std::string CudaBackend::missing_entries() const {
  std::string m;
  auto need = [&m](const void* p, const char* what) {
    if (!p) m += (m.empty() ? "" : ", ") + std::string(what);
  };
#define KILN_CHECK_ENTRY_(fn) need(reinterpret_cast<const void*>(fn), #fn);
#define KILN_CHECK_TYPED_(fn)                                      \
  need(reinterpret_cast<const void*>(f32.fn), #fn "<float>");    \
  need(reinterpret_cast<const void*>(f64.fn), #fn "<double>");
  KILN_CUDA_BACKEND_ENTRIES(KILN_CHECK_ENTRY_)
  KILN_CUDA_BACKEND_TYPED_ENTRIES(KILN_CHECK_TYPED_)
  KILN_CHECK_ENTRY_(conv2d_16_uses_kiln)
  KILN_CHECK_ENTRY_(conv2d_16_forward)
  KILN_CHECK_ENTRY_(conv2d_16_backward_input)
  KILN_CHECK_ENTRY_(conv2d_16_backward_weight)
  KILN_CHECK_ENTRY_(bias_uses_kiln)
  KILN_CHECK_ENTRY_(set_kernels_kiln)
  KILN_CHECK_ENTRY_(copy_bytes)
  KILN_CHECK_ENTRY_(synchronize)
  KILN_CHECK_ENTRY_(current_device)
  KILN_CHECK_ENTRY_(set_device)
#undef KILN_CHECK_ENTRY_
#undef KILN_CHECK_TYPED_
  if (!runtime || !runtime->device_count || !runtime->make_provider || !runtime->make_event_source)
    m += (m.empty() ? "" : ", ") + std::string("runtime hooks");
  return m;
}

const CudaBackend* real_cuda_backend() {
#if defined(KILN_WITH_CUDA)
  return &cuda::backend_table();
#else
  return nullptr;
#endif
}

const CudaBackend* cuda_backend() { return current().load(); }

const CudaBackend& cuda_backend_or_throw() {
  const CudaBackend* b = current().load();
  if (!b) throw Error("cuda kernels are not built in this kiln (KILN_CUDA=OFF)");
  return *b;
}

CudaBackendInstall::CudaBackendInstall(const CudaBackend* backend) {
  KILN_CHECK(backend != nullptr, "CudaBackendInstall: no backend given");
  const std::string missing = backend->missing_entries();
  KILN_CHECK(missing.empty(), "CudaBackendInstall: the ", backend->name ? backend->name : "unnamed",
             " backend leaves entries unset: ", missing);
  forget_cuda_allocators();
  prev_runtime_ = set_cuda_runtime_hooks(backend->runtime);
  prev_ = current().exchange(backend);
}

CudaBackendInstall::~CudaBackendInstall() {
  forget_cuda_allocators();
  current().store(prev_);
  set_cuda_runtime_hooks(prev_runtime_);
}

CudaDeviceScope::CudaDeviceScope(int device) : b_(cuda_backend()) {
  if (!b_) return;
  prev_ = b_->current_device();
  if (prev_ != device) b_->set_device(device);
}

CudaDeviceScope::~CudaDeviceScope() {
  if (b_ && prev_ >= 0) {
    try {
      b_->set_device(prev_);
    } catch (...) {  // no throw from a destructor; a failure resurfaces at the next checked call
    }
  }
}

}  // namespace kiln
