// 2-D convolution on the CPU (NCHW, contiguous): forward, input gradient, weight/bias gradient.
// im2col + OpenBLAS GEMM, with several images per GEMM when the output plane is small and no
// im2col at all for 1x1 / stride 1 / pad 0. Kernels never allocate: the caller passes a scratch
// buffer of conv2d_workspace_bytes() bytes (kiln allocates it tagged `temporary`).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

#include "kernels/common/api/conv2d.inc"

// Images whose columns share one GEMM (1 when the output plane alone is wide enough).
int64_t conv2d_images_per_block(const Conv2dDesc& d);

}  // namespace kiln::cpu
