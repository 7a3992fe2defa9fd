// Convolution of small output planes on the CPU by valid taps (NCHW, contiguous, groups 1,
// dilation 1): for each output pixel only the kernel taps whose input pixel lies inside the plane
// are multiplied, with no column buffer. im2col multiplies the padding's zeros too: on a 2x2 plane
// a 3x3 pad-1 kernel meets the plane with 16 of its 36 (output pixel, tap) pairs, so im2col spends
// 2.25x the multiply-adds (ResNet18's layer4 at 64 px: ~22% of the f32 train step). The weights
// are repacked tap-major, Wt (K, R*S, C), so that the taps of one kernel row that meet the plane
// are one contiguous block of columns; the images are the GEMMs' columns (x gathered to
// (H*W, C, N)), so each (output pixel, kernel row) is one GEMM of (K, N, taps*C).
// Threads: every GEMM keeps all images as its columns (split by images, a thread's GEMMs had 16 or
// fewer at batch 32 and ran at 55-80% of the 32-column speed); the threads split the output channels
// (forward, weight gradient) or the input channels (input gradient) in one OpenMP region, and the
// repack, gathers and scatters are OpenMP loops. Inside an OpenMP region everything runs on the
// calling thread.
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

}  // namespace kiln::cpu
