// Reductions over dims. The input is permuted so reduced dims are last and made contiguous,
// then reduced row by row by the backend. NaN and empty dims follow PyTorch 1.13: sums and means
// propagate NaN/inf; max/min pick the first NaN; a reduction over a 0-size dim gives 0 (sum) or NaN
// (mean, var) and max/min over one is an error, as in torch. Gradients: max/min along a dim route
// to the returned index; max/min over all elements split the gradient evenly among the tied
// elements (all NaNs when the result is NaN), like torch's evenly_distribute_backward on the CPU.
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "engine/ops/autocast.h"
#include "engine/ops/dispatch.h"
#include "kernels/cpu/reduce.h"

namespace kiln {
namespace {

struct ReducePlan {
  std::vector<bool> reduced;
  Shape out_keep;    // output shape with keepdim
  Shape out_shape;   // output shape as requested
  int64_t rows = 1, cols = 1;
  std::vector<int64_t> perm;
};

ReducePlan plan_reduce(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, const char* op) {
  ReducePlan p;
  int64_t nd = x.dim();
  p.reduced.assign(nd, dims.empty());
  for (int64_t d : dims) {
    int w = wrap_dim(d, nd, op);
    if (nd == 0) continue;
    KILN_CHECK(!p.reduced[w] || dims.empty(), op, ": dim ", w, " given twice");
    p.reduced[w] = true;
  }
  for (int64_t i = 0; i < nd; ++i)
    if (!p.reduced[i]) p.perm.push_back(i);
  for (int64_t i = 0; i < nd; ++i)
    if (p.reduced[i]) p.perm.push_back(i);
  for (int64_t i = 0; i < nd; ++i) {
    if (p.reduced[i]) {
      p.cols *= x.sizes()[i];
      p.out_keep.push_back(1);
    } else {
      p.rows *= x.sizes()[i];
      p.out_keep.push_back(x.sizes()[i]);
      p.out_shape.push_back(x.sizes()[i]);
    }
  }
  if (keepdim) p.out_shape = p.out_keep;
  return p;
}

// Runs the row reduction; returns (values with out_shape, indices or undefined).
std::pair<Tensor, Tensor> run_reduce(ReduceOp op, const Tensor& x, const ReducePlan& p, bool want_idx,
                                     const char* name) {
  check_floating(x, name);
  Tensor out = empty(p.out_shape, x.dtype(), x.device());
  Tensor idx = want_idx ? empty(p.out_shape, DType::i64, x.device()) : Tensor();
  if (out.numel() == 0) return {out, idx};
  if (p.cols == 0) {  // a 0-size reduced dim: torch's identities (sum 0, mean and var NaN)
    KILN_CHECK(op != ReduceOp::max && op != ReduceOp::min, name, ": cannot reduce over a dim of size 0 of ",
               x.str(), " (max and min have no identity)");
    launch_fill(out, op == ReduceOp::sum ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    return {out, idx};
  }
  Tensor xp = contiguous(permute(x.detach(), p.perm));
  KILN_DISPATCH(x.device(), reduce_rows, op, x.dtype(), xp.data_ptr(), p.rows, p.cols, out.data_ptr(),
                want_idx ? idx.data<int64_t>() : nullptr);
  return {out, idx};
}

Tensor sum_impl(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);
Tensor mean_impl(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);

}  // namespace

// sum and mean are on autocast's f32 list; backward formulas and sum_to call the plain versions
// so they keep their gradient's dtype even inside a region.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_defined(x, "sum", "input");
  if (autocast_enabled()) {
    Tensor xf = autocast_detail::to_f32(x);
    autocast_detail::Suspend off;
    return sum_impl(xf, dims, keepdim);
  }
  return sum_impl(x, dims, keepdim);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_defined(x, "mean", "input");
  if (autocast_enabled()) {
    Tensor xf = autocast_detail::to_f32(x);
    autocast_detail::Suspend off;
    return mean_impl(xf, dims, keepdim);
  }
  return mean_impl(x, dims, keepdim);
}

namespace {

Tensor sum_impl(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  ReducePlan p = plan_reduce(x, dims, keepdim, "sum");
  Tensor out = run_reduce(ReduceOp::sum, x, p, false, "sum").first;
  Shape in_shape = x.sizes(), keep = p.out_keep;
  record_op("sum", {x}, {out}, [in_shape, keep](FunctionNode&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{contiguous(expand(reshape(g[0], keep), in_shape))};
  });
  return out;
}

Tensor mean_impl(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  ReducePlan p = plan_reduce(x, dims, keepdim, "mean");
  Tensor out = run_reduce(ReduceOp::mean, x, p, false, "mean").first;
  Shape in_shape = x.sizes(), keep = p.out_keep;
  double inv = 1.0 / (double)std::max<int64_t>(p.cols, 1);
  record_op("mean", {x}, {out}, [in_shape, keep, inv](FunctionNode&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{mul(expand(reshape(g[0], keep), in_shape), inv)};
  });
  return out;
}

}  // namespace

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, bool unbiased, bool keepdim) {
  check_defined(x, "var", "input");
  ReducePlan p = plan_reduce(x, dims, keepdim, "var");
  Tensor out = run_reduce(unbiased ? ReduceOp::var_unbiased : ReduceOp::var, x, p, false, "var").first;
  Shape keep = p.out_keep;
  std::vector<int64_t> rd;
  for (size_t i = 0; i < p.reduced.size(); ++i)
    if (p.reduced[i]) rd.push_back((int64_t)i);
  double den = (double)(unbiased ? p.cols - 1 : p.cols);
  auto node = record_op("var", {x}, {out}, [keep, rd, den](FunctionNode& n, const std::vector<Tensor>& g) {
    // d var / dx = 2 (x - mean) / den
    Tensor x = n.saved(0);
    Tensor m = mean_impl(x, rd, true);
    Tensor gk = reshape(g[0], keep);
    return std::vector<Tensor>{mul(mul(sub(x, m), gk), 2.0 / den)};
  });
  if (node) node->save(x);
  return out;
}

static ValuesIndices max_min(const Tensor& x, int64_t dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "max" : "min";
  check_defined(x, name, "input");
  ReducePlan p = plan_reduce(x, {dim}, keepdim, name);
  auto [vals, idx] = run_reduce(is_max ? ReduceOp::max : ReduceOp::min, x, p, true, name);
  Shape in_shape = x.sizes(), keep = p.out_keep;
  int d = wrap_dim(dim, x.dim(), name);
  auto node = record_op(name, {x}, {vals}, [in_shape, keep, d](FunctionNode& n, const std::vector<Tensor>& g) {
    // Route the gradient to the selected index along dim d: a one-hot mask built from the saved
    // indices (device-generic: no scatter kernel needed).
    Tensor id = n.saved(0);
    Tensor ik = reshape(id, keep);
    Shape ar_shape(in_shape.size(), 1);
    int64_t n_d = in_shape.empty() ? 1 : in_shape[d];
    if (!in_shape.empty()) ar_shape[d] = n_d;
    Tensor ar = reshape(arange(n_d, DType::i64, id.device()), ar_shape);
    Tensor mask = eq(ar, ik);  // u8, broadcast to in_shape
    Tensor gi = where(mask, reshape(g[0], keep), zeros({}, g[0].dtype(), g[0].device()));
    return std::vector<Tensor>{gi};
  });
  if (node) node->save(idx);
  return {vals, idx};
}

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) { return max_min(x, dim, keepdim, true); }
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) { return max_min(x, dim, keepdim, false); }
// Max/min over all elements. Backward as torch on the CPU: mask = (x == value), or isnan(x) when
// the value is NaN; d/dx = where(mask, g / count(mask), 0).
static Tensor max_min_all(const Tensor& x, bool is_max) {
  const char* name = is_max ? "max" : "min";
  check_defined(x, name, "input");
  KILN_CHECK(x.numel() > 0, name, ": the ", name, " of an empty tensor ", x.str(), " is undefined (give a dim)");
  Tensor v;
  {
    NoGradGuard ng;
    v = max_min(reshape(x.detach(), {-1}), 0, false, is_max).values;  // shape ()
  }
  auto node = record_op(name, {x}, {v}, [](FunctionNode& n, const std::vector<Tensor>& g) {
    Tensor x = n.saved(0), v = n.saved(1);
    auto mask01 = [](BinaryOp op, const Tensor& a, const Tensor& b) {  // 1/0 in a's dtype, broadcast
      Shape s = broadcast_shapes(a.sizes(), b.sizes(), "max backward");
      Tensor m = empty(s, a.dtype(), a.device());
      launch_binary(op, m, a, b);
      return m;
    };
    Tensor one = ones({}, x.dtype(), x.device());
    Tensor x_nan = sub(one, mask01(BinaryOp::eq, x, x));  // 1 where x is NaN
    Tensor v_nan = sub(one, mask01(BinaryOp::eq, v, v));  // 1 when the result is NaN
    Tensor mask = add(mask01(BinaryOp::eq, x, v), mul(x_nan, v_nan));
    Tensor share = div(g[0], sum_impl(mask, {}, false));  // g / number of tied elements
    return std::vector<Tensor>{where(to_dtype(mask, DType::u8), share, zeros({}, g[0].dtype(), g[0].device()))};
  });
  if (node) {
    node->save(x);
    node->save(v);
  }
  return v;
}

Tensor max(const Tensor& x) { return max_min_all(x, true); }
Tensor min(const Tensor& x) { return max_min_all(x, false); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard ng;
  return max_min(x, dim, keepdim, true).indices;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.sizes() == shape) return x;
  size_t lead = x.sizes().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < x.sizes().size(); ++i) {
    if (i < lead) dims.push_back((int64_t)i);
    else if (shape[i - lead] == 1 && x.sizes()[i] != 1) dims.push_back((int64_t)i);
  }
  if (dims.empty()) return reshape(x, shape);
  return reshape(sum_impl(x, dims, true), shape);
}

}  // namespace kiln
