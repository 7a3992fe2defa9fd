// bf16 2-D convolution computed directly (no im2col, no GEMM, no oneDNN) for reductions too short for the
// dot-product units: the small CNN's 1->32 3x3 conv (C*R*S = 9), which oneDNN's rule (conv2d_bf16.h) leaves
// out and which otherwise stages x, w and dy through f32 copies (tensors of kiln's allocator) into kiln's f32
// kernels. Here each image's x (or dy) plane is widened to f32 inside the kernel, products of bf16 values
// are exact in f32, sums are f32 in a fixed order (the same bits at every instruction set and thread count),
// and each output is rounded once to bf16. Loops in the machine's best instruction set (cpu_isa.h).
// Memory: no workspace and no tensors; per-thread scratch of one image's padded f32 planes (C*(H+2p)*(W+2p)
// floats, and for the weight gradient K*C*R*S*OW partial sums) on the C++ heap, freed before returning,
// a few KiB on the small CNN (like OpenBLAS's own buffers, outside kiln's allocator and its plans).
// Groups == 1 only. Must not allocate tensors or know autograd.
#pragma once
#include <cstdint>

#include "engine/core/half.h"
#include "kernels/common/nn_desc.h"
#include "kernels/cpu/conv2d_bf16.h"

namespace kiln::cpu {

// Whether the direct path computes this bf16 convolution: groups == 1 and C*R*S below oneDNN's minimum
// reduction (16, conv2d_bf16.cpp), on every path and ISA (the measured rule, docs/cpu-bf16.md), unless
// forced (set_conv2d_bf16_direct_forced, or KILN_BF16_CONV_DIRECT=on|off|auto read once: on takes every
// groups == 1 shape, off none). engine/ops/nn_conv.cpp asks this before conv2d_bf16_uses_onednn.
bool conv2d_bf16_uses_direct(const Conv2dDesc& d);
// -1 the rule, 0 never, 1 every groups == 1 shape. Returns the previous setting. For tests and benchmarks.
int set_conv2d_bf16_direct_forced(int mode);

// x: (N, C, H, W), w: (K, C, R, S), bias: (K) of `bt`'s type or null -> y: (N, K, OH, OW) (overwritten).
void conv2d_bf16_direct_forward(const Conv2dDesc& d, const bfloat16* x, const bfloat16* w, const void* bias,
                                Bf16Bias bt, bfloat16* y);
// dy: (N, K, OH, OW), w: (K, C, R, S) -> dx: (N, C, H, W) (overwritten).
void conv2d_bf16_direct_backward_input(const Conv2dDesc& d, const bfloat16* dy, const bfloat16* w, bfloat16* dx);
// x: (N, C, H, W), dy: (N, K, OH, OW) -> dw: (K, C, R, S) and, when bt != none, dbias: (K) of bt's type
// (overwritten).
void conv2d_bf16_direct_backward_weight(const Conv2dDesc& d, const bfloat16* x, const bfloat16* dy, bfloat16* dw,
                                        void* dbias, Bf16Bias bt);

}  // namespace kiln::cpu
