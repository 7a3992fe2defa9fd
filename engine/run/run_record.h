// The run ledger's JSON of a run (engine/train/run_ledger.h writes the lines): one epoch's record and
// the sizes a progressive --image-size schedule uses. Pure functions of what they are given.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "data/image_options.h"
#include "engine/train/fit.h"

namespace kiln {

// {"epoch", "train_loss", "train_acc", "images_per_s", "seconds", "lr", "val_loss", "val_acc" (null
// without validation), segmentation's val_* metrics, "peak_memory_bytes", "loss_scale", ...}.
nlohmann::json epoch_json(const train::EpochStats& e);

// A number, or null when it is NaN (an undefined metric: JSON has no NaN).
nlohmann::json number_or_null(double v);

// The sizes a schedule gives in `epochs` epochs: "16 for epochs 1-2" or "16 for epochs 1-5, 20 for epoch 6".
std::string sizes_used(const ImageSizeSchedule& sched, int64_t epochs);

}  // namespace kiln
