// CUDA runtime services (see runtime.h): discovery, properties, streams, copies, handles, and the
// error formatting of check.h. Host code only; compiled with the CUDA build.
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/runtime_hooks.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "engine/core/host_sync.h"
#include "engine/memory/event_source_cuda.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/deferred_error.h"
#include "kernels/cuda/handles.h"

namespace kiln::cuda {

[[noreturn]] void throw_cuda(const std::string& what, const char* call, cudaError_t e) {
  throw Error(str_cat(what, ": ", call, " failed: ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")"));
}

[[noreturn]] void throw_cublas(const std::string& what, const char* call, cublasStatus_t s) {
  throw Error(str_cat(what, ": ", call, " failed: ", cublasGetStatusString(s), " (", cublasGetStatusName(s), ")"));
}

#if defined(KILN_WITH_CUDNN)
[[noreturn]] void throw_cudnn(const std::string& what, const char* call, cudnnStatus_t s) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  throw Error(str_cat(what, ": ", call, " failed: ", cudnnGetErrorString(s), detail[0] ? " - " : "", detail));
}
#endif

namespace {

constexpr int kMaxDevices = 64;

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      if (access("/proc/driver/nvidia/version", R_OK) != 0 && e != cudaErrorNoDevice)
        r.reason = str_cat("no NVIDIA driver is loaded (/proc/driver/nvidia/version is missing; CUDA says: ",
                           cudaGetErrorString(e), ")");
      else if (vis && !*vis)
        r.reason = "CUDA_VISIBLE_DEVICES is set but empty, so no GPU is visible";
      else if (e == cudaErrorInsufficientDriver)
        r.reason = "the NVIDIA driver is older than this CUDA runtime (cudaErrorInsufficientDriver)";
      else if (e == cudaErrorNoDevice)
        r.reason = vis ? str_cat("no CUDA device is visible (CUDA_VISIBLE_DEVICES=", vis, ")")
                       : std::string("no CUDA device is present (cudaErrorNoDevice)");
      else
        r.reason = str_cat("no NVIDIA driver or device is usable: ", cudaGetErrorString(e), " (",
                           cudaGetErrorName(e), ")");
      return r;
    }
    if (n == 0) {
      r.reason = vis ? str_cat("no CUDA device is visible (CUDA_VISIBLE_DEVICES=", vis, ")")
                     : std::string("no CUDA device is present");
      return r;
    }
    r.count = n < kMaxDevices ? n : kMaxDevices;
    return r;
  }();
  return p;
}

struct PerDevice {
  std::once_flag once;
  cudaStream_t compute = nullptr;
  cudaStream_t copy = nullptr;
  std::once_flag blas_once;
  cublasHandle_t blas = nullptr;
#if defined(KILN_WITH_CUDNN)
  std::once_flag dnn_once;
  cudnnHandle_t dnn = nullptr;
#endif
};

PerDevice& per_device(int dev) {
  static PerDevice table[kMaxDevices];
  KILN_CHECK(dev >= 0 && dev < device_count(), "cuda:", dev, " is not a usable device (", device_count(),
             " visible", device_count() ? "" : str_cat(": ", unavailable_reason()), ")");
  PerDevice& d = table[dev];
  std::call_once(d.once, [&] {
    DeviceGuard g(dev);
    KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&d.compute, cudaStreamNonBlocking), str_cat("cuda:", dev, " compute stream"));
    KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&d.copy, cudaStreamNonBlocking), str_cat("cuda:", dev, " copy stream"));
  });
  return d;
}

bool g_allow_tf32 = false;

}  // namespace

int device_count() { return probe().count; }
std::string unavailable_reason() { return probe().reason; }

DeviceProps device_properties(int index) {
  KILN_CHECK(index >= 0 && index < device_count(), "cuda:", index, " is not a usable device (", device_count(),
             " visible)");
  cudaDeviceProp p;
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&p, index), str_cat("device_properties(cuda:", index, ")"));
  DeviceProps r;
  r.index = index;
  r.name = p.name;
  r.total_memory = p.totalGlobalMem;
  r.cc_major = p.major;
  r.cc_minor = p.minor;
  r.multiprocessors = p.multiProcessorCount;
  KILN_CUDA_CHECK(cudaDriverGetVersion(&r.driver_version), "cudaDriverGetVersion");
  KILN_CUDA_CHECK(cudaRuntimeGetVersion(&r.runtime_version), "cudaRuntimeGetVersion");
  DeviceGuard g(index);
  size_t free_b = 0, total_b = 0;
  KILN_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b), str_cat("cudaMemGetInfo(cuda:", index, ")"));
  r.free_memory = free_b;
  return r;
}

cudaStream_t compute_stream(int dev) { return per_device(dev).compute; }
cudaStream_t copy_stream(int dev) { return per_device(dev).copy; }

}  // namespace kiln::cuda

// The allocator's stream ids (engine/memory/event_source_cuda.h) resolved to this runtime's streams.
cudaStream_t kiln::cuda_stream_for_id(int device, StreamId stream) {
  if (stream == kCudaComputeStream) return cuda::compute_stream(device);
  if (stream == kCudaCopyStream) return cuda::copy_stream(device);
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(stream));
}

namespace kiln::cuda {

DeviceGuard::DeviceGuard(int dev) {
  KILN_CUDA_CHECK(cudaGetDevice(&prev_), "DeviceGuard: cudaGetDevice");
  if (prev_ != dev) KILN_CUDA_CHECK(cudaSetDevice(dev), str_cat("DeviceGuard: cudaSetDevice(", dev, ")"));
}
DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) cudaSetDevice(prev_);  // no throw from a destructor; a failure here resurfaces later
}

void set_device(int dev) { KILN_CUDA_CHECK(cudaSetDevice(dev), str_cat("cudaSetDevice(", dev, ")")); }

const CudaRuntimeHooks* runtime_hooks() { return real_cuda_runtime_hooks(); }

int current_device() {
  int d = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

cublasHandle_t cublas_handle(int dev) {
  PerDevice& d = per_device(dev);
  std::call_once(d.blas_once, [&] {
    DeviceGuard g(dev);
    KILN_CUBLAS_CHECK(cublasCreate(&d.blas), str_cat("cublasCreate on cuda:", dev));
    KILN_CUBLAS_CHECK(cublasSetStream(d.blas, d.compute), "cublasSetStream");
  });
  // The math mode is set per GEMM by its caller (matmul.cpp: gemm_math_mode), by dtype.
  return d.blas;
}

#if defined(KILN_WITH_CUDNN)
cudnnHandle_t cudnn_handle(int dev) {
  PerDevice& d = per_device(dev);
  std::call_once(d.dnn_once, [&] {
    DeviceGuard g(dev);
    KILN_CUDNN_CHECK(cudnnCreate(&d.dnn), str_cat("cudnnCreate on cuda:", dev));
    KILN_CUDNN_CHECK(cudnnSetStream(d.dnn, d.compute), "cudnnSetStream");
  });
  return d.dnn;
}
#endif

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

namespace {
std::atomic<bool> g_cudnn_benchmark{false};
}  // namespace
void set_cudnn_benchmark(bool on) { g_cudnn_benchmark = on; }
bool cudnn_benchmark() { return g_cudnn_benchmark; }

void synchronize(int dev) {
  note_host_sync(HostSyncKind::device_sync);
  PerDevice& d = per_device(dev);
  KILN_CUDA_CHECK(cudaStreamSynchronize(d.compute), str_cat("synchronize cuda:", dev, " compute stream"));
  KILN_CUDA_CHECK(cudaStreamSynchronize(d.copy), str_cat("synchronize cuda:", dev, " copy stream"));
  check_deferred_errors(dev, "synchronize");
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) {
  if (n == 0) return;
  auto what = [&] { return str_cat("to_device: copy ", n, " bytes ", src_dev.str(), " -> ", dst_dev.str()); };
  KILN_CHECK(!dst_dev.is_meta() && !src_dev.is_meta(), what(), ": meta tensors hold no data");
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, n);
    return;
  }
  if (dst_dev.is_cuda() && src_dev.is_cuda()) {
    PerDevice& d = per_device(dst_dev.index);
    if (dst_dev.index == src_dev.index) {
      DeviceGuard g(dst_dev.index);
      KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, d.compute), what());
      return;
    }
    // Across devices each allocator knows only its own compute stream, so the copy runs on the SOURCE's
    // compute stream, fenced both ways: after the destination's pending work (the last readers of dst)
    // and before its later work (the consumers of dst). The source block is then used only on its own
    // stream: freed and reused after the copy, as for any op there (issue 33, defect 1: the copy ran on
    // the destination's stream alone, so src could still be being written, or be freed and reused).
    PerDevice& s = per_device(src_dev.index);
    cudaEvent_t dst_ready = nullptr, copied = nullptr;
    cudaError_t e;
    {
      DeviceGuard g(dst_dev.index);
      e = cudaEventCreateWithFlags(&dst_ready, cudaEventDisableTiming);
      if (e == cudaSuccess) e = cudaEventRecord(dst_ready, d.compute);
    }
    if (e == cudaSuccess) {
      DeviceGuard g(src_dev.index);
      e = cudaStreamWaitEvent(s.compute, dst_ready, 0);
      if (e == cudaSuccess) e = cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, n, s.compute);
      if (e == cudaSuccess) e = cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
      if (e == cudaSuccess) e = cudaEventRecord(copied, s.compute);
    }
    if (e == cudaSuccess) {
      DeviceGuard g(dst_dev.index);
      e = cudaStreamWaitEvent(d.compute, copied, 0);
    }
    if (dst_ready) cudaEventDestroy(dst_ready);  // destroying a recorded event is safe: the wait holds it
    if (copied) cudaEventDestroy(copied);
    if (e != cudaSuccess) throw_cuda(what(), "cudaMemcpyPeerAsync on the source's stream, fenced by events", e);
    return;
  }
  // Host <-> device: order after the compute stream's pending work (the producer of src, or the
  // last reader of dst), copy on the copy stream, and wait, because the host side may be pageable
  // and the caller reads/frees it right after.
  int dev = dst_dev.is_cuda() ? dst_dev.index : src_dev.index;
  PerDevice& d = per_device(dev);
  DeviceGuard g(dev);
  cudaEvent_t ev;
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), what());
  cudaError_t e = cudaEventRecord(ev, d.compute);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(d.copy, ev, 0);
  cudaEventDestroy(ev);
  if (e != cudaSuccess) throw_cuda(what(), "cudaEventRecord/cudaStreamWaitEvent", e);
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, dst_dev.is_cuda() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                  d.copy),
                  what());
  note_host_sync(HostSyncKind::device_sync);  // the host waits for the device here
  KILN_CUDA_CHECK(cudaStreamSynchronize(d.copy), what());
  // The compute stream's work before this copy is done: report an input error a kernel found.
  if (src_dev.is_cuda()) check_deferred_errors(dev, "a copy from the device to the host");
}

}  // namespace kiln::cuda
