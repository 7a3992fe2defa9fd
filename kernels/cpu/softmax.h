// softmax and log_softmax over the last dim of a contiguous (rows, cols) buffer, forward and
// backward, on the CPU. The op layer moves the softmax dim last. Rows run in parallel.
#pragma once
#include <cstdint>

namespace kiln::cpu {

#include "kernels/common/api/softmax.inc"

}  // namespace kiln::cpu
