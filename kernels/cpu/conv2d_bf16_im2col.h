// A bf16 convolution's weight gradient as ONE GEMM (conv2d_bf16.h's Bf16Wgrad::im2col): kiln's im2col of x and
// dy's planes side by side, then oneDNN's bf16 matmul (matmul_bf16.h) for dw = dy^T col^T, straight into KCRS,
// and the bias gradient summed from dy in f32. All its buffers (col, dy^T, the matmul's scratchpad) are pieces of
// ONE caller-provided workspace of conv2d_bf16_wgrad_im2col_bytes(d) bytes, whose size comes from the matmul's
// oneDNN descriptor (never a constant), so kiln's allocator and the meta device account every byte.
// On NHWC (Bf16Layout::nhwc, kiln's channels-last) the same product reads dy (N*OH*OW, K) in place as the
// transposed left operand and takes col row-major (N*OH*OW, C*R*S), each row a window's taps in KCRS's
// (c, r, s) order, gathered from x's contiguous channel rows: no dy^T copy, dw again straight into KCRS.
// conv2d_bf16.cpp's rule decides where it runs; this file only computes. Kernels never allocate tensors.
#pragma once
#include <cstddef>
#include <string>

#include "engine/core/half.h"
#include "kernels/common/nn_desc.h"
#include "kernels/cpu/conv2d_bf16.h"
#include "kernels/cpu/cpu_isa.h"

namespace kiln::cpu {

// Workspace bytes: col (C*R*S, N*OH*OW) and, NCHW only, dy^T (K, N*OH*OW) in bf16, the matmul's workspace,
// 64-byte aligned pieces, plus 64 so any base address works. Needs a oneDNN bf16 path (bf16_path.h).
size_t conv2d_bf16_wgrad_im2col_bytes(const Conv2dDesc& d, Bf16Layout layout = Bf16Layout::nchw);

// x: (N, C, H, W), dy: (N, K, OH, OW) (nhwc: (N, H, W, C) and (N, OH, OW, K) in memory) -> dw: (K, C, R, S)
// (bf16, one rounding of the f32 sum) and, when bt != none, dbias: (K) of bt's type (overwritten), summed in
// f32 in the same order in both layouts. groups 1.
void conv2d_bf16_wgrad_im2col(const Conv2dDesc& d, const bfloat16* x, const bfloat16* dy, bfloat16* dw, void* dbias,
                              Bf16Bias bt, void* workspace, Bf16Layout layout = Bf16Layout::nchw);

// The NHWC im2col alone (the rows the NHWC weight gradient multiplies): x (N, H, W, C) in memory -> col
// (N*OH*OW, C*R*S), row (n, oh, ow) column c*R*S + r*S + s = x[n, ih, iw, c], 0 outside x (bf16 bits moved).
// isa: at avx512 (cpu_isa_vector) 32 channels at a time by vector permutes where C >= 32 and R*S <= 16, else
// one value at a time; the same col at every level. R*S <= 1024.
void conv2d_bf16_im2col_nhwc(const Conv2dDesc& d, const bfloat16* x, bfloat16* col, CpuIsa isa);

// The matmul's oneDNN implementation name ("brg:avx512_core_bf16", ...): tests print it.
std::string conv2d_bf16_wgrad_im2col_impl(const Conv2dDesc& d, Bf16Layout layout = Bf16Layout::nchw);

}  // namespace kiln::cpu
