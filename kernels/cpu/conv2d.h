// 2-D convolution on the CPU (NCHW, contiguous): forward, input gradient, weight/bias gradient.
// im2col + OpenBLAS GEMM, with several images per GEMM when the output plane is small and no
// im2col at all for 1x1 / stride 1 / pad 0; Winograd F(2x2, 3x3) (conv2d_winograd.h) for the
// passes of 3x3 stride-1 layers where it pays (conv2d_uses_winograd, per pass); valid taps
// (conv2d_taps.h: no padding zeros multiplied) for the passes of small planes where they pay. With several threads each pass is split by
// images (each thread its own images and workspace slice; conv2d.cpp). Kernels never allocate: the
// caller passes a scratch buffer of conv2d_workspace_bytes() bytes (kiln allocates it tagged
// `temporary`); its size depends on the thread count (cpu::set_num_threads), so set that first.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

#include "kernels/common/api/conv2d.inc"

// Images whose columns share one GEMM (1 when the output plane alone is wide enough).
int64_t conv2d_images_per_block(const Conv2dDesc& d);

// Which algorithm runs the three passes. automatic: Winograd where conv2d_winograd_pays(d, pass),
// else valid taps (conv2d_taps.h) where conv2d_taps_pays(d, pass), else im2col. im2col / winograd /
// taps: that one wherever it applies (im2col elsewhere).
enum class Conv2dAlgo { automatic, im2col, winograd, taps };
enum class Conv2dPass { forward, backward_input, backward_weight };

// For tests and benchmarks: every later call uses `a` (winograd still only where winograd_applies;
// conv2d_workspace_bytes follows, so call it after this). The first use reads the environment
// variable KILN_CPU_CONV=auto|im2col|winograd|taps (unset: auto; anything else throws kiln::Error).
// Must not be called while a convolution runs.
void conv2d_set_algo(Conv2dAlgo a);
Conv2dAlgo conv2d_algo();

// The automatic choice for one pass: Winograd applies (3x3, stride 1, dilation 1, groups 1, pad
// <= 2), the layer has at least 16 input and output channels, and one thread's share of the images
// (the passes are split by images, see conv2d.cpp) saves enough multiply-adds to pay for the
// transforms; the weight gradient asks for more (conv2d.cpp has the rule and the measurements). It
// depends on the thread count (cpu::set_num_threads), like the workspace.
bool conv2d_winograd_pays(const Conv2dDesc& d, Conv2dPass pass);
// Whether this pass takes the Winograd path for this desc under the current setting (it still
// falls back to im2col per call when x, dy or w holds a value that is non-finite or above 1e15 in
// f32 / 1e150 in f64, see winograd_values_in_range).
bool conv2d_uses_winograd(const Conv2dDesc& d, Conv2dPass pass);

// The automatic choice of valid taps (conv2d_taps.h) for a pass that does not take Winograd: small
// output planes, where im2col would multiply many padding zeros, and enough images per thread for
// the GEMMs' columns (conv2d.cpp has the rule and the measurements). Depends on the thread count.
bool conv2d_taps_pays(const Conv2dDesc& d, Conv2dPass pass);
// Whether this pass takes valid taps for this desc under the current setting (no per-call fallback).
bool conv2d_uses_taps(const Conv2dDesc& d, Conv2dPass pass);

}  // namespace kiln::cpu
