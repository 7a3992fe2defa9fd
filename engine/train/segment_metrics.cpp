// Segmentation metrics from a confusion matrix (see segment_metrics.h).
#include "engine/train/segment_metrics.h"

#include <cmath>

#include "engine/core/error.h"

namespace kiln::train {

SegmentMetrics segment_metrics(const std::vector<int64_t>& confusion, int64_t K, bool ignore_background) {
  KILN_CHECK(K >= 1 && (int64_t)confusion.size() == K * K, "segment_metrics: ", confusion.size(),
             " counts for ", K, " classes (expected ", K * K, ")");
  SegmentMetrics m;
  m.num_classes = K;
  m.confusion = confusion;
  m.ignore_background = ignore_background;
  m.iou.assign((size_t)K, std::nan(""));
  m.dice.assign((size_t)K, std::nan(""));
  m.present.assign((size_t)K, false);
  std::vector<int64_t> row((size_t)K, 0), col((size_t)K, 0);
  int64_t correct = 0;
  for (int64_t t = 0; t < K; ++t)
    for (int64_t p = 0; p < K; ++p) {
      const int64_t c = confusion[(size_t)(t * K + p)];
      KILN_CHECK(c >= 0, "segment_metrics: negative count ", c, " at (", t, ", ", p, ")");
      row[(size_t)t] += c;
      col[(size_t)p] += c;
      m.pixels += c;
      if (t == p) correct += c;
    }
  if (m.pixels > 0) m.pixel_accuracy = (double)correct / (double)m.pixels;
  double iou_sum = 0, dice_sum = 0;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t tp = confusion[(size_t)(k * K + k)];
    const int64_t fp = col[(size_t)k] - tp, fn = row[(size_t)k] - tp;
    const int64_t uni = tp + fp + fn;
    m.dice[(size_t)k] = (2.0 * (double)tp + 1.0) / (2.0 * (double)tp + (double)fp + (double)fn + 1.0);
    if (uni == 0) continue;  // absent from target and prediction: no IoU, not in the means
    m.present[(size_t)k] = true;
    m.iou[(size_t)k] = (double)tp / (double)uni;
    if (ignore_background && k == 0) continue;
    iou_sum += m.iou[(size_t)k];
    dice_sum += m.dice[(size_t)k];
    ++m.classes_in_mean;
  }
  if (m.classes_in_mean > 0) {
    m.mean_iou = iou_sum / (double)m.classes_in_mean;
    m.mean_dice = dice_sum / (double)m.classes_in_mean;
  }
  return m;
}

SegmentMetrics all_background_metrics(const SegmentMetrics& m) {
  const int64_t K = m.num_classes;
  std::vector<int64_t> c((size_t)(K * K), 0);
  for (int64_t t = 0; t < K; ++t)
    for (int64_t p = 0; p < K; ++p) c[(size_t)(t * K)] += m.confusion[(size_t)(t * K + p)];
  return segment_metrics(c, K, m.ignore_background);
}

}  // namespace kiln::train
