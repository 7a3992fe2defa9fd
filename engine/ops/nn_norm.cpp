// batch_norm over x (N, C, *): statistics per channel. Training mode normalizes with batch
// statistics and updates the running stats in place; eval mode uses the running stats.
// Deliberate difference from PyTorch: the CPU kernels normalize as (x - mean) * invstd with x - mean
// in double (kernels/cpu/batch_norm.cpp), not torch's x * scale + shift, so a channel whose mean is
// large against its std keeps its digits (f32 error 1e-7 where torch's is 1e-6 .. 1e-2). NaN in a
// channel makes that channel's output and running statistics NaN, as in torch.
#include "engine/core/meta_target.h"
#include "engine/ops/nn_common.h"
#include "engine/ops/op_trace.h"
#include "kernels/cpu/batch_norm.h"

namespace kiln {

namespace {

// A 16-bit training batch norm on the CPU (or on meta imitating the CPU: the same allocations, no kernels):
// x, y, dy, dx stay 16-bit, the kernels widen on load and compute in f32 lanes (kernels/cpu/batch_norm.h: within
// a stated bound of the f64 result, not the f32-staged path's bits), without the staged path's copies (measured:
// the copies were 17% of a ResNet18 bf16 step, docs/cpu-bf16.md).
// Weight, bias, running stats: f32 (checked by batch_norm). xs: x contiguous in fmt, what backward keeps.
Tensor batch_norm_cpu_16_train(const Tensor& x, const Tensor& xs, const Tensor& weight, const Tensor& bias,
                               const Tensor& rm, const Tensor& rv, double momentum, double eps, MemoryFormat fmt,
                               int64_t kN, int64_t C, int64_t kHW) {
  const Device dev = x.device();
  const bool run = dev.is_cpu();
  const DType xdt = x.dtype();
  // The statistics before y, as the f32-staged path (the cuda plan's) allocates them after its x32 and y32
  // copies: the two targets' request sequences then differ by exactly those copies (test_cuda_plan_diff.cpp).
  Tensor save_mean = empty({C}, DType::f32, dev), save_invstd = empty({C}, DType::f32, dev);
  Tensor y = empty(x.sizes(), xdt, dev, fmt);
  auto fwd = [&](auto tag) {
    using X = decltype(tag);
    OpSpanScope span("batch_norm_forward_train_16");
    cpu::batch_norm_forward_train_16<X>(kN, C, kHW, ptr<X>(xs), ptr<float>(weight), ptr<float>(bias), eps, ptr<X>(y),
                                        ptr<float>(save_mean), ptr<float>(save_invstd), ptr<float>(rm),
                                        ptr<float>(rv), momentum);
  };
  if (run) {
    if (xdt == DType::bf16)
      fwd(bfloat16());
    else
      fwd(half());
  }
  if (rm.defined()) rm.bump_version();
  if (rv.defined()) rv.bump_version();
  const bool has_w = weight.defined(), has_b = bias.defined();
  auto node = record_op("batch_norm", {x, weight, bias}, {y},
                        [=](FunctionNode& n, const std::vector<Tensor>& g) {
                          Tensor xb = n.saved(0), w = n.saved(1), a = n.saved(2), b = n.saved(3);
                          const Device d = xb.device();
                          // dy in x's dtype (a gradient of another dtype is rounded to it first: f32
                          // staging would keep it, so that case is staged as before)
                          const bool direct = g[0].dtype() == xdt;
                          Tensor dy = contiguous(direct ? g[0] : to_dtype(g[0], DType::f32), fmt);
                          if (!direct) xb = to_dtype(xb, DType::f32);
                          // Requests in the staged path's order: dx32, dw, db, then dx rounded to 16 bits;
                          // the direct path makes dw, db, then its 16-bit dx, so the cuda plan (staged)
                          // differs by exactly its x32, dy32, dx32 (test_cuda_plan_diff.cpp).
                          Tensor dx = direct ? Tensor() : empty(xb.sizes(), DType::f32, d, fmt);
                          Tensor dw = empty({C}, DType::f32, d), db = empty({C}, DType::f32, d);
                          if (direct) dx = empty(xb.sizes(), xdt, d, fmt);
                          if (d.is_cpu()) {
                            auto bwd = [&](auto tag) {
                              using X = decltype(tag);
                              OpSpanScope span("batch_norm_backward_train_16");
                              cpu::batch_norm_backward_train_16<X>(kN, C, kHW, ptr<X>(dy), ptr<X>(xb), ptr<float>(w),
                                                                   ptr<float>(a), ptr<float>(b), ptr<X>(dx),
                                                                   ptr<float>(dw), ptr<float>(db));
                            };
                            if (!direct)
                              KILN_DISPATCH(d, batch_norm_backward_train<float>, kN, C, kHW, ptr<float>(dy),
                                            ptr<float>(xb), ptr<float>(w), ptr<float>(a), ptr<float>(b),
                                            ptr<float>(dx), ptr<float>(dw), ptr<float>(db));
                            else if (xdt == DType::bf16)
                              bwd(bfloat16());
                            else
                              bwd(half());
                          }
                          return std::vector<Tensor>{direct ? dx : to_dtype(dx, xdt), has_w ? dw : Tensor(),
                                                     has_b ? db : Tensor()};
                        });
  if (node) {
    node->save(xs);
    node->save(weight);
    node->save(save_mean);
    node->save(save_invstd);
  }
  return y;
}

}  // namespace

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
  const Device dev = x.device();
  if (half && training && (dev.is_cpu() || (dev.is_meta() && !meta_target().is_cuda())))
    return batch_norm_cpu_16_train(x, xs, weight, bias, running_mean, running_var, momentum, eps, fmt, kN, C, kHW);
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
