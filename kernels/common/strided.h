// Raw description of a strided elementwise loop, shared by the CPU and CUDA backends: an
// iteration shape and, per operand, a base pointer, dtype and element strides (0 = broadcast).
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"

namespace kiln {

constexpr int kMaxDims = 8;

struct StridedOperand {
  char* data = nullptr;
  DType dtype = DType::f32;
  int64_t strides[kMaxDims] = {0};
};

struct LoopShape {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {0};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
};

// Merges adjacent dims that are contiguous with each other in every operand and drops size-1
// dims, so most loops become one flat dim. Always leaves ndim >= 1.
void coalesce_dims(LoopShape& shape, StridedOperand* ops, int nops);

}  // namespace kiln
