// kiln's implicit-GEMM convolution on FP16 Tensor Cores (the `--kernels kiln` alternative to
// cuDNN): NHWC activations, KRSC weights, f16 inputs, f32 accumulation, f16 or f32 outputs, for
// the forward pass and both backward passes, on the tiled GEMM of hgemm_tile.h (mapping in
// kernels/common/tile_conv.h). groups = 1; any stride, padding, dilation; no bias (added apart).
//   x: (N, H, W, C)   w: (K, R, S, C)   y: (N, P, Q, K)
// Each call computes out = alpha * conv + beta * out. The weight gradient splits the long
// N*P*Q reduction across blocks (split-K) and needs the workspace this header sizes.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "engine/core/dtype.h"
#include "kernels/common/nn_desc.h"

namespace kiln::cuda {

enum class ConvPass { fprop, dgrad, wgrad };

// Device workspace bytes `pass` needs on the current device (0 for fprop and dgrad).
size_t igemm_conv_workspace_bytes(const Conv2dDesc& d, ConvPass pass);

// y = conv(x, w).
void igemm_conv_fprop(const Conv2dDesc& d, const void* x, const void* w, void* y, DType y_dtype, float alpha,
                      float beta, cudaStream_t stream);
// dx = conv_transpose(dy, w).
void igemm_conv_dgrad(const Conv2dDesc& d, const void* dy, const void* w, void* dx, DType dx_dtype, float alpha,
                      float beta, cudaStream_t stream);
// dw = correlation of dy with x; workspace: igemm_conv_workspace_bytes(d, ConvPass::wgrad) bytes.
void igemm_conv_wgrad(const Conv2dDesc& d, const void* dy, const void* x, void* dw, DType dw_dtype, float alpha,
                      float beta, void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace kiln::cuda
