// Segmentation metrics of a whole validation set, computed from ONE confusion matrix accumulated
// over every batch (engine/ops/confusion.h), never averaged per batch. Definitions, with
// C[t][p] = pixels of target class t predicted as p (pixels whose target is the ignore index, 255,
// are not in C), TP_k = C[k][k], FP_k = sum_t C[t][k] - TP_k, FN_k = sum_p C[k][p] - TP_k:
//   pixel accuracy = sum_k TP_k / sum C;
//   IoU_k  = TP_k / (TP_k + FP_k + FN_k), defined only for a class PRESENT in the target or the
//            prediction (TP_k + FP_k + FN_k > 0); a class absent from both has no IoU (NaN) and is
//            left out of the mean;
//   Dice_k = (2 TP_k + 1) / (2 TP_k + FP_k + FN_k + 1)   (smoothing 1: an absent class gives 1);
//   mean IoU and mean Dice = the plain means over the present classes, class 0 (background)
//            included unless ignore_background; NaN when no class is left.
// Pure arithmetic on host integers: no tensors, no devices, no printing.
#pragma once
#include <cstdint>
#include <limits>
#include <vector>

namespace kiln::train {

struct SegmentMetrics {
  int64_t num_classes = 0;
  std::vector<int64_t> confusion;  // K * K, row-major: row = target class, column = predicted class
  int64_t pixels = 0;              // pixels counted (ignored ones are not)
  double pixel_accuracy = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> iou;         // per class; NaN for a class absent from target and prediction
  std::vector<double> dice;        // per class, smoothing 1
  std::vector<bool> present;       // per class: in the target or the prediction
  bool ignore_background = false;  // class 0 left out of the means
  double mean_iou = std::numeric_limits<double>::quiet_NaN();
  double mean_dice = std::numeric_limits<double>::quiet_NaN();
  int64_t classes_in_mean = 0;     // classes the means are over
};

// The metrics of a K x K confusion matrix (row-major, counts >= 0). Throws kiln::Error when the
// size is not K * K or a count is negative.
SegmentMetrics segment_metrics(const std::vector<int64_t>& confusion, int64_t num_classes, bool ignore_background);

// The baseline that predicts background (class 0) for every pixel of the same targets: each row
// of m's confusion matrix moved to column 0, then segment_metrics with m's ignore_background. Its
// mean IoU is background's pixel share over the classes present in the targets.
SegmentMetrics all_background_metrics(const SegmentMetrics& m);

}  // namespace kiln::train
