// Winograd F(2x2, 3x3) convolution on the CPU (NCHW, contiguous) for 3x3 / stride 1 / dilation 1 /
// groups 1 layers with padding 0..2: the forward pass, the input gradient (itself a 3x3 stride-1
// convolution of dy with the flipped weights, channels swapped, padding 2 - p) and the weight
// gradient (the adjoint of the forward transforms: dw = G^T [sum over tiles (A dy A^T) .* (B^T d B)] G).
// Each 2x2 output tile costs 16 multiplies per (input, output) channel pair instead of 36: 2.25x
// fewer GEMM flops.
// Used only through conv2d.cpp, which decides per desc which algorithm runs (conv2d_uses_winograd)
// and runs im2col when these refuse the values (winograd_values_in_range): this file does not choose, does not
// allocate (the caller's workspace of winograd_workspace_bytes), and never runs OpenBLAS threads
// inside an OpenMP region (transforms in OpenMP loops, GEMMs through kiln's gemm_batched).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

// True when the desc is one this file computes: R = S = 3, stride 1, dilation 1, groups 1,
// 0 <= pad_h, pad_w <= 2.
bool winograd_applies(const Conv2dDesc& d);

// Scratch bytes of winograd_forward, winograd_backward_input and winograd_backward_weight for this
// desc (the largest of the three: the weight gradient needs the forward's; see conv2d_winograd.cpp).
size_t winograd_workspace_bytes(const Conv2dDesc& d, size_t elem_size);

// Images transformed together (one block of tiles, one batch of 16 GEMMs) in the forward pass.
int64_t winograd_images_per_block(const Conv2dDesc& d);

// False when some |v| of p[0, n) is NaN, inf, or above 1e15 (f32) / 1e150 (f64). The transforms
// subtract inputs (inf - inf = NaN where the direct sum gives inf) and grow magnitudes by up to
// 81x, so Winograd runs only when x (or dy) and w pass: then no intermediate overflows (bound
// 81 * C * max|x| * max|w|) and non-finite values go the im2col way, propagating exactly as the
// direct convolution.
template <typename T>
bool winograd_values_in_range(const T* p, int64_t n);

// Same contracts as conv2d_forward / conv2d_backward_input (conv2d.h), for winograd_applies(d),
// except that they return false, leaving the output untouched, when x (dy) or w fails
// winograd_values_in_range; the caller then runs im2col. true: the output is written.
// x: (N, C, H, W), w: (K, C, 3, 3), bias: (K) or null -> y: (N, K, OH, OW) (overwritten).
template <typename T>
bool winograd_forward(const Conv2dDesc& d, const T* x, const T* w, const T* bias, T* y, void* workspace);
// dy: (N, K, OH, OW), w: (K, C, 3, 3) -> dx: (N, C, H, W) (overwritten).
template <typename T>
bool winograd_backward_input(const Conv2dDesc& d, const T* dy, const T* w, T* dx, void* workspace);
// x: (N, C, H, W), dy: (N, K, OH, OW) -> dw: (K, C, 3, 3) (overwritten; false when x or dy fails
// winograd_values_in_range). The bias gradient stays with conv2d_backward_weight.
template <typename T>
bool winograd_backward_weight(const Conv2dDesc& d, const T* x, const T* dy, T* dw, void* workspace);

// The two steps of winograd_forward / winograd_backward_input, so that the threads of conv2d.cpp's
// split by images share one weight transform (each thread transformed all of w for its share: 3% of
// a 2-thread 32x64 ResNet18 step, done twice). The workspace layout is the same: U (the first
// winograd_u_elems values), then the blocks' V and M.
int64_t winograd_u_elems(const Conv2dDesc& d);
// U from w (flip: the input gradient's, w turned 180 degrees); false when w fails
// winograd_values_in_range (U is then garbage). OpenMP over output channels.
template <typename T>
bool winograd_transform_weights(const Conv2dDesc& d, const T* w, bool flip, T* U);
// The forward (backward_input: the input gradient) given U; vm: scratch past U of a workspace of
// winograd_workspace_bytes. The caller has checked x (dy) with winograd_values_in_range: the
// threads decide together, so that no thread falls back to im2col (whose scratch overlaps U) while
// another still reads U.
template <typename T>
void winograd_forward_u(const Conv2dDesc& d, const T* x, const T* U, const T* bias, T* y, T* vm);
template <typename T>
void winograd_backward_input_u(const Conv2dDesc& d, const T* dy, const T* U, T* dx, T* vm);

}  // namespace kiln::cpu
