// Convolution of small output planes on the CPU by valid taps (NCHW, contiguous, groups 1,
// dilation 1): for each output pixel only the kernel taps whose input pixel lies inside the plane
// are multiplied, with no column buffer. im2col multiplies the padding's zeros too: on a 2x2 plane
// a 3x3 pad-1 kernel meets the plane with 16 of its 36 (output pixel, tap) pairs, so im2col spends
// 2.25x the multiply-adds (ResNet18's layer4 at 64 px: ~22% of the f32 train step). The weights
// are repacked tap-major, Wt (K, R*S, C), so that the taps of one kernel row that meet the plane
// are one contiguous block of columns; the images are the GEMMs' columns (x gathered to
// (H*W, C, N)), so each (output pixel, kernel row) is one GEMM of (K, N, taps*C).
// Used only through conv2d.cpp, which decides per pass which algorithm runs (conv2d_uses_taps):
// this file does not choose, does not allocate (the caller's workspace of taps_workspace_bytes),
// and never starts OpenBLAS threads inside an OpenMP region (kiln's gemm).
// Numerics: a sum over the same products as the direct convolution without the padding's zero
// terms, so a NaN or inf weight meeting only padding does not turn an output into NaN (im2col's
// 0 * inf does).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

// True when this file computes the desc: groups 1, dilation 1.
bool taps_applies(const Conv2dDesc& d);

// (output pixel, tap) pairs whose input pixel is inside the plane, per image and channel pair (the
// multiply-adds this file does per (n, k, c)); im2col does R*S*OH*OW.
int64_t taps_met_pairs(const Conv2dDesc& d);

// Scratch bytes of all three passes: Wt (K*R*S*C), the gathered input (N*C*H*W) and the gathered
// output side (N*K*OH*OW).
size_t taps_workspace_bytes(const Conv2dDesc& d, size_t elem_size);

// Same contracts as conv2d_forward / conv2d_backward_input / conv2d_backward_weight's dw (conv2d.h)
// for taps_applies(d). x: (N, C, H, W), w: (K, C, R, S), bias: (K) or null -> y (N, K, OH, OW),
// overwritten.
template <typename T>
void taps_forward(const Conv2dDesc& d, const T* x, const T* w, const T* bias, T* y, void* workspace);
// dy: (N, K, OH, OW), w -> dx: (N, C, H, W), overwritten.
template <typename T>
void taps_backward_input(const Conv2dDesc& d, const T* dy, const T* w, T* dx, void* workspace);
// x, dy -> dw: (K, C, R, S), overwritten (0 when N is 0).
template <typename T>
void taps_backward_weight(const Conv2dDesc& d, const T* x, const T* dy, T* dw, void* workspace);

// The two steps of taps_forward / taps_backward_input, so that the threads of conv2d.cpp's split by
// images share one repack of the weights (the layout of the workspace is the same: Wt, its first
// taps_wt_elems values, then each thread's scratch of the gathered input and output).
int64_t taps_wt_elems(const Conv2dDesc& d);
// Wt (K, R*S, C) from w (K, C, R, S); OpenMP over output channels.
template <typename T>
void taps_repack_weights(const Conv2dDesc& d, const T* w, T* wt);
// scratch: N*C*H*W + N*K*OH*OW values of d (d.N: this call's images).
template <typename T>
void taps_forward_packed(const Conv2dDesc& d, const T* x, const T* wt, const T* bias, T* y, T* scratch);
template <typename T>
void taps_backward_input_packed(const Conv2dDesc& d, const T* dy, const T* wt, T* dx, T* scratch);

}  // namespace kiln::cpu
