// CPU execution mode: the cuBLAS and cuDNN entry points that CPU-mode sources name (shim/cublas_v2.h,
// shim/cudnn.h), as failing stubs. Neither library can run here; reaching one of these throws kiln::Error
// naming the call, so a test that drives kiln's backend in the CPU mode fails by name on any vendor call
// instead of computing something else. (cublas_handle() / cudnn_handle() throw first on every path kiln
// has; these are the second line.) NCCL: no CPU-mode source names it.
#include "kernels/cuda_cpu/prelude.h"

#include <cublas_v2.h>
#include <cudnn.h>

namespace {

[[noreturn]] void vendor_call(const char* call) {
  const char* lib = call[3] == 'l' ? "cuBLAS" : "cuDNN";  // cublas... / cudnn...
  throw kiln::Error(kiln::str_cat(call, ": a ", lib, " call in the CPU mode (", lib,
                                  " cannot run here; use kiln's own kernels)"));
}

}  // namespace

cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { vendor_call("cublasSetMathMode"); }
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                          const void*, const void*, cudaDataType_t, int, long long, const void*,
                                          cudaDataType_t, int, long long, const void*, void*, cudaDataType_t, int,
                                          long long, int, cublasComputeType_t, cublasGemmAlgo_t) {
  vendor_call("cublasGemmStridedBatchedEx");
}

#define KILN_CUDNN_SHIM_DEFINE(name, params) \
  cudnnStatus_t name params { vendor_call(#name); }
KILN_CUDNN_SHIM_CALLS(KILN_CUDNN_SHIM_DEFINE)
#undef KILN_CUDNN_SHIM_DEFINE
// Only ever asked about a failed status, which no stub returns (they throw).
const char* cudnnGetErrorString(cudnnStatus_t) { return "cuDNN status (CPU mode: no cuDNN)"; }
