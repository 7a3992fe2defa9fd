// CPU execution mode: the cuBLAS entry points that CPU-mode sources name (shim/cublas_v2.h), as failing
// stubs. cuBLAS cannot run here; reaching one of these throws kiln::Error naming the call, so a test
// that drives kiln's backend in the CPU mode fails by name on any vendor call instead of computing
// something else. (cublas_handle() throws first on every path kiln has; these are the second line.)
#include "kernels/cuda_cpu/prelude.h"

#include <cublas_v2.h>

namespace {

[[noreturn]] void vendor_call(const char* call) {
  throw kiln::Error(kiln::str_cat(call, ": a cuBLAS call in the CPU mode (cuBLAS cannot run here; use kiln's own kernels)"));
}

}  // namespace

cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { vendor_call("cublasSetMathMode"); }
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                          const void*, const void*, cudaDataType_t, int, long long, const void*,
                                          cudaDataType_t, int, long long, const void*, void*, cudaDataType_t, int,
                                          long long, int, cublasComputeType_t, cublasGemmAlgo_t) {
  vendor_call("cublasGemmStridedBatchedEx");
}
