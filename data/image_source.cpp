// ImageSource: ImageLoader batches as training tensors (see image_source.h).
#include "data/image_source.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "data/channel_stats.h"
#include "data/decode.h"
#include "data/image_loader.h"
#include "engine/dist/shard.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"
#include "data/batch_transfer.h"

namespace kiln {

namespace {

class ImageSource : public DataSource {
 public:
  ImageSource(ImageDataset ds, const ImageOptions& o, ImageSizeSchedule sizes, const float* mean, const float* std,
              uint64_t seed, Device device)
      : ds_(std::move(ds)), o_(o), sizes_(std::move(sizes)), seed_(seed), device_(device),
        mem_(batch_memory_for(device, o.pin_memory)) {
    for (int c = 0; c < 3; ++c) {
      mean_[c] = mean[c];
      std_[c] = std[c];
    }
  }
  std::string source() const override { return "images:" + ds_.root; }
  int64_t size() const override { return (int64_t)ds_.size(); }
  int64_t channels() const override { return o_.channels; }
  int64_t image_size(int64_t epoch) const override { return sizes_.at_epoch(epoch); }
  int64_t max_label() const override {
    int64_t m = -1;
    for (const ImageSample& s : ds_.samples) m = std::max(m, s.label);
    return m;
  }
  int64_t label(int64_t i) const override { return ds_.samples[(size_t)i].label; }
  std::string path(int64_t i) const override { return ds_.samples[(size_t)i].path; }
  std::vector<std::string> class_names() const override { return ds_.classes; }

  int64_t start_epoch(int64_t epoch, int64_t batch, bool train) override {
    const int s = sizes_.at_epoch(epoch);
    if (!loader_ || s != size_ || batch != batch_ || train != train_) {
      loader_.reset();
      size_ = s;
      batch_ = batch;
      train_ = train;
      loader_ = std::make_unique<ImageLoader>(ds_, loader_options());
    }
    epoch_ = epoch;
    loader_->start_epoch((uint64_t)epoch);
    return (int64_t)loader_->batches_per_epoch();
  }

  // Data-parallel: training epochs decode only this rank's rows of each global batch (ImageLoader's shard).
  bool can_shard() const override { return true; }
  bool shard(int rank, int ranks, int64_t accum) override {
    shard_ = {rank, ranks, accum};
    loader_.reset();  // the next start_epoch makes a loader with the shard
    return true;
  }

  // Restarts the epoch's loader at the batch after the skipped ones (none of them is decoded).
  void skip_batches(int64_t n) override {
    if (n <= 0) return;
    loader_->start_epoch((uint64_t)epoch_, loader_->batches_delivered() + (size_t)n);
  }

  bool next(SourceBatch* out) override {
    ImageBatch ib;
    if (!loader_->next(ib)) {
      collect_bad();
      return false;
    }
    collect_bad();
    out->micro_rows = ib.micro_rows;
    out->release();
    const DType xt = ib.dtype == PixelDType::f16 ? DType::f16 : DType::f32;
    if (ib.n == 0 || device_.is_cpu()) {
      // On the CPU (and for an empty batch) the loader's host buffer is copied into the allocator here, on the
      // training thread: the workers never allocate from it, so a run's allocations do not depend on their
      // timing (training: every sample of an empty batch was bad; fit counts it as a step, left out).
      MemoryScope scope(MemoryTag::data);
      out->x = empty({ib.n, ib.c, ib.h, ib.w}, xt, device_);
      if (ib.n > 0) std::memcpy(out->x.data_ptr(), ib.buffer.get(), (size_t)out->x.nbytes());
    } else {
      out->x = batch_to_device(ib.buffer.get(), {ib.n, ib.c, ib.h, ib.w}, ib.buffer, device_, mem_.pinned);
    }
    {
      MemoryScope scope(MemoryTag::data);
      Tensor y = ib.n > 0 ? tensor_from(ib.labels, {ib.n}) : empty({0}, DType::i64, Device::cpu());
      out->y = device_.is_cpu() ? y : to_device(y, device_);
    }
    out->indices.assign(ib.indices.begin(), ib.indices.end());
    return true;
  }

  std::vector<std::string> take_bad_reports() override {
    std::vector<std::string> v;
    v.swap(pending_);
    return v;
  }
  int64_t bad_count() const override { return (int64_t)reported_.size(); }

 private:
  ImageLoaderOptions loader_options() const {
    ImageLoaderOptions lo;
    lo.batch_size = (size_t)batch_;
    lo.seed = seed_ ^ 0x5bd1e9955bd1e995ULL;  // augmentation: a key apart from the sampler's
    lo.workers = o_.workers;
    lo.prefetch_batches = o_.prefetch;
    if (!device_.is_cpu()) {  // on the CPU: plain host buffers, copied into the allocator in next()
      lo.alloc = mem_.alloc;
      lo.release = mem_.release;
    }
    lo.on_bad_sample = [](const std::string&, const std::string&) {};  // reported from the main thread
    // Training: an all-bad batch is still a step of the epoch (train::fit leaves it out and counts it),
    // so a state saved after step k resumes at the loader's batch k (skip_batches).
    lo.keep_empty_batches = train_;
    if (train_) {
      lo.shard_rank = shard_.rank;
      lo.shard_ranks = shard_.ranks;
      lo.shard_accum = shard_.accum;
      lo.sampler.kind = o_.balance ? SamplerKind::weighted : SamplerKind::random;
      lo.sampler.balance = o_.balance;
      lo.sampler.seed = seed_;
    }
    SampleTransform& t = lo.transform;
    t.channels = o_.channels;
    for (int c = 0; c < 3; ++c) {
      t.mean[c] = mean_[c];
      t.std[c] = std_[c];
    }
    t.out_w = t.out_h = size_;
    if (train_ && o_.uses_rrc()) {
      t.kind = SampleTransform::Kind::random_resized_crop;
      t.rrc.scale_lo = o_.rrc_min_scale();
    } else if (o_.crop == "none") {
      t.kind = SampleTransform::Kind::resize_exact;
    } else {
      t.kind = SampleTransform::Kind::resize_center_crop;
      // --resize R is given for the final size; earlier (smaller) stages keep its ratio.
      const int fin = sizes_.final_size();
      t.resize = o_.resize > 0 ? std::max(size_, (int)std::lround((double)o_.resize * size_ / std::max(fin, 1)))
                               : size_;
    }
    t.random_hflip = train_ && o_.uses_flip();
    return lo;
  }

  void collect_bad() {
    if (!loader_ || loader_->bad_count() == 0) return;
    for (const BadSample& b : loader_->bad_samples())
      if (reported_.insert(b.path).second) pending_.push_back(b.path + ": " + b.reason);
  }

  ImageDataset ds_;
  ImageOptions o_;
  ImageSizeSchedule sizes_;
  float mean_[3], std_[3];
  uint64_t seed_;
  Device device_;
  BatchMemory mem_;
  std::unique_ptr<ImageLoader> loader_;
  int size_ = 0;
  int64_t batch_ = 0;
  int64_t epoch_ = 0;
  bool train_ = false;
  dist::RankShard shard_;  // shard(): training batches are this rank's rows of each global batch
  std::set<std::string> reported_;
  std::vector<std::string> pending_;
};

// Evenly spread subset of `n` samples (keeps every class represented, unlike the first n).
void keep_spread(ImageDataset& ds, int64_t n) {
  if (n < 0 || (size_t)n >= ds.size()) return;
  std::vector<ImageSample> kept;
  kept.reserve((size_t)n);
  for (int64_t i = 0; i < n; ++i) kept.push_back(ds.samples[(size_t)(i * (int64_t)ds.size() / n)]);
  ds.samples = std::move(kept);
}

// Resolves the normalization (auto: measured on `stats_ds`) into mean/std; returns a log line.
std::string resolve_norm(const Normalization& norm, const ImageDataset& stats_ds, int channels, int size,
                         int workers, float* mean, float* std) {
  for (int c = 0; c < 3; ++c) {
    mean[c] = 0.f;
    std[c] = 1.f;
  }
  if (norm.kind != Normalization::Kind::automatic) {
    norm.values(channels, mean, std);
    return "";
  }
  (void)size;  // the statistics are of the full-size images, whatever size the model sees
  const size_t used = normalize_statistics(stats_ds, channels, workers, mean, std);
  KILN_CHECK(used > 0, "--normalize auto: no readable image in ", stats_ds.root);
  const double m[3] = {mean[0], mean[1], mean[2]}, s[3] = {std[0], std[1], std[2]};
  return str_cat("normalize auto: --normalize ", normalize_flag_values(channels, m, s), " (measured on ", used,
                 " images of ", stats_ds.root, ": ", kNormalizeStatisticsScope, "; kiln data prints the same)");
}

}  // namespace

int probe_image_size(const ImageDataset& ds) {
  for (size_t i = 0; i < std::min<size_t>(ds.size(), 16); ++i) {
    try {
      const std::string bytes = read_file_bytes(ds.samples[i].path, 512ull << 20);
      int w = 0, h = 0;
      const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
      if (jpeg_probe_size(p, bytes.size(), true, &w, &h)) return std::min(w, h);
      Image im = decode_image_bytes(p, bytes.size(), ds.samples[i].path);
      return std::min(im.w, im.h);
    } catch (const std::exception&) {
    }
  }
  return 0;
}

namespace {

// A training set that would train on something other than what was meant: a folder of split
// names without train/ (its "classes" would be test, val), a single class (acc 100% by
// construction), or a list none of whose files exists (every batch empty).
void check_trainable(const ImageDataset& train, const std::string& data, bool from_splits) {
  namespace fs = std::filesystem;
  static const std::set<std::string> split_names = {"train", "val", "valid", "validation", "test"};
  const bool folder = fs::is_directory(data);
  if (folder && !from_splits) {
    bool all_splits = !train.classes.empty();
    std::string names;
    for (const std::string& cls : train.classes) {
      all_splits = all_splits && split_names.count(cls) > 0;
      names += (names.empty() ? "" : ", ") + cls + "/";
    }
    KILN_CHECK(!all_splits, "--data ", data, ": holds only split folders (", names,
               ") and no train/: give a folder with train/ plus val/ or test/, or a split folder itself");
  }
  KILN_CHECK(train.labelled, "--data ", data, ": a list of paths without labels: kiln predict takes it, training "
             "needs path,label lines");
  KILN_CHECK(train.classes.size() >= 2, "--data ", data, ": one class (", train.classes.empty() ? "" : train.classes[0],
             "), a classifier needs at least 2", folder ? " class folders" : " labels");
  for (const ImageSample& s : train.samples) {
    std::error_code ec;
    if (fs::exists(s.path, ec)) return;
  }
  throw Error(str_cat("--data ", data, ": no readable sample: none of its ", train.size(), " files exists (the first: ",
                      train.samples[0].path, folder ? ")" : "; CSV paths are relative to the CSV's folder)"));
}

// "train has 3 (a, b, c), --val has 3 (a, b, d); only in train: c; only in --val: d" (at most 12
// names a list).
std::string class_difference(const std::vector<std::string>& train, const std::vector<std::string>& val) {
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 12; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 12) s += str_cat(", ... (", v.size() - 12, " more)");
    return s;
  };
  const std::set<std::string> a(train.begin(), train.end()), b(val.begin(), val.end());
  std::vector<std::string> only_train, only_val;
  for (const std::string& n : train)
    if (!b.count(n)) only_train.push_back(n);
  for (const std::string& n : val)
    if (!a.count(n)) only_val.push_back(n);
  std::string s = str_cat("train has ", train.size(), " (", list(train), "), --val has ", val.size(), " (", list(val),
                          ")");
  if (!only_train.empty()) s += "; only in train: " + list(only_train);
  if (!only_val.empty()) s += "; only in --val: " + list(only_val);
  return s;
}

}  // namespace

TrainData open_image_train_data(const ImageDataOptions& c, Device device) {
  const ImageOptions& o = c.image;
  o.validate();
  TrainData t;
  t.format = "images";
  ImageDataset train, val;
  bool has_val = false;
  std::string split_note;
  if (has_split_folders(c.data) && std::filesystem::is_directory(c.data)) {
    DatasetSplits s = image_folder_splits(c.data);
    train = std::move(s.train);
    val = std::move(s.eval);
    has_val = true;
    split_note = "train/ + " + s.eval_name + "/";
  } else if (std::filesystem::is_directory(c.data) &&
             std::filesystem::is_directory(std::filesystem::path(c.data) / "train")) {
    // train/ without val/ or test/ beside it: the training split alone (was: one class named "train").
    train = open_image_dataset((std::filesystem::path(c.data) / "train").string());
    split_note = "train/ (no val/ or test/ beside it: no validation unless --val)";
  } else {
    train = open_image_dataset(c.data);
  }
  if (!c.val.empty()) {
    val = open_image_dataset(c.val);
    KILN_CHECK(val.labelled, "--val ", c.val, ": a list of paths without labels: validation needs path,label lines");
    KILN_CHECK(val.classes == train.classes || std::filesystem::is_regular_file(c.val), "--val ", c.val,
               ": its classes differ from the training data's: ", class_difference(train.classes, val.classes));
    has_val = true;
  }
  KILN_CHECK(train.size() > 0, "--data ", c.data, ": no training images");
  check_trainable(train, c.data, !split_note.empty());
  keep_spread(train, c.limit);
  ImageSizeSchedule sizes = ImageSizeSchedule::parse(o.image_size);
  if (sizes.empty()) {
    const int s = probe_image_size(train);
    KILN_CHECK(s >= 4, "--data ", c.data, ": cannot read the first images to learn their size; pass --image-size");
    sizes = ImageSizeSchedule::parse(std::to_string(s));
    t.notes.push_back(str_cat("image size ", s, " (the first image's shorter side; --image-size to change)"));
  }
  if (sizes.progressive()) t.notes.push_back("progressive resizing: " + sizes.str());
  float mean[3], std[3];
  const std::string norm_note =
      resolve_norm(Normalization::parse(o.normalize), train, o.channels, sizes.final_size(), o.workers, mean, std);
  if (!norm_note.empty()) t.notes.push_back(norm_note);
  const std::string pin = pin_memory_note(device, o.pin_memory);
  if (!pin.empty()) t.notes.push_back(pin);
  if (o.pin_memory && device.is_cuda()) t.notes.push_back("batches: pinned host buffers, async copy to " + device.str());
  t.num_classes = (int64_t)train.classes.size();
  t.classes = train.classes;
  t.mean.assign(mean, mean + o.channels);
  t.std.assign(std, std + o.channels);
  t.ledger = {{"format", "images"}, {"train", train.root}, {"train_samples", train.size()},
              {"classes", train.classes}, {"image_size", sizes.str()}, {"normalize", o.normalize}};
  t.ledger["mean"] = std::vector<float>(mean, mean + o.channels);
  t.ledger["std"] = std::vector<float>(std, std + o.channels);
  t.ledger["val"] = has_val ? nlohmann::json(val.root) : nlohmann::json();
  t.ledger["val_samples"] = has_val ? val.size() : 0;
  if (!split_note.empty()) t.notes.push_back("splits: " + split_note);
  if (has_val && val.size() > 0)
    t.val = std::make_unique<ImageSource>(std::move(val), o, sizes, mean, std, c.seed, device);
  t.train = std::make_unique<ImageSource>(std::move(train), o, std::move(sizes), mean, std, c.seed, device);
  return t;
}

bool is_unlabelled_image_input(const std::vector<std::string>& inputs) {
  if (inputs.size() != 1) return true;
  const std::string& p = inputs[0];
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) return has_glob_characters(p);
  if (std::filesystem::is_regular_file(p, ec)) return is_image_extension(p);
  return is_flat_image_folder(p);
}

std::unique_ptr<DataSource> open_image_predict_data(const std::vector<std::string>& inputs, const ImageOptions& o,
                                                    Device device) {
  KILN_CHECK(!inputs.empty(), "predict: no --data");
  const std::string& path = inputs[0];
  o.validate();
  const Normalization norm = Normalization::parse(o.normalize);
  // Statistics come from the training set (a weights file stores them), never from the data predicted.
  KILN_CHECK(norm.kind != Normalization::Kind::automatic, "predict: --normalize auto: the mean/std are the training "
             "set's, and predict never measures the data it predicts; give them (--normalize m1,m2,m3:s1,s2,s3)");
  ImageDataset ds;
  if (is_unlabelled_image_input(inputs)) ds = unlabelled_images(inputs);
  else if (std::filesystem::is_directory(path) && has_split_folders(path)) ds = std::move(image_folder_splits(path).eval);
  else ds = open_image_dataset(path);
  ImageSizeSchedule sizes = ImageSizeSchedule::parse(o.image_size);
  if (sizes.empty()) sizes = ImageSizeSchedule::parse(std::to_string(std::max(4, probe_image_size(ds))));
  sizes = ImageSizeSchedule::parse(std::to_string(sizes.final_size()));  // inference: the final size
  float mean[3] = {0.f, 0.f, 0.f}, std[3] = {1.f, 1.f, 1.f};
  norm.values(o.channels, mean, std);
  return std::make_unique<ImageSource>(std::move(ds), o, std::move(sizes), mean, std, 0, device);
}

}  // namespace kiln
