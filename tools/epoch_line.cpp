// The epoch line (see epoch_line.h).
#include "tools/epoch_line.h"

#include <cstdio>

#include "engine/core/percent.h"
#include "engine/train/memory_peak.h"

namespace kiln_cli {

namespace {

// A percentage from the epoch's counts (engine/core/percent.h); the fraction when they are unknown.
std::string pct(int64_t correct, int64_t total, double fraction) {
  if (total > 0) return kiln::percent_text(correct, total);
  return fraction >= 0 ? kiln::percent_text(fraction) : "-";
}

}  // namespace

std::string format_epoch_line(const kiln::train::EpochStats& es, int64_t epochs, bool segment) {
  const std::string train_acc = pct(es.train_correct, es.train_total, es.train_acc);
  const std::string val_acc = es.val_acc >= 0 ? pct(es.val_correct, es.val_total, es.val_acc) : "-";
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
                  "epoch %lld/%lld  train loss %.4f pixel acc %s  val loss %.4f pixel acc %s mIoU %s%s  "
                  "%.0f img/s  %.1f s  peak allocated %s  lr %.4g",
                  (long long)es.epoch, (long long)epochs, es.train_loss, train_acc.c_str(), es.val_loss,
                  pct(es.val_correct, es.val_total, m.pixel_accuracy).c_str(), kiln::percent_text(m.mean_iou).c_str(),
                  m.ignore_background ? " (no background)" : "",
                  es.images_per_s, es.seconds, peak, es.lr);
    return std::string(line) + "  dice " + dice;
  }
  if (segment) {
    std::snprintf(line, sizeof line, "epoch %lld/%lld  train loss %.4f pixel acc %s  (no --val)  %.0f img/s  "
                  "%.1f s  peak allocated %s  lr %.4g",
                  (long long)es.epoch, (long long)epochs, es.train_loss, train_acc.c_str(), es.images_per_s,
                  es.seconds, peak, es.lr);
    return line;
  }
  std::snprintf(line, sizeof line,
                "epoch %lld/%lld  train loss %.4f acc %s  val loss %s acc %s  %.0f img/s  %.1f s  peak allocated %s  "
                "lr %.4g",
                (long long)es.epoch, (long long)epochs, es.train_loss, train_acc.c_str(),
                es.val_loss >= 0 ? std::to_string(es.val_loss).substr(0, 6).c_str() : "-", val_acc.c_str(),
                es.images_per_s, es.seconds, peak, es.lr);
  return line;
}

}  // namespace kiln_cli
