// The CUDA entry points of conv_transpose2d and interpolate: the signatures the CPU backend shares,
// declared once in kernels/common/api/{conv_transpose2d,interpolate}.inc, T = float or double. Kept
// out of nn_backend.h so only the two ops that call them (engine/ops/nn_conv_transpose.cpp,
// nn_interpolate.cpp) include them. Device pointers on the current device; work queued on its
// compute stream. kiln's own direct kernels (conv_transpose2d.cu, interpolate.cu) with the index
// math of kernels/common/upsample_math.h; conv_transpose2d_workspace_bytes is 0 here.
// STATUS: compiled for sm_80/sm_90; never run on a GPU yet (tests/cuda/test_cuda_upsampling.cpp
// checks them against the CPU backend when a GPU is present).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/common/upsample_math.h"

namespace kiln::cuda {

#include "kernels/common/api/conv_transpose2d.inc"
#include "kernels/common/api/interpolate.inc"

}  // namespace kiln::cuda
