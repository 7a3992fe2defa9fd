// CPU elementwise kernels over strided operands: copy/cast, fill, unary, binary, where, random
// fill. Compute in f32 (f64 for f64), round on store; OpenMP over the outer loop.
#pragma once
#include "kernels/common/elementwise_math.h"
#include "kernels/common/strided.h"

namespace kiln::cpu {

void copy(const LoopShape& shape, StridedOperand dst, StridedOperand src);  // any dtype pair
void fill(const LoopShape& shape, StridedOperand dst, double value);
void unary(UnaryOp op, const LoopShape& shape, StridedOperand out, StridedOperand in, double a, double b);
void binary(BinaryOp op, const LoopShape& shape, StridedOperand out, StridedOperand x, StridedOperand y, double a);
// cond is u8 (nonzero selects x).
void where(const LoopShape& shape, StridedOperand out, StridedOperand cond, StridedOperand x, StridedOperand y);
// Philox draws into a contiguous buffer: kind 0 uniform [lo, hi), 1 normal(mean=lo, std=hi).
void random_fill(void* out, DType dt, int64_t n, int kind, double lo, double hi, uint64_t seed, uint64_t offset);

}  // namespace kiln::cpu
