// In-memory array data sets for `kiln train` / `kiln predict`: a whole data set held as one f32
// (N, C, H, W) block plus i64 labels, loaded from
//   - a folder of MNIST-format IDX files (train-images-idx3-ubyte[.gz], ...), or
//   - a folder with x.npy (N,C,H,W f32, or N,H,W,C u8 -> /255 as f32 NCHW) and y.npy (N i64 or i32).
// IDX pixels become x/255, then (x - mean) / std with the mean and std of the folder's TRAINING
// images (one value each, computed once at load; the same numbers normalize the t10k split, a
// --val folder and `kiln predict`, so train and inference see the same input distribution). With a
// training limit (--limit N) they are those of the N samples trained on, as the run ledger says;
// `kiln predict` still takes the whole training split's (weights files do not store them yet).
// Array (.npy) data is used as given (u8 only scaled to [0,1]) with no augmentation.
// Batches are gathered by index into fresh tensors tagged MemoryTag::data. Shuffling is a
// Philox-driven Fisher-Yates permutation that depends only on (seed, epoch), so a resumed run
// sees the same order as an uninterrupted one. Must not know about models or training.
// Every set is checked when loaded, with one error naming the file and the first bad index: no
// samples, a non-finite value in f32 images (NaN would train "fine" into a NaN model), a negative
// label, and (when the number of classes is known) a label >= num_classes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/data_source.h"
#include "engine/tensor/tensor.h"

namespace kiln {

struct ArrayDataset {
  std::string source;  // "idx:/path (train)", "npy:/path" — for messages and the run ledger
  std::string labels_file;  // the file the labels came from (y.npy or the IDX labels), for errors
  int64_t n = 0, channels = 0, height = 0, width = 0;
  std::vector<float> images;    // n * channels * height * width, NCHW, C order
  std::vector<int64_t> labels;  // n, each >= 0

  int64_t sample_numel() const { return channels * height * width; }
  int64_t max_label() const;  // -1 when empty
  // Keeps only the first `count` samples (count >= 0; no-op when count >= n).
  void truncate(int64_t count);
};

struct DataSplits {
  std::string format;  // "idx" or "npy"
  ArrayDataset train;
  std::optional<ArrayDataset> val;
  double mean = 0.0, std = 1.0;  // IDX normalization applied (after /255); 0 and 1 for npy
};

// What `path` holds: "idx" when it is a folder with MNIST train (or test) files, "npy" when it has
// x.npy and y.npy. Throws kiln::Error saying what was expected when it is neither, or missing.
std::string detect_data_format(const std::string& path);

// Training data from `path`, plus validation data: from `val_path` when not empty, else the t10k
// files of an IDX folder, else none. `limit` >= 0 keeps only the first `limit` training samples.
// num_classes > 0: every label (training and validation) must be < num_classes (check_labels).
DataSplits load_training_data(const std::string& path, const std::string& val_path = "", int64_t limit = -1,
                              int64_t num_classes = 0);

// Data to run inference on: the t10k split of an IDX folder (its train split when it has no t10k
// files), normalized with the folder's training statistics; or x.npy / y.npy of an npy folder.
// num_classes > 0: labels are checked against it (check_labels).
ArrayDataset load_inference_data(const std::string& path, int64_t num_classes = 0);
// Same, an IDX folder normalized with the given statistics mean_std[0], mean_std[1] (a weights
// file's, the training set's) instead of the folder's own; null: as above. npy data is as given.
ArrayDataset load_inference_data(const std::string& path, int64_t num_classes, const double* mean_std);

// Throws kiln::Error naming d.labels_file and the first index whose label is negative or, when
// num_classes > 0, >= num_classes. For callers that learn the class count after loading.
void check_labels(const ArrayDataset& d, int64_t num_classes);

// x: (B, C, H, W) f32 and y: (B) i64 on `device` (tagged data), samples data.images[indices[begin..end)],
// with their indices.
SourceBatch gather_batch(const ArrayDataset& data, const std::vector<int64_t>& indices, int64_t begin, int64_t end,
                         Device device = Device::cpu());

// 0..n-1 shuffled by a Fisher-Yates pass over Philox words keyed by `seed` at a stream offset
// derived from `epoch` (independent of kiln's global generator).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace kiln
