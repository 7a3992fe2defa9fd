// bf16 2-D convolution on the CPU's matrix units through oneDNN (AMX tiles or AVX512-BF16, bf16_path.h):
// forward, input gradient, weight (and bias) gradient, f32 accumulation. The activations x, y, dy, dx are
// NCHW (Bf16Layout::nchw) or all NHWC (Bf16Layout::nhwc, kiln's channels-last); w and dw are always KCRS.
// For NCHW oneDNN picks blocked layouts for x, w, y, dy; for NHWC it runs on x, y, dy, dx as they are (only w
// is reordered) unless it would take a gemm / ref kernel there, then that pass takes the blocked layouts with
// reorders from and to NHWC (conv2d_bf16.cpp). The reorders into and out of them and oneDNN's own
// scratchpad (scratchpad_mode::user) are carved out of ONE caller-provided workspace of
// conv2d_bf16_workspace_bytes(d, pass, bias) bytes, so kiln's allocator owns every byte (kiln allocates it
// tagged `temporary`, and a meta run allocates the same). The size comes from oneDNN's memory descriptors:
// it depends on the ISA (amx vs avx512_bf16) and the thread count (cpu::set_num_threads), never a constant.
// Primitives are cached per (desc, pass, bias, threads, path, layout). Kernels never allocate tensors.
// The weight gradient may split the images (Bf16Wgrad::split) or the output channels (split_channels) between
// kiln's threads, or run as kiln's im2col + one oneDNN matmul (im2col): each thread's single-threaded oneDNN
// call, its reorders, scratchpad and f32 partial, or the col and dy^T buffers, sit in the same one workspace.
// Only groups == 1 with a reduction C*R*S >= 16 takes this path (conv2d_bf16_uses_onednn, a measured rule);
// groups == 1 with C*R*S < 16 (the small CNN's conv1) runs kiln's direct kernel (conv2d_bf16_direct.h) on every
// path; everything else, and C*R*S >= 16 on the portable path, is computed by engine/ops/nn_conv.cpp through f32
// copies and kiln's f32 kernels.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/half.h"
#include "kernels/common/nn_desc.h"
#include "kernels/cpu/conv2d.h"

namespace kiln::cpu {

// The bias (forward) and bias gradient (backward_weight): absent, f32 or bf16 values of (K).
enum class Bf16Bias { none, f32, bf16 };
// The memory layout of the activations x, y, dy, dx (all four the same): NCHW or NHWC (channels-last).
enum class Bf16Layout { nchw, nhwc };

// True when this bf16 convolution runs on oneDNN: groups == 1, C*R*S >= 16 (the measured rule in
// conv2d_bf16.cpp, docs/cpu-bf16.md) and bf16_path() is an onednn one.
bool conv2d_bf16_uses_onednn(const Conv2dDesc& d);
// How a bf16 weight gradient that uses oneDNN runs:
//   onednn      one oneDNN call over all images, threaded by oneDNN (its reduction across threads);
//   split       kiln's threads each run a single-threaded oneDNN call on their share of the images into
//               their own f32 partial (all in the one workspace), then one vectorized sum rounded to dw;
//   f32_staging x and dy copied to f32, kiln's f32 kernel (engine/ops/nn_conv.cpp), dw rounded;
//   split_channels  kiln's threads each run a single-threaded oneDNN call over all images for their share of
//               the output channels (whole blocks of 16), writing their rows of dw (and dbias) directly;
//   im2col      kiln's im2col of x (bf16) and dy's planes side by side, then one oneDNN bf16 matmul
//               dw = dy^T col^T (threaded by oneDNN), at any thread count; on NHWC the windows' rows of x
//               and dy read in place (conv2d_bf16_im2col.h).
// With one thread split and split_channels are onednn; split with one image, and split_channels with K < 32,
// are f32_staging. by_rule is only a value for set_bf16_wgrad_forced.
enum class Bf16Wgrad { by_rule, onednn, split, f32_staging, split_channels, im2col };
// The weight gradient's algorithm for this desc and thread count (the measured rule in conv2d_bf16.cpp,
// docs/cpu-bf16.md), unless forced (set_bf16_wgrad_forced, or KILN_BF16_WGRAD=onednn|split|channels|im2col|f32 read
// once).
// Only for descs where conv2d_bf16_uses_onednn.
Bf16Wgrad conv2d_bf16_wgrad(const Conv2dDesc& d, Bf16Layout layout = Bf16Layout::nchw);
// "onednn", "split", "f32 staging", "split by channel", "im2col + matmul", "by rule".
const char* bf16_wgrad_name(Bf16Wgrad w);
// Forces the weight gradient's algorithm (by_rule: back to the rule); returns the previous setting. For tests
// and benchmarks; not thread-safe against running convolutions.
Bf16Wgrad set_bf16_wgrad_forced(Bf16Wgrad w);
// Per pass, for a desc that uses oneDNN: false for the weight gradient when conv2d_bf16_wgrad is f32_staging;
// the op then computes that pass through f32 copies and kiln's f32 kernel.
bool conv2d_bf16_pass_uses_onednn(const Conv2dDesc& d, Conv2dPass pass, Bf16Layout layout = Bf16Layout::nchw);

// Workspace bytes of one pass (its reorders and oneDNN's scratchpad, 64-byte aligned pieces, plus 64 so
// any base address works). Only for descs where conv2d_bf16_uses_onednn.
size_t conv2d_bf16_workspace_bytes(const Conv2dDesc& d, Conv2dPass pass, Bf16Bias bias,
                                   Bf16Layout layout = Bf16Layout::nchw);

// x: (N, C, H, W), w: (K, C, R, S), bias: (K) of `bias` type or null -> y: (N, K, OH, OW) (overwritten).
// x and y dense in `layout` (nhwc: (N, H, W, C) in memory), w KCRS.
void conv2d_bf16_forward(const Conv2dDesc& d, const bfloat16* x, const bfloat16* w, const void* bias, Bf16Bias bt,
                         bfloat16* y, void* workspace, Bf16Layout layout = Bf16Layout::nchw);
// dy: (N, K, OH, OW), w: (K, C, R, S) -> dx: (N, C, H, W) (overwritten); dy and dx dense in `layout`.
void conv2d_bf16_backward_input(const Conv2dDesc& d, const bfloat16* dy, const bfloat16* w, bfloat16* dx,
                                void* workspace, Bf16Layout layout = Bf16Layout::nchw);
// x: (N, C, H, W), dy: (N, K, OH, OW) -> dw: (K, C, R, S) and, when bt != none, dbias: (K) of bt's type
// (overwritten); x and dy dense in `layout`, dw KCRS.
void conv2d_bf16_backward_weight(const Conv2dDesc& d, const bfloat16* x, const bfloat16* dy, bfloat16* dw,
                                 void* dbias, Bf16Bias bt, void* workspace, Bf16Layout layout = Bf16Layout::nchw);

// oneDNN's implementation name for this pass ("brgconv:avx512_core_amx_bf16", ...): tests print it. For nhwc a
// pass that fell back to the blocked layouts says so (" (blocked)").
const char* conv2d_bf16_impl_name(const Conv2dDesc& d, Conv2dPass pass, Bf16Bias bias,
                                  Bf16Layout layout = Bf16Layout::nchw);

}  // namespace kiln::cpu
