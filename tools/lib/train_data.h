// The data of a `kiln train` / `kiln predict` run behind one interface, whatever --data names:
// an IDX or .npy folder (in memory, data/array_dataset.h) or an image folder / CSV list (decoded
// per epoch by the threaded ImageLoader, image_data_source.h). The training loop asks a
// DataSource for an epoch's batches on the training device and never learns which it is.
// Must not know about models or optimizers.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/nn/module.h"
#include "engine/tensor/tensor.h"
#include "tools/lib/evaluate.h"
#include "tools/lib/image_options.h"
#include "tools/lib/train_config.h"

namespace kiln {

struct SourceBatch {
  Tensor x, y;                   // (B, C, H, W) f32 and (B) i64 on the device
  std::vector<int64_t> indices;  // data set index of each row
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
  // Starts an epoch; returns its number of batches. train: shuffled (or balanced) and augmented;
  // else the data set's order, no augmentation.
  virtual int64_t start_epoch(int64_t epoch, int64_t batch, bool train) = 0;
  // The next batch (bad samples left out, so it may be smaller); false at the end of the epoch.
  virtual bool next(SourceBatch* out) = 0;
  // "PATH: REASON" for bad samples met since the last call (each path once per run).
  virtual std::vector<std::string> take_bad_reports() { return {}; }
  virtual int64_t bad_count() const { return 0; }
};

struct TrainData {
  std::string format;  // idx | npy | images
  std::unique_ptr<DataSource> train, val;
  int64_t num_classes = 0;         // from class folder names (images), else 0
  std::vector<std::string> notes;  // lines for the log (normalization, pinning, ...)
  nlohmann::json ledger;           // the ledger's "data" object
};

// "idx", "npy" or "images" (an image folder or a .csv file) for --data; throws naming the path.
std::string data_kind(const std::string& path);

// The training (and validation) data of run `c` on `device`.
TrainData open_train_data(const TrainConfig& c, Device device);
// The data `kiln predict` runs on: an IDX folder's t10k split, x.npy + y.npy, or for image data
// the val/ or test/ split of a folder with splits (else the whole folder, or the CSV), with the
// eval transform. `stats_from` (optional): normalization from the weights' metadata.
std::unique_ptr<DataSource> open_predict_data(const std::string& path, const ImageOptions& opt, Device device,
                                              const std::string& stored_norm = "");

// Mean loss and accuracy over one pass of `data` at `epoch`'s image size, in eval mode without
// gradients. on_batch (optional) sees each batch's logits (CPU, contiguous) and the batch.
EvalResult evaluate_source(nn::Module& model, DataSource& data, int64_t batch, int64_t epoch,
                           const Tensor& class_weights = Tensor(),
                           const std::function<void(const Tensor& logits, const SourceBatch&)>& on_batch = nullptr);

// Prints bad-sample reports not yet printed ("data: skipped bad sample PATH: REASON").
void report_bad_samples(DataSource& d, std::ostream& log);

}  // namespace kiln
