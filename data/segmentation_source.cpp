// SegmentationSource and its openers (see segmentation_source.h).
#include "data/segmentation_source.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include "data/channel_stats.h"
#include "data/dataset.h"
#include "data/decode.h"
#include "data/image_source.h"
#include "data/sampler.h"
#include "data/segmentation_sample.h"
#include "data/segmentation_scan.h"
#include "engine/dist/shard.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

class SegmentationSource : public DataSource {
 public:
  SegmentationSource(SegmentationDataset ds, const ImageOptions& o, ImageSizeSchedule sizes, const float* mean,
                     const float* std, int64_t num_classes, uint64_t seed, Device device, bool has_masks)
      : ds_(std::move(ds)), o_(o), sizes_(std::move(sizes)), num_classes_(num_classes), seed_(seed),
        device_(device), has_masks_(has_masks) {
    KILN_CHECK(!ds_.samples.empty(), "segmentation data ", ds_.root, ": no samples");
    for (int c = 0; c < 3; ++c) {
      mean_[c] = mean[c];
      std_[c] = std[c];
    }
  }
  ~SegmentationSource() override { drop_ahead(); }
  std::string source() const override { return "segment:" + ds_.root; }
  int64_t size() const override { return (int64_t)ds_.size(); }
  int64_t channels() const override { return o_.channels; }
  int64_t image_size(int64_t epoch) const override { return sizes_.at_epoch(epoch); }
  std::vector<int64_t> target_shape(int64_t epoch) const override {
    if (!has_masks_) return {};
    return {image_size(epoch), image_size(epoch)};
  }
  int64_t max_label() const override { return num_classes_ - 1; }
  int64_t label(int64_t) const override { return 0; }  // no per-image label: the labels are the masks
  std::string path(int64_t i) const override { return ds_.samples[(size_t)i].image; }
  std::vector<std::string> class_names() const override { return ds_.classes; }

  int64_t start_epoch(int64_t epoch, int64_t batch, bool train) override {
    KILN_CHECK(batch > 0, "segmentation data: batch size must be > 0");
    drop_ahead();
    epoch_ = epoch;
    batch_ = batch;
    train_ = train;
    const std::vector<size_t> order =
        train ? random_permutation(ds_.size(), seed_, (uint64_t)epoch) : sequential_indices(ds_.size());
    batches_ = make_batches(order, (size_t)batch, false);
    cursor_ = 0;
    t_ = transform(sizes_.at_epoch(epoch));
    return (int64_t)batches_.size();
  }

  // Data-parallel: training batches decode only this rank's rows of each global batch (its shares of
  // `accum` micro-batches, engine/dist/shard.h), each with the augmentation draws of its place in the epoch.
  bool can_shard() const override { return true; }
  bool shard(int rank, int ranks, int64_t accum) override {
    drop_ahead();
    shard_ = {rank, ranks, accum};
    return true;
  }

  // Batches are made from (seed, epoch, position): skipping decodes nothing (a batch decoded
  // ahead is dropped).
  void skip_batches(int64_t n) override {
    if (n <= 0) return;
    drop_ahead();
    cursor_ = std::min(batches_.size(), cursor_ + (size_t)n);
  }

  // The batch at the cursor (decoded ahead, or now); then the one after it starts decoding on a
  // background thread while the caller trains on this one.
  bool next(SourceBatch* out) override {
    for (;;) {
      if (cursor_ >= batches_.size()) return false;
      const size_t b = cursor_++;
      Decoded d;
      if (ahead_.valid() && ahead_batch_ == b) {
        d = ahead_.get();
      } else {
        drop_ahead();
        d = decode(b);
      }
      if (cursor_ < batches_.size()) {
        ahead_batch_ = cursor_;
        ahead_ = std::async(std::launch::async, [this, nb = cursor_] { return decode(nb); });
      }
      if (finish(d, out) || train_) return true;  // training keeps an all-bad batch as a step (n = 0)
    }
  }

  std::vector<std::string> take_bad_reports() override {
    std::vector<std::string> v;
    v.swap(pending_);
    return v;
  }
  int64_t bad_count() const override { return (int64_t)reported_.size(); }

 private:
  SegmentationTransform transform(int size) const {
    SegmentationTransform t;
    t.num_classes = num_classes_;
    SampleTransform& s = t.image;
    s.channels = o_.channels;
    for (int c = 0; c < 3; ++c) {
      s.mean[c] = mean_[c];
      s.std[c] = std_[c];
    }
    s.out_w = s.out_h = size;
    s.decode.apply_exif = false;
    if (train_ && o_.uses_rrc()) {
      s.kind = SampleTransform::Kind::random_resized_crop;
      s.rrc.scale_lo = o_.rrc_min_scale();
    } else if (o_.crop == "none") {
      s.kind = SampleTransform::Kind::resize_exact;
    } else {
      s.kind = SampleTransform::Kind::resize_center_crop;
      const int fin = sizes_.final_size();
      s.resize = o_.resize > 0 ? std::max(size, (int)std::lround((double)o_.resize * size / std::max(fin, 1))) : size;
    }
    s.random_hflip = train_ && o_.uses_flip();
    return t;
  }

  // One batch's samples decoded into host buffers (bad ones marked), not yet tensors.
  struct Decoded {
    std::vector<size_t> idx;
    std::vector<int64_t> pieces;  // sharded with accum > 1: rows of each micro-batch share, in order
    std::vector<float> xs;
    std::vector<int64_t> ys;
    std::vector<std::string> bad_path, why;
  };

  // Waits for a batch decoded ahead and drops it (an epoch restart, a skip, the end).
  void drop_ahead() {
    if (ahead_.valid()) ahead_.wait();
    ahead_ = std::future<Decoded>();
  }

  // Decodes batch b. Reads only what start_epoch fixed (batches_, t_, epoch_, batch_) and the data
  // set, so it may run on the background thread; never throws for a bad sample.
  Decoded decode(size_t b) const {
    Decoded d;
    // Each row's place in the global batch (its augmentation stream); data-parallel training: this rank's.
    const std::vector<int64_t> place =
        (train_ ? shard_ : dist::RankShard{}).places((int64_t)batches_[b].size(), &d.pieces);
    for (int64_t k : place) d.idx.push_back(batches_[b][(size_t)k]);
    const std::vector<size_t>& idx = d.idx;
    const size_t n = idx.size(), S = (size_t)t_.image.out_h * t_.image.out_w, C = (size_t)o_.channels;
    d.xs.resize(n * C * S);
    d.ys.resize(has_masks_ ? n * S : 0);
    d.bad_path.resize(n);
    d.why.resize(n);
    std::vector<float>& xs = d.xs;
    std::vector<int64_t>& ys = d.ys;
    std::vector<std::string>&bad_path = d.bad_path, &why = d.why;
    const uint64_t aug_seed = seed_ ^ 0x5bd1e9955bd1e995ULL;  // a key apart from the sampler's, as image folders
    std::atomic<size_t> next_k{0};
    auto work = [&] {
      for (size_t k; (k = next_k++) < n;) {
        const SegmentationSample& s = ds_.samples[idx[k]];
        const uint64_t stream = sample_stream((uint64_t)epoch_, (uint64_t)(b * (size_t)batch_ + (size_t)place[k]));
        try {
          if (has_masks_)
            load_segmentation_sample(s.image, s.mask, t_, aug_seed, stream, xs.data() + k * C * S, ys.data() + k * S);
          else
            load_sample_file(s.image, t_.image, aug_seed, stream, xs.data() + k * C * S);
        } catch (const DecodeError& e) {
          bad_path[k] = e.file();
          why[k] = e.reason();
        } catch (const std::exception& e) {
          bad_path[k] = s.image;
          why[k] = e.what();
        }
      }
    };
    const int workers = std::max(1, std::min<int>(o_.workers > 0 ? o_.workers
                                                                : (int)std::thread::hardware_concurrency() / 2,
                                                  (int)n));
    std::vector<std::thread> threads;
    for (int t = 1; t < workers; ++t) threads.emplace_back(work);
    work();
    for (auto& th : threads) th.join();
    return d;
  }

  // On the caller's thread: bad samples reported, good ones packed to the front, tensors made on
  // the device. False when every sample was bad (out then holds n = 0).
  bool finish(Decoded& d, SourceBatch* out) {
    const std::vector<size_t>& idx = d.idx;
    const size_t n = idx.size(), S = (size_t)t_.image.out_h * t_.image.out_w, C = (size_t)o_.channels;
    std::vector<float>& xs = d.xs;
    std::vector<int64_t>& ys = d.ys;
    const std::vector<std::string>&bad_path = d.bad_path, &why = d.why;
    std::vector<int64_t> kept;
    out->micro_rows = d.pieces;  // then less the bad rows of each share
    for (size_t k = 0, piece = 0, end = d.pieces.empty() ? n : (size_t)d.pieces[0]; k < n; ++k) {
      while (!d.pieces.empty() && k >= end) end += (size_t)d.pieces[++piece];
      if (!bad_path[k].empty() || !why[k].empty()) {
        if (!d.pieces.empty()) --out->micro_rows[piece];
        if (reported_.insert(bad_path[k]).second) pending_.push_back(bad_path[k] + ": " + why[k]);
        continue;
      }
      const size_t j = kept.size();
      if (j != k) {
        std::memmove(xs.data() + j * C * S, xs.data() + k * C * S, C * S * sizeof(float));
        if (has_masks_) std::memmove(ys.data() + j * S, ys.data() + k * S, S * sizeof(int64_t));
      }
      kept.push_back((int64_t)idx[k]);
    }
    const int64_t m = (int64_t)kept.size(), H = t_.image.out_h, W = t_.image.out_w;
    out->release();
    MemoryScope scope(MemoryTag::data);
    Tensor x = empty({m, (int64_t)C, H, W}, DType::f32, Device::cpu());
    if (m) std::memcpy(x.data<float>(), xs.data(), (size_t)m * C * S * sizeof(float));
    Tensor y = has_masks_ ? empty({m, H, W}, DType::i64, Device::cpu()) : empty({m}, DType::i64, Device::cpu());
    if (has_masks_ && m) std::memcpy(y.data<int64_t>(), ys.data(), (size_t)m * S * sizeof(int64_t));
    if (!has_masks_ && m) std::fill(y.data<int64_t>(), y.data<int64_t>() + m, (int64_t)0);
    out->x = device_.is_cpu() ? x : to_device(x, device_);
    out->y = device_.is_cpu() ? y : to_device(y, device_);
    out->indices = std::move(kept);
    return m > 0;
  }

  SegmentationDataset ds_;
  ImageOptions o_;
  ImageSizeSchedule sizes_;
  float mean_[3], std_[3];
  int64_t num_classes_;
  uint64_t seed_;
  Device device_;
  bool has_masks_;
  SegmentationTransform t_;
  std::vector<std::vector<size_t>> batches_;
  size_t cursor_ = 0;
  std::future<Decoded> ahead_;  // the batch after the cursor's, decoding
  size_t ahead_batch_ = 0;
  int64_t epoch_ = 0, batch_ = 1;
  bool train_ = false;
  dist::RankShard shard_;  // shard(): training batches are this rank's rows of each global batch
  std::set<std::string> reported_;
  std::vector<std::string> pending_;
};

// The images of a segmentation data set as an ImageDataset (one class), for the size probe and
// --normalize auto.
ImageDataset images_of(const SegmentationDataset& ds) {
  ImageDataset d;
  d.root = ds.root;
  d.classes = {"image"};
  for (const SegmentationSample& s : ds.samples) d.samples.push_back({s.image, 0});
  return d;
}

void keep_spread(SegmentationDataset& ds, int64_t n) {
  if (n < 0 || (size_t)n >= ds.size()) return;
  std::vector<SegmentationSample> kept;
  for (int64_t i = 0; i < n; ++i) kept.push_back(ds.samples[(size_t)(i * (int64_t)ds.size() / n)]);
  ds.samples = std::move(kept);
}

}  // namespace

bool is_segmentation_data(const std::string& path) {
  return is_segmentation_folder(path) || has_segmentation_splits(path) || is_segmentation_csv(path);
}

std::unique_ptr<DataSource> make_segmentation_source(SegmentationDataset ds, const ImageOptions& o,
                                                     const ImageSizeSchedule& sizes, const float* mean,
                                                     const float* std, int64_t num_classes, uint64_t seed,
                                                     Device device, bool has_masks) {
  return std::make_unique<SegmentationSource>(std::move(ds), o, sizes, mean, std, num_classes, seed, device,
                                              has_masks);
}

TrainData open_segmentation_train_data(const SegmentationDataOptions& c, Device device) {
  const ImageOptions& o = c.image;
  o.validate();
  KILN_CHECK(!o.balance, "--balance: segmentation samples have no single class to balance by");
  KILN_CHECK(is_segmentation_data(c.data), "--data ", c.data,
             ": not segmentation data (a folder with images/ and masks/, one whose train/ is such a folder, "
             "or a CSV whose header is image,mask)");
  KILN_CHECK(c.num_classes >= 0 && c.num_classes <= 255, "--num-classes ", c.num_classes,
             ": masks are 8-bit, so 1..255 classes (255 = ignore)");
  TrainData t;
  t.format = "segment";
  SegmentationDataset train, val;
  bool has_val = false;
  std::string split_note;
  if (has_segmentation_splits(c.data)) {
    SegmentationSplits s = segmentation_folder_splits(c.data);
    train = std::move(s.train);
    if (!s.eval_name.empty()) {
      val = std::move(s.eval);
      has_val = true;
      split_note = "train/ + " + s.eval_name + "/";
    } else {
      split_note = "train/ (no val/ or test/ beside it: no validation unless --val)";
    }
  } else {
    train = open_segmentation_dataset(c.data);
  }
  if (!c.val.empty()) {
    KILN_CHECK(is_segmentation_data(c.val), "--val ", c.val, ": not segmentation data (images/ + masks/, or image,mask CSV)");
    val = has_segmentation_splits(c.val) ? segmentation_folder_splits(c.val).train : open_segmentation_dataset(c.val);
    has_val = true;
  }
  keep_spread(train, c.limit);
  KILN_CHECK(train.size() > 0, "--data ", c.data, ": no training samples");

  // Classes: --num-classes, else classes.txt, else a scan of the masks.
  int64_t k = c.num_classes;
  std::string k_note;
  if (k > 0) {
    k_note = str_cat("classes: ", k, " (--num-classes)");
  } else if (!train.classes.empty()) {
    k = (int64_t)train.classes.size();
    k_note = str_cat("classes: ", k, " (", train.classes_file, ")");
  } else {
    MaskScan s = scan_masks(train, o.workers);
    int max_class = s.max_class;
    int64_t read = s.masks_read;
    if (has_val) {
      MaskScan v = scan_masks(val, o.workers);
      max_class = std::max(max_class, v.max_class);
      read += v.masks_read;
    }
    KILN_CHECK(max_class >= 0, "--data ", c.data, ": no readable mask holds a class (every mask unreadable or all 255)",
               s.bad.empty() ? "" : str_cat("; the first bad one: ", s.bad[0].path, ": ", s.bad[0].reason));
    k = max_class + 1;
    k_note = str_cat("classes: ", k, " (the largest mask value + 1 over the ", read,
                     " readable masks, scanned at open; --num-classes K skips the scan)");
  }
  KILN_CHECK(k >= 2, "--data ", c.data, ": ", k, " class; segmentation needs at least 2 (e.g. background and object)");
  std::vector<std::string> names = train.classes;
  if (!names.empty())
    KILN_CHECK((int64_t)names.size() == k, train.classes_file, ": ", names.size(), " class names, but ", k,
               " classes (", k_note, ")");
  if (names.empty())
    for (int64_t i = 0; i < k; ++i) names.push_back(std::to_string(i));
  train.classes = names;
  val.classes = names;
  t.notes.push_back(k_note);

  ImageSizeSchedule sizes = ImageSizeSchedule::parse(o.image_size);
  if (sizes.empty()) {
    const int s = probe_image_size(images_of(train));
    KILN_CHECK(s >= 4, "--data ", c.data, ": cannot read the first images to learn their size; pass --image-size");
    sizes = ImageSizeSchedule::parse(std::to_string(s));
    t.notes.push_back(str_cat("image size ", s, " (the first image's shorter side; --image-size to change)"));
  }
  if (sizes.progressive()) t.notes.push_back("progressive resizing: " + sizes.str());
  float mean[3] = {0.f, 0.f, 0.f}, std[3] = {1.f, 1.f, 1.f};
  const Normalization norm = Normalization::parse(o.normalize);
  if (norm.kind == Normalization::Kind::automatic) {
    const size_t used = normalize_statistics(images_of(train), o.channels, o.workers, mean, std);
    KILN_CHECK(used > 0, "--normalize auto: no readable image in ", train.root);
    const double m[3] = {mean[0], mean[1], mean[2]}, sd[3] = {std[0], std[1], std[2]};
    t.notes.push_back(str_cat("normalize auto: --normalize ", normalize_flag_values(o.channels, m, sd), " (measured on ",
                              used, " images of ", train.root, ": ", kNormalizeStatisticsScope,
                              "; kiln data prints the same)"));
  } else {
    norm.values(o.channels, mean, std);
  }
  if (!split_note.empty()) t.notes.push_back("splits: " + split_note);
  if (o.pin_memory && device.is_cuda())
    t.notes.push_back("segmentation batches are copied from ordinary host memory (--pin-memory is not used here)");
  t.num_classes = k;
  t.classes = names;
  t.mean.assign(mean, mean + o.channels);
  t.std.assign(std, std + o.channels);
  t.ledger = {{"format", "segment"}, {"train", train.root}, {"train_samples", train.size()},
              {"classes", names}, {"num_classes", k}, {"ignore_index", 255}, {"image_size", sizes.str()},
              {"normalize", o.normalize}};
  t.ledger["mean"] = t.mean;
  t.ledger["std"] = t.std;
  t.ledger["val"] = has_val ? nlohmann::json(val.root) : nlohmann::json();
  t.ledger["val_samples"] = has_val ? val.size() : 0;
  if (has_val && val.size() > 0)
    t.val = make_segmentation_source(std::move(val), o, sizes, mean, std, k, c.seed, device);
  t.train = make_segmentation_source(std::move(train), o, sizes, mean, std, k, c.seed, device);
  return t;
}

std::unique_ptr<DataSource> open_segmentation_predict_data(const std::string& path, const ImageOptions& o,
                                                           Device device, int64_t num_classes) {
  o.validate();
  const Normalization norm = Normalization::parse(o.normalize);
  KILN_CHECK(norm.kind != Normalization::Kind::automatic, "predict: --normalize auto: the mean/std are the training "
             "set's, and predict never measures the data it predicts; give them (--normalize m1,m2,m3:s1,s2,s3)");
  std::string dir = path;
  if (has_segmentation_splits(path)) {
    for (const char* split : {"val", "test", "train"})
      if (is_segmentation_folder((fs::path(path) / split).string())) {
        dir = (fs::path(path) / split).string();
        break;
      }
  }
  SegmentationDataset ds;
  ds.root = path;
  std::error_code ec;
  KILN_CHECK(fs::exists(path, ec), "predict: ", path, " does not exist");
  // Masks beside every image (images/ + masks/, or an image,mask CSV): they score the prediction.
  bool masks = false;
  if (num_classes > 0 && (is_segmentation_folder(dir) || (fs::is_regular_file(dir, ec) && is_segmentation_csv(dir)))) {
    SegmentationDataset with = is_segmentation_folder(dir) ? segmentation_folder(dir) : segmentation_csv(dir);
    masks = !with.samples.empty() && std::all_of(with.samples.begin(), with.samples.end(),
                                                 [](const SegmentationSample& x) { return !x.mask.empty(); });
    if (masks) {
      with.root = path;
      ds = std::move(with);
    }
  }
  if (masks) {
  } else if (fs::is_directory(dir, ec)) {
    const fs::path images = is_segmentation_folder(dir) ? fs::path(dir) / "images" : fs::path(dir);
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(images, ec), end = fs::recursive_directory_iterator();
         !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec) && is_image_extension(it->path().string())) files.push_back(it->path().string());
    }
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) ds.samples.push_back({f, ""});
    KILN_CHECK(!ds.samples.empty(), "predict: no images in ", images.string());
  } else {
    SegmentationDataset csv = segmentation_csv(path);
    for (const SegmentationSample& s : csv.samples) ds.samples.push_back({s.image, ""});
  }
  ImageSizeSchedule sizes = ImageSizeSchedule::parse(o.image_size);
  if (sizes.empty()) sizes = ImageSizeSchedule::parse(std::to_string(std::max(4, probe_image_size(images_of(ds)))));
  sizes = ImageSizeSchedule::parse(std::to_string(sizes.final_size()));
  float mean[3] = {0.f, 0.f, 0.f}, std[3] = {1.f, 1.f, 1.f};
  norm.values(o.channels, mean, std);
  return make_segmentation_source(std::move(ds), o, sizes, mean, std, masks ? num_classes : 0, 0, device, masks);
}

}  // namespace kiln
