// Transposed 2-D convolution on the CPU (NCHW, contiguous): forward, input gradient, weight/bias
// gradient, through the conv2d machinery run backwards: GEMM (OpenBLAS) + col2im for the forward,
// im2col + GEMM for both gradients. Kernels never allocate: the caller passes a scratch buffer of
// conv_transpose2d_workspace_bytes() bytes (kiln allocates it tagged `temporary`).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/common/upsample_math.h"

namespace kiln::cpu {

#include "kernels/common/api/conv_transpose2d.inc"

}  // namespace kiln::cpu
