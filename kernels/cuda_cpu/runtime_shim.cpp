// CPU execution mode: the host side of the CUDA runtime that kiln's kernel files call (kernels/cuda/
// runtime.h, handles.h, check.h), for kiln::cuda_on_cpu. "Device" memory is host memory, there is one
// device (0) and streams are null (launches complete before launch_kernel returns). cuBLAS and cuDNN
// cannot run here: asking for a handle throws, naming the call (and the cuBLAS calls that CPU-mode
// sources name are failing stubs, vendor_stubs.cpp).
#include "kernels/cuda_cpu/prelude.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/runtime.h"

namespace kiln::cuda_on_cpu {

int current_device() { return 0; }
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
