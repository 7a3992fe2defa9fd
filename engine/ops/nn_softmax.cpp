// softmax / log_softmax along any dim (moved last, reduced row by row) and their backward.
// As torch: a NaN or +inf in a row makes the whole row NaN, a row of all -inf is NaN, and an empty
// input (a 0-size dim anywhere, the softmax dim included) gives an empty output and gradient.
#include "engine/ops/autocast.h"
#include "engine/ops/nn_common.h"
#include "kernels/cpu/softmax.h"

namespace kiln {
namespace {

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log_form) {
  const char* name = log_form ? "log_softmax" : "softmax";
  check_defined(x, name, "input");
  if (autocast_enabled()) {  // f32 list
    Tensor xf = autocast_detail::to_f32(x);
    autocast_detail::Suspend off;
    return softmax_impl(xf, dim, log_form);
  }
  if (is_16bit(x.dtype())) return to_dtype(softmax_impl(to_dtype(x, DType::f32), dim, log_form), x.dtype());
  int d = wrap_dim(dim, x.dim(), name);
  int64_t nd = std::max<int64_t>(x.dim(), 1);
  Tensor xt = x.dim() == 0 ? reshape(x.detach(), {1}) : transpose(x.detach(), d, nd - 1);
  Tensor xc = contiguous(xt);
  int64_t cols = xc.sizes().back(), rows = xc.numel() / std::max<int64_t>(cols, 1);
  Tensor yc = empty(xc.sizes(), x.dtype(), x.device());
  const bool none = xc.numel() == 0;  // nothing to compute (cols may be 0: the kernels need >= 1)
  if (!none && log_form)
    KILN_NN_TYPED(x.dtype(), name, KILN_DISPATCH(x.device(), log_softmax_forward<T>, rows, cols, ptr<T>(xc), ptr<T>(yc)));
  else if (!none)
    KILN_NN_TYPED(x.dtype(), name, KILN_DISPATCH(x.device(), softmax_forward<T>, rows, cols, ptr<T>(xc), ptr<T>(yc)));
  Tensor y = x.dim() == 0 ? reshape(yc, {}) : contiguous(transpose(yc, d, nd - 1));
  Shape xs = x.sizes();
  auto node = record_op(name, {x}, {y}, [=](FunctionNode& n, const std::vector<Tensor>& g) {
    Tensor yv = n.saved(0);
    Tensor yt = contiguous(x.dim() == 0 ? reshape(yv, {1}) : transpose(yv, d, nd - 1));
    Tensor gt = contiguous(x.dim() == 0 ? reshape(g[0], {1}) : transpose(g[0], d, nd - 1));
    Tensor dx = empty(yt.sizes(), yt.dtype(), yt.device());
    if (!none && log_form)
      KILN_NN_TYPED(yt.dtype(), name,
                    KILN_DISPATCH(yt.device(), log_softmax_backward<T>, rows, cols, ptr<T>(yt), ptr<T>(gt), ptr<T>(dx)));
    else if (!none)
      KILN_NN_TYPED(yt.dtype(), name,
                    KILN_DISPATCH(yt.device(), softmax_backward<T>, rows, cols, ptr<T>(yt), ptr<T>(gt), ptr<T>(dx)));
    return std::vector<Tensor>{xs.empty() ? reshape(dx, {}) : contiguous(transpose(dx, d, nd - 1))};
  });
  if (node) node->save(y);
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

}  // namespace kiln
