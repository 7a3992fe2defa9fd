// A source of training or evaluation batches, as the trainer (engine/train/fit.h) consumes them:
// array data sets (data/array_source.h) and image folders / CSV lists (data/image_source.h)
// behind one interface, plus the value a data opener returns (train and optional validation
// sources, class count, notes for the log, the run ledger's "data" object).
// Batches arrive on the device the source was opened for; a source must not know models.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tensor/tensor.h"

namespace kiln {

// One batch of an epoch as a source will deliver it, before sharding and before bad samples are left out:
// its rows and the H = W of its images (data/meta_source.h replays these shapes on the meta device).
struct BatchShape {
  int64_t rows = 0;
  int64_t size = 0;
};

struct SourceBatch {
  Tensor x, y;                   // (B, C, H, W) f32 and (B) i64 (or (B, H, W) masks) on the device
  std::vector<int64_t> indices;  // data set index of each row
  std::vector<int64_t> micro_rows;  // sharded with accum > 1: rows of each micro-batch's share (engine/train/batch.h's Batch::micro_rows)
  // The one order in which every source hands a batch over (so a run's allocations, and the plan that
  // replays them with data/meta_source.h, are the same): the previous x and y go back first, then the new x
  // and y are allocated (tag data), x first.
  void release() {
    x = Tensor();
    y = Tensor();
  }
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual std::string source() const = 0;  // for messages and the ledger
  virtual int64_t size() const = 0;        // samples
  virtual int64_t channels() const = 0;
  virtual int64_t image_size(int64_t epoch) const = 0;  // H = W at that (0-based) epoch
  virtual int64_t max_label() const = 0;
  virtual int64_t label(int64_t index) const = 0;
  virtual std::string path(int64_t index) const { (void)index; return ""; }
  // Class names in label order (an image folder's class folders, a CSV's names); empty when the
  // labels are plain indices (IDX, npy).
  virtual std::vector<std::string> class_names() const { return {}; }
  // A source that plans its own batches (data/bucketed_image_source.h, --batch-memory): the number
  // of batches of every training epoch, whatever batch start_epoch is given; 0: batches of that size.
  virtual int64_t planned_steps_per_epoch() const { return 0; }
  // Starts an epoch; returns its number of batches. train: shuffled (or balanced) and augmented;
  // else the data set's order, no augmentation (validation is never shuffled).
  virtual int64_t start_epoch(int64_t epoch, int64_t batch, bool train) = 0;
  // The next batch (bad samples left out, so it may be smaller); false at the end of the epoch. Hands it over
  // as SourceBatch::release() says: out's previous x and y released, then x and y allocated.
  virtual bool next(SourceBatch* out) = 0;
  // The batches of an epoch (start_epoch's arguments): by default size() samples cut into batches of `batch`
  // rows (the last one shorter) at image_size(epoch); a source that plans its own batches says its plan.
  virtual std::vector<BatchShape> epoch_batches(int64_t epoch, int64_t batch, bool train) const {
    (void)train;
    std::vector<BatchShape> v;
    for (int64_t pos = 0; pos < size(); pos += batch) v.push_back({std::min(batch, size() - pos), image_size(epoch)});
    return v;
  }
  // One sample's input at `epoch`, (C, H, W) (default: channels(), image_size(epoch) square), and its target:
  // {} for a class index, {H, W} for a segmentation mask (i64 both).
  virtual std::vector<int64_t> sample_shape(int64_t epoch) const {
    return {channels(), image_size(epoch), image_size(epoch)};
  }
  virtual std::vector<int64_t> target_shape(int64_t epoch) const {
    (void)epoch;
    return {};
  }
  // Data-parallel: from now on, deliver only rank `rank`'s rows of each training batch (the global batch
  // that start_epoch's `batch` names, or a planned one, split by engine/dist/shard.h's shard_pieces for `accum` micro-batches,
  // with SourceBatch::micro_rows when accum > 1), so a rank reads only its shard. Returns false when the
  // source cannot (the default): the trainer then cuts each global batch itself.
  virtual bool shard(int rank, int ranks, int64_t accum) {
    (void)rank;
    (void)ranks;
    (void)accum;
    return false;
  }
  // Whether shard() returns true (without changing anything).
  virtual bool can_shard() const { return false; }
  // Passes over the next n batches of the epoch (a run resumed mid-epoch): the batches after them
  // are those an uninterrupted epoch gives. The default reads and drops them.
  virtual void skip_batches(int64_t n) {
    SourceBatch b;
    for (int64_t i = 0; i < n && next(&b); ++i) {
    }
  }
  // "PATH: REASON" for bad samples met since the last call (each path once per run).
  virtual std::vector<std::string> take_bad_reports() { return {}; }
  virtual int64_t bad_count() const { return 0; }
};

struct TrainData {
  std::string format;  // idx | npy | images
  std::unique_ptr<DataSource> train, val;
  int64_t num_classes = 0;         // from class folder names (images), else 0
  std::vector<std::string> classes;  // class names in label order (images), else empty (indices)
  // The normalization applied to the inputs, (x/255 - mean[c]) / std[c]: one value per channel
  // (images) or one for all (IDX; npy: 0 and 1). What a weights file records (engine/train/model_card.h).
  std::vector<double> mean, std;
  std::vector<std::string> notes;  // lines for the log (normalization, pinning, ...)
  nlohmann::json ledger;           // the ledger's "data" object
};

}  // namespace kiln
