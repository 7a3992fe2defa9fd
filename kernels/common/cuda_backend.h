// CudaBackend: what the engine calls on a cuda device, as one table of function pointers: every kernel
// entry point the op layer reaches through KILN_DISPATCH (the signatures both backends share,
// kernels/common/api/*.inc), the ones it calls directly (the 16-bit convolutions, the --kernels switch,
// copies between devices, the current device) and the runtime hooks engine/memory builds cuda:N's
// allocator from (engine/memory/cuda_runtime_hooks.h). Filled by the real backend
// (kernels/cuda/backend_table.cpp, in force from the start in a KILN_WITH_CUDA build) or by the CPU
// execution mode (the same file compiled into kiln_cuda_cpu, installed by a test with
// kiln::cuda_on_cpu::install_as_cuda_backend()). The table exists in every build, KILN_CUDA=OFF
// included; with none installed, a kernel call on a cuda device throws "cuda kernels are not built in
// this kiln". One indirect call per op: nothing measurable next to a kernel launch.
// This header must not include kernels/cpu or kernels/cuda, nor use the bare name `cuda` in code (the CPU
// mode's prelude renames it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/op_modes.h"
#include "engine/memory/cuda_runtime_hooks.h"
#include "kernels/common/elementwise_math.h"
#include "kernels/common/nn_desc.h"
#include "kernels/common/reduce_op.h"
#include "kernels/common/strided.h"
#include "kernels/common/update_rules.h"
#include "kernels/common/upsample_math.h"

namespace kiln {

// The shared signatures, declared (never defined) only so that the table's pointer types are written
// once: decltype(&cuda_backend_sig::bias_add) is bias_add's type on every backend.
namespace cuda_backend_sig {
#include "kernels/common/api/batch_norm.inc"
#include "kernels/common/api/batch_norm_sync.inc"
#include "kernels/common/api/bias.inc"
#include "kernels/common/api/confusion.inc"
#include "kernels/common/api/conv2d.inc"
#include "kernels/common/api/conv_transpose2d.inc"
#include "kernels/common/api/dropout.inc"
#include "kernels/common/api/elementwise.inc"
#include "kernels/common/api/interpolate.inc"
#include "kernels/common/api/loss.inc"
#include "kernels/common/api/matmul.inc"
#include "kernels/common/api/one_hot.inc"
#include "kernels/common/api/optim_update.inc"
#include "kernels/common/api/pool.inc"
#include "kernels/common/api/reduce.inc"
#include "kernels/common/api/softmax.inc"
}  // namespace cuda_backend_sig

// The entry points KILN_DISPATCH reaches: plain functions, and templates on T = float / double.
#define KILN_CUDA_BACKEND_ENTRIES(X) \
  X(copy) X(fill) X(unary) X(binary) X(where) X(random_fill) X(reduce_rows) X(gemm_strided) X(bias_add) \
  X(bias_grad) X(sgd_fused) X(adamw_fused)
#define KILN_CUDA_BACKEND_TYPED_ENTRIES(X)                                                                   \
  X(batch_norm_forward_train) X(batch_norm_forward_eval) X(batch_norm_backward_train)                       \
  X(batch_norm_backward_eval) X(batch_norm_channel_sums) X(batch_norm_channel_centered_squares)             \
  X(batch_norm_forward_with_stats) X(batch_norm_grad_sums) X(batch_norm_backward_with_sums)                  \
  X(confusion_matrix_accumulate) X(conv2d_forward) X(conv2d_backward_input) X(conv2d_backward_weight)       \
  X(conv_transpose2d_forward) X(conv_transpose2d_backward_input) X(conv_transpose2d_backward_weight)        \
  X(dropout_forward) X(dropout_backward) X(interpolate2d_forward) X(interpolate2d_backward)                 \
  X(cross_entropy_forward) X(cross_entropy_backward) X(nll_loss_forward) X(nll_loss_backward)               \
  X(one_hot_forward) X(max_pool2d_forward) X(max_pool2d_backward) X(avg_pool2d_forward)                    \
  X(avg_pool2d_backward) X(adaptive_avg_pool2d_forward) X(adaptive_avg_pool2d_backward) X(softmax_forward)  \
  X(log_softmax_forward) X(softmax_backward) X(log_softmax_backward)

// The templated entry points of one element type.
template <typename T>
struct CudaTypedEntries {
#define KILN_CUDA_BACKEND_MEMBER_(fn) decltype(&cuda_backend_sig::fn<T>) fn = nullptr;
  KILN_CUDA_BACKEND_TYPED_ENTRIES(KILN_CUDA_BACKEND_MEMBER_)
#undef KILN_CUDA_BACKEND_MEMBER_
};

struct CudaBackend {
  const char* name = nullptr;                         // "CUDA", "CPU execution mode": named in errors
  const CudaRuntimeHooks* runtime = nullptr;          // installed with the table (device count, memory)

#define KILN_CUDA_BACKEND_MEMBER_(fn) decltype(&cuda_backend_sig::fn) fn = nullptr;
  KILN_CUDA_BACKEND_ENTRIES(KILN_CUDA_BACKEND_MEMBER_)
#undef KILN_CUDA_BACKEND_MEMBER_
  CudaTypedEntries<float> f32;
  CudaTypedEntries<double> f64;

  // The 16-bit convolutions (kernels/cuda/conv2d_16.h; nhwc: channels-last operands, else NCHW) and
  // whether kiln's implicit GEMM runs them; whether the conv bias runs on kiln's bias kernels.
  bool (*conv2d_16_uses_kiln)(const Conv2dDesc& d, DType dt) = nullptr;
  void (*conv2d_16_forward)(const Conv2dDesc& d, DType dt, bool nhwc, const void* x, const void* w,
                            void* y) = nullptr;
  void (*conv2d_16_backward_input)(const Conv2dDesc& d, DType dt, bool nhwc, const void* dy, const void* w,
                                   void* dx) = nullptr;
  void (*conv2d_16_backward_weight)(const Conv2dDesc& d, DType dt, bool nhwc, const void* x, const void* dy,
                                    void* dw) = nullptr;
  bool (*bias_uses_kiln)() = nullptr;
  // --kernels kiln (true) or vendor (false): the backend's process-wide switch (kernel_select.h).
  void (*set_kernels_kiln)(bool kiln) = nullptr;
  // Runtime: n bytes between any two of cpu and cuda:N (to_device; host <-> device complete on
  // return, deferred kernel errors checked after a device -> host copy), waiting for a device's
  // streams, and the current device (DeviceGuard).
  void (*copy_bytes)(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) = nullptr;
  void (*synchronize)(int device) = nullptr;
  int (*current_device)() = nullptr;
  void (*set_device)(int device) = nullptr;

  // The templated entry point `fn<T>` (KILN_CUDA_CALL(max_pool2d_forward<T>, ...) calls this).
  template <typename T>
  const CudaTypedEntries<T>& typed() const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cuda backend: T is float or double");
    if constexpr (std::is_same_v<T, float>) return f32;
    else return f64;
  }
#define KILN_CUDA_BACKEND_FORWARD_(fn)            \
  template <typename T, typename... A>            \
  void fn(A&&... a) const {                       \
    typed<T>().fn(std::forward<A>(a)...);         \
  }
  KILN_CUDA_BACKEND_TYPED_ENTRIES(KILN_CUDA_BACKEND_FORWARD_)
#undef KILN_CUDA_BACKEND_FORWARD_

  // The names of the entries left null (empty when the table is complete).
  std::string missing_entries() const;
};

// The backend in force: the real one in a KILN_WITH_CUDA build, else nullptr, until an install.
const CudaBackend* cuda_backend();
// The backend in force; throws kiln::Error("cuda kernels are not built in this kiln (KILN_CUDA=OFF)")
// when there is none.
const CudaBackend& cuda_backend_or_throw();
// The real CUDA backend's table (kernels/cuda/backend_table.cpp); nullptr in a build without CUDA.
const CudaBackend* real_cuda_backend();

// Installs a complete backend (and its runtime hooks) for its lifetime and restores the previous ones
// after (tests: the CPU execution mode as cuda:0). Both ends drop the registry's cuda allocators, so
// cuda:N memory comes from the backend in force. Not for concurrent use with cuda work in flight.
class CudaBackendInstall {
 public:
  explicit CudaBackendInstall(const CudaBackend* backend);
  ~CudaBackendInstall();
  CudaBackendInstall(const CudaBackendInstall&) = delete;
  CudaBackendInstall& operator=(const CudaBackendInstall&) = delete;

 private:
  const CudaBackend* prev_ = nullptr;
  const CudaRuntimeHooks* prev_runtime_ = nullptr;
};

// Makes cuda:device current for a scope through the backend in force and restores the previous one
// (the engine's DeviceGuard); does nothing when no backend is installed.
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int device);
  ~CudaDeviceScope();
  CudaDeviceScope(const CudaDeviceScope&) = delete;
  CudaDeviceScope& operator=(const CudaDeviceScope&) = delete;

 private:
  const CudaBackend* b_ = nullptr;
  int prev_ = -1;
};

}  // namespace kiln
