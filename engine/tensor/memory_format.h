// Memory formats of 4-D activations: `contiguous` (NCHW, row-major) and `channels_last` (NHWC in
// memory, still indexed as (N, C, H, W)). Only stride arithmetic lives here; the copies that change
// a tensor's format are ops (contiguous(x, fmt) in engine/ops/ops.h).
#pragma once
#include "engine/core/shape.h"

namespace kiln {

class Tensor;

enum class MemoryFormat { contiguous, channels_last };

const char* memory_format_name(MemoryFormat f);  // "contiguous" / "channels_last"

// Strides of a dense tensor of `sizes` in format f. channels_last needs 4 dims:
// sizes (N, C, H, W) -> strides (H*W*C, 1, W*C, C).
Shape strides_for(const Shape& sizes, MemoryFormat f);

// True when t is 4-D and dense in NHWC order (dims of size 1 may have any stride, as in
// Tensor::is_contiguous). A tensor with C == 1 or H == W == 1 can be both contiguous and channels-last.
bool is_channels_last(const Tensor& t);

// The format an op should give its output for input t: channels_last when t is channels-last and not
// also contiguous (the ambiguous cases stay contiguous, as in PyTorch), else contiguous.
MemoryFormat suggest_memory_format(const Tensor& t);

}  // namespace kiln
