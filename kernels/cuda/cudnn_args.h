// The arguments kiln gives cuDNN for one convolution, as plain host arithmetic: the tensor, filter
// and bias descriptor dims (always n, c, h, w order; the format names the memory order), the strides
// cuDNN derives from that format, the convolution descriptor (padding, stride, dilation, groups,
// compute type, math type), and the workspace-limit filtering of candidate algorithms.
// kernels/cuda/conv2d.cpp calls these and only translates the enums to cuDNN's;
// tests/unit/test_cuda_cudnn_args.cpp checks them against kiln's own tensor layouts on the CPU.
// Includes no CUDA or cuDNN header and must not: it is compiled into every build.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "kernels/common/nn_desc.h"

namespace kiln::cuda {

enum class CudnnLayout { nchw, nhwc };          // CUDNN_TENSOR_NCHW / CUDNN_TENSOR_NHWC
enum class CudnnData { f32, f64, f16, bf16 };   // CUDNN_DATA_FLOAT / DOUBLE / HALF / BFLOAT16
enum class CudnnMath { default_math, tensor_op, fma };  // CUDNN_DEFAULT_MATH / TENSOR_OP_MATH / FMA_MATH

// A 4-D descriptor as cudnnSetTensor4dDescriptor / cudnnSetFilter4dDescriptor take it.
struct CudnnDims {
  int64_t n = 0, c = 0, h = 0, w = 0;
};

// Everything conv2d.cpp's descriptors are set from. x, y: (N, C, H, W) / (N, K, out_h, out_w) in
// `layout`; w: (K, C/groups, R, S) in `layout` (KCRS or KRSC); bias: (1, K, 1, 1), NCHW always.
struct CudnnConvArgs {
  CudnnLayout layout = CudnnLayout::nchw;
  CudnnData data = CudnnData::f32;
  CudnnDims x, y, w, bias;
  int64_t pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1, groups = 1;
  CudnnData compute = CudnnData::f32;  // 16-bit data accumulates in f32
  CudnnMath math = CudnnMath::fma;     // the descriptor's initial math type (each candidate sets its own)
};

// "" when cuDNN can describe d, else why not (conv2d.cpp throws it with the call's shapes).
inline const char* cudnn_conv_invalid(const Conv2dDesc& d) {
  if (!(d.N > 0 && d.C > 0 && d.K > 0 && d.groups > 0 && d.C % d.groups == 0 && d.K % d.groups == 0 && d.out_h() > 0 &&
        d.out_w() > 0))
    return "invalid convolution";
  for (int64_t v : {d.N, d.C, d.H, d.W, d.K, d.R, d.S, d.out_h(), d.out_w()})
    if (v >= (int64_t)1 << 31) return "a size exceeds cuDNN's 32-bit limit";
  return "";
}

// f32 uses FMA math (true f32) unless TF32 is allowed (DEFAULT lets cuDNN pick TF32); f16/bf16 use
// Tensor Core math with f32 accumulation; f64 FMA.
inline CudnnConvArgs cudnn_conv_args(const Conv2dDesc& d, CudnnData dt, bool nhwc, bool tf32) {
  CudnnConvArgs a;
  a.layout = nhwc ? CudnnLayout::nhwc : CudnnLayout::nchw;
  a.data = dt;
  a.x = {d.N, d.C, d.H, d.W};
  a.y = {d.N, d.K, d.out_h(), d.out_w()};
  a.w = {d.K, d.groups > 0 ? d.C / d.groups : 0, d.R, d.S};
  a.bias = {1, d.K, 1, 1};
  a.pad_h = d.pad_h, a.pad_w = d.pad_w, a.stride_h = d.stride_h, a.stride_w = d.stride_w;
  a.dil_h = d.dil_h, a.dil_w = d.dil_w, a.groups = d.groups;
  const bool half = dt == CudnnData::f16 || dt == CudnnData::bf16;
  a.compute = half ? CudnnData::f32 : dt;
  a.math = half ? CudnnMath::tensor_op : (dt == CudnnData::f32 && tf32) ? CudnnMath::default_math : CudnnMath::fma;
  return a;
}

// The element strides (of n, c, h, w) that cuDNN gives a packed 4-D descriptor of this format:
// NCHW (chw, hw, w, 1), NHWC (hwc, 1, wc, c). They must be the strides of kiln's buffer.
inline std::array<int64_t, 4> cudnn_packed_strides(const CudnnDims& d, CudnnLayout f) {
  if (f == CudnnLayout::nchw) return {d.c * d.h * d.w, d.h * d.w, d.w, 1};
  return {d.h * d.w * d.c, 1, d.w * d.c, d.c};
}

// Indices of the candidate algorithms (workspace bytes each, best first) whose workspace is within
// `limit`, in order; throws naming the smallest need when none is. `what` names the convolution.
inline std::vector<size_t> candidates_within_workspace(const std::vector<size_t>& workspace, size_t limit,
                                                       const std::string& what) {
  std::vector<size_t> kept;
  size_t smallest = SIZE_MAX;
  for (size_t i = 0; i < workspace.size(); ++i) {
    smallest = workspace[i] < smallest ? workspace[i] : smallest;
    if (workspace[i] <= limit) kept.push_back(i);
  }
  KILN_CHECK(!kept.empty(), what, ": every cuDNN algorithm needs more workspace than kiln's limit of ", limit,
             " bytes (the smallest needs ", smallest, "); raise KILN_CUDNN_WORKSPACE_LIMIT");
  return kept;
}

// The workspace handed to cudnnFind*AlgorithmEx: the largest of the candidates kept, so each can run.
inline size_t find_workspace_bytes(const std::vector<size_t>& workspace) {
  size_t m = 0;
  for (size_t w : workspace) m = w > m ? w : m;
  return m;
}

}  // namespace kiln::cuda
