// The CUDA backend's kernel entry points, called by the op layer through KILN_DISPATCH with the
// signatures both backends share (declared once, kernels/common/api/*.inc): pointers are device
// pointers on the current device, work is queued on compute_stream(current device) and is asynchronous unless noted. Same
// math as the CPU (kernels/common/, engine/core/philox.h), so random draws agree bit for bit.
// The NN kernels (conv, pool, batch norm, softmax, losses, dropout) are declared in nn_backend.h,
// included here so the op layer's KILN_DISPATCH finds them. The fused optimizer updates dispatch
// like every other op (engine/ops/fused_update.cpp; CPU twin kernels/cpu/optim_update.h).
// STATUS: sgd_fused / adamw_fused compiled for sm_80/sm_90, never run on a GPU yet
// (tests/cuda/test_cuda_optim.cpp checks them against the CPU loop when one is present).
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/dtype.h"
#include "kernels/common/elementwise_math.h"
#include "kernels/common/reduce_op.h"
#include "kernels/common/strided.h"
#include "kernels/common/update_rules.h"
#include "kernels/cuda/nn_backend.h"

namespace kiln::cuda {

// ---- elementwise (elementwise.cu), reductions (reduce.cu), GEMM (matmul.cpp, cuBLAS) ----
#include "kernels/common/api/elementwise.inc"
#include "kernels/common/api/reduce.inc"
#include "kernels/common/api/matmul.inc"

// ---- fused optimizer updates (optim_update.cu) -- the per-element rules of update_rules.h ----
#include "kernels/common/api/optim_update.inc"

}  // namespace kiln::cuda
