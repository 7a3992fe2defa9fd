// Pooling on the CPU (NCHW, contiguous): max, average and adaptive average, forward and backward,
// with PyTorch's window rules (padding, dilation for max, ceil_mode, count_include_pad, adaptive
// start/end). Planes (n, c) run in parallel. Never allocates.
#pragma once
#include <cstdint>

#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

// Throws kiln::Error (naming `op` and the desc) unless the pooling desc is valid (as PyTorch:
// padding at most half the kernel, output at least 1x1).
void pool2d_check(const Pool2dDesc& d, const char* op);

// x: (N, C, H, W) -> y: (N, C, OH, OW). indices (may be null): (N, C, OH, OW), the argmax as a
// flat h*W + w offset within its (H, W) plane, like PyTorch. Ties: the first max wins; NaN propagates.
template <typename T>
void max_pool2d_forward(const Pool2dDesc& d, const T* x, T* y, int64_t* indices);
// dy: (N, C, OH, OW), indices from the forward -> dx: (N, C, H, W) (overwritten).
template <typename T>
void max_pool2d_backward(const Pool2dDesc& d, const T* dy, const int64_t* indices, T* dx);

// Average over the window; divisor = window size clipped to the padded input when
// count_include_pad, else the number of real input elements in it. Requires dilation 1.
template <typename T>
void avg_pool2d_forward(const Pool2dDesc& d, bool count_include_pad, const T* x, T* y);
template <typename T>
void avg_pool2d_backward(const Pool2dDesc& d, bool count_include_pad, const T* dy, T* dx);

// x: (N, C, H, W) -> y: (N, C, OH, OW); window of output (oh, ow) is rows
// [adaptive_start(oh, H, OH), adaptive_end(oh, H, OH)) and likewise for columns.
template <typename T>
void adaptive_avg_pool2d_forward(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                 const T* x, T* y);
template <typename T>
void adaptive_avg_pool2d_backward(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                  const T* dy, T* dx);

}  // namespace kiln::cpu
