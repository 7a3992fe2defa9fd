// one_hot: class-index targets (N, d...) i64 -> (N, K, d...) floating, the class dim second like
// logits. Pixels equal to ignore_index get an all-zero column, so sum over K is the valid mask.
// Not differentiable (its input is an index tensor). Used by dice_loss (nn_dice.cpp).
#include "engine/ops/nn_common.h"
#include "engine/ops/segmentation.h"
#include "kernels/cpu/one_hot.h"

namespace kiln {

Tensor one_hot(const Tensor& target, int64_t num_classes, int64_t ignore_index, DType dtype) {
  check_defined(target, "one_hot", "target");
  KILN_CHECK(target.dtype() == DType::i64 && target.dim() >= 1, "one_hot: target must be i64 (N, d...), got ",
             target.str());
  KILN_CHECK(num_classes >= 1, "one_hot: num_classes must be >= 1, got ", num_classes, " (target ", target.str(), ")");
  KILN_CHECK(dtype == DType::f32 || dtype == DType::f64, "one_hot: dtype must be f32 or f64, got ", dtype_name(dtype));
  const int64_t N = target.size(0), S = target.numel() / std::max<int64_t>(N, 1);
  Shape out_shape{N, num_classes};
  for (int64_t i = 1; i < target.dim(); ++i) out_shape.push_back(target.size(i));
  Tensor tc = contiguous(target.detach());
  Tensor out = empty(out_shape, dtype, target.device());
  const std::string desc = target.str();
  KILN_NN_TYPED(dtype, "one_hot",
                KILN_DISPATCH(target.device(), one_hot_forward<T>, N, num_classes, N > 0 ? S : 0, ptr<int64_t>(tc),
                              ignore_index, ptr<T>(out), desc.c_str()));
  return out;
}

}  // namespace kiln
