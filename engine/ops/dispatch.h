// Internal helpers of engine/ops: operand descriptors from tensors, input checks, and the
// device dispatch of backend kernels (cpu, cuda; meta runs nothing).
#pragma once
#include <string>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "kernels/common/strided.h"
#include "kernels/common/cuda_backend.h"
#include "kernels/cpu/elementwise.h"

namespace kiln {

// The operand view of `t` broadcast to `shape` (strides 0 on broadcast dims).
StridedOperand operand_of(const Tensor& t, const Shape& shape);
// Permutes the loop's dims (and every operand's strides) into the memory order of ops[0], the output:
// a channels-last output walks (N, H, W, C), so channels-last operands coalesce into one contiguous run
// (the bf16 rows, vectorized) instead of a C-strided loop. Elementwise results do not depend on the order.
void in_memory_order(LoopShape& s, StridedOperand* ops, int nops);
LoopShape loop_shape_of(const Shape& shape);

void check_defined(const Tensor& t, const char* op, const char* what);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_floating(const Tensor& t, const char* op);

// Device dispatch: kiln::cpu::fn, or on a cuda device the same entry of the cuda backend in force
// (kernels/common/cuda_backend.h: the real backend, or the CPU execution mode in its tests), with the
// same arguments; nothing on meta. With no cuda backend it throws "cuda kernels are not built in this
// kiln". `fn` may be a template instance (max_pool2d_forward<T>): the table forwards to fn's T entry.
#define KILN_CUDA_CALL(fn, ...) ::kiln::cuda_backend_or_throw().fn(__VA_ARGS__)
#define KILN_DISPATCH(device, fn, ...)                         \
  do {                                                         \
    ::kiln::Device kiln_dev_ = (device);                       \
    ::kiln::OpSpanScope kiln_span_(#fn);                       \
    if (kiln_dev_.is_cpu()) ::kiln::cpu::fn(__VA_ARGS__);      \
    else if (kiln_dev_.is_cuda()) KILN_CUDA_CALL(fn, __VA_ARGS__); \
  } while (0)

// Runs a backend elementwise op out = op(x) / op(x, y) with broadcasting already resolved.
void launch_unary(UnaryOp op, const Tensor& out, const Tensor& x, double a = 0, double b = 0);
void launch_binary(BinaryOp op, const Tensor& out, const Tensor& x, const Tensor& y, double a = 1);
void launch_copy(const Tensor& dst, const Tensor& src);
void launch_fill(const Tensor& dst, double v);

}  // namespace kiln
