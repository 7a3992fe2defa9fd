// batch_norm_sync: training-mode batch norm whose statistics are those of the data-parallel global
// batch (SyncBatchNorm). The caller's reducer sums doubles over the ranks in place; this op calls it
// twice in forward (per-channel sums with this rank's value count, then the sums of squares centred on
// the global mean: the two-pass variance of the fused kernel, exact, never E[x^2] - E[x]^2) and once
// in backward (per-channel sum dy and sum dy * (x - mean)). Each rank weighs by its own count, so a
// rank without rows (N = 0) adds zeros. dgamma and dbeta: this rank's own sums, or the global ones on one
// rank and zeros on the others (BnParamGrads), for the gradient buckets to add. With one rank's sums (an identity reducer) it computes the bits
// of batch_norm (kernels/cpu/batch_norm_channel.h is both kernels' arithmetic). On CUDA the stages run on
// the device (kernels/cuda/batch_norm.cu) and only the per-channel doubles (C + 1, C, then 2C values)
// cross to the host for the reducer; x, y, dy and dx never leave the device (compiled, run in the CPU
// execution mode, never on a GPU yet).
// It must not know MPI or the process group: engine/train supplies the reducer.
#include "engine/ops/batch_norm_sync.h"

#include <algorithm>
#include <vector>

#include "engine/ops/nn_common.h"
#include "kernels/cpu/batch_norm_sync.h"

namespace kiln {

namespace {

// The per-channel doubles of a stage: the kernels read / write `host` itself on the CPU, a device
// copy on another device (only these cross to the host, for the reducer).
struct ChannelDoubles {
  std::vector<double> host;
  Tensor dev;  // f64 on the kernels' device; undefined on the CPU
  ChannelDoubles(size_t n, Device d) : host(n) {
    if (!d.is_cpu()) dev = empty({(int64_t)n}, DType::f64, d);
  }
  double* kernel_ptr() { return dev.defined() ? dev.data<double>() : host.data(); }
  void to_host(int64_t n) {  // after a kernel wrote the device copy
    if (!dev.defined()) return;
    const std::vector<double> h = to_device(dev, Device::cpu()).to_vector<double>();
    std::copy(h.begin(), h.begin() + n, host.begin());
  }
  void to_kernel() {  // after the host changed the values
    if (dev.defined()) copy_(dev, tensor_from<double>(host, {(int64_t)host.size()}));
  }
};

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
  const Device dev = x.device();
  Tensor xs = contiguous(x.detach(), fmt);            // what backward keeps (16-bit when half)
  Tensor xc = half ? to_dtype(xs, DType::f32) : xs;   // what the kernels read, on x's device
  const BnView v = bn_view(xc);
  // Forward, first reduction: per-channel sums and this rank's values per channel -> the global mean.
  ChannelDoubles sums((size_t)C + 1, dev);
  KILN_NN_TYPED(cdt, "batch_norm_sync",
                KILN_DISPATCH(dev, batch_norm_channel_sums<T>, v.n, C, v.hw, ptr<T>(xc), sums.kernel_ptr()));
  sums.to_host(C);
  sums.host[(size_t)C] = (double)(v.n * v.hw);
  reduce(sums.host.data(), C + 1);
  const int64_t M = (int64_t)sums.host[(size_t)C];
  KILN_CHECK(M > 1, "batch_norm_sync",
             memory_context().module.empty() ? std::string() : " in " + memory_context().module,
             ": expected more than 1 value per channel over the ranks when training, got ", M, " (this rank's input ",
             x.str(), ")");
  ChannelDoubles mean((size_t)C, dev), var((size_t)C, dev);
  for (int64_t c = 0; c < C; ++c) mean.host[(size_t)c] = sums.host[(size_t)c] / (double)M;
  mean.to_kernel();
  // Second reduction: sums of squares centred on the global mean -> the global (biased) variance.
  KILN_NN_TYPED(cdt, "batch_norm_sync",
                KILN_DISPATCH(dev, batch_norm_channel_centered_squares<T>, v.n, C, v.hw, ptr<T>(xc),
                              mean.kernel_ptr(), var.kernel_ptr()));
  var.to_host(C);
  reduce(var.host.data(), C);
  for (int64_t c = 0; c < C; ++c) var.host[(size_t)c] /= (double)M;
  var.to_kernel();
  Tensor y = empty(xc.sizes(), cdt, dev, suggest_memory_format(xc));
  Tensor save_mean = empty({C}, cdt, dev), save_invstd = empty({C}, cdt, dev);
  KILN_NN_TYPED(cdt, "batch_norm_sync",
                KILN_DISPATCH(dev, batch_norm_forward_with_stats<T>, v.n, C, v.hw, ptr<T>(xc), ptr<T>(weight),
                              ptr<T>(bias), eps, mean.kernel_ptr(), var.kernel_ptr(), M, ptr<T>(y), ptr<T>(save_mean),
                              ptr<T>(save_invstd), ptr<T>(running_mean), ptr<T>(running_var), momentum));
  for (Tensor t : {running_mean, running_var})
    if (t.defined()) t.bump_version();
  const bool has_w = weight.defined(), has_b = bias.defined();
  auto node = record_op(
      "batch_norm_sync", {x, weight, bias}, {y}, [=](FunctionNode& n, const std::vector<Tensor>& g) {
        Tensor xb = n.saved(0), w = n.saved(1), sm = n.saved(2), si = n.saved(3);
        const Device d = xb.device();
        if (half) xb = to_dtype(xb, DType::f32);
        const BnView bv = bn_view(xb);
        Tensor dy = contiguous(half ? to_dtype(g[0], DType::f32) : g[0], fmt);
        dy = contiguous(dy, suggest_memory_format(xb));
        ChannelDoubles local((size_t)(2 * C), d), global((size_t)(2 * C), d);
        KILN_NN_TYPED(cdt, "batch_norm_sync backward",
                      KILN_DISPATCH(d, batch_norm_grad_sums<T>, bv.n, C, bv.hw, ptr<T>(dy), ptr<T>(xb), ptr<T>(sm),
                                    local.kernel_ptr()));
        local.to_host(2 * C);
        global.host = local.host;
        reduce(global.host.data(), 2 * C);
        if (param_grads == BnParamGrads::global) local.host = global.host;
        if (param_grads == BnParamGrads::zero) std::fill(local.host.begin(), local.host.end(), 0.0);
        global.to_kernel();
        local.to_kernel();
        Tensor dx = empty(xb.sizes(), cdt, d, suggest_memory_format(xb));
        Tensor dw = empty({C}, cdt, d), db = empty({C}, cdt, d);
        KILN_NN_TYPED(cdt, "batch_norm_sync backward",
                      KILN_DISPATCH(d, batch_norm_backward_with_sums<T>, bv.n, C, bv.hw, ptr<T>(dy), ptr<T>(xb),
                                    ptr<T>(w), ptr<T>(sm), ptr<T>(si), global.kernel_ptr(), local.kernel_ptr(), M,
                                    ptr<T>(dx), ptr<T>(dw), ptr<T>(db)));
        return std::vector<Tensor>{half ? to_dtype(dx, xdt) : dx, has_w ? dw : Tensor(), has_b ? db : Tensor()};
      });
  if (node) {
    node->save(xs);
    node->save(weight);
    node->save(save_mean);  // on x's device, as the kernels read them
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
