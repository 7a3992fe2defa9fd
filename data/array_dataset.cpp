// In-memory IDX / npy data sets, batching and epoch shuffling (see array_dataset.h).
#include "data/array_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/core/philox.h"
#include "engine/io/idx.h"
#include "engine/io/npy.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln {
namespace fs = std::filesystem;

int64_t ArrayDataset::max_label() const {
  int64_t m = -1;
  for (int64_t l : labels) m = std::max(m, l);
  return m;
}

void ArrayDataset::truncate(int64_t count) {
  KILN_CHECK(count >= 0, "data: --limit must be >= 0, got ", count);
  if (count >= n) return;
  n = count;
  images.resize((size_t)(n * sample_numel()));
  labels.resize((size_t)n);
}

namespace {

// A set with no samples, or samples of no elements, is an error naming the file.
void check_not_empty(const ArrayDataset& d, const std::string& images_file) {
  KILN_CHECK(d.n > 0, "data: ", images_file, ": holds no samples (N = 0)");
  KILN_CHECK(d.sample_numel() > 0, "data: ", images_file, ": samples have no elements (", d.channels, " x ",
             d.height, " x ", d.width, ")");
}

// f32 images as stored: the first NaN or inf is an error naming the sample and its element.
void check_finite(const ArrayDataset& d, const std::string& images_file) {
  const int64_t per = d.sample_numel();
  for (size_t i = 0; i < d.images.size(); ++i) {
    const float v = d.images[i];
    if (std::isfinite(v)) continue;
    const int64_t s = (int64_t)i / per, e = (int64_t)i % per, hw = d.height * d.width;
    throw Error(str_cat("data: ", images_file, ": sample ", s, " holds a non-finite value (", v, ") at (c, h, w) = (",
                        e / hw, ", ", (e % hw) / d.width, ", ", e % d.width, "), flat index ", i,
                        "; fix or drop that sample"));
  }
}

bool is_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}
bool is_file(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// IDX images (N, H, W) u8 + labels (N) u8 -> dataset with pixels x/255 (normalized later).
ArrayDataset read_idx_pair(const std::string& images_path, const std::string& labels_path, const std::string& tag) {
  HostArray img = read_idx(images_path);
  HostArray lab = read_idx(labels_path);
  KILN_CHECK(img.dtype == DType::u8 && (img.shape.size() == 3 || img.shape.size() == 4), "data: ", images_path,
             ": expected u8 images of shape (N, H, W) or (N, H, W, C), got ", dtype_name(img.dtype), " ",
             shape_str(img.shape));
  KILN_CHECK(lab.dtype == DType::u8 && lab.shape.size() == 1, "data: ", labels_path,
             ": expected u8 labels of shape (N), got ", dtype_name(lab.dtype), " ", shape_str(lab.shape));
  KILN_CHECK(lab.shape[0] == img.shape[0], "data: ", images_path, " has ", img.shape[0], " images but ", labels_path,
             " has ", lab.shape[0], " labels");
  ArrayDataset d;
  d.source = "idx:" + images_path + " (" + tag + ")";
  d.labels_file = labels_path;
  d.n = img.shape[0];
  d.height = img.shape[1];
  d.width = img.shape[2];
  d.channels = img.shape.size() == 4 ? img.shape[3] : 1;
  check_not_empty(d, images_path);
  d.images.resize((size_t)(d.n * d.sample_numel()));
  const uint8_t* src = img.data<uint8_t>();
  const int64_t hw = d.height * d.width, c = d.channels;
  for (int64_t i = 0; i < d.n; ++i)  // (H, W, C) -> (C, H, W)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t ch = 0; ch < c; ++ch)
        d.images[(size_t)((i * c + ch) * hw + p)] = (float)src[(i * hw + p) * c + ch] * (1.0f / 255.0f);
  d.labels.resize((size_t)d.n);
  const uint8_t* l = lab.data<uint8_t>();
  for (int64_t i = 0; i < d.n; ++i) d.labels[(size_t)i] = l[i];
  return d;
}

void normalize(ArrayDataset& d, double mean, double std) {
  const float m = (float)mean, inv = (float)(1.0 / std);
  for (float& v : d.images) v = (v - m) * inv;
}

// Mean and std of the first `count` samples' pixels (count < 0: all of them).
void image_stats(const ArrayDataset& d, double* mean, double* std, int64_t count = -1) {
  const size_t used = count < 0 ? d.images.size()
                                : (size_t)(std::min(count, d.n) * d.sample_numel());
  double s = 0, s2 = 0;
  for (size_t i = 0; i < used; ++i) {
    const float v = d.images[i];
    s += v;
    s2 += (double)v * v;
  }
  const double cnt = std::max<double>(1.0, (double)used);
  *mean = s / cnt;
  *std = std::sqrt(std::max(0.0, s2 / cnt - *mean * *mean));
  if (*std < 1e-12) *std = 1.0;  // constant images: leave the scale alone
}

ArrayDataset read_npy_folder(const std::string& folder) {
  const std::string xp = (fs::path(folder) / "x.npy").string(), yp = (fs::path(folder) / "y.npy").string();
  HostArray x = read_npy(xp);
  HostArray y = read_npy(yp);
  KILN_CHECK(x.shape.size() == 4, "data: ", xp, ": expected 4 dims (N,C,H,W f32 or N,H,W,C u8), got ",
             shape_str(x.shape));
  KILN_CHECK(y.shape.size() == 1, "data: ", yp, ": expected labels of shape (N), got ", shape_str(y.shape));
  KILN_CHECK(y.shape[0] == x.shape[0], "data: ", xp, " has ", x.shape[0], " samples but ", yp, " has ", y.shape[0],
             " labels");
  ArrayDataset d;
  d.source = "npy:" + folder;
  d.labels_file = yp;
  d.n = x.shape[0];
  if (x.dtype == DType::f32) {
    d.channels = x.shape[1];
    d.height = x.shape[2];
    d.width = x.shape[3];
    check_not_empty(d, xp);
    d.images.resize((size_t)x.numel());
    std::memcpy(d.images.data(), x.bytes.data(), x.bytes.size());
    check_finite(d, xp);
  } else if (x.dtype == DType::u8) {
    d.height = x.shape[1];
    d.width = x.shape[2];
    d.channels = x.shape[3];
    check_not_empty(d, xp);
    d.images.resize((size_t)x.numel());
    const uint8_t* s = x.data<uint8_t>();
    const int64_t hw = d.height * d.width, c = d.channels;
    for (int64_t i = 0; i < d.n; ++i)
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t ch = 0; ch < c; ++ch)
          d.images[(size_t)((i * c + ch) * hw + p)] = (float)s[(i * hw + p) * c + ch] * (1.0f / 255.0f);
  } else {
    throw Error(str_cat("data: ", xp, ": expected f32 (N,C,H,W) or u8 (N,H,W,C) images, got ", dtype_name(x.dtype)));
  }
  d.labels.resize((size_t)d.n);
  if (y.dtype == DType::i64) {
    if (d.n) std::memcpy(d.labels.data(), y.bytes.data(), y.bytes.size());
  } else if (y.dtype == DType::i32) {
    for (int64_t i = 0; i < d.n; ++i) d.labels[(size_t)i] = y.data<int32_t>()[i];
  } else {
    throw Error(str_cat("data: ", yp, ": expected i64 labels, got ", dtype_name(y.dtype)));
  }
  check_labels(d, 0);
  return d;
}

struct IdxFolder {
  ArrayDataset train_or_first;
  std::optional<ArrayDataset> test;
  double mean = 0, std = 1;
};

// Loads an IDX folder's splits and normalizes both with the statistics of its training images
// (of its test images when it has no training files), or with `given` (mean, std) when not null;
// stats_count >= 0: of its first stats_count training images only (--limit: the samples that are trained on).
IdxFolder read_idx_folder(const std::string& folder, bool want_train, bool want_test, int64_t stats_count = -1,
                          const double* given = nullptr) {
  MnistFiles f = find_mnist_files(folder);
  IdxFolder r;
  ArrayDataset stats_src;
  if (f.has_train()) stats_src = read_idx_pair(f.train_images, f.train_labels, "train");
  else stats_src = read_idx_pair(f.test_images, f.test_labels, "t10k");
  if (given) {
    r.mean = given[0];
    r.std = given[1];
  } else {
    image_stats(stats_src, &r.mean, &r.std, stats_count);
  }
  if (want_test && f.has_test() && f.has_train()) {
    r.test = read_idx_pair(f.test_images, f.test_labels, "t10k");
    normalize(*r.test, r.mean, r.std);
  }
  if (want_train || !f.has_test() || !f.has_train()) {
    normalize(stats_src, r.mean, r.std);
    r.train_or_first = std::move(stats_src);
  }
  return r;
}

}  // namespace

std::string detect_data_format(const std::string& path) {
  KILN_CHECK(!path.empty(), "data: no data path given");
  std::error_code ec;
  KILN_CHECK(fs::exists(path, ec), "data: ", path, ": no such file or directory");
  KILN_CHECK(is_dir(path), "data: ", path,
             ": expected a folder (MNIST-format IDX files, or x.npy and y.npy), got a file");
  const bool has_x = is_file((fs::path(path) / "x.npy").string()), has_y = is_file((fs::path(path) / "y.npy").string());
  if (has_x && has_y) return "npy";
  MnistFiles f = find_mnist_files(path);
  if (f.has_train() || f.has_test()) return "idx";
  KILN_CHECK(!(has_x || has_y), "data: ", path, ": found ", has_x ? "x.npy" : "y.npy", " but not ",
             has_x ? "y.npy" : "x.npy");
  throw Error(str_cat("data: ", path,
                      ": not a recognized data folder (expected MNIST-format IDX files such as "
                      "train-images-idx3-ubyte[.gz] + train-labels-idx1-ubyte[.gz], or x.npy + y.npy)"));
}

void check_labels(const ArrayDataset& d, int64_t num_classes) {
  for (size_t i = 0; i < d.labels.size(); ++i) {
    const int64_t l = d.labels[i];
    KILN_CHECK(l >= 0, "data: ", d.labels_file, ": label ", l, " at index ", i, " is negative");
    KILN_CHECK(num_classes <= 0 || l < num_classes, "data: ", d.labels_file, ": label ", l, " at index ", i,
               " is out of range for ", num_classes, " classes (labels must be 0..", num_classes - 1, ")");
  }
}

DataSplits load_training_data(const std::string& path, const std::string& val_path, int64_t limit,
                              int64_t num_classes) {
  DataSplits s;
  s.format = detect_data_format(path);
  if (s.format == "idx") {
    KILN_CHECK(find_mnist_files(path).has_train(), "data: ", path,
               ": IDX folder has no training files (train-images-idx3-ubyte + train-labels-idx1-ubyte)");
    // With --limit the statistics are those of the samples trained on (and in the ledger).
    IdxFolder f = read_idx_folder(path, true, val_path.empty(), limit);
    s.train = std::move(f.train_or_first);
    s.val = std::move(f.test);
    s.mean = f.mean;
    s.std = f.std;
  } else {
    s.train = read_npy_folder(path);
  }
  if (!val_path.empty()) {
    const std::string vf = detect_data_format(val_path);
    if (vf == "npy") {
      s.val = read_npy_folder(val_path);
    } else {
      MnistFiles f = find_mnist_files(val_path);
      s.val = f.has_test() ? read_idx_pair(f.test_images, f.test_labels, "t10k")
                           : read_idx_pair(f.train_images, f.train_labels, "train");
      normalize(*s.val, s.format == "idx" ? s.mean : 0.0, s.format == "idx" ? s.std : 1.0);
    }
    KILN_CHECK(s.val->channels == s.train.channels && s.val->height == s.train.height &&
                   s.val->width == s.train.width,
               "data: validation images ", s.val->source, " are (", s.val->channels, ", ", s.val->height, ", ",
               s.val->width, ") but training images are (", s.train.channels, ", ", s.train.height, ", ",
               s.train.width, ")");
  }
  check_labels(s.train, num_classes);  // the whole file, before --limit: a bad label is a bad file
  if (s.val) check_labels(*s.val, num_classes);
  if (limit >= 0) s.train.truncate(limit);
  KILN_CHECK(s.train.n > 0, "data: ", path, ": no training samples", limit == 0 ? " (--limit 0)" : "");
  return s;
}

ArrayDataset load_inference_data(const std::string& path, int64_t num_classes) {
  return load_inference_data(path, num_classes, nullptr);
}

ArrayDataset load_inference_data(const std::string& path, int64_t num_classes, const double* mean_std) {
  const std::string fmt = detect_data_format(path);
  ArrayDataset d;
  if (fmt == "npy") {
    d = read_npy_folder(path);
  } else {
    IdxFolder f = read_idx_folder(path, false, true, -1, mean_std);
    d = f.test ? std::move(*f.test) : std::move(f.train_or_first);
  }
  check_labels(d, num_classes);
  return d;
}

SourceBatch gather_batch(const ArrayDataset& data, const std::vector<int64_t>& indices, int64_t begin, int64_t end,
                         Device device) {
  KILN_CHECK(0 <= begin && begin <= end && end <= (int64_t)indices.size(), "gather_batch: range [", begin, ", ",
             end, ") outside ", indices.size(), " indices");
  MemoryScope scope(MemoryTag::data);
  const int64_t b = end - begin, per = data.sample_numel();
  Tensor x = empty({b, data.channels, data.height, data.width}, DType::f32, Device::cpu());
  Tensor y = empty({b}, DType::i64, Device::cpu());
  float* xp = x.data<float>();
  int64_t* yp = y.data<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t s = indices[(size_t)(begin + i)];
    KILN_CHECK(0 <= s && s < data.n, "gather_batch: index ", s, " outside a data set of ", data.n);
    std::memcpy(xp + i * per, data.images.data() + s * per, (size_t)per * sizeof(float));
    yp[i] = data.labels[(size_t)s];
  }
  SourceBatch out;
  out.x = device.is_cpu() ? x : to_device(x, device);
  out.y = device.is_cpu() ? y : to_device(y, device);
  out.indices.assign(indices.begin() + begin, indices.begin() + end);
  return out;
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p((size_t)std::max<int64_t>(n, 0));
  for (int64_t i = 0; i < n; ++i) p[(size_t)i] = i;
  // A key separate from the model generator's use of `seed`, one counter block per epoch.
  const uint64_t key = seed ^ 0x9e3779b97f4a7c15ULL;
  const uint64_t offset = (uint64_t)epoch << 40;
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t w = ((uint64_t)philox_word(key, offset, 2 * (uint64_t)i) << 32) |
                       philox_word(key, offset, 2 * (uint64_t)i + 1);
    const int64_t j = (int64_t)(w % (uint64_t)(i + 1));
    std::swap(p[(size_t)i], p[(size_t)j]);
  }
  return p;
}

}  // namespace kiln
