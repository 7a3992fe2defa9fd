// The ops of segmentation: the soft Dice loss and the one-hot of class-index targets, and what
// cross_entropy / nll_loss (declared in ops.h) do with per-pixel logits. Declared apart from ops.h so
// the rest of the engine need not rebuild for them; engine/kiln.h includes it.
//
// cross_entropy(logits, target, weight, reduction, ignore_index, label_smoothing) and nll_loss take
// logits (N, K) with target (N) i64, or per-pixel logits (N, K, d...) with target (N, d...) i64: the
// class dim is moved last and flattened (engine/ops/nn_loss.cpp); reduction none gives (N, d...).
// PyTorch 1.13 semantics: weighted mean = sum w[y] l / sum w[y] over non-ignored targets (every
// target ignored: NaN, gradient 0); an ignored pixel's loss is 0 and its gradient 0 (NaN where its
// logits hold NaN or +inf, as torch's log_softmax backward gives); a target outside [0, K) that is
// not ignore_index is a kiln::Error (CUDA: reported at the next host synchronization).
#pragma once
#include <cstdint>

#include "engine/ops/ops.h"

namespace kiln {

// Soft Dice loss (nn_dice.cpp): logits (N, K, d...), target (N, d...) i64. softmax over K, one-hot
// target, pixels equal to ignore_index masked out of both (p there is replaced by 0, so their
// logits do not reach the loss); per class
//   dice_k = (2 sum(p_k t_k) + smooth) / (sum(p_k) + sum(t_k) + smooth), sums over the batch and pixels;
// loss = 1 - mean_k dice_k (classes 1..K-1 when include_background is false). A 0-d tensor.
// Composed from differentiable ops: every device (meta included), autocast computes it in f32.
Tensor dice_loss(const Tensor& logits, const Tensor& target, int64_t ignore_index = 255, double smooth = 1.0,
                 bool include_background = true);

// target (N, d...) i64 -> (N, K, d...) of 0/1 in dtype (f32/f64); ignore_index gives an all-zero
// column. Not differentiable. A target outside [0, K) (not ignore_index) is a kiln::Error naming
// the value, its position and the target's shape (CUDA: at the next host synchronization).
Tensor one_hot(const Tensor& target, int64_t num_classes, int64_t ignore_index = -100, DType dtype = DType::f32);

}  // namespace kiln
