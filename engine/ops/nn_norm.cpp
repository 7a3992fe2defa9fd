// batch_norm over x (N, C, *): statistics per channel. Training mode normalizes with batch
// statistics and updates the running stats in place; eval mode uses the running stats.
// Deliberate difference from PyTorch: the CPU kernels normalize as (x - mean) * invstd with x - mean
// in double (kernels/cpu/batch_norm.cpp), not torch's x * scale + shift, so a channel whose mean is
// large against its std keeps its digits (f32 error 1e-7 where torch's is 1e-6 .. 1e-2). NaN in a
// channel makes that channel's output and running statistics NaN, as in torch.
#include "engine/ops/nn_common.h"
#include "kernels/cpu/batch_norm.h"

namespace kiln {

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  check_defined(x, "batch_norm", "input");
  // A 16-bit input is normalized in f32 (the autocast rule for norms; the affine parameters and
  // running statistics stay f32) and the output rounded back; backward keeps only the 16-bit input.
  const bool half = is_16bit(x.dtype());
  const DType xdt = x.dtype(), cdt = half ? DType::f32 : x.dtype();
  KILN_CHECK(x.dim() >= 2, "batch_norm: input must be (N, C, ...), got ", x.str());
  int64_t N = x.size(0), C = x.size(1), HW = x.numel() / std::max<int64_t>(N * C, 1);
  // A channels-last x (N, C, H, W) is (N*H*W, C) in memory: the same per-channel statistics with
  // the kernels' (N, C, HW) view taken as (N*H*W, C, 1), and y, dx stay channels-last.
  const MemoryFormat fmt = suggest_memory_format(x);
  const bool cl = fmt == MemoryFormat::channels_last;
  const int64_t kN = cl ? N * HW : N, kHW = cl ? 1 : HW;
  for (const Tensor* t : {&weight, &bias, &running_mean, &running_var})
    if (t->defined()) {
      KILN_CHECK(t->dim() == 1 && t->size(0) == C, "batch_norm: parameter ", t->str(), " does not match ", C,
                 " channels of input ", x.str());
      KILN_CHECK(t->dtype() == cdt, "batch_norm: parameter ", t->str(), " must be ", dtype_name(cdt), " for input ",
                 x.str());
      check_same_device(x, *t, "batch_norm");
    }
  if (training)
    KILN_CHECK(N * HW > 1, "batch_norm",
               memory_context().module.empty() ? std::string() : " in " + memory_context().module,
               ": expected more than 1 value per channel when training, got input ", x.str(), " (", N,
               " sample of ", HW, " value per channel: the image is too small for the model at this batch size; "
               "use larger images or a larger batch)");
  else
    KILN_CHECK(running_mean.defined() && running_var.defined(), "batch_norm: eval mode needs running statistics");
  Tensor xs = contiguous(x.detach(), fmt);                // what backward keeps (16-bit when half)
  Tensor xc = half ? to_dtype(xs, DType::f32) : xs;        // what the kernels read (same format)
  Tensor y = empty(x.sizes(), cdt, x.device(), fmt);
  Tensor save_mean, save_invstd;
  Tensor rm = running_mean, rv = running_var;
  if (training) {
    save_mean = empty({C}, cdt, x.device());
    save_invstd = empty({C}, cdt, x.device());
    KILN_NN_TYPED(cdt, "batch_norm",
                  KILN_DISPATCH(x.device(), batch_norm_forward_train<T>, kN, C, kHW, ptr<T>(xc), ptr<T>(weight),
                                ptr<T>(bias), eps, ptr<T>(y), ptr<T>(save_mean), ptr<T>(save_invstd), ptr<T>(rm),
                                ptr<T>(rv), momentum));
    if (rm.defined()) rm.bump_version();
    if (rv.defined()) rv.bump_version();
  } else {
    KILN_NN_TYPED(cdt, "batch_norm",
                  KILN_DISPATCH(x.device(), batch_norm_forward_eval<T>, kN, C, kHW, ptr<T>(xc), ptr<T>(weight),
                                ptr<T>(bias), ptr<T>(rm), ptr<T>(rv), eps, ptr<T>(y)));
  }
  bool has_w = weight.defined(), has_b = bias.defined();
  auto node = record_op("batch_norm", {x, weight, bias}, {y},
                        [=](FunctionNode& n, const std::vector<Tensor>& g) {
                          Tensor x = n.saved(0), w = n.saved(1), a = n.saved(2), b = n.saved(3);
                          if (half) x = to_dtype(x, DType::f32);
                          Tensor dy = contiguous(half ? to_dtype(g[0], DType::f32) : g[0], fmt);
                          Tensor dx = empty(x.sizes(), x.dtype(), x.device(), fmt);
                          Tensor dw = empty({C}, x.dtype(), x.device()), db = empty({C}, x.dtype(), x.device());
                          if (training) {
                            KILN_NN_TYPED(x.dtype(), "batch_norm backward",
                                          KILN_DISPATCH(x.device(), batch_norm_backward_train<T>, kN, C, kHW, ptr<T>(dy),
                                                        ptr<T>(x), ptr<T>(w), ptr<T>(a), ptr<T>(b), ptr<T>(dx),
                                                        ptr<T>(dw), ptr<T>(db)));
                          } else {
                            KILN_NN_TYPED(x.dtype(), "batch_norm backward",
                                          KILN_DISPATCH(x.device(), batch_norm_backward_eval<T>, kN, C, kHW, ptr<T>(dy),
                                                        ptr<T>(x), ptr<T>(w), ptr<T>(a), ptr<T>(b), eps, ptr<T>(dx),
                                                        ptr<T>(dw), ptr<T>(db)));
                          }
                          return std::vector<Tensor>{half ? to_dtype(dx, xdt) : dx, has_w ? dw : Tensor(),
                                                     has_b ? db : Tensor()};
                        });
  if (node) {
    node->save(xs);
    node->save(weight);
    // Eval-mode backward reads the running stats; they must not change before backward.
    node->save(training ? save_mean : (rm.defined() ? clone(rm) : Tensor()));
    node->save(training ? save_invstd : (rv.defined() ? clone(rv) : Tensor()));
  }
  return half ? to_dtype(y, xdt) : y;
}

}  // namespace kiln
