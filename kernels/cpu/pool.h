// Pooling on the CPU (NCHW, contiguous): max, average and adaptive average, forward and backward,
// with PyTorch's window rules (padding, dilation for max, ceil_mode, count_include_pad, adaptive
// start/end). Planes (n, c) run in parallel. Never allocates. Max pool forward / backward are also
// instantiated for bfloat16 and half on the CPU (f32 compares, the f32 kernels' bits; pool.cpp).
#pragma once
#include <cstdint>

#include "engine/core/half.h"
#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

#include "kernels/common/api/pool.inc"

}  // namespace kiln::cpu
