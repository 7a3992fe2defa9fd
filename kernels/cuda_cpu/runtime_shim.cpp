// CPU execution mode: the host side of the CUDA runtime that kiln's kernel files and the backend table
// call (kernels/cuda/runtime.h, handles.h, check.h), for kiln::cuda_on_cpu. "Device" memory is host
// memory, there is one device (0) and streams are null (launches complete before launch_kernel
// returns, so every event is complete when recorded). Copies are memcpy; a device -> host copy and
// synchronize() check the deferred-error slots (host memory here, deferred_error.cpp) as the real
// runtime does. cuBLAS and cuDNN cannot run here: asking for a handle throws, naming the call (and the
// vendor calls that CPU-mode sources name are failing stubs, vendor_stubs.cpp).
#include "kernels/cuda_cpu/prelude.h"

#include <cstring>
#include <memory>

#include "engine/core/host_sync.h"
#include "engine/memory/provider.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/deferred_error.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/runtime_hooks.h"

namespace kiln::cuda_on_cpu {

namespace {

// cuda:0's raw memory in the CPU mode: aligned host memory (HostProvider), named as the mode's.
class CpuModeDeviceProvider : public HostProvider {
 public:
  const char* name() const override { return "cuda (CPU execution mode: host memory)"; }
};

// Streams are null and launches synchronous: every recorded event has completed.
class CompletedEvents : public EventSource {
 public:
  EventId record(StreamId) override { return next_++; }
  bool query(EventId) override { return true; }

 private:
  EventId next_ = 1;
};

void check_device(int dev, const char* what) {
  KILN_CHECK(dev == 0, what, ": cuda:", dev, " does not exist in the CPU execution mode (one device, cuda:0)");
}

const CudaRuntimeHooks kHooks = {
    "CPU execution mode",
    [] { return 1; },
    [](int device) -> std::unique_ptr<Provider> {
      check_device(device, "device memory provider");
      return std::make_unique<CpuModeDeviceProvider>();
    },
    [](int device) -> std::unique_ptr<EventSource> {
      check_device(device, "event source");
      return std::make_unique<CompletedEvents>();
    },
};

}  // namespace

const CudaRuntimeHooks* runtime_hooks() { return &kHooks; }

int current_device() { return 0; }
void set_device(int dev) { check_device(dev, "set_device"); }

void synchronize(int dev) {
  check_device(dev, "synchronize");
  note_host_sync(HostSyncKind::device_sync);
  check_deferred_errors(dev, "synchronize");
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) {
  if (n == 0) return;
  const std::string what = str_cat("to_device: copy ", n, " bytes ", src_dev.str(), " -> ", dst_dev.str());
  KILN_CHECK(!dst_dev.is_meta() && !src_dev.is_meta(), what, ": meta tensors hold no data");
  if (dst_dev.is_cuda()) check_device(dst_dev.index, what.c_str());
  if (src_dev.is_cuda()) check_device(src_dev.index, what.c_str());
  std::memcpy(dst, src, n);
  // As the real runtime: a host <-> device copy waits for the device; one to the host reports an input
  // error a kernel found (the deferred-error path).
  if (dst_dev.is_cuda() != src_dev.is_cuda()) note_host_sync(HostSyncKind::device_sync);
  if (src_dev.is_cuda() && dst_dev.is_cpu()) check_deferred_errors(src_dev.index, "a copy from the device to the host");
}
cudaStream_t compute_stream(int) { return nullptr; }
cudaStream_t copy_stream(int) { return nullptr; }
cublasHandle_t cublas_handle(int) {
  throw Error("cublas_handle: a cuBLAS call in the CPU mode (cuBLAS cannot run here; use kiln's own kernels)");
}
// TF32 (handles.h): matmul.cpp reads it; nothing here runs f32 on Tensor Cores, the flag is only kept.
namespace {
bool g_allow_tf32 = false;
}  // namespace
void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }
// cuDNN benchmark mode (handles.h): conv2d.cpp reads it on its cuDNN path, which stops at cudnn_handle().
namespace {
bool g_cudnn_benchmark = false;
}
void set_cudnn_benchmark(bool on) { g_cudnn_benchmark = on; }
bool cudnn_benchmark() { return g_cudnn_benchmark; }
#if defined(KILN_WITH_CUDNN)
cudnnHandle_t cudnn_handle(int) {
  throw Error("cudnn_handle: a cuDNN call in the CPU mode (cuDNN cannot run here; use kiln's own kernels)");
}
#endif

void throw_cuda(const std::string& what, const char* call, cudaError_t e) {
  throw Error(str_cat(what, ": ", call, " failed: ", cudaGetErrorString(e), " (", (int)e, ", CPU mode)"));
}
void throw_cublas(const std::string& what, const char* call, cublasStatus_t s) {
  throw Error(str_cat(what, ": ", call, " failed (cuBLAS status ", (int)s, ", CPU mode)"));
}
#if defined(KILN_WITH_CUDNN)
void throw_cudnn(const std::string& what, const char* call, cudnnStatus_t s) {
  throw Error(str_cat(what, ": ", call, " failed (cuDNN status ", (int)s, ", CPU mode)"));
}
#endif

}  // namespace kiln::cuda_on_cpu
