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
#include "kernels/cpu/elementwise.h"
#if defined(KILN_WITH_CUDA)
#include "kernels/cuda/backend.h"
#endif

namespace kiln {

// The operand view of `t` broadcast to `shape` (strides 0 on broadcast dims).
StridedOperand operand_of(const Tensor& t, const Shape& shape);
LoopShape loop_shape_of(const Shape& shape);

void check_defined(const Tensor& t, const char* op, const char* what);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op);
void check_floating(const Tensor& t, const char* op);

// Device dispatch: kiln::cpu::fn or kiln::cuda::fn with the same arguments; nothing on meta.
#if defined(KILN_WITH_CUDA)
#define KILN_CUDA_CALL(fn, ...) ::kiln::cuda::fn(__VA_ARGS__)
#else
#define KILN_CUDA_CALL(fn, ...) throw ::kiln::Error("cuda kernels are not built in this kiln (KILN_CUDA=OFF)")
#endif
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
