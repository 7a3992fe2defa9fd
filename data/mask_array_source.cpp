// In-memory npy segmentation sets (see mask_array_source.h).
#include "data/mask_array_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "data/array_dataset.h"
#include "engine/dist/shard.h"
#include "engine/io/npy.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln {
namespace fs = std::filesystem;

int64_t MaskArrayDataset::max_class() const {
  int64_t m = -1;
  for (int64_t v : masks)
    if (v != 255) m = std::max(m, v);
  return m;
}

void MaskArrayDataset::truncate(int64_t count) {
  if (count < 0 || count >= n) return;
  n = count;
  images.resize((size_t)(n * channels * height * width));
  masks.resize((size_t)(n * height * width));
}

bool is_mask_npy_folder(const std::string& path) {
  std::error_code ec;
  const fs::path x = fs::path(path) / "x.npy", y = fs::path(path) / "y.npy";
  if (!fs::is_directory(path, ec) || !fs::is_regular_file(x, ec) || !fs::is_regular_file(y, ec)) return false;
  try {
    return read_npy(y.string()).shape.size() == 3;
  } catch (const Error&) {
    return false;
  }
}

MaskArrayDataset read_mask_npy_folder(const std::string& folder) {
  const std::string xp = (fs::path(folder) / "x.npy").string(), yp = (fs::path(folder) / "y.npy").string();
  HostArray x = read_npy(xp);
  HostArray y = read_npy(yp);
  KILN_CHECK(x.shape.size() == 4, "data: ", xp, ": expected 4 dims (N,C,H,W f32 or N,H,W,C u8), got ",
             shape_str(x.shape));
  KILN_CHECK(y.shape.size() == 3, "data: ", yp, ": expected masks of shape (N,H,W), got ", shape_str(y.shape));
  MaskArrayDataset d;
  d.source = "npy-masks:" + folder;
  d.masks_file = yp;
  d.n = x.shape[0];
  const bool nchw = x.dtype == DType::f32;
  KILN_CHECK(nchw || x.dtype == DType::u8, "data: ", xp, ": expected f32 (N,C,H,W) or u8 (N,H,W,C) images, got ",
             dtype_name(x.dtype));
  d.channels = nchw ? x.shape[1] : x.shape[3];
  d.height = nchw ? x.shape[2] : x.shape[1];
  d.width = nchw ? x.shape[3] : x.shape[2];
  KILN_CHECK(d.n > 0 && d.channels > 0 && d.height > 0 && d.width > 0, "data: ", xp, ": no samples (shape ",
             shape_str(x.shape), ")");
  KILN_CHECK(y.shape[0] == d.n && y.shape[1] == d.height && y.shape[2] == d.width, "data: ", yp, " holds masks ",
             shape_str(y.shape), " but ", xp, " holds ", d.n, " images of ", d.height, "x", d.width);
  d.images.resize((size_t)x.numel());
  if (nchw) {
    std::memcpy(d.images.data(), x.bytes.data(), x.bytes.size());
    for (size_t i = 0; i < d.images.size(); ++i)
      KILN_CHECK(std::isfinite(d.images[i]), "data: ", xp, ": non-finite value at sample ",
                 (int64_t)i / (d.channels * d.height * d.width));
  } else {
    const uint8_t* s = x.data<uint8_t>();
    const int64_t hw = d.height * d.width, c = d.channels;
    for (int64_t i = 0; i < d.n; ++i)
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t ch = 0; ch < c; ++ch)
          d.images[(size_t)((i * c + ch) * hw + p)] = (float)s[(i * hw + p) * c + ch] * (1.0f / 255.0f);
  }
  const int64_t count = y.numel();
  d.masks.resize((size_t)count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t v = 0;
    if (y.dtype == DType::u8) v = y.data<uint8_t>()[i];
    else if (y.dtype == DType::i32) v = y.data<int32_t>()[i];
    else if (y.dtype == DType::i64) v = y.data<int64_t>()[i];
    else throw Error(str_cat("data: ", yp, ": expected u8, i32 or i64 masks, got ", dtype_name(y.dtype)));
    KILN_CHECK(v >= 0 && v <= 255, "data: ", yp, ": mask value ", v, " at sample ", i / (d.height * d.width),
               ", pixel ", i % (d.height * d.width), " (classes are 0..254, 255 = ignore)");
    d.masks[(size_t)i] = v;
  }
  return d;
}

namespace {

class MaskArraySource : public DataSource {
 public:
  MaskArraySource(MaskArrayDataset d, uint64_t seed, Device device) : d_(std::move(d)), seed_(seed), device_(device) {
    const int64_t hw = d_.height * d_.width;
    labels_.assign((size_t)d_.n, 0);
    for (int64_t i = 0; i < d_.n; ++i)
      for (int64_t p = 0; p < hw; ++p) {
        const int64_t v = d_.masks[(size_t)(i * hw + p)];
        if (v != 255) labels_[(size_t)i] = std::max(labels_[(size_t)i], v);
      }
  }
  std::string source() const override { return d_.source; }
  int64_t size() const override { return d_.n; }
  int64_t channels() const override { return d_.channels; }
  int64_t image_size(int64_t) const override { return d_.height; }
  std::vector<int64_t> sample_shape(int64_t) const override { return {d_.channels, d_.height, d_.width}; }
  std::vector<int64_t> target_shape(int64_t) const override { return {d_.height, d_.width}; }
  int64_t max_label() const override { return d_.max_class(); }
  int64_t label(int64_t i) const override { return labels_[(size_t)i]; }
  int64_t start_epoch(int64_t epoch, int64_t batch, bool train) override {
    if (train) {
      order_ = epoch_permutation(d_.n, seed_, epoch);
    } else {
      order_.resize((size_t)d_.n);
      for (int64_t i = 0; i < d_.n; ++i) order_[(size_t)i] = i;
    }
    batch_ = batch;
    pos_ = 0;
    train_ = train;
    return (d_.n + batch - 1) / batch;
  }
  bool next(SourceBatch* out) override {
    if (pos_ >= d_.n) return false;
    const int64_t end = std::min(d_.n, pos_ + batch_);
    // The batch's rows in the permutation; data-parallel training: this rank's shares only.
    std::vector<int64_t> rows;
    for (int64_t k : (train_ ? shard_ : dist::RankShard{}).places(end - pos_, &out->micro_rows))
      rows.push_back(order_[(size_t)(pos_ + k)]);
    const int64_t b = (int64_t)rows.size();
    const int64_t chw = d_.channels * d_.height * d_.width, hw = d_.height * d_.width;
    out->release();
    MemoryScope scope(MemoryTag::data);  // as gather_batch: the batch is the step's data
    Tensor x = empty({b, d_.channels, d_.height, d_.width}, DType::f32, Device::cpu());
    Tensor y = empty({b, d_.height, d_.width}, DType::i64, Device::cpu());
    for (int64_t r = 0; r < b; ++r) {
      const int64_t i = rows[(size_t)r];
      std::memcpy(x.data<float>() + r * chw, d_.images.data() + i * chw, sizeof(float) * (size_t)chw);
      std::memcpy(y.data<int64_t>() + r * hw, d_.masks.data() + i * hw, sizeof(int64_t) * (size_t)hw);
    }
    out->x = device_.is_cpu() ? x : to_device(x, device_);
    out->y = device_.is_cpu() ? y : to_device(y, device_);
    out->indices = std::move(rows);
    pos_ = end;
    return true;
  }
  bool can_shard() const override { return true; }
  bool shard(int rank, int ranks, int64_t accum) override {
    shard_ = {rank, ranks, accum};
    return true;
  }
  void skip_batches(int64_t n) override { pos_ = std::min(d_.n, pos_ + n * batch_); }

 private:
  MaskArrayDataset d_;
  uint64_t seed_;
  Device device_;
  std::vector<int64_t> labels_, order_;
  int64_t batch_ = 1, pos_ = 0;
  bool train_ = false;
  dist::RankShard shard_;  // shard(): training batches are this rank's rows of each global batch
};

}  // namespace

std::unique_ptr<DataSource> make_mask_array_source(MaskArrayDataset data, uint64_t seed, Device device) {
  return std::make_unique<MaskArraySource>(std::move(data), seed, device);
}

}  // namespace kiln
