// The --data dispatch to data/'s sources and evaluation over any source (see train_data.h).
#include "engine/run/run_data.h"

#include "engine/core/usage_error.h"

#include <filesystem>
#include <optional>

#include "data/array_source.h"
#include "engine/memory/alloc_config.h"
#include "data/mask_array_source.h"
#include "data/segmentation_source.h"
#include "engine/ops/ops.h"
#include "data/bucketed_image_source.h"
#include "data/image_source.h"

namespace kiln {
namespace fs = std::filesystem;

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

namespace {

// "--data PATH" of --task segment that is no segmentation set: one error saying what is taken.
void check_segment_folder(const std::string& path, const char* flag) {
  std::error_code ec;
  KILN_CHECK(fs::exists(path, ec), flag, " ", path, ": no such file or folder");
  KILN_CHECK(is_mask_npy_folder(path), "--task segment: ", flag, " ", path,
             ": not a segmentation set (expected a folder with images/ and masks/ matched by stem, a folder whose "
             "train/ is one, an image,mask CSV, or a folder with x.npy (N,C,H,W f32 or N,H,W,C u8) and y.npy "
             "(N,H,W) masks: classes 0..254, 255 = ignore)");
}

TrainData open_segment_train_data(const RunConfig& c, Device device) {
  if (is_segmentation_data(c.data)) {  // image + mask files (data/segmentation_source.h)
    SegmentationDataOptions o;
    o.data = c.data;
    o.val = c.val;
    o.image = c.image;
    o.seed = c.seed;
    o.limit = c.limit;
    o.num_classes = c.num_classes;
    return open_segmentation_train_data(o, device);
  }
  check_segment_folder(c.data, "--data");
  MaskArrayDataset train = read_mask_npy_folder(c.data);
  train.truncate(c.limit);
  std::optional<MaskArrayDataset> val;
  if (!c.val.empty()) {
    check_segment_folder(c.val, "--val");
    val = read_mask_npy_folder(c.val);
    KILN_CHECK(val->channels == train.channels, "--val ", c.val, ": ", val->channels, " channels, --data ", c.data,
               " has ", train.channels);
  }
  TrainData t;
  t.format = "segment";
  t.mean = {0.0};
  t.std = {1.0};
  t.ledger = {{"format", "segment"}, {"train", train.source}, {"train_samples", train.n}, {"mean", 0.0}, {"std", 1.0}};
  t.ledger["val"] = val ? nlohmann::json(val->source) : nlohmann::json();
  t.ledger["val_samples"] = val ? val->n : 0;
  if (!c.image.image_size.empty() || c.image.augment != "none" || c.image.balance || c.image.normalize != "none")
    t.notes.push_back("note: --image-size, --augment, --balance and --normalize do not apply to npy masks; the "
                      "arrays are used as stored");
  t.train = make_mask_array_source(std::move(train), c.seed, device);
  if (val) t.val = make_mask_array_source(std::move(*val), c.seed, device);
  return t;
}

}  // namespace

std::unique_ptr<DataSource> open_segment_predict_data(const std::string& path, const ImageOptions& opt,
                                                      Device device, int64_t num_classes) {
  if (!is_mask_npy_folder(path)) return open_segmentation_predict_data(path, opt, device, num_classes);  // images
  check_segment_folder(path, "--data");
  return make_mask_array_source(read_mask_npy_folder(path), 0, device);
}

TrainData open_train_data(const RunConfig& c, Device device) {
  KILN_USAGE_CHECK(c.limit != 0, "--limit 0: no samples to train on (give a positive count, or leave --limit out)");
  if (!c.batch_memory.empty()) {  // before any file is read
    size_t bytes = 0;
    try {
      bytes = parse_bytes(c.batch_memory);
    } catch (const Error& e) {
      throw UsageError(str_cat("--batch-memory ", c.batch_memory, ": ", e.what()));
    }
    KILN_USAGE_CHECK(bytes > 0, "--batch-memory ", c.batch_memory, ": the budget must be > 0 bytes");
  }
  if (c.task == "segment") {
    KILN_USAGE_CHECK(c.batch_memory.empty(), "--batch-memory ", c.batch_memory,
                     ": not available with --task segment yet (give --batch)");
    return open_segment_train_data(c, device);
  }
  const std::string kind = data_kind(c.data);
  if (kind == "images") {
    if (ImageSizeSchedule::parse(c.image.image_size).progressive())
      KILN_USAGE_CHECK(c.model != "small_cnn", "--image-size ", c.image.image_size,
                 ": small_cnn takes one input size (its classifier is sized for it); progressive resizing needs a "
                 "model with global pooling (resnet18, resnet34, ...)");
    ImageDataOptions o;
    o.data = c.data;
    o.val = c.val;
    o.image = c.image;
    o.seed = c.seed;
    o.limit = c.limit;
    if (!c.batch_memory.empty()) return open_bucketed_image_train_data(o, device);
    return open_image_train_data(o, device);
  }
  KILN_USAGE_CHECK(c.batch_memory.empty(), "--batch-memory: ", c.data, " is ", kind, " data of one image size; "
                   "batches sized by memory are for image folders and CSV lists of mixed sizes (use --batch)");
  TrainData t;
  DataSplits s = load_training_data(c.data, c.val, c.limit, c.num_classes);  // labels checked against --num-classes
  t.format = s.format;
  t.mean = {s.mean};
  t.std = {s.std};
  t.ledger = {{"format", s.format}, {"train", s.train.source}, {"train_samples", s.train.n},
              {"mean", s.mean},     {"std", s.std}};
  t.ledger["val"] = s.val ? nlohmann::json(s.val->source) : nlohmann::json();
  t.ledger["val_samples"] = s.val ? s.val->n : 0;
  if (s.format == "idx") t.notes.push_back(str_cat("normalized (x/255 - ", s.mean, ") / ", s.std));
  if (!c.image.image_size.empty() || c.image.augment != "none" || c.image.balance || c.image.normalize != "none")
    t.notes.push_back("note: --image-size, --augment, --balance and --normalize apply to image folders and CSV "
                      "lists only; " + s.format + " data is used as stored");
  t.train = make_array_source(std::move(s.train), c.seed, device);
  if (s.val) t.val = make_array_source(std::move(*s.val), c.seed, device);
  return t;
}

std::unique_ptr<DataSource> open_predict_data(const std::vector<std::string>& inputs, const ImageOptions& opt,
                                              Device device, const double* idx_mean_std) {
  KILN_CHECK(!inputs.empty(), "predict: no --data");
  if (is_unlabelled_image_input(inputs) || data_kind(inputs[0]) == "images")
    return open_image_predict_data(inputs, opt, device);
  return make_array_source(load_inference_data(inputs[0], 0, idx_mean_std), 0, device);
}

void report_bad_samples(DataSource& d, std::ostream& log, const std::string& prefix) {
  for (const std::string& line : d.take_bad_reports()) log << prefix << "data: skipped bad sample " << line << "\n";
}

}  // namespace kiln
