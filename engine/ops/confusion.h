// The confusion matrix of a segmentation (or classification) output against its targets, on the
// output's device: the op behind whole-set segmentation metrics (engine/train/segment_metrics.h)
// and the pixel counts of a training step. Not differentiable (no autograd node); the counts stay
// on the device until a caller reads them. Kernels: kernels/{cpu,cuda}/confusion*, per-pixel math in
// kernels/common/confusion_math.h.
#pragma once
#include <cstdint>

#include "engine/tensor/tensor.h"

namespace kiln {

// scores: (N, K, H, W) (a model's per-pixel class scores; also (N, K) with (N) targets), any
// floating dtype (16-bit scores are compared in f32); target: (N, H, W) i64 on the same device;
// counts: (K, K) i64 on that device, row = target class, column = predicted class = argmax over K
// (the first of equal maxima, a NaN beats every number: torch.argmax). Adds each pixel's count to
// counts (in place, bumps its version); pixels whose target is ignore_index are left out; any other
// target outside [0, K) is an error naming the pixel (on CUDA at the next synchronization).
void confusion_matrix_add_(Tensor& counts, const Tensor& scores, const Tensor& target, int64_t ignore_index = 255);

// A fresh (K, K) i64 matrix on the scores' device (zeros + confusion_matrix_add_).
Tensor confusion_matrix(const Tensor& scores, const Tensor& target, int64_t ignore_index = 255);

}  // namespace kiln
