// The epoch line (see epoch_line.h).
#include "tools/epoch_line.h"

#include <cstdio>

#include "engine/train/memory_peak.h"

namespace kiln_cli {

std::string format_epoch_line(const kiln::train::EpochStats& es, int64_t epochs, bool segment) {
  char mem[32], rsv[32], line[384];
  // The run's two figures so far (allocated, reserved), named as the ledger and `kiln runs` name them.
  const std::string peak_text =
      es.run_peak_allocated >= 0
          ? std::string(kiln::format_bytes(es.run_peak_allocated, mem, sizeof mem)) + " reserved " +
                kiln::format_bytes(es.run_peak_reserved, rsv, sizeof rsv)
          : std::string(kiln::format_bytes(es.peak_memory, mem, sizeof mem));
  const char* peak = peak_text.c_str();
  if (es.val_segment) {  // replaces the classification line: pixel accuracy, mIoU, Dice per class
    const kiln::train::SegmentMetrics& m = *es.val_segment;
    std::string dice;
    for (int64_t k = 0; k < m.num_classes; ++k) {
      char d[16];
      std::snprintf(d, sizeof d, "%.3f", m.dice[(size_t)k]);
      dice += (k ? "/" : "") + std::string(d);
    }
    std::snprintf(line, sizeof line,
                  "epoch %lld/%lld  train loss %.4f pixel acc %.2f%%  val loss %.4f pixel acc %.2f%% mIoU %.2f%%%s  "
                  "%.0f img/s  %.1f s  peak allocated %s  lr %.4g",
                  (long long)es.epoch, (long long)epochs, es.train_loss, 100 * es.train_acc, es.val_loss,
                  100 * m.pixel_accuracy, 100 * m.mean_iou, m.ignore_background ? " (no background)" : "",
                  es.images_per_s, es.seconds, peak, es.lr);
    return std::string(line) + "  dice " + dice;
  }
  if (segment) {
    std::snprintf(line, sizeof line, "epoch %lld/%lld  train loss %.4f pixel acc %.2f%%  (no --val)  %.0f img/s  "
                  "%.1f s  peak allocated %s  lr %.4g",
                  (long long)es.epoch, (long long)epochs, es.train_loss, 100 * es.train_acc, es.images_per_s,
                  es.seconds, peak, es.lr);
    return line;
  }
  std::snprintf(line, sizeof line,
                "epoch %lld/%lld  train loss %.4f acc %.2f%%  val loss %s acc %s  %.0f img/s  %.1f s  peak allocated %s  "
                "lr %.4g",
                (long long)es.epoch, (long long)epochs, es.train_loss, 100 * es.train_acc,
                es.val_loss >= 0 ? std::to_string(es.val_loss).substr(0, 6).c_str() : "-",
                es.val_acc >= 0 ? (std::to_string(100 * es.val_acc).substr(0, 5) + "%").c_str() : "-",
                es.images_per_s, es.seconds, peak, es.lr);
  return line;
}

}  // namespace kiln_cli
