// Image data bucketed by size, batches from a plan (see bucketed_image_source.h).
#include "data/bucketed_image_source.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "data/batch_transfer.h"
#include "data/decode.h"
#include "data/image_loader.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln {

namespace {

uint32_t be32(const uint8_t* p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

// The training/validation DataSource of open_image_train_data as an ImageDataset again (its samples
// in index order): the opener has applied the splits, --limit and the checks.
ImageDataset dataset_of(const DataSource& src) {
  ImageDataset ds;
  const std::string s = src.source();
  ds.root = s.rfind("images:", 0) == 0 ? s.substr(7) : s;
  ds.classes = src.class_names();
  ds.samples.reserve((size_t)src.size());
  for (int64_t i = 0; i < src.size(); ++i) ds.samples.push_back({src.path(i), src.label(i)});
  return ds;
}

}  // namespace

bool probe_image_dims(const std::string& path, int* w, int* h) {
  try {
    const std::string bytes = read_file_bytes(path, 512ull << 20);
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    if (jpeg_probe_size(p, bytes.size(), true, w, h)) return true;
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (bytes.size() >= 24 && std::memcmp(p, png, 8) == 0 && std::memcmp(p + 12, "IHDR", 4) == 0) {
      *w = (int)be32(p + 16);
      *h = (int)be32(p + 20);
      return *w > 0 && *h > 0;
    }
    const Image im = decode_image_bytes(p, bytes.size(), path);
    *w = im.w;
    *h = im.h;
    return im.w > 0 && im.h > 0;
  } catch (const std::exception&) {
    return false;
  }
}

BucketedImageSource::BucketedImageSource(ImageDataset ds, const ImageOptions& o, const std::vector<double>& mean,
                                         const std::vector<double>& std, uint64_t seed, Device device)
    : ds_(std::move(ds)), o_(o), seed_(seed), device_(device) {
  for (size_t c = 0; c < 3; ++c) {
    mean_[c] = c < mean.size() ? (float)mean[c] : mean.empty() ? 0.f : (float)mean.back();
    std_[c] = c < std.size() ? (float)std[c] : std.empty() ? 1.f : (float)std.back();
  }
  // Bucket sizes ascending; an image whose header cannot be read goes to the smallest bucket (the
  // loader reports it as a bad sample when it fails to decode).
  std::vector<int> size_of(ds_.size(), 0);
  std::map<int, std::vector<size_t>> by_size;
  for (size_t i = 0; i < ds_.size(); ++i) {
    int w = 0, h = 0;
    if (probe_image_dims(ds_.samples[i].path, &w, &h)) size_of[i] = bucket_size_for(w, h);
  }
  int smallest = 0;
  for (int s : size_of)
    if (s > 0 && (smallest == 0 || s < smallest)) smallest = s;
  if (smallest == 0) smallest = kBucketMultiple;
  for (size_t i = 0; i < ds_.size(); ++i) by_size[size_of[i] > 0 ? size_of[i] : smallest].push_back(i);
  for (auto& [size, members] : by_size) buckets_.push_back({size, std::move(members), 1});
}

BucketedImageSource::~BucketedImageSource() = default;

void BucketedImageSource::set_batches(const std::vector<int64_t>& batches) {
  KILN_CHECK(batches.size() == buckets_.size(), "bucketed images: ", batches.size(), " batch sizes for ",
             buckets_.size(), " buckets");
  for (size_t k = 0; k < batches.size(); ++k) {
    KILN_CHECK(batches[k] >= 1, "bucketed images: batch ", batches[k], " for bucket ", buckets_[k].size, " px");
    buckets_[k].batch = batches[k];
  }
  loader_.reset();  // the plan changed
}

int64_t BucketedImageSource::max_label() const {
  int64_t m = -1;
  for (const ImageSample& s : ds_.samples) m = std::max(m, s.label);
  return m;
}

int64_t BucketedImageSource::start_epoch(int64_t epoch, int64_t, bool train) {
  plan_ = plan_epoch(buckets_, seed_, (uint64_t)epoch, train);
  if (!loader_ || train != train_) {
    loader_.reset();
    train_ = train;
    ImageLoaderOptions lo;
    lo.seed = seed_ ^ 0x5bd1e9955bd1e995ULL;  // augmentation: the same key as ImageSource's
    lo.workers = o_.workers;
    lo.prefetch_batches = o_.prefetch;
    if (!device_.is_cpu()) {  // on the CPU: plain host buffers, copied into the allocator in next()
      const BatchMemory mem = batch_memory_for(device_, o_.pin_memory);
      lo.alloc = mem.alloc;
      lo.release = mem.release;
      pinned_ = mem.pinned;
    }
    lo.on_bad_sample = [](const std::string&, const std::string&) {};  // reported from the main thread
    lo.keep_empty_batches = train;  // a step of the plan even when all of its samples were bad
    if (train) {
      lo.shard_rank = shard_.rank;
      lo.shard_ranks = shard_.ranks;
      lo.shard_accum = shard_.accum;
    }
    lo.plan = [this](uint64_t) {
      std::vector<PlannedBatch> v;
      v.reserve(plan_.size());
      for (const PlannedStep& s : plan_) v.push_back({s.indices, buckets_[s.bucket].size});
      return v;
    };
    SampleTransform& t = lo.transform;
    t.channels = o_.channels;
    for (int c = 0; c < 3; ++c) {
      t.mean[c] = mean_[c];
      t.std[c] = std_[c];
    }
    t.out_w = t.out_h = t.resize = buckets_.empty() ? kBucketMultiple : buckets_.front().size;  // per batch: its bucket's
    if (train && o_.uses_rrc()) {
      t.kind = SampleTransform::Kind::random_resized_crop;
      t.rrc.scale_lo = o_.rrc_min_scale();
    } else if (o_.crop == "none") {
      t.kind = SampleTransform::Kind::resize_exact;
    } else {
      t.kind = SampleTransform::Kind::resize_center_crop;
    }
    t.random_hflip = train && o_.uses_flip();
    loader_ = std::make_unique<ImageLoader>(ds_, std::move(lo));
  }
  epoch_ = epoch;
  loader_->start_epoch((uint64_t)epoch);
  return (int64_t)plan_.size();
}

bool BucketedImageSource::shard(int rank, int ranks, int64_t accum) {
  shard_ = {rank, ranks, accum};
  loader_.reset();  // the next start_epoch makes a loader with the shard
  return true;
}

void BucketedImageSource::skip_batches(int64_t n) {
  if (n <= 0) return;
  loader_->start_epoch((uint64_t)epoch_, loader_->batches_delivered() + (size_t)n);
}

std::vector<BatchShape> BucketedImageSource::epoch_batches(int64_t epoch, int64_t, bool train) const {
  std::vector<BatchShape> v;
  for (const PlannedStep& p : plan_epoch(buckets_, seed_, (uint64_t)epoch, train))
    v.push_back({(int64_t)p.indices.size(), buckets_[p.bucket].size});
  return v;
}

bool BucketedImageSource::next(SourceBatch* out) {
  ImageBatch ib;
  if (!loader_->next(ib)) {
    collect_bad();
    return false;
  }
  collect_bad();
  current_bucket_ = ib.index < plan_.size() ? plan_[ib.index].bucket : 0;
  const Shape shape{ib.n, ib.c, ib.h, ib.w};
  out->release();  // the previous batch goes back first
  if (ib.n == 0 || device_.is_cpu()) {
    {
      MemoryScope scope(MemoryTag::data);
      out->x = empty(shape, DType::f32, device_);
    }
    if (ib.n > 0) std::memcpy(out->x.data_ptr(), ib.buffer.get(), (size_t)out->x.nbytes());
  } else {
    out->x = batch_to_device(ib.buffer.get(), shape, ib.buffer, device_, pinned_);
  }
  {
    MemoryScope scope(MemoryTag::data);
    Tensor y = ib.n > 0 ? tensor_from(ib.labels, {ib.n}) : empty({0}, DType::i64, Device::cpu());
    out->y = device_.is_cpu() ? y : to_device(y, device_);
  }
  out->indices.assign(ib.indices.begin(), ib.indices.end());
  out->micro_rows = ib.micro_rows;
  return true;
}

std::vector<std::string> BucketedImageSource::take_bad_reports() {
  std::vector<std::string> v;
  v.swap(pending_);
  return v;
}

void BucketedImageSource::collect_bad() {
  if (!loader_ || loader_->bad_count() == 0) return;
  for (const BadSample& b : loader_->bad_samples())
    if (reported_.insert(b.path).second) pending_.push_back(b.path + ": " + b.reason);
}

TrainData open_bucketed_image_train_data(const ImageDataOptions& c, Device device) {
  KILN_CHECK(c.image.image_size.empty(), "--batch-memory: --image-size ", c.image.image_size,
             " is refused: the images keep their own sizes, bucketed by the shorter side rounded down to a "
             "multiple of ", kBucketMultiple, " px");
  KILN_CHECK(c.image.resize == 0, "--batch-memory: --resize is refused: each bucket resizes to its own size");
  KILN_CHECK(!c.image.balance, "--batch-memory: --balance is refused: batches follow the size buckets' plan");
  TrainData t = open_image_train_data(c, device);
  // The opener's sources, with its splits, --limit and checks applied, become bucketed ones.
  ImageDataset train = dataset_of(*t.train), val;
  const bool has_val = t.val != nullptr;
  if (has_val) val = dataset_of(*t.val);
  t.train = std::make_unique<BucketedImageSource>(std::move(train), c.image, t.mean, t.std, c.seed, device);
  if (has_val) t.val = std::make_unique<BucketedImageSource>(std::move(val), c.image, t.mean, t.std, c.seed, device);
  // The opener's "image size N (the first image's shorter side)" note does not apply.
  t.notes.erase(std::remove_if(t.notes.begin(), t.notes.end(),
                               [](const std::string& n) { return n.rfind("image size ", 0) == 0; }),
                t.notes.end());
  const auto& bk = static_cast<const BucketedImageSource&>(*t.train).buckets();
  std::string sizes;
  nlohmann::json jb = nlohmann::json::array();
  for (const SizeBucket& b : bk) {
    sizes += str_cat(sizes.empty() ? "" : ", ", b.size, " px: ", b.members.size());
    jb.push_back({{"size", b.size}, {"images", b.members.size()}});
  }
  t.notes.push_back(str_cat("size buckets (shorter side rounded down to a multiple of ", kBucketMultiple, " px): ",
                            sizes));
  t.ledger["image_size"] = "buckets";
  t.ledger["size_buckets"] = jb;
  return t;
}

}  // namespace kiln
