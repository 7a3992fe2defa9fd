#include "engine/ops/dispatch.h"

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

void launch_unary(UnaryOp op, const Tensor& out, const Tensor& x, double a, double b) {
  if (out.numel() == 0) return;
  LoopShape s = loop_shape_of(out.sizes());
  KILN_DISPATCH(out.device(), unary, op, s, operand_of(out, out.sizes()), operand_of(x, out.sizes()), a, b);
}

void launch_binary(BinaryOp op, const Tensor& out, const Tensor& x, const Tensor& y, double a) {
  if (out.numel() == 0) return;
  LoopShape s = loop_shape_of(out.sizes());
  KILN_DISPATCH(out.device(), binary, op, s, operand_of(out, out.sizes()), operand_of(x, out.sizes()),
                operand_of(y, out.sizes()), a);
}

void launch_copy(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  LoopShape s = loop_shape_of(dst.sizes());
  KILN_DISPATCH(dst.device(), copy, s, operand_of(dst, dst.sizes()), operand_of(src, dst.sizes()));
}

void launch_fill(const Tensor& dst, double v) {
  if (dst.numel() == 0) return;
  LoopShape s = loop_shape_of(dst.sizes());
  KILN_DISPATCH(dst.device(), fill, s, operand_of(dst, dst.sizes()), v);
}

}  // namespace kiln
