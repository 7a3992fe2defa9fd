// Losses: cross_entropy (class weights, label smoothing, ignore_index), nll_loss, mse_loss,
// with PyTorch's reductions. logits (N, K) with target (N) i64, or per-pixel logits (N, K, d...)
// with target (N, d...) i64: the class dim is moved last and flattened to (N * prod(d), K) (a
// differentiable copy), so the kernels only ever see rows of K classes. Reduction none gives
// (N, d...) back. The Dice loss lives in nn_dice.cpp.
#include "engine/ops/autocast.h"
#include "engine/ops/nn_common.h"
#include "kernels/cpu/loss.h"

namespace kiln {
namespace {

void check_targets(const Tensor& logits, const Tensor& target, const Tensor& weight, const char* op) {
  check_defined(logits, op, "input");
  check_defined(target, op, "target");
  KILN_CHECK(logits.dim() == 2, op, ": input must be (N, K), got ", logits.str());
  KILN_CHECK(target.dtype() == DType::i64 && target.dim() == 1 && target.size(0) == logits.size(0), op,
             ": target must be i64 (N,) with N = ", logits.size(0), ", got ", target.str());
  check_same_device(logits, target, op);
  if (weight.defined()) {
    KILN_CHECK(weight.dim() == 1 && weight.size(0) == logits.size(1), op, ": weight ", weight.str(),
               " must have one entry per class (", logits.size(1), ")");
    check_same_dtype(logits, weight, op);
  }
}

Shape loss_shape(Reduction r, int64_t n) { return r == Reduction::none ? Shape{n} : Shape{}; }

// (N, K, d...) logits with (N, d...) targets -> (N * prod(d), K) rows and (N * prod(d)) targets.
// Returns false (nothing written) for the 2-D case.
bool flatten_spatial(const Tensor& logits, const Tensor& target, const char* op, Tensor& rows, Tensor& flat_t) {
  check_defined(logits, op, "input");
  check_defined(target, op, "target");
  if (logits.dim() <= 2) return false;
  const int64_t D = logits.dim();
  bool ok = target.dtype() == DType::i64 && target.dim() == D - 1 && target.size(0) == logits.size(0);
  for (int64_t i = 2; ok && i < D; ++i) ok = target.size(i - 1) == logits.size(i);
  KILN_CHECK(ok, op, ": target must be i64 (N, d...) matching input (N, K, d...) = ", logits.str(), " without K, got ",
             target.str());
  std::vector<int64_t> perm{0};
  for (int64_t i = 2; i < D; ++i) perm.push_back(i);
  perm.push_back(1);
  rows = reshape(permute(logits, perm), {-1, logits.size(1)});  // (N * prod(d), K)
  flat_t = reshape(target, {-1});
  return true;
}

// Per-element loss (N * prod(d)) back to the target's shape (N, d...) for reduction none.
Tensor unflatten_loss(const Tensor& loss, Reduction r, const Tensor& target) {
  return r == Reduction::none ? reshape(loss, target.sizes()) : loss;
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, Reduction reduction,
                     int64_t ignore_index, double label_smoothing) {
  if (autocast_enabled()) {  // f32 list
    using namespace autocast_detail;
    Tensor lf = to_f32(logits), wf = to_f32(weight);
    Suspend off;
    return cross_entropy(lf, target, wf, reduction, ignore_index, label_smoothing);
  }
  Tensor rows, flat_t;
  if (flatten_spatial(logits, target, "cross_entropy", rows, flat_t))
    return unflatten_loss(cross_entropy(rows, flat_t, weight, reduction, ignore_index, label_smoothing), reduction,
                          target);
  check_targets(logits, target, weight, "cross_entropy");
  if (is_16bit(logits.dtype())) {  // losses run in f32 (autocast rule)
    Tensor w = weight.defined() ? to_dtype(weight, DType::f32) : weight;
    return cross_entropy(to_dtype(logits, DType::f32), target, w, reduction, ignore_index, label_smoothing);
  }
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "cross_entropy: label_smoothing ", label_smoothing,
             " must be in [0, 1]");
  int64_t N = logits.size(0), K = logits.size(1);
  Tensor lc = contiguous(logits.detach()), tc = contiguous(target), wc = weight.defined() ? contiguous(weight) : Tensor();
  Tensor out = empty(loss_shape(reduction, N), logits.dtype(), logits.device());
  Tensor logp = empty({N, K}, logits.dtype(), logits.device());
  KILN_NN_TYPED(logits.dtype(), "cross_entropy",
                KILN_DISPATCH(logits.device(), cross_entropy_forward<T>, N, K, ptr<T>(lc), ptr<int64_t>(tc), ptr<T>(wc),
                              label_smoothing, ignore_index, reduction, ptr<T>(out), ptr<T>(logp)));
  auto node = record_op("cross_entropy", {logits}, {out}, [=](FunctionNode& n, const std::vector<Tensor>& g) {
    Tensor lp = n.saved(0), t = n.saved(1), w = n.saved(2);
    Tensor go = contiguous(g[0]);
    Tensor dl = empty({N, K}, lp.dtype(), lp.device());
    KILN_NN_TYPED(lp.dtype(), "cross_entropy backward",
                  KILN_DISPATCH(lp.device(), cross_entropy_backward<T>, N, K, ptr<T>(go), ptr<T>(lp), ptr<int64_t>(t),
                                ptr<T>(w), label_smoothing, ignore_index, reduction, ptr<T>(dl)));
    return std::vector<Tensor>{dl};
  });
  if (node) {
    node->save(logp);
    node->save(tc);
    node->save(wc);
  }
  return out;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight, Reduction reduction,
                int64_t ignore_index) {
  if (autocast_enabled()) {  // f32 list
    using namespace autocast_detail;
    Tensor lf = to_f32(log_probs), wf = to_f32(weight);
    Suspend off;
    return nll_loss(lf, target, wf, reduction, ignore_index);
  }
  Tensor rows, flat_t;
  if (flatten_spatial(log_probs, target, "nll_loss", rows, flat_t))
    return unflatten_loss(nll_loss(rows, flat_t, weight, reduction, ignore_index), reduction, target);
  check_targets(log_probs, target, weight, "nll_loss");
  if (is_16bit(log_probs.dtype())) {
    Tensor w = weight.defined() ? to_dtype(weight, DType::f32) : weight;
    return nll_loss(to_dtype(log_probs, DType::f32), target, w, reduction, ignore_index);
  }
  int64_t N = log_probs.size(0), K = log_probs.size(1);
  Tensor lc = contiguous(log_probs.detach()), tc = contiguous(target), wc = weight.defined() ? contiguous(weight) : Tensor();
  Tensor out = empty(loss_shape(reduction, N), log_probs.dtype(), log_probs.device());
  KILN_NN_TYPED(log_probs.dtype(), "nll_loss",
                KILN_DISPATCH(log_probs.device(), nll_loss_forward<T>, N, K, ptr<T>(lc), ptr<int64_t>(tc), ptr<T>(wc),
                              ignore_index, reduction, ptr<T>(out)));
  auto node = record_op("nll_loss", {log_probs}, {out}, [=](FunctionNode& n, const std::vector<Tensor>& g) {
    Tensor t = n.saved(0), w = n.saved(1);
    Tensor go = contiguous(g[0]);
    Tensor dl = empty({N, K}, go.dtype(), go.device());
    KILN_NN_TYPED(go.dtype(), "nll_loss backward",
                  KILN_DISPATCH(go.device(), nll_loss_backward<T>, N, K, ptr<T>(go), ptr<int64_t>(t), ptr<T>(w),
                                ignore_index, reduction, ptr<T>(dl)));
    return std::vector<Tensor>{dl};
  });
  if (node) {
    node->save(tc);
    node->save(wc);
  }
  return out;
}

Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction) {
  check_defined(a, "mse_loss", "input");
  check_defined(b, "mse_loss", "target");
  if (autocast_enabled()) {  // f32 list
    using namespace autocast_detail;
    Tensor af = to_f32(a), bf = to_f32(b);
    Suspend off;
    return mse_loss(af, bf, reduction);
  }
  check_same_dtype(a, b, "mse_loss");
  check_same_device(a, b, "mse_loss");
  KILN_CHECK(a.sizes() == b.sizes(), "mse_loss: input ", a.str(), " and target ", b.str(), " differ in shape");
  Tensor d = sub(a, b);
  Tensor sq = mul(d, d);
  if (reduction == Reduction::none) return sq;
  return reduction == Reduction::sum ? sum(sq) : mean(sq);
}

}  // namespace kiln
