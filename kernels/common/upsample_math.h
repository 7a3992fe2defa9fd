// Descriptors and index math of the two ops that grow a feature map, shared by the CPU and CUDA
// backends as KILN_HOST_DEVICE functions:
//   - conv_transpose2d (torch.nn.functional.conv_transpose2d): output-size formula and the
//     per-element gather sums the CUDA kernels run (the CPU runs GEMM + col2im and is tested against
//     these sums in tests/unit/test_upsampling.cpp);
//   - interpolate (F.interpolate, PyTorch 1.13, modes nearest and bilinear): the nearest-index rule
//     (float arithmetic, with torch's exact shortcuts for out == in and out == 2*in) and the bilinear
//     source index and weights (align_corners true/false, user scale factor or in/out).
// No memory, no validation (kernels/common/upsample_check.h validates), no device code beyond math.
#pragma once
#include <math.h>

#include <cstdint>

#include "engine/core/host_device.h"
#include "engine/core/op_modes.h"
#include "kernels/common/float_to_int.h"

namespace kiln {

// x: (N, C, H, W), w: (C, K/groups, R, S), bias: (K), y: (N, K, out_h, out_w).
// C = input channels, K = output channels (torch's weight layout: in first).
struct ConvTranspose2dDesc {
  int64_t N = 1, C = 1, H = 1, W = 1;
  int64_t K = 1, R = 1, S = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t outpad_h = 0, outpad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;

  // (H - 1) s - 2p + d (R - 1) + output_padding + 1, as torch.nn.ConvTranspose2d.
  KILN_HOST_DEVICE int64_t out_h() const { return (H - 1) * stride_h - 2 * pad_h + dil_h * (R - 1) + outpad_h + 1; }
  KILN_HOST_DEVICE int64_t out_w() const { return (W - 1) * stride_w - 2 * pad_w + dil_w * (S - 1) + outpad_w + 1; }
};

// Input position i along one axis that output position o reads through kernel tap r, or -1:
// i * stride = o + pad - r * dil must hold exactly with 0 <= i < in.
KILN_HOST_DEVICE int64_t convt_source(int64_t o, int64_t r, int64_t stride, int64_t pad, int64_t dil,
                                             int64_t in) {
  const int64_t t = o + pad - r * dil;
  if (t < 0 || t % stride != 0) return -1;
  const int64_t i = t / stride;
  return i < in ? i : -1;
}

// y[n, k, oh, ow] without the bias: sum over c in k's group, taps (r, s) of x[n, c, ih, iw] w[c, k', r, s].
// x, w contiguous NCHW / (C, K/groups, R, S). A accumulates (float for float, double for double).
template <typename A, typename T>
KILN_HOST_DEVICE A convt_output_at(const ConvTranspose2dDesc& d, const T* x, const T* w, int64_t n, int64_t k,
                                   int64_t oh, int64_t ow) {
  const int64_t Cg = d.C / d.groups, Kg = d.K / d.groups, g = k / Kg, kk = k % Kg;
  A acc = A(0);
  for (int64_t r = 0; r < d.R; ++r) {
    const int64_t ih = convt_source(oh, r, d.stride_h, d.pad_h, d.dil_h, d.H);
    if (ih < 0) continue;
    for (int64_t s = 0; s < d.S; ++s) {
      const int64_t iw = convt_source(ow, s, d.stride_w, d.pad_w, d.dil_w, d.W);
      if (iw < 0) continue;
      for (int64_t cc = 0; cc < Cg; ++cc) {
        const int64_t c = g * Cg + cc;
        acc += (A)x[((n * d.C + c) * d.H + ih) * d.W + iw] * (A)w[((c * Kg + kk) * d.R + r) * d.S + s];
      }
    }
  }
  return acc;
}

// dx[n, c, ih, iw] = sum over k in c's group, taps (r, s) of dy[n, k, ih*sh - ph + r*dh, ...] w[c, k', r, s].
template <typename A, typename T>
KILN_HOST_DEVICE A convt_input_grad_at(const ConvTranspose2dDesc& d, const T* dy, const T* w, int64_t n, int64_t c,
                                       int64_t ih, int64_t iw) {
  const int64_t Cg = d.C / d.groups, Kg = d.K / d.groups, g = c / Cg, OH = d.out_h(), OW = d.out_w();
  A acc = A(0);
  for (int64_t r = 0; r < d.R; ++r) {
    const int64_t oh = ih * d.stride_h - d.pad_h + r * d.dil_h;
    if (oh < 0 || oh >= OH) continue;
    for (int64_t s = 0; s < d.S; ++s) {
      const int64_t ow = iw * d.stride_w - d.pad_w + s * d.dil_w;
      if (ow < 0 || ow >= OW) continue;
      for (int64_t kk = 0; kk < Kg; ++kk) {
        const int64_t k = g * Kg + kk;
        acc += (A)dy[((n * d.K + k) * OH + oh) * OW + ow] * (A)w[((c * Kg + kk) * d.R + r) * d.S + s];
      }
    }
  }
  return acc;
}

// One term of dw[c, k', r, s]: x[n, c, ih, iw] dy[n, k, oh, ow] with oh = ih*sh - ph + r*dh,
// ow = iw*sw - pw + s*dw, or 0 when (oh, ow) falls outside the output.
template <typename A, typename T>
KILN_HOST_DEVICE A convt_weight_term(const ConvTranspose2dDesc& d, const T* x, const T* dy, int64_t c, int64_t kk,
                                     int64_t r, int64_t s, int64_t n, int64_t ih, int64_t iw) {
  const int64_t Cg = d.C / d.groups, Kg = d.K / d.groups, k = (c / Cg) * Kg + kk, OH = d.out_h(), OW = d.out_w();
  const int64_t oh = ih * d.stride_h - d.pad_h + r * d.dil_h, ow = iw * d.stride_w - d.pad_w + s * d.dil_w;
  if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) return A(0);
  return (A)x[((n * d.C + c) * d.H + ih) * d.W + iw] * (A)dy[((n * d.K + k) * OH + oh) * OW + ow];
}

// dw[c, k', r, s] = sum over n, ih, iw of convt_weight_term (the CUDA kernel splits this sum
// over a block's threads; the CPU test sums it here).
template <typename A, typename T>
KILN_HOST_DEVICE A convt_weight_grad_at(const ConvTranspose2dDesc& d, const T* x, const T* dy, int64_t c,
                                        int64_t kk, int64_t r, int64_t s) {
  A acc = A(0);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t ih = 0; ih < d.H; ++ih)
      for (int64_t iw = 0; iw < d.W; ++iw) acc += convt_weight_term<A>(d, x, dy, c, kk, r, s, n, ih, iw);
  return acc;
}

// ---- interpolate ----

// x: (N, C, H, W) -> y: (N, C, OH, OW). scale_h / scale_w: the user's scale factors when the output
// size came from them (torch passes them to the kernel), else 0 (the kernel then uses in / out).
struct Interp2dDesc {
  int64_t N = 1, C = 1, H = 1, W = 1, OH = 1, OW = 1;
  InterpMode mode = InterpMode::nearest;
  bool align_corners = false;
  double scale_h = 0, scale_w = 0;
};

// torch's nearest_idx (UpSample.h, 1.13): out == in copies, out == 2 in halves, else
// min(floor(o * scale), in - 1) in float, scale = 1/scale_factor if given else in/out.
KILN_HOST_DEVICE int64_t nearest_source_index(int64_t o, int64_t in, int64_t out, double scale_factor) {
  if (out == in) return o;
  if (out == 2 * in) return o >> 1;
  const float scale = scale_factor > 0 ? (float)(1.0 / scale_factor) : (float)in / (float)out;
  const int64_t i = float_to_int<int64_t>(floorf((float)o * scale));
  return i < in - 1 ? i : in - 1;
}

// The two input positions and weights of output position o along one axis (bilinear):
// value = l0 * x[i0] + l1 * x[i1], weights in T (the tensor's type).
template <typename T>
struct LinearTaps {
  int64_t i0, i1;
  T l0, l1;
};

// torch 1.13's CPU rule (area_pixel_compute_scale + area_pixel_compute_source_index +
// compute_source_index_and_lambda): the ratio in T ((in-1)/(out-1) with align_corners, else
// 1/scale_factor or in/out), the source index in double (the CPU accumulate type), i0 = trunc,
// l1 = T(real - i0), l0 = 1 - l1 in T. The double index matters at the edges: with align_corners,
// 3/7 in float times 7 is 3.00000003, so the last output keeps a weight of 3e-8 on pixel 3 instead of
// an exact 0, and a -inf there stays -inf instead of becoming -inf + 0 * -inf = NaN, as in torch.
template <typename T>
KILN_HOST_DEVICE LinearTaps<T> linear_source(int64_t o, int64_t in, int64_t out, bool align_corners,
                                             double scale_factor) {
  LinearTaps<T> t;
  if (out == in) {  // torch copies: weights (1, 0) on the same pixel
    t.i0 = t.i1 = o;
    t.l0 = T(1);
    t.l1 = T(0);
    return t;
  }
  double real;
  if (align_corners) {
    const T ratio = out > 1 ? (T)(in - 1) / (T)(out - 1) : T(0);
    real = (double)ratio * (double)o;
  } else {
    const T ratio = scale_factor > 0 ? (T)(1.0 / scale_factor) : (T)in / (T)out;
    real = (double)ratio * ((double)o + 0.5) - 0.5;
    if (real < 0) real = 0;
  }
  int64_t i0 = float_to_int<int64_t>(real);  // real >= 0: truncation
  if (i0 > in - 1) i0 = in - 1;
  t.i0 = i0;
  t.i1 = i0 + (i0 < in - 1 ? 1 : 0);
  t.l1 = (T)(real - (double)i0);
  t.l0 = T(1) - t.l1;
  return t;
}

}  // namespace kiln
