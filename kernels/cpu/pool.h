// Pooling on the CPU (NCHW, contiguous): max, average and adaptive average, forward and backward,
// with PyTorch's window rules (padding, dilation for max, ceil_mode, count_include_pad, adaptive
// start/end). Planes (n, c) run in parallel. Never allocates tensors (the bf16 max pool keeps one f32 plane
// per thread on the C++ heap).
#pragma once
#include <cstdint>

#include "engine/core/half.h"
#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

#include "kernels/common/api/pool.inc"

// bf16 max pooling on the CPU: the same values, indices and bits as the f32 kernels on f32 copies rounded
// back (engine/ops/nn_pool.cpp's staging), without the f32 tensors. x: (N, C, H, W), y and indices:
// (N, C, OH, OW); backward: dy, indices -> dx (N, C, H, W) (overwritten).
void max_pool2d_forward_bf16(const Pool2dDesc& d, const bfloat16* x, bfloat16* y, int64_t* indices);
void max_pool2d_backward_bf16(const Pool2dDesc& d, const bfloat16* dy, const int64_t* indices, bfloat16* dx);

}  // namespace kiln::cpu
