#include "engine/ops/dispatch.h"

#include <algorithm>
#include <climits>

namespace kiln {

StridedOperand operand_of(const Tensor& t, const Shape& shape) {
  KILN_CHECK((int)shape.size() <= kMaxDims, "tensors of more than ", kMaxDims, " dims are not supported (",
             shape_str(shape), ")");
  StridedOperand o;
  o.data = static_cast<char*>(t.data_ptr());
  o.dtype = t.dtype();
  size_t n = shape.size(), tn = t.sizes().size();
  for (size_t i = 0; i < n; ++i) {
    if (i < n - tn) {
      o.strides[i] = 0;
      continue;
    }
    size_t j = i - (n - tn);
    o.strides[i] = t.sizes()[j] == 1 && shape[i] != 1 ? 0 : t.strides()[j];
  }
  return o;
}

LoopShape loop_shape_of(const Shape& shape) {
  LoopShape s;
  s.ndim = (int)shape.size();
  for (size_t i = 0; i < shape.size(); ++i) s.sizes[i] = shape[i];
  return s;
}

void check_defined(const Tensor& t, const char* op, const char* what) {
  KILN_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}
void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  KILN_CHECK(a.device() == b.device(), op, ": tensors on different devices: ", a.str(), " and ", b.str());
}
void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  KILN_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", a.str(), " and ", b.str(),
             " (convert one with to_dtype)");
}
void check_floating(const Tensor& t, const char* op) {
  KILN_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, got ", t.str());
}

void in_memory_order(LoopShape& s, StridedOperand* ops, int nops) {
  // The dims of size > 1 ordered by the output's strides, largest first (stable); size-1 dims first (the
  // kernels' coalesce_dims drops them). Already so (row-major outputs): nothing changes.
  int perm[kMaxDims];
  for (int d = 0; d < s.ndim; ++d) perm[d] = d;
  auto key = [&](int d) { return s.sizes[d] == 1 ? INT64_MAX : ops[0].strides[d]; };
  bool sorted = true;
  for (int d = 1; d < s.ndim; ++d) sorted = sorted && key(d - 1) >= key(d);
  if (sorted) return;
  std::stable_sort(perm, perm + s.ndim, [&](int a, int b) { return key(a) > key(b); });
  LoopShape t = s;
  for (int d = 0; d < s.ndim; ++d) t.sizes[d] = s.sizes[perm[d]];
  s = t;
  for (int k = 0; k < nops; ++k) {
    int64_t st[kMaxDims];
    for (int d = 0; d < s.ndim; ++d) st[d] = ops[k].strides[perm[d]];
    for (int d = 0; d < s.ndim; ++d) ops[k].strides[d] = st[d];
  }
}

void launch_unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) {
  if (out.numel() == 0) return;
  LoopShape s = loop_shape_of(out.sizes());
  StridedOperand ops[2] = {operand_of(out, out.sizes()), operand_of(x, out.sizes())};
  in_memory_order(s, ops, 2);
  KILN_DISPATCH(out.device(), unary, op, s, ops[0], ops[1], a, b);
}

void launch_binary(BinaryOp op, const Tensor& out, const Tensor& x, const Tensor& y, double a) {
  if (out.numel() == 0) return;
  LoopShape s = loop_shape_of(out.sizes());
  StridedOperand ops[3] = {operand_of(out, out.sizes()), operand_of(x, out.sizes()), operand_of(y, out.sizes())};
  in_memory_order(s, ops, 3);
  KILN_DISPATCH(out.device(), binary, op, s, ops[0], ops[1], ops[2], a);
}

void launch_copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  LoopShape s = loop_shape_of(dst.sizes());
  StridedOperand ops[2] = {operand_of(dst, dst.sizes()), operand_of(src, dst.sizes())};
  in_memory_order(s, ops, 2);
  KILN_DISPATCH(dst.device(), copy, s, ops[0], ops[1]);
}

void launch_fill(const Tensor& dst, double v) {
  if (dst.numel() == 0) return;
  LoopShape s = loop_shape_of(dst.sizes());
  StridedOperand ops[1] = {operand_of(dst, dst.sizes())};
  in_memory_order(s, ops, 1);
  KILN_DISPATCH(dst.device(), fill, s, ops[0], v);
}

}  // namespace kiln
