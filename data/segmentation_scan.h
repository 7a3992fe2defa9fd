// A pass over a segmentation data set's masks: pixels per class value (the class count and the
// frequencies `kiln data` prints) and the masks that cannot be read, each with its reason. Reads
// only the masks (PNG, data/png_io.h), in parallel; must not decode images or build batches.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/segmentation_dataset.h"

namespace kiln {

struct MaskScan {
  std::array<uint64_t, 256> pixels{};  // pixels per mask value, over the readable masks (255 = ignore)
  int64_t masks_read = 0;
  int max_class = -1;  // the largest value other than 255 (-1: none)
  struct Bad {
    std::string path, reason;
  };
  std::vector<Bad> bad;  // in sample order: a missing mask names its image
  // Per sample (index into the data set): mask width and height, 0 when unreadable.
  std::vector<int> mask_w, mask_h;
};

// workers: threads (0 = half the cores).
MaskScan scan_masks(const SegmentationDataset& ds, int workers);

}  // namespace kiln
