// conv_transpose2d: x (N, C, H, W), w (C, K/groups, R, S), b (K) -> y (N, K, OH, OW).
// f32/f64 kernels on every device; 16-bit tensors compute in f32 and round on store (on cuda too:
// there is no 16-bit transposed-convolution kernel yet), saving the 16-bit x and w for backward.
// Workspace: the CPU kernels' column buffer (K*R*S*H*W elements). None on cuda, and none in a meta
// run that imitates cuda (kiln mem --device cuda:N).
#include "engine/core/meta_target.h"
#include "engine/ops/autocast.h"
#include "engine/ops/nn_common.h"
#include "engine/ops/upsampling.h"
#include "kernels/common/upsample_check.h"
#include "kernels/cpu/conv_transpose2d.h"

namespace kiln {

namespace {

size_t convt_workspace_bytes(const ConvTranspose2dDesc& d, DType dt, Device dev) {
  if (dev.is_cuda() || (dev.is_meta() && meta_target().is_cuda())) return 0;
  return cpu::conv_transpose2d_workspace_bytes(d, dtype_size(dt));
}

}  // namespace

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b, std::vector<int64_t> stride,
                        std::vector<int64_t> padding, std::vector<int64_t> output_padding, int64_t groups,
                        std::vector<int64_t> dilation) {
  const char* op = "conv_transpose2d";
  check_defined(x, op, "input");
  check_defined(w, op, "weight");
  if (autocast_enabled()) {  // lower-precision list, as conv2d
    using namespace autocast_detail;
    Tensor xl = to_lower(x), wl = to_lower(w), bl = to_lower(b);
    Suspend off;
    return conv_transpose2d(xl, wl, bl, stride, padding, output_padding, groups, dilation);
  }
  check_same_dtype(x, w, op);
  check_same_device(x, w, op);
  KILN_CHECK(x.dim() == 4, op, ": input must be 4-D (N, C_in, H, W), got ", x.str());
  KILN_CHECK(w.dim() == 4, op, ": weight must be 4-D (C_in, C_out/groups, R, S), got ", w.str());
  stride = expand_pair(stride, op, "stride");
  padding = expand_pair(padding, op, "padding");
  output_padding = expand_pair(output_padding, op, "output_padding");
  dilation = expand_pair(dilation, op, "dilation");
  KILN_CHECK(groups >= 1, op, ": groups must be >= 1, got ", groups);
  KILN_CHECK(w.size(0) == x.size(1), op, ": weight ", w.str(), " expects ", w.size(0),
             " input channels but input ", x.str(), " has ", x.size(1));
  KILN_CHECK(x.size(1) % groups == 0, op, ": groups ", groups, " must divide the input channels of ", x.str());
  ConvTranspose2dDesc d;
  d.N = x.size(0), d.C = x.size(1), d.H = x.size(2), d.W = x.size(3);
  d.K = w.size(1) * groups, d.R = w.size(2), d.S = w.size(3);
  d.stride_h = stride[0], d.stride_w = stride[1], d.pad_h = padding[0], d.pad_w = padding[1];
  d.outpad_h = output_padding[0], d.outpad_w = output_padding[1];
  d.dil_h = dilation[0], d.dil_w = dilation[1], d.groups = groups;
  if (b.defined())
    KILN_CHECK(b.dim() == 1 && b.size(0) == d.K, op, ": bias ", b.str(), " does not match ", d.K,
               " output channels of weight ", w.str());
  if (b.defined() && !is_16bit(x.dtype())) check_same_dtype(x, b, op);
  conv_transpose2d_check(d, op);
  const bool half = is_16bit(x.dtype());
  const DType xdt = x.dtype(), bdt = b.defined() ? b.dtype() : x.dtype();
  auto compute = [half](const Tensor& t) { return half && t.defined() ? to_dtype(t, DType::f32) : t; };
  Tensor xc = contiguous(x.detach()), wc = contiguous(w.detach());
  Tensor bc = b.defined() ? contiguous(b.detach()) : Tensor();
  Tensor y;
  {
    Tensor xk = compute(xc), wk = compute(wc), bk = compute(bc);
    Tensor yk = empty({d.N, d.K, d.out_h(), d.out_w()}, xk.dtype(), x.device());
    Tensor ws = workspace(convt_workspace_bytes(d, xk.dtype(), x.device()), x.device());
    KILN_NN_TYPED(xk.dtype(), op,
                  KILN_DISPATCH(x.device(), conv_transpose2d_forward<T>, d, ptr<T>(xk), ptr<T>(wk), ptr<T>(bk),
                                ptr<T>(yk), ws.data_ptr()));
    y = half ? to_dtype(yk, xdt) : yk;
  }
  const bool has_bias = b.defined();
  auto node = record_op(op, {x, w, b}, {y}, [d, has_bias, half, xdt, bdt, compute](FunctionNode& n,
                                                                               const std::vector<Tensor>& g) {
    Tensor x = compute(n.saved(0)), w = compute(n.saved(1));
    Tensor dy = contiguous(compute(g[0]));
    auto back = [half](const Tensor& t, DType dt) { return half && t.defined() ? to_dtype(t, dt) : t; };
    std::vector<Tensor> r(3);
    Tensor ws = workspace(convt_workspace_bytes(d, x.dtype(), x.device()), x.device());
    if (n.needs_input_grad(0)) {
      Tensor dx = empty(x.sizes(), x.dtype(), x.device());
      KILN_NN_TYPED(x.dtype(), "conv_transpose2d backward",
                    KILN_DISPATCH(x.device(), conv_transpose2d_backward_input<T>, d, ptr<T>(dy), ptr<T>(w),
                                  ptr<T>(dx), ws.data_ptr()));
      r[0] = back(dx, xdt);
    }
    if (n.needs_input_grad(1) || n.needs_input_grad(2)) {
      Tensor dw = empty(w.sizes(), w.dtype(), w.device());
      Tensor db = has_bias ? empty({d.K}, w.dtype(), w.device()) : Tensor();
      KILN_NN_TYPED(x.dtype(), "conv_transpose2d backward",
                    KILN_DISPATCH(x.device(), conv_transpose2d_backward_weight<T>, d, ptr<T>(x), ptr<T>(dy),
                                  ptr<T>(dw), ptr<T>(db), ws.data_ptr()));
      r[1] = back(dw, xdt);
      r[2] = back(db, bdt);
    }
    return r;
  });
  if (node) {
    node->save(xc);
    node->save(wc);
  }
  return y;
}

}  // namespace kiln
