// Elementwise ops with broadcasting, their in-place variants and backward formulas.
// NaN, inf and ties follow PyTorch 1.13 forward and backward (the scalar math and its NaN rules are
// in kernels/common/elementwise_math.h; tests/parity/test_parity_nonfinite.cpp checks every op here
// on NaN, +-inf, +-0 and ties). Masked gradients (relu, clamp, maximum/minimum, pow's zero cases)
// are selected with where, not multiplied by a 0/1 mask, so a NaN upstream gradient stays where
// torch keeps it. Deliberate differences from PyTorch: none known; clamp_ refuses tensors that
// require grad (torch allows it).
#include "engine/ops/dispatch.h"

namespace kiln {
namespace {

// Output format of an elementwise op of shape s: channels-last when an operand of that exact shape
// is channels-last (so NHWC activations stay NHWC through relu, add, ...), else contiguous.
MemoryFormat out_format(const Shape& s, const Tensor& a, const Tensor& b = Tensor()) {
  for (const Tensor* t : {&a, &b})
    if (t->defined() && t->sizes() == s && suggest_memory_format(*t) == MemoryFormat::channels_last)
      return MemoryFormat::channels_last;
  return MemoryFormat::contiguous;
}

Tensor binary_forward(BinaryOp op, const char* name, const Tensor& a, const Tensor& b, double alpha) {
  check_defined(a, name, "first operand");
  check_defined(b, name, "second operand");
  check_same_device(a, b, name);
  check_same_dtype(a, b, name);
  check_floating(a, name);
  Shape s = broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = empty(s, a.dtype(), a.device(), out_format(s, a, b));
  launch_binary(op, out, a, b, alpha);
  return out;
}

Tensor unary_forward(UnaryOp op, const char* name, const Tensor& x, double a = 0, double b = 0) {
  check_defined(x, name, "input");
  check_floating(x, name);
  Tensor out = empty(x.sizes(), x.dtype(), x.device(), out_format(x.sizes(), x));
  launch_unary(op, out, x, a, b);
  return out;
}

// 0/1 mask in x's dtype.
Tensor mask_of(BinaryOp op, const Tensor& a, const Tensor& b) {
  Shape s = broadcast_shapes(a.sizes(), b.sizes(), "mask");
  Tensor out = empty(s, a.dtype(), a.device(), out_format(s, a, b));
  launch_binary(op, out, a, b, 1.0);
  return out;
}

using Grads = std::vector<Tensor>;

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  Tensor out = binary_forward(BinaryOp::add, "add", a, b, alpha);
  Shape sa = a.sizes(), sb = b.sizes();
  record_op("add", {a, b}, {out}, [sa, sb, alpha](FunctionNode& n, const Grads& g) {
    Grads r(2);
    if (n.needs_input_grad(0)) r[0] = sum_to(g[0], sa);
    if (n.needs_input_grad(1)) r[1] = sum_to(alpha == 1.0 ? g[0] : mul(g[0], alpha), sb);
    return r;
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  Tensor out = binary_forward(BinaryOp::sub, "sub", a, b, alpha);
  Shape sa = a.sizes(), sb = b.sizes();
  record_op("sub", {a, b}, {out}, [sa, sb, alpha](FunctionNode& n, const Grads& g) {
    Grads r(2);
    if (n.needs_input_grad(0)) r[0] = sum_to(g[0], sa);
    if (n.needs_input_grad(1)) r[1] = sum_to(mul(g[0], -alpha), sb);
    return r;
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::mul, "mul", a, b, 1.0);
  auto node = record_op("mul", {a, b}, {out}, [](FunctionNode& n, const Grads& g) {
    Grads r(2);
    Tensor a = n.saved(0), b = n.saved(1);
    if (n.needs_input_grad(0)) r[0] = sum_to(mul(g[0], b), a.sizes());
    if (n.needs_input_grad(1)) r[1] = sum_to(mul(g[0], a), b.sizes());
    return r;
  });
  if (node) {
    node->save(a);
    node->save(b);
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::div, "div", a, b, 1.0);
  auto node = record_op("div", {a, b}, {out}, [](FunctionNode& n, const Grads& g) {
    Grads r(2);
    Tensor a = n.saved(0), b = n.saved(1);
    if (n.needs_input_grad(0)) r[0] = sum_to(div(g[0], b), a.sizes());
    if (n.needs_input_grad(1)) r[1] = sum_to(neg(div(mul(g[0], a), mul(b, b))), b.sizes());
    return r;
  });
  if (node) {
    node->save(a);
    node->save(b);
  }
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::pow, "pow", a, b, 1.0);
  auto node = record_op("pow", {a, b}, {out}, [](FunctionNode& n, const Grads& g) {
    Grads r(2);
    Tensor a = n.saved(0), b = n.saved(1), out = n.saved(2);
    Tensor zero = zeros({}, g[0].dtype(), g[0].device());
    // PyTorch's masks: d/da is 0 where b == 0 (so pow(0, 0) and pow(NaN, 0) give 0, not 0 * inf);
    // d/db is g * 0 where a == 0 and b >= 0 (out * log(a) would be 0 * -inf).
    if (n.needs_input_grad(0)) {
      Tensor da = mul(g[0], mul(b, pow(a, sub(b, ones_like(b)))));
      r[0] = sum_to(where(eq(b, zero), zero, da), a.sizes());
    }
    if (n.needs_input_grad(1)) {
      Tensor a0 = mul(mask_of(BinaryOp::eq, a, zero), mask_of(BinaryOp::ge_mask, b, zero));
      Tensor db = where(to_dtype(a0, DType::u8), zero, mul(out, log(a)));
      r[1] = sum_to(mul(g[0], db), b.sizes());
    }
    return r;
  });
  if (node) {
    node->save(a);
    node->save(b);
    node->save(out);
  }
  return out;
}

static Tensor minmax(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(op, name, a, b, 1.0);
  bool is_max = op == BinaryOp::maximum;
  auto node = record_op(name, {a, b}, {out}, [is_max](FunctionNode& n, const Grads& g) {
    Grads r(2);
    Tensor a = n.saved(0), b = n.saved(1);
    // PyTorch's rule: ties split the gradient evenly; the losing side gets exactly 0 (masked, so a
    // NaN gradient does not leak into it); where a or b is NaN neither side loses, so both get g.
    Tensor zero = zeros({}, g[0].dtype(), g[0].device());
    Tensor gh = where(eq(a, b), mul(g[0], 0.5), g[0]);
    if (n.needs_input_grad(0)) r[0] = sum_to(where(is_max ? lt(a, b) : gt(a, b), zero, gh), a.sizes());
    if (n.needs_input_grad(1)) r[1] = sum_to(where(is_max ? gt(a, b) : lt(a, b), zero, gh), b.sizes());
    return r;
  });
  if (node) {
    node->save(a);
    node->save(b);
  }
  return out;
}
Tensor maximum(const Tensor& a, const Tensor& b) { return minmax(BinaryOp::maximum, "maximum", a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return minmax(BinaryOp::minimum, "minimum", a, b); }

// ---- scalar forms ----
Tensor add(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::add_scalar, "add", a, s);
  record_op("add_scalar", {a}, {out}, [](FunctionNode&, const Grads& g) { return Grads{g[0]}; });
  return out;
}
Tensor mul(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::mul_scalar, "mul", a, s);
  record_op("mul_scalar", {a}, {out}, [s](FunctionNode&, const Grads& g) { return Grads{mul(g[0], s)}; });
  return out;
}
Tensor rsub(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::rsub_scalar, "rsub", a, s);
  record_op("rsub", {a}, {out}, [](FunctionNode&, const Grads& g) { return Grads{neg(g[0])}; });
  return out;
}
Tensor pow(const Tensor& a, double p) {
  Tensor out = unary_forward(UnaryOp::pow_scalar, "pow", a, p);
  auto node = record_op("pow_scalar", {a}, {out}, [p](FunctionNode& n, const Grads& g) {
    Tensor x = n.saved(0);
    if (p == 0.0) return Grads{zeros_like(g[0])};
    return Grads{mul(mul(g[0], pow(x, p - 1.0)), p)};
  });
  if (node) node->save(a);
  return out;
}

// ---- unary ----
Tensor neg(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::neg, "neg", x);
  record_op("neg", {x}, {out}, [](FunctionNode&, const Grads& g) { return Grads{neg(g[0])}; });
  return out;
}

// Unary ops whose gradient is g * f(saved), with saved = input or output.
#define KILN_UNARY_SAVING(fn, OP, SAVE_OUT, GRAD_EXPR)                                    \
  Tensor fn(const Tensor& x) {                                                            \
    Tensor out = unary_forward(UnaryOp::OP, #fn, x);                                      \
    auto node = record_op(#fn, {x}, {out}, [](FunctionNode& n, const Grads& g) {          \
      Tensor s = n.saved(0);                                                              \
      (void)s;                                                                            \
      return Grads{GRAD_EXPR};                                                            \
    });                                                                                   \
    if (node) node->save(SAVE_OUT ? out : x);                                             \
    return out;                                                                           \
  }

KILN_UNARY_SAVING(exp, exp, true, mul(g[0], s))
KILN_UNARY_SAVING(log, log, false, div(g[0], s))
KILN_UNARY_SAVING(sqrt, sqrt, true, div(g[0], mul(s, 2.0)))
KILN_UNARY_SAVING(rsqrt, rsqrt, true, mul(mul(g[0], pow(s, 3.0)), -0.5))
KILN_UNARY_SAVING(abs, abs, false, mul(g[0], [&] {
  Tensor sg = empty(s.sizes(), s.dtype(), s.device(), out_format(s.sizes(), s));
  launch_unary(UnaryOp::sign, sg, s);
  return sg;
}()))
KILN_UNARY_SAVING(sigmoid, sigmoid, true, mul(g[0], mul(s, rsub(s, 1.0))))
KILN_UNARY_SAVING(tanh, tanh, true, mul(g[0], rsub(mul(s, s), 1.0)))
KILN_UNARY_SAVING(gelu, gelu, false, mul(g[0], [&] {
  Tensor d = empty(s.sizes(), s.dtype(), s.device(), out_format(s.sizes(), s));
  launch_unary(UnaryOp::gelu_grad, d, s);
  return d;
}()))
#undef KILN_UNARY_SAVING

static Tensor relu_grad(const Tensor& g, const Tensor& out) {
  Tensor r = empty(g.sizes(), g.dtype(), g.device(), out_format(g.sizes(), g, out));
  launch_binary(BinaryOp::relu_grad, r, g, out);
  return r;
}

Tensor relu(const Tensor& x) {
  Tensor out = unary_forward(UnaryOp::relu, "relu", x);
  auto node = record_op("relu", {x}, {out}, [](FunctionNode& n, const Grads& g) {
    return Grads{relu_grad(g[0], n.saved(0))};
  });
  if (node) node->save(out);
  return out;
}

Tensor leaky_relu(const Tensor& x, double slope) {
  Tensor out = unary_forward(UnaryOp::leaky_relu, "leaky_relu", x, slope);
  auto node = record_op("leaky_relu", {x}, {out}, [slope](FunctionNode& n, const Grads& g) {
    Tensor r = empty(g[0].sizes(), g[0].dtype(), g[0].device(), out_format(g[0].sizes(), g[0], n.saved(0)));
    launch_binary(BinaryOp::leaky_relu_grad, r, g[0], n.saved(0), slope);
    return Grads{r};
  });
  if (node) node->save(x);
  return out;
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  double l = lo ? *lo : -INFINITY, h = hi ? *hi : INFINITY;
  Tensor out = unary_forward(UnaryOp::clamp, "clamp", x, l, h);
  auto node = record_op("clamp", {x}, {out}, [l, h](FunctionNode& n, const Grads& g) {
    Tensor x = n.saved(0);
    // gradient flows where lo <= x <= hi
    Tensor m = empty(x.sizes(), x.dtype(), x.device(), out_format(x.sizes(), x));
    launch_unary(UnaryOp::clamp, m, x, l, h);
    // where, not mul: torch masks (a NaN or inf gradient at a clamped element gives 0, not NaN)
    return Grads{where(eq(m, x), g[0], zeros({}, g[0].dtype(), g[0].device()))};
  });
  if (node) node->save(x);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined(cond, "where", "condition");
  check_same_dtype(a, b, "where");
  check_same_device(a, b, "where");
  check_same_device(cond, a, "where");
  KILN_CHECK(cond.dtype() == DType::u8, "where: condition must be u8, got ", cond.str());
  Shape s = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor out = empty(s, a.dtype(), a.device());
  if (out.numel() > 0) {
    LoopShape ls = loop_shape_of(s);
    KILN_DISPATCH(out.device(), where, ls, operand_of(out, s), operand_of(cond, s), operand_of(a, s),
                  operand_of(b, s));
  }
  Shape sa = a.sizes(), sb = b.sizes();
  auto node = record_op("where", {a, b}, {out}, [sa, sb](FunctionNode& n, const Grads& g) {
    Tensor c = n.saved(0);
    Tensor z = zeros({}, g[0].dtype(), g[0].device());
    Grads r(2);
    if (n.needs_input_grad(0)) r[0] = sum_to(where(c, g[0], z), sa);
    if (n.needs_input_grad(1)) r[1] = sum_to(where(c, z, g[0]), sb);
    return r;
  });
  if (node) node->save(cond);
  return out;
}

// ---- comparisons (u8, no gradient) ----
static Tensor compare(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  check_defined(a, name, "first operand");
  check_defined(b, name, "second operand");
  check_same_device(a, b, name);
  check_same_dtype(a, b, name);
  Tensor fa = is_floating(a.dtype()) ? a.detach() : to_dtype(a.detach(), DType::f64);
  Tensor fb = is_floating(b.dtype()) ? b.detach() : to_dtype(b.detach(), DType::f64);
  return to_dtype(mask_of(op, fa, fb), DType::u8);
}
Tensor gt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::gt, "gt", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(BinaryOp::lt, "lt", a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return compare(BinaryOp::eq, "eq", a, b); }
Tensor gt(const Tensor& a, double s) {
  Tensor fa = is_floating(a.dtype()) ? a.detach() : to_dtype(a.detach(), DType::f64);
  Tensor m = empty(a.sizes(), fa.dtype(), a.device());
  launch_unary(UnaryOp::gt_scalar, m, fa, s);
  return to_dtype(m, DType::u8);
}
Tensor isfinite_all(const Tensor& x) {
  check_floating(x, "isfinite_all");
  if (x.numel() == 0) return ones({}, DType::u8, x.device());  // nothing non-finite in an empty tensor
  // max propagates NaN and reaches +inf, min reaches -inf: x is all finite iff both are. Two
  // reductions (grid-wide on cuda), no full-size mask; hi - hi + lo - lo is 0, or NaN when not.
  NoGradGuard ng;
  const Tensor flat = reshape(x.detach(), {-1});
  const Tensor hi = max(flat), lo = min(flat);
  Tensor m = empty({}, x.dtype(), x.device());
  launch_unary(UnaryOp::isfinite, m, add(sub(hi, hi), sub(lo, lo)));
  return to_dtype(m, DType::u8);
}

// ---- in place ----
Tensor& add_(Tensor& a, const Tensor& b, double alpha) {
  check_same_dtype(a, b, "add_");
  check_same_device(a, b, "add_");
  KILN_CHECK(broadcast_shapes(a.sizes(), b.sizes(), "add_") == a.sizes(), "add_: ", b.str(),
             " does not broadcast to ", a.str());
  check_inplace("add_", a, {b});
  launch_binary(BinaryOp::add, a, a, b, alpha);
  a.bump_version();
  Shape sb = b.sizes();
  record_inplace_op("add_", a, {b}, [sb, alpha](FunctionNode& n, const Grads& g) {
    Grads r(2);
    r[0] = g[0];
    if (n.needs_input_grad(1)) r[1] = sum_to(mul(g[0], alpha), sb);
    return r;
  });
  return a;
}
Tensor& sub_(Tensor& a, const Tensor& b, double alpha) { return add_(a, b, -alpha); }
Tensor& add_(Tensor& a, double s) {
  check_floating(a, "add_");
  check_inplace("add_", a, {});
  launch_unary(UnaryOp::add_scalar, a, a, s);
  a.bump_version();
  record_inplace_op("add_scalar_", a, {}, [](FunctionNode&, const Grads& g) { return Grads{g[0]}; });
  return a;
}
Tensor& mul_(Tensor& a, double s) {
  check_floating(a, "mul_");
  check_inplace("mul_", a, {});
  launch_unary(UnaryOp::mul_scalar, a, a, s);
  a.bump_version();
  record_inplace_op("mul_scalar_", a, {}, [s](FunctionNode&, const Grads& g) { return Grads{mul(g[0], s)}; });
  return a;
}
Tensor& mul_(Tensor& a, const Tensor& b) {
  check_same_dtype(a, b, "mul_");
  check_same_device(a, b, "mul_");
  KILN_CHECK(broadcast_shapes(a.sizes(), b.sizes(), "mul_") == a.sizes(), "mul_: ", b.str(),
             " does not broadcast to ", a.str());
  check_inplace("mul_", a, {b});
  bool track = any_requires_grad({a, b});
  Tensor a_old = track && b.requires_grad() ? clone(a.detach()) : Tensor();
  launch_binary(BinaryOp::mul, a, a, b, 1.0);
  a.bump_version();
  Shape sb = b.sizes();
  auto node = record_inplace_op("mul_", a, {b}, [sb](FunctionNode& n, const Grads& g) {
    Grads r(2);
    r[0] = mul(g[0], n.saved(0));
    if (n.needs_input_grad(1)) r[1] = sum_to(mul(g[0], n.saved(1)), sb);
    return r;
  });
  if (node) {
    node->save(b);
    node->save(a_old);
  }
  return a;
}
Tensor& div_(Tensor& a, const Tensor& b) {
  Tensor inv = div(ones({}, b.dtype(), b.device()), b);
  return mul_(a, inv);
}
Tensor& relu_(Tensor& a) {
  check_floating(a, "relu_");
  check_inplace("relu_", a, {});
  launch_unary(UnaryOp::relu, a, a);
  a.bump_version();
  auto node = record_inplace_op("relu_", a, {}, [](FunctionNode& n, const Grads& g) {
    return Grads{relu_grad(g[0], n.saved(0))};
  });
  if (node) node->save(a);
  return a;
}
Tensor& clamp_(Tensor& a, std::optional<double> lo, std::optional<double> hi) {
  KILN_CHECK(!any_requires_grad({a}), "clamp_: in-place clamp of a tensor that requires grad is not supported; use clamp");
  launch_unary(UnaryOp::clamp, a, a, lo ? *lo : -INFINITY, hi ? *hi : INFINITY);
  a.bump_version();
  return a;
}

}  // namespace kiln
