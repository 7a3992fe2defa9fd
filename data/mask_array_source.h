// An in-memory segmentation set from .npy arrays, as a DataSource for `kiln train --task segment`
// and `kiln predict --task segment`: a folder with x.npy (N,C,H,W f32, or N,H,W,C u8 -> /255 as f32
// NCHW, as the classification npy folders) and y.npy (N,H,W) masks (u8, i32 or i64): class indices
// 0..254, 255 = ignore. Batches: x (B, C, H, W) f32 and y (B, H, W) i64 on the device, tagged
// MemoryTag::data; training epochs cut the (seed, epoch) permutation (data/array_dataset.h) into
// consecutive batches, evaluation keeps the order; no augmentation, no normalization. Loading checks
// every mask value (one error naming the file and the first bad index). Must not know models.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/data_source.h"

namespace kiln {

struct MaskArrayDataset {
  std::string source;      // "npy-masks:/path", for messages and the ledger
  std::string masks_file;  // y.npy's path, for errors
  int64_t n = 0, channels = 0, height = 0, width = 0;
  std::vector<float> images;   // n * channels * height * width, NCHW
  std::vector<int64_t> masks;  // n * height * width; 0..254 classes, 255 ignore

  int64_t max_class() const;  // the largest class in the masks (255 aside); -1 when none
  void truncate(int64_t count);  // keep the first `count` samples
};

// True when `path` is a folder with x.npy and a y.npy of 3 dimensions (masks).
bool is_mask_npy_folder(const std::string& path);
// Throws kiln::Error naming the file: missing arrays, wrong ranks or dtypes, sizes that disagree,
// a non-finite f32 pixel, a mask value outside 0..254 and 255.
MaskArrayDataset read_mask_npy_folder(const std::string& folder);
// label(i) of this source is the largest class in mask i (its sampler weight has no meaning here).
std::unique_ptr<DataSource> make_mask_array_source(MaskArrayDataset data, uint64_t seed, Device device);

}  // namespace kiln
