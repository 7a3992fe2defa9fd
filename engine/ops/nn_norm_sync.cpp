// batch_norm_sync: training-mode batch norm whose statistics are those of the data-parallel global
// batch (SyncBatchNorm). The caller's reducer sums doubles over the ranks in place; this op calls it
// twice in forward (per-channel sums with this rank's value count, then the sums of squares centred on
// the global mean: the two-pass variance of the fused kernel, exact, never E[x^2] - E[x]^2) and once
// in backward (per-channel sum dy and sum dy * (x - mean)). Each rank weighs by its own count, so a
// rank without rows (N = 0) adds zeros. dgamma and dbeta: this rank's own sums, or the global ones on one
// rank and zeros on the others (BnParamGrads), for the gradient buckets to add. With one rank's sums (an identity reducer) it computes the bits
// of batch_norm (kernels/cpu/batch_norm_channel.h is both kernels' arithmetic). CPU kernels only: a
// tensor on another device goes through host copies (compiled for CUDA, never run on a GPU yet).
// It must not know MPI or the process group: engine/train supplies the reducer.
#include "engine/ops/batch_norm_sync.h"
#include "engine/ops/nn_common.h"
#include "kernels/cpu/batch_norm_sync.h"

namespace kiln {

namespace {

Tensor on_host(const Tensor& t) { return !t.defined() || t.device().is_cpu() ? t : to_device(t, Device::cpu()); }

// The kernels' (N, C, HW) view of a host tensor (N, C, ...): a channels-last one is (N*H*W, C, 1).
struct BnView {
  int64_t n = 0, c = 0, hw = 0;
};
BnView bn_view(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), HW = x.numel() / std::max<int64_t>(N * C, 1);
  const bool cl = suggest_memory_format(x) == MemoryFormat::channels_last;
  return cl ? BnView{N * HW, C, 1} : BnView{N, C, HW};
}

}  // namespace

Tensor batch_norm_sync(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, double momentum, double eps, const ChannelSumReducer& reduce,
                       BnParamGrads param_grads) {
  check_defined(x, "batch_norm_sync", "input");
  KILN_CHECK(reduce, "batch_norm_sync: no reducer (use batch_norm for one process)");
  KILN_CHECK(x.dim() >= 2, "batch_norm_sync: input must be (N, C, ...), got ", x.str());
  KILN_CHECK(!x.device().is_meta(), "batch_norm_sync: input ", x.str(),
             " is on the meta device (the statistics are summed over the ranks' values)");
  const bool half = is_16bit(x.dtype());
  const DType xdt = x.dtype(), cdt = half ? DType::f32 : x.dtype();
  const int64_t C = x.size(1);
  for (const Tensor* t : {&weight, &bias, &running_mean, &running_var})
    if (t->defined()) {
      KILN_CHECK(t->dim() == 1 && t->size(0) == C, "batch_norm_sync: parameter ", t->str(), " does not match ", C,
                 " channels of input ", x.str());
      KILN_CHECK(t->dtype() == cdt, "batch_norm_sync: parameter ", t->str(), " must be ", dtype_name(cdt),
                 " for input ", x.str());
      check_same_device(x, *t, "batch_norm_sync");
    }
  const MemoryFormat fmt = suggest_memory_format(x);
  Tensor xs = contiguous(x.detach(), fmt);            // what backward keeps (16-bit when half)
  Tensor xc = on_host(half ? to_dtype(xs, DType::f32) : xs);  // what the kernels read
  const BnView v = bn_view(xc);
  // Forward, first reduction: per-channel sums and this rank's values per channel -> the global mean.
  std::vector<double> sums((size_t)C + 1);
  KILN_NN_TYPED(cdt, "batch_norm_sync", cpu::batch_norm_channel_sums<T>(v.n, C, v.hw, ptr<T>(xc), sums.data()));
  sums[(size_t)C] = (double)(v.n * v.hw);
  reduce(sums.data(), C + 1);
  const int64_t M = (int64_t)sums[(size_t)C];
  KILN_CHECK(M > 1, "batch_norm_sync",
             memory_context().module.empty() ? std::string() : " in " + memory_context().module,
             ": expected more than 1 value per channel over the ranks when training, got ", M, " (this rank's input ",
             x.str(), ")");
  std::vector<double> mean((size_t)C), var((size_t)C);
  for (int64_t c = 0; c < C; ++c) mean[(size_t)c] = sums[(size_t)c] / (double)M;
  // Second reduction: sums of squares centred on the global mean -> the global (biased) variance.
  KILN_NN_TYPED(cdt, "batch_norm_sync",
                cpu::batch_norm_channel_centered_squares<T>(v.n, C, v.hw, ptr<T>(xc), mean.data(), var.data()));
  reduce(var.data(), C);
  for (int64_t c = 0; c < C; ++c) var[(size_t)c] /= (double)M;
  Tensor wh = on_host(weight), bh = on_host(bias), rmh = on_host(running_mean), rvh = on_host(running_var);
  Tensor yh = empty(xc.sizes(), cdt, Device::cpu(), suggest_memory_format(xc));
  Tensor save_mean = empty({C}, cdt, Device::cpu()), save_invstd = empty({C}, cdt, Device::cpu());
  KILN_NN_TYPED(cdt, "batch_norm_sync",
                cpu::batch_norm_forward_with_stats<T>(v.n, C, v.hw, ptr<T>(xc), ptr<T>(wh), ptr<T>(bh), eps,
                                                      mean.data(), var.data(), M, ptr<T>(yh), ptr<T>(save_mean),
                                                      ptr<T>(save_invstd), ptr<T>(rmh), ptr<T>(rvh), momentum));
  for (auto [dev, host] : {std::pair<Tensor, Tensor>{running_mean, rmh}, {running_var, rvh}})
    if (dev.defined()) {
      if (!dev.device().is_cpu()) copy_(dev, host);  // the GPU's running stats take the host's update
      dev.bump_version();
    }
  Tensor y = x.device().is_cpu() ? yh : contiguous(to_device(yh, x.device()), fmt);
  const bool has_w = weight.defined(), has_b = bias.defined();
  auto node = record_op(
      "batch_norm_sync", {x, weight, bias}, {y}, [=](FunctionNode& n, const std::vector<Tensor>& g) {
        Tensor xb = on_host(n.saved(0)), w = on_host(n.saved(1)), sm = n.saved(2), si = n.saved(3);
        if (half) xb = to_dtype(xb, DType::f32);
        const BnView bv = bn_view(xb);
        Tensor dy = on_host(contiguous(half ? to_dtype(g[0], DType::f32) : g[0], fmt));
        dy = contiguous(dy, suggest_memory_format(xb));
        std::vector<double> local((size_t)(2 * C));
        KILN_NN_TYPED(cdt, "batch_norm_sync backward",
                      cpu::batch_norm_grad_sums<T>(bv.n, C, bv.hw, ptr<T>(dy), ptr<T>(xb), ptr<T>(sm), local.data()));
        std::vector<double> global = local;
        reduce(global.data(), 2 * C);
        if (param_grads == BnParamGrads::global) local = global;
        if (param_grads == BnParamGrads::zero) std::fill(local.begin(), local.end(), 0.0);
        Tensor dx = empty(xb.sizes(), cdt, Device::cpu(), suggest_memory_format(xb));
        Tensor dw = empty({C}, cdt, Device::cpu()), db = empty({C}, cdt, Device::cpu());
        KILN_NN_TYPED(cdt, "batch_norm_sync backward",
                      cpu::batch_norm_backward_with_sums<T>(bv.n, C, bv.hw, ptr<T>(dy), ptr<T>(xb), ptr<T>(w),
                                                            ptr<T>(sm), ptr<T>(si), global.data(), local.data(), M,
                                                            ptr<T>(dx), ptr<T>(dw), ptr<T>(db)));
        const Device d = n.saved(0).device();
        if (!d.is_cpu()) {
          dx = contiguous(to_device(dx, d), fmt);
          dw = to_device(dw, d);
          db = to_device(db, d);
        }
        return std::vector<Tensor>{half ? to_dtype(dx, xdt) : dx, has_w ? dw : Tensor(), has_b ? db : Tensor()};
      });
  if (node) {
    node->save(xs);
    node->save(weight);
    node->save(save_mean);  // host tensors: backward's kernels read them on the CPU
    node->save(save_invstd);
  }
  return half ? to_dtype(y, xdt) : y;
}

namespace {
ChannelSumReducer& reducer_slot() {
  static ChannelSumReducer r;
  return r;
}
BnParamGrads& param_grads_slot() {
  static BnParamGrads g = BnParamGrads::local;
  return g;
}
}  // namespace

void set_batch_norm_reducer(ChannelSumReducer reduce, BnParamGrads param_grads) {
  reducer_slot() = std::move(reduce);
  param_grads_slot() = param_grads;
}
const ChannelSumReducer& batch_norm_reducer() { return reducer_slot(); }
BnParamGrads batch_norm_reducer_param_grads() { return param_grads_slot(); }

}  // namespace kiln
