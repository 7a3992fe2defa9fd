// dice_loss: the soft Dice loss of segmentation, composed from differentiable ops (softmax, where,
// mul, sum, div), so it runs forward and backward on every device, the meta device included, and
// follows autocast (a loss: computed in f32). Only the one-hot of the target (nn_one_hot.cpp) has
// its own kernels.
//   logits (N, K, d...), target (N, d...) i64 class indices
//   p = softmax(logits, 1), t = one_hot(target); pixels whose target is ignore_index are masked
//   out of both (p there is replaced by 0, so a NaN logit in an ignored pixel does not reach the
//   loss, as with cross_entropy's ignore_index)
//   dice_k = (2 sum(p_k t_k) + smooth) / (sum(p_k) + sum(t_k) + smooth), sums over N and pixels
//   loss = 1 - mean over classes k (k >= 1 when include_background is false)
#include "engine/ops/autocast.h"
#include "engine/ops/nn_common.h"
#include "engine/ops/segmentation.h"

namespace kiln {

Tensor dice_loss(const Tensor& logits, const Tensor& target, int64_t ignore_index, double smooth,
                 bool include_background) {
  check_defined(logits, "dice_loss", "input");
  check_defined(target, "dice_loss", "target");
  if (autocast_enabled()) {  // f32 list (a loss)
    using namespace autocast_detail;
    Tensor lf = to_f32(logits);
    Suspend off;
    return dice_loss(lf, target, ignore_index, smooth, include_background);
  }
  if (is_16bit(logits.dtype()))
    return dice_loss(to_dtype(logits, DType::f32), target, ignore_index, smooth, include_background);
  check_floating(logits, "dice_loss");
  const int64_t D = logits.dim();
  KILN_CHECK(D >= 3, "dice_loss: input must be (N, K, d...) logits, got ", logits.str());
  bool ok = target.dtype() == DType::i64 && target.dim() == D - 1 && target.size(0) == logits.size(0);
  for (int64_t i = 2; ok && i < D; ++i) ok = target.size(i - 1) == logits.size(i);
  KILN_CHECK(ok, "dice_loss: target must be i64 (N, d...) matching input (N, K, d...) = ", logits.str(),
             " without K, got ", target.str());
  check_same_device(logits, target, "dice_loss");
  const int64_t K = logits.size(1);
  KILN_CHECK(include_background || K >= 2, "dice_loss: leaving out class 0 needs K >= 2 classes, input ",
             logits.str());
  KILN_CHECK(smooth >= 0.0, "dice_loss: smooth must be >= 0, got ", smooth);

  Tensor t = one_hot(target, K, ignore_index, logits.dtype());  // (N, K, d...), zero columns where ignored
  Tensor valid = gt(sum(t, {1}, true), 0.0);                    // (N, 1, d...) u8
  Tensor zero = scalar_tensor(0.0, logits.dtype(), logits.device());
  Tensor p = where(valid, softmax(logits, 1), zero);            // (N, K, d...)
  std::vector<int64_t> dims{0};
  for (int64_t i = 2; i < D; ++i) dims.push_back(i);
  Tensor inter = sum(mul(p, t), dims);                          // (K)
  Tensor psum = sum(p, dims), tsum = sum(t, dims);              // (K)
  Tensor dice = div(add(mul(inter, 2.0), smooth), add(add(psum, tsum), smooth));
  if (!include_background) dice = slice(dice, 0, 1, K);
  return rsub(mean(dice), 1.0);
}

}  // namespace kiln
