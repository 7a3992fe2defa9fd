// The ledger records of a run (see run_record.h).
#include "engine/run/run_record.h"

#include <cmath>

#include "engine/train/segment_metrics.h"

namespace kiln {

nlohmann::json number_or_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

nlohmann::json epoch_json(const train::EpochStats& e) {
  nlohmann::json j = {{"epoch", e.epoch},         {"train_loss", e.train_loss}, {"train_acc", e.train_acc},
                      {"images_per_s", e.images_per_s}, {"seconds", e.seconds}, {"lr", e.lr}};
  j["val_loss"] = e.val_loss >= 0 ? nlohmann::json(e.val_loss) : nlohmann::json();
  j["val_acc"] = e.val_acc >= 0 ? nlohmann::json(e.val_acc) : nlohmann::json();
  // The counts the accuracies are (every printed percentage is computed from them: engine/core/percent.h).
  if (e.train_total > 0) j["train_correct"] = e.train_correct, j["train_total"] = e.train_total;
  if (e.val_total > 0) j["val_correct"] = e.val_correct, j["val_total"] = e.val_total;
  if (e.val_segment) {  // --task segment: the whole validation set's metrics (engine/train/segment_metrics.h)
    const train::SegmentMetrics& m = *e.val_segment;
    j["val_pixel_acc"] = number_or_null(m.pixel_accuracy);
    j["val_miou"] = number_or_null(m.mean_iou);
    j["val_mean_dice"] = number_or_null(m.mean_dice);
    nlohmann::json iou = nlohmann::json::array(), dice = nlohmann::json::array();
    for (int64_t k = 0; k < m.num_classes; ++k) {
      iou.push_back(number_or_null(m.iou[(size_t)k]));  // null: the class is in neither target nor prediction
      dice.push_back(number_or_null(m.dice[(size_t)k]));
    }
    j["val_iou"] = iou;
    j["val_dice"] = dice;
    j["val_pixels"] = m.pixels;
    j["ignore_background"] = m.ignore_background;
    j["val_baseline_miou"] = number_or_null(train::all_background_metrics(m).mean_iou);  // all background
  }
  j["peak_memory_bytes"] = e.peak_memory >= 0 ? nlohmann::json(e.peak_memory) : nlohmann::json();
  if (e.run_peak_allocated >= 0) {  // the whole run up to this epoch (engine/run/run_peaks.h)
    j["peak_allocated"] = e.run_peak_allocated;
    j["peak_reserved"] = e.run_peak_reserved;
  }
  if (e.undefined_batches > 0) j["undefined_batches"] = e.undefined_batches;
  if (e.loss_scale > 0) {
    j["loss_scale"] = e.loss_scale;
    j["skipped_steps"] = e.skipped_steps;
  }
  return j;
}

std::string sizes_used(const ImageSizeSchedule& sched, int64_t epochs) {
  std::string out;
  for (int64_t e = 0; e < epochs;) {
    const int size = sched.at_epoch(e);
    int64_t end = e;
    while (end + 1 < epochs && sched.at_epoch(end + 1) == size) ++end;
    out += str_cat(out.empty() ? "" : ", ", size, end > e ? " for epochs " : " for epoch ", e + 1);
    if (end > e) out += str_cat("-", end + 1);
    e = end + 1;
  }
  return out;
}

}  // namespace kiln
