// 16-bit convolution on the GPU (the --amp path): f16 or bf16 x, w, y; f32 accumulation on Tensor
// Cores; forward and both backward passes; no bias (the op layer adds it and reduces its gradient).
// Layouts: nchw = x/y (N, C, H, W) and w (K, C/groups, R, S) row-major; nhwc = x (N, H, W, C),
// y (N, P, Q, K) and w (K, R, S, C) in memory (channels-last), shapes still named by Conv2dDesc.
// Implementation: cuDNN (CUDNN_DATA_HALF / BFLOAT16, computeType FLOAT, CUDNN_TENSOR_OP_MATH,
// algorithm cached per shape, dtype, layout and direction) unless conv2d_16_uses_kiln(), then
// kiln's implicit-GEMM kernels (igemm_conv.h), which need nhwc. Device pointers on the current
// device; work queued on its compute stream; workspace from kiln's allocator (tag temporary).
// STATUS: compiled for sm_80/sm_90, never run on a GPU.
#pragma once
#include "engine/core/dtype.h"
#include "kernels/common/nn_desc.h"

namespace kiln::cuda {

enum class ConvLayout { nchw, nhwc };

// True when a 16-bit convolution of d in dtype dt runs on kiln's kernels: kernel_source() is kiln,
// dt is f16 and groups == 1 (anything else goes to cuDNN). The caller must then pass nhwc.
bool conv2d_16_uses_kiln(const Conv2dDesc& d, DType dt);

// y = conv(x, w).
void conv2d_16_forward(const Conv2dDesc& d, DType dt, ConvLayout layout, const void* x, const void* w, void* y);
// dx = conv_transpose(dy, w).
void conv2d_16_backward_input(const Conv2dDesc& d, DType dt, ConvLayout layout, const void* dy, const void* w,
                              void* dx);
// dw = correlation of dy with x.
void conv2d_16_backward_weight(const Conv2dDesc& d, DType dt, ConvLayout layout, const void* x, const void* dy,
                               void* dw);

}  // namespace kiln::cuda
