// The line `kiln train` prints after each epoch: "epoch 2/5  train loss 0.4123 acc 85.12%  val loss 0.3921
// acc 86.03%  812 img/s  12.3 s  peak allocated 161.0 MiB reserved 162.0 MiB  lr 0.001" (the run so far; segmentation: pixel accuracy, mIoU, Dice per
// class). Printing only: the numbers are the trainer's (engine/train/fit.h's EpochStats).
#pragma once
#include <cstdint>
#include <string>

#include "engine/train/fit.h"

namespace kiln_cli {

// `segment`: a --task segment run (its line without --val says so).
std::string format_epoch_line(const kiln::train::EpochStats& es, int64_t epochs, bool segment);

}  // namespace kiln_cli
