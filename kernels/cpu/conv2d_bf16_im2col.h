// A bf16 convolution's weight gradient as ONE GEMM (conv2d_bf16.h's Bf16Wgrad::im2col): kiln's im2col of x and
// dy's planes side by side, then oneDNN's bf16 matmul (matmul_bf16.h) for dw = dy^T col^T, straight into KCRS,
// and the bias gradient summed from dy in f32. All its buffers (col, dy^T, the matmul's scratchpad) are pieces of
// ONE caller-provided workspace of conv2d_bf16_wgrad_im2col_bytes(d) bytes, whose size comes from the matmul's
// oneDNN descriptor (never a constant), so kiln's allocator and the meta device account every byte.
// conv2d_bf16.cpp's rule decides where it runs; this file only computes. Kernels never allocate tensors.
#pragma once
#include <cstddef>
#include <string>

#include "engine/core/half.h"
#include "kernels/common/nn_desc.h"
#include "kernels/cpu/conv2d_bf16.h"

namespace kiln::cpu {

// Workspace bytes: col (C*R*S, N*OH*OW) and dy^T (K, N*OH*OW) in bf16, the matmul's workspace, 64-byte aligned
// pieces, plus 64 so any base address works. Needs a oneDNN bf16 path (bf16_path.h).
size_t conv2d_bf16_wgrad_im2col_bytes(const Conv2dDesc& d);

// x: (N, C, H, W), dy: (N, K, OH, OW) -> dw: (K, C, R, S) (bf16, one rounding of the f32 sum) and, when bt !=
// none, dbias: (K) of bt's type (overwritten). groups 1.
void conv2d_bf16_wgrad_im2col(const Conv2dDesc& d, const bfloat16* x, const bfloat16* dy, bfloat16* dw, void* dbias,
                              Bf16Bias bt, void* workspace);

// The matmul's oneDNN implementation name ("brg:avx512_core_bf16", ...): tests print it.
std::string conv2d_bf16_wgrad_im2col_impl(const Conv2dDesc& d);

}  // namespace kiln::cpu
