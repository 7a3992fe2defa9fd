// Plain descriptors of the neural-network ops (conv, pooling), shared by the CPU and CUDA
// backends: sizes, strides, padding, dilation and PyTorch's output-size formulas. No memory,
// no validation beyond arithmetic (the kernels' entry points check and throw kiln::Error).
#pragma once
#include <cstdint>

#include "engine/core/host_device.h"
#include "engine/core/op_modes.h"

namespace kiln {

// x: (N, C, H, W), w: (K, C/groups, R, S), bias: (K), y: (N, K, out_h, out_w).
struct Conv2dDesc {
  int64_t N = 1, C = 1, H = 1, W = 1;
  int64_t K = 1, R = 1, S = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;

  // floor((H + 2p - d(R-1) - 1) / s) + 1, as torch.nn.Conv2d.
  KILN_HOST_DEVICE int64_t out_h() const { return (H + 2 * pad_h - dil_h * (R - 1) - 1) / stride_h + 1; }
  KILN_HOST_DEVICE int64_t out_w() const { return (W + 2 * pad_w - dil_w * (S - 1) - 1) / stride_w + 1; }
  // Multiply-adds of the forward pass (each backward pass costs the same).
  KILN_HOST_DEVICE double forward_macs() const {
    return (double)N * (double)K * (double)out_h() * (double)out_w() * (double)(C / groups) * (double)R *
           (double)S;
  }
};

// PyTorch's pooling_output_shape: floor or ceil of (in + 2p - d(k-1) - 1) / s, + 1; with ceil_mode
// the last window must start inside the input or the left padding, else it is dropped.
KILN_HOST_DEVICE int64_t pool_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil,
                                       bool ceil_mode) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // Floor division (num may be negative for too-small inputs; the caller rejects out < 1).
  int64_t q = num >= 0 ? num / stride : -((-num + stride - 1) / stride);
  int64_t out = q + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// x: (N, C, H, W) -> y: (N, C, out_h, out_w); window kh x kw. Dilation is used by max pooling only.
struct Pool2dDesc {
  int64_t N = 1, C = 1, H = 1, W = 1;
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
  bool ceil_mode = false;

  KILN_HOST_DEVICE int64_t out_h() const { return pool_out_size(H, kh, stride_h, pad_h, dil_h, ceil_mode); }
  KILN_HOST_DEVICE int64_t out_w() const { return pool_out_size(W, kw, stride_w, pad_w, dil_w, ceil_mode); }
};

// Window of average pooling along one axis for output index o: [start, end) clipped to the input,
// and padded_len, the window clipped to the padded input (the count_include_pad divisor).
struct AvgWin {
  int64_t start, end, padded_len;
};
KILN_HOST_DEVICE AvgWin avg_win(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t in) {
  const int64_t s = o * stride - pad;
  const int64_t e = s + k < in + pad ? s + k : in + pad;
  AvgWin w;
  w.padded_len = e - s;
  w.start = s > 0 ? s : 0;
  w.end = e < in ? e : in;
  return w;
}

// Adaptive average pooling window of output index o over an input of length `in` split into
// `out` windows: [start, end) with start = floor(o*in/out), end = ceil((o+1)*in/out), as PyTorch.
KILN_HOST_DEVICE int64_t adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
KILN_HOST_DEVICE int64_t adaptive_end(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

// Loss reductions, as torch's reduction= strings.

}  // namespace kiln
