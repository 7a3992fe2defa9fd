// Max pool on channels-last (NHWC) data on the CPU: x (N, H, W, C) in memory -> y and the indices
// (N, OH, OW, C) in memory, and the backward. The channels are innermost, so each window's taps are
// compared for a run of channels at once (vectorized over C) instead of through NCHW copies of x, y and dy
// (they took 28 ms of a bf16 ResNet18 step at 8x224 on channels-last batches). The same rule and bits as
// pool.h's NCHW kernels: taps in row order, a larger value or a NaN takes the place (the last NaN wins), the
// first tap inside the plane starts (a window of -inf reports it), compares in f32 for 16-bit data and the
// winner stored in S; an index is h * W + w within the plane, as NCHW's. The backward gathers for each input
// the outputs whose windows hold it, in output order, summing in f32 from +0 those whose index is it and
// rounding once to S: the NCHW scatter's sums in its order, so its bits. S = bfloat16, half or float.
// Never allocates; (n, oh) rows run in parallel.
#pragma once
#include <cstdint>

#include "engine/core/half.h"
#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

template <typename S>
void max_pool2d_forward_nhwc(const Pool2dDesc& d, const S* x, S* y, int64_t* indices);
template <typename S>
void max_pool2d_backward_nhwc(const Pool2dDesc& d, const S* dy, const int64_t* indices, S* dx);

}  // namespace kiln::cpu
