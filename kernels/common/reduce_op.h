// Reduction opcodes shared by the CPU and CUDA backends.
#pragma once
#include <cstdint>

namespace kiln {

// Reductions over the last axis of a contiguous (rows, cols) buffer.
enum class ReduceOp : uint8_t { sum, mean, max, min, var, var_unbiased };

}  // namespace kiln
