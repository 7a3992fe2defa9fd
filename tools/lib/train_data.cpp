// Array data (IDX / npy) as a DataSource, the --data dispatch, and evaluation over any source
// (see train_data.h). Image folders and CSV lists live in image_data_source.cpp.
#include "tools/lib/train_data.h"

#include <filesystem>

#include "data/array_dataset.h"
#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"
#include "tools/lib/image_data_source.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

// Same batches as before DataSource existed: the (seed, epoch) permutation cut into consecutive
// batches when training, the data set's order otherwise.
class ArraySource : public DataSource {
 public:
  ArraySource(ArrayDataset d, uint64_t seed, Device device) : d_(std::move(d)), seed_(seed), device_(device) {}
  std::string source() const override { return d_.source; }
  int64_t size() const override { return d_.n; }
  int64_t channels() const override { return d_.channels; }
  int64_t image_size(int64_t) const override { return d_.height; }
  int64_t max_label() const override { return d_.max_label(); }
  int64_t label(int64_t i) const override { return d_.labels[(size_t)i]; }
  int64_t start_epoch(int64_t epoch, int64_t batch, bool train) override {
    if (train) {
      order_ = epoch_permutation(d_.n, seed_, epoch);
    } else {
      order_.resize((size_t)d_.n);
      for (int64_t i = 0; i < d_.n; ++i) order_[(size_t)i] = i;
    }
    batch_ = batch;
    pos_ = 0;
    return (d_.n + batch - 1) / batch;
  }
  bool next(SourceBatch* out) override {
    if (pos_ >= d_.n) return false;
    const int64_t end = std::min(d_.n, pos_ + batch_);
    Batch b = gather_batch(d_, order_, pos_, end, device_);
    out->x = b.x;
    out->y = b.y;
    out->indices.assign(order_.begin() + pos_, order_.begin() + end);
    pos_ = end;
    return true;
  }

 private:
  ArrayDataset d_;
  uint64_t seed_;
  Device device_;
  std::vector<int64_t> order_;
  int64_t batch_ = 1, pos_ = 0;
};

}  // namespace

std::string data_kind(const std::string& path) {
  std::error_code ec;
  KILN_CHECK(fs::exists(path, ec), "--data ", path, ": no such file or folder");
  if (fs::is_regular_file(path, ec)) {
    KILN_CHECK(fs::path(path).extension() == ".csv" || fs::path(path).extension() == ".CSV", "--data ", path,
               ": a file must be a CSV list (path,label); otherwise give a folder (IDX files, x.npy + y.npy, or "
               "class subfolders of images)");
    return "images";
  }
  KILN_CHECK(fs::is_directory(path, ec), "--data ", path, ": not a file or folder");
  try {
    return detect_data_format(path);
  } catch (const Error&) {
    return "images";  // image_folder() says what is wrong when it is not that either
  }
}

TrainData open_train_data(const TrainConfig& c, Device device) {
  const std::string kind = data_kind(c.data);
  if (kind == "images") return open_image_train_data(c, device);
  TrainData t;
  DataSplits s = load_training_data(c.data, c.val, c.limit);
  t.format = s.format;
  t.ledger = {{"format", s.format}, {"train", s.train.source}, {"train_samples", s.train.n},
              {"mean", s.mean},     {"std", s.std}};
  t.ledger["val"] = s.val ? nlohmann::json(s.val->source) : nlohmann::json();
  t.ledger["val_samples"] = s.val ? s.val->n : 0;
  if (s.format == "idx") t.notes.push_back(str_cat("normalized (x/255 - ", s.mean, ") / ", s.std));
  if (!c.image.image_size.empty() || c.image.augment != "none" || c.image.balance || c.image.normalize != "none")
    t.notes.push_back("note: --image-size, --augment, --balance and --normalize apply to image folders and CSV "
                      "lists only; " + s.format + " data is used as stored");
  t.train = std::make_unique<ArraySource>(std::move(s.train), c.seed, device);
  if (s.val) t.val = std::make_unique<ArraySource>(std::move(*s.val), c.seed, device);
  return t;
}

std::unique_ptr<DataSource> open_predict_data(const std::string& path, const ImageOptions& opt, Device device,
                                              const std::string& stored_norm) {
  if (data_kind(path) == "images") return open_image_predict_data(path, opt, device, stored_norm);
  return std::make_unique<ArraySource>(load_inference_data(path), 0, device);
}

EvalResult evaluate_source(nn::Module& model, DataSource& data, int64_t batch, int64_t epoch,
                           const Tensor& class_weights,
                           const std::function<void(const Tensor&, const SourceBatch&)>& on_batch) {
  model.eval();
  NoGradGuard no_grad;
  data.start_epoch(epoch, batch, false);
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  SourceBatch b;
  while (data.next(&b)) {
    const int64_t n = b.x.size(0);
    MemoryScope scope(MemoryTag::temporary);
    Tensor logits = model(b.x);
    Tensor loss = cross_entropy(logits, b.y, class_weights);
    loss_sum += to_device(loss, Device::cpu()).item() * (double)n;
    correct += count_correct(logits, b.y);
    r.n += n;
    if (on_batch) on_batch(contiguous(to_device(logits, Device::cpu())), b);
  }
  r.loss = r.n ? loss_sum / (double)r.n : 0.0;
  r.accuracy = r.n ? (double)correct / (double)r.n : 0.0;
  return r;
}

void report_bad_samples(DataSource& d, std::ostream& log) {
  for (const std::string& line : d.take_bad_reports()) log << "data: skipped bad sample " << line << "\n";
}

}  // namespace kiln
