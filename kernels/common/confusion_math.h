// The per-pixel math of a segmentation confusion matrix, shared by the CPU and CUDA kernels of
// confusion_matrix_accumulate (kernels/common/api/confusion.inc) as KILN_HOST_DEVICE functions:
// which class a pixel is predicted as (argmax over the K class scores), and which cell of the
// K x K matrix the pixel counts in. No memory, no validation messages, no device code beyond math.
#pragma once
#include <cstdint>

#include "engine/core/host_device.h"

namespace kiln {

// The predicted class of one pixel: argmax over x[0], x[stride], ..., x[(K - 1) * stride], with
// torch.argmax's rules: of equal maxima the FIRST (lowest class index) wins; a NaN beats every
// number and the first NaN wins. T = float or double (16-bit scores are converted before).
template <typename T>
KILN_HOST_DEVICE int64_t pixel_argmax(const T* x, int64_t K, int64_t stride) {
  T best_v = x[0];
  if (best_v != best_v) return 0;
  int64_t best = 0;
  for (int64_t k = 1; k < K; ++k) {
    const T v = x[k * stride];
    if (v != v) return k;
    if (v > best_v) {  // strictly greater: a tie keeps the earlier class
      best_v = v;
      best = k;
    }
  }
  return best;
}

// The cell a pixel counts in: row = target class, column = predicted class, t * K + p (row-major).
// kConfusionIgnored for a target equal to ignore_index (the pixel is left out), kConfusionBadTarget
// for any other target outside [0, K).
constexpr int64_t kConfusionIgnored = -1;
constexpr int64_t kConfusionBadTarget = -2;
KILN_HOST_DEVICE int64_t confusion_cell(int64_t target, int64_t pred, int64_t K, int64_t ignore_index) {
  if (target == ignore_index) return kConfusionIgnored;
  if (target < 0 || target >= K) return kConfusionBadTarget;
  return target * K + pred;
}

}  // namespace kiln
