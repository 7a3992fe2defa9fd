// CPU execution mode (kernels/cuda_cpu): the cuDNN types, constants and calls that kiln's CPU-mode
// sources name (kernels/cuda/conv2d.cpp, compiled into the CPU mode for its 16-bit entry points, which
// run kiln's implicit-GEMM kernels under --kernels kiln). No cuDNN call can run in this mode: the
// declared functions are failing stubs (kernels/cuda_cpu/vendor_stubs.cpp) that throw kiln::Error
// naming the call, and cudnn_handle() (runtime_shim.cpp), which every cuDNN path asks first, throws
// before any of them. A call not declared here does not compile in a CPU-mode source.
#pragma once
#include <cstddef>

typedef struct cudnnContext* cudnnHandle_t;
typedef struct cudnnTensorStruct* cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct* cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct* cudnnConvolutionDescriptor_t;
typedef enum { CUDNN_STATUS_SUCCESS = 0, CUDNN_STATUS_NOT_SUPPORTED = 9 } cudnnStatus_t;
typedef enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_DOUBLE = 1, CUDNN_DATA_HALF = 2, CUDNN_DATA_BFLOAT16 = 9 } cudnnDataType_t;
typedef enum { CUDNN_DEFAULT_MATH = 0, CUDNN_TENSOR_OP_MATH = 1, CUDNN_FMA_MATH = 3 } cudnnMathType_t;
typedef enum { CUDNN_TENSOR_NCHW = 0, CUDNN_TENSOR_NHWC = 1 } cudnnTensorFormat_t;
typedef enum { CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;
typedef enum { CUDNN_DETERMINISTIC = 1 } cudnnDeterminism_t;
typedef enum {
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0,
  CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM = 1,
  CUDNN_CONVOLUTION_FWD_ALGO_GEMM = 2,
  CUDNN_CONVOLUTION_FWD_ALGO_DIRECT = 3
} cudnnConvolutionFwdAlgo_t;
typedef enum { CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 = 0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 = 1 } cudnnConvolutionBwdDataAlgo_t;
typedef enum {
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 = 0,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 = 1,
  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 = 3
} cudnnConvolutionBwdFilterAlgo_t;
#define KILN_CUDNN_SHIM_PERF(Name, Algo) \
  typedef struct {                       \
    Algo algo;                           \
    cudnnStatus_t status;                \
    float time;                          \
    size_t memory;                       \
    cudnnDeterminism_t determinism;      \
    cudnnMathType_t mathType;            \
  } Name;
KILN_CUDNN_SHIM_PERF(cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t)
KILN_CUDNN_SHIM_PERF(cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t)
KILN_CUDNN_SHIM_PERF(cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t)
#undef KILN_CUDNN_SHIM_PERF

// The calls (each a stub that throws naming itself).
#define KILN_CUDNN_SHIM_CALLS(X)                                                                                        \
  X(cudnnCreateTensorDescriptor, (cudnnTensorDescriptor_t*))                                                            \
  X(cudnnCreateFilterDescriptor, (cudnnFilterDescriptor_t*))                                                            \
  X(cudnnCreateConvolutionDescriptor, (cudnnConvolutionDescriptor_t*))                                                  \
  X(cudnnDestroyTensorDescriptor, (cudnnTensorDescriptor_t))                                                            \
  X(cudnnDestroyFilterDescriptor, (cudnnFilterDescriptor_t))                                                            \
  X(cudnnDestroyConvolutionDescriptor, (cudnnConvolutionDescriptor_t))                                                  \
  X(cudnnSetTensor4dDescriptor, (cudnnTensorDescriptor_t, cudnnTensorFormat_t, cudnnDataType_t, int, int, int, int))     \
  X(cudnnSetFilter4dDescriptor, (cudnnFilterDescriptor_t, cudnnDataType_t, cudnnTensorFormat_t, int, int, int, int))     \
  X(cudnnSetConvolution2dDescriptor,                                                                                    \
    (cudnnConvolutionDescriptor_t, int, int, int, int, int, int, cudnnConvolutionMode_t, cudnnDataType_t))              \
  X(cudnnSetConvolutionGroupCount, (cudnnConvolutionDescriptor_t, int))                                                 \
  X(cudnnSetConvolutionMathType, (cudnnConvolutionDescriptor_t, cudnnMathType_t))                                       \
  X(cudnnGetConvolutionForwardAlgorithm_v7,                                                                             \
    (cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t, cudnnConvolutionDescriptor_t,                     \
     cudnnTensorDescriptor_t, int, int*, cudnnConvolutionFwdAlgoPerf_t*))                                               \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7,                                                                        \
    (cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,                     \
     cudnnTensorDescriptor_t, int, int*, cudnnConvolutionBwdDataAlgoPerf_t*))                                           \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7,                                                                      \
    (cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,                     \
     cudnnFilterDescriptor_t, int, int*, cudnnConvolutionBwdFilterAlgoPerf_t*))                                         \
  X(cudnnGetConvolutionForwardWorkspaceSize,                                                                            \
    (cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t, cudnnConvolutionDescriptor_t,                     \
     cudnnTensorDescriptor_t, cudnnConvolutionFwdAlgo_t, size_t*))                                                      \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize,                                                                       \
    (cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,                     \
     cudnnTensorDescriptor_t, cudnnConvolutionBwdDataAlgo_t, size_t*))                                                  \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize,                                                                     \
    (cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionDescriptor_t,                     \
     cudnnFilterDescriptor_t, cudnnConvolutionBwdFilterAlgo_t, size_t*))                                                \
  X(cudnnFindConvolutionForwardAlgorithmEx,                                                                             \
    (cudnnHandle_t, cudnnTensorDescriptor_t, const void*, cudnnFilterDescriptor_t, const void*,                         \
     cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, void*, int, int*, cudnnConvolutionFwdAlgoPerf_t*, void*,    \
     size_t))                                                                                                           \
  X(cudnnFindConvolutionBackwardDataAlgorithmEx,                                                                        \
    (cudnnHandle_t, cudnnFilterDescriptor_t, const void*, cudnnTensorDescriptor_t, const void*,                         \
     cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, void*, int, int*, cudnnConvolutionBwdDataAlgoPerf_t*,       \
     void*, size_t))                                                                                                    \
  X(cudnnFindConvolutionBackwardFilterAlgorithmEx,                                                                      \
    (cudnnHandle_t, cudnnTensorDescriptor_t, const void*, cudnnTensorDescriptor_t, const void*,                         \
     cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t, void*, int, int*, cudnnConvolutionBwdFilterAlgoPerf_t*,     \
     void*, size_t))                                                                                                    \
  X(cudnnConvolutionForward,                                                                                            \
    (cudnnHandle_t, const void*, cudnnTensorDescriptor_t, const void*, cudnnFilterDescriptor_t, const void*,            \
     cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t, void*, size_t, const void*, cudnnTensorDescriptor_t,      \
     void*))                                                                                                            \
  X(cudnnConvolutionBackwardData,                                                                                       \
    (cudnnHandle_t, const void*, cudnnFilterDescriptor_t, const void*, cudnnTensorDescriptor_t, const void*,            \
     cudnnConvolutionDescriptor_t, cudnnConvolutionBwdDataAlgo_t, void*, size_t, const void*, cudnnTensorDescriptor_t,  \
     void*))                                                                                                            \
  X(cudnnConvolutionBackwardFilter,                                                                                     \
    (cudnnHandle_t, const void*, cudnnTensorDescriptor_t, const void*, cudnnTensorDescriptor_t, const void*,            \
     cudnnConvolutionDescriptor_t, cudnnConvolutionBwdFilterAlgo_t, void*, size_t, const void*,                         \
     cudnnFilterDescriptor_t, void*))                                                                                   \
  X(cudnnConvolutionBackwardBias,                                                                                       \
    (cudnnHandle_t, const void*, cudnnTensorDescriptor_t, const void*, const void*, cudnnTensorDescriptor_t, void*))    \
  X(cudnnAddTensor,                                                                                                     \
    (cudnnHandle_t, const void*, cudnnTensorDescriptor_t, const void*, const void*, cudnnTensorDescriptor_t, void*))

#define KILN_CUDNN_SHIM_DECLARE(name, params) cudnnStatus_t name params;
KILN_CUDNN_SHIM_CALLS(KILN_CUDNN_SHIM_DECLARE)
#undef KILN_CUDNN_SHIM_DECLARE
const char* cudnnGetErrorString(cudnnStatus_t status);
