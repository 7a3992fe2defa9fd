// ImageLoader implementation: items (one per sample of the epoch) are claimed in order by the
// workers; a worker waits while its item's batch is more than prefetch_batches ahead of the
// consumer. Each batch is one buffer of batch_size slots that workers fill independently.
#include "data/image_loader.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/dist/shard.h"

namespace kiln {

struct ImageLoader::Slot {
  std::shared_ptr<void> buffer;
  size_t done = 0;
  std::vector<char> ok;  // per sample
};

ImageLoader::ImageLoader(ImageDataset ds, ImageLoaderOptions opt) : ds_(std::move(ds)), opt_(std::move(opt)) {
  KILN_CHECK(!ds_.samples.empty(), "image loader: data set ", ds_.root, " is empty");
  KILN_CHECK(opt_.batch_size > 0, "image loader: batch size must be > 0");
  KILN_CHECK(opt_.prefetch_batches >= 1, "image loader: prefetch_batches must be >= 1");
  KILN_CHECK(opt_.shard_ranks >= 1 && opt_.shard_rank >= 0 && opt_.shard_rank < opt_.shard_ranks,
             "image loader: shard rank ", opt_.shard_rank, " outside ", opt_.shard_ranks, " ranks");
  workers_ = opt_.workers > 0 ? opt_.workers : std::max(1, (int)std::thread::hardware_concurrency() / 2);
  if (!opt_.alloc) {
    opt_.alloc = [](size_t bytes) -> void* {
      size_t r = (bytes + 63) / 64 * 64;
      return std::aligned_alloc(64, r ? r : 64);
    };
    opt_.release = [](void* p, size_t) { std::free(p); };
  }
  KILN_CHECK((bool)opt_.release, "image loader: an alloc callback needs a release callback");
  if (!opt_.on_bad_sample)
    opt_.on_bad_sample = [](const std::string& path, const std::string& reason) {
      std::fprintf(stderr, "kiln: skipping bad sample %s: %s\n", path.c_str(), reason.c_str());
    };
}

ImageLoader::~ImageLoader() { stop_workers(); }

void ImageLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void ImageLoader::start_epoch(uint64_t epoch, size_t first_batch) {
  stop_workers();
  epoch_ = epoch;
  batches_.clear();
  sizes_.clear();
  if (opt_.plan) {
    for (PlannedBatch& p : opt_.plan(epoch)) {
      for (size_t i : p.indices)
        KILN_CHECK(i < ds_.size(), "image loader: planned sample ", i, " is outside the data set (", ds_.size(), ")");
      batches_.push_back(std::move(p.indices));
      sizes_.push_back(p.size);
    }
  } else {
    std::vector<size_t> order = epoch_indices(opt_.sampler, ds_.labels(), ds_.classes.size(), epoch);
    batches_ = make_batches(order, opt_.batch_size, opt_.drop_last);
    sizes_.assign(batches_.size(), 0);
  }
  // Each batch's samples' places in the whole epoch; a sharded loader then keeps its rows only.
  streams_.clear();
  pieces_.clear();
  const dist::RankShard shard{opt_.shard_rank, opt_.shard_ranks, opt_.shard_accum};
  size_t place = 0;
  for (std::vector<size_t>& b : batches_) {
    const size_t global = b.size();
    std::vector<size_t> streams, rows;
    std::vector<int64_t> pieces;
    for (int64_t k : shard.places((int64_t)global, &pieces)) {
      streams.push_back(place + (size_t)k);
      rows.push_back(b[(size_t)k]);
    }
    b = std::move(rows);
    streams_.push_back(std::move(streams));
    pieces_.push_back(std::move(pieces));
    place += global;
  }
  total_items_ = 0;
  first_item_.clear();
  for (auto& b : batches_) {
    first_item_.push_back(total_items_);
    total_items_ += b.size();
  }
  first_item_.push_back(total_items_);
  slots_.clear();
  for (size_t i = 0; i < batches_.size(); ++i) slots_.emplace_back(new Slot());
  // Items are numbered in batch order (first_item_[b] + k), as the workers read them.
  delivered_ = std::min(first_batch, batches_.size());
  next_item_ = first_item_[delivered_];
  samples_done_ = 0;
  stop_ = false;
  fatal_.clear();
  for (int i = 0; i < workers_; ++i) threads_.emplace_back([this] { worker_loop(); });
}

SampleTransform ImageLoader::transform_of(size_t b) const {
  SampleTransform t = opt_.transform;
  if (b < sizes_.size() && sizes_[b] > 0) t.out_w = t.out_h = t.resize = sizes_[b];
  return t;
}

void ImageLoader::worker_loop() {
  for (;;) {
    size_t item, b, k;
    void* dst;
    SampleTransform t;
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (stop_ || next_item_ >= total_items_) return;
      item = next_item_++;
      b = (size_t)(std::upper_bound(first_item_.begin(), first_item_.end(), item) - first_item_.begin()) - 1;
      k = item - first_item_[b];
      t = transform_of(b);
      cv_.wait(lk, [&] { return stop_ || b < delivered_ + (size_t)opt_.prefetch_batches; });
      if (stop_) return;
      Slot& s = *slots_[b];
      const size_t sbytes = t.sample_bytes();
      if (!s.buffer) {
        // A fixed batch size: every buffer holds batch_size samples (one size for the allocator to reuse);
        // a sharded loader's, the largest share of a batch_size batch (rank 0's).
        const size_t fixed =
            dist::RankShard{0, opt_.shard_ranks, opt_.shard_accum}.places((int64_t)opt_.batch_size).size();
        size_t bytes = sbytes * (opt_.plan ? batches_[b].size() : fixed);
        void* p = nullptr;
        try {
          p = opt_.alloc(bytes);
        } catch (...) {
        }
        if (!p) {  // not a sample's fault: the consumer gets the error from next()
          fatal_ = str_cat("image loader: batch buffer allocation of ", bytes, " bytes failed");
          stop_ = true;
          cv_.notify_all();
          return;
        }
        auto rel = opt_.release;
        s.buffer = std::shared_ptr<void>(p, [rel, bytes](void* q) { rel(q, bytes); });
        s.ok.assign(batches_[b].size(), 0);
      }
      dst = static_cast<char*>(s.buffer.get()) + k * sbytes;
    }
    const size_t idx = batches_[b][k];
    const std::string& path = ds_.samples[idx].path;
    bool ok = true;
    std::string reason;
    try {
      load_sample_file(path, t, opt_.seed, sample_stream(epoch_, streams_[b][k]), dst);
    } catch (const std::exception& e) {
      ok = false;
      const auto* de = dynamic_cast<const DecodeError*>(&e);
      reason = de ? de->reason() : std::string(e.what());
    } catch (...) {
      ok = false;
      reason = "unknown error";
    }
    bool report = false;
    {
      std::lock_guard<std::mutex> g(mu_);
      Slot& s = *slots_[b];
      s.ok[k] = ok;
      ++s.done;
      // Counted under the lock with s.done: once next() has delivered a batch, its samples are in
      // samples_done() (incremented after the unlock, a caller that had read every batch could still
      // see one short: 24 of 25 under the sanitizers in CI).
      ++samples_done_;
      if (!ok) {
        ++bad_count_;
        if (bad_seen_.insert(path).second) {
          bad_list_.push_back({path, reason});
          report = true;
        }
      }
    }
    if (report) opt_.on_bad_sample(path, reason);
    cv_.notify_all();
  }
}

bool ImageLoader::next(ImageBatch& out) {
  for (;;) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!fatal_.empty()) throw Error(fatal_);
    if (delivered_ >= batches_.size()) return false;
    const size_t b = delivered_;
    const SampleTransform t = transform_of(b);
    const size_t sbytes = t.sample_bytes();
    cv_.wait(lk, [&] { return slots_[b]->done == batches_[b].size() || !fatal_.empty(); });
    if (!fatal_.empty()) throw Error(fatal_);
    Slot& s = *slots_[b];
    ImageBatch r;
    r.index = b;
    r.c = t.channels;
    r.h = t.out_h;
    r.w = t.out_w;
    r.dtype = t.dtype;
    char* base = static_cast<char*>(s.buffer.get());
    for (size_t k = 0; k < batches_[b].size(); ++k) {
      if (!s.ok[k]) continue;
      size_t j = r.indices.size();  // packed position
      if (j != k) std::memmove(base + j * sbytes, base + k * sbytes, sbytes);
      size_t idx = batches_[b][k];
      r.indices.push_back(idx);
      r.labels.push_back(ds_.samples[idx].label);
      r.paths.push_back(ds_.samples[idx].path);
    }
    r.n = (int64_t)r.indices.size();
    size_t k0 = 0;
    for (int64_t rows : pieces_[b]) {  // the good rows of each micro-batch share
      int64_t good = 0;
      for (size_t k = k0; k < k0 + (size_t)rows; ++k) good += s.ok[k] ? 1 : 0;
      r.micro_rows.push_back(good);
      k0 += (size_t)rows;
    }
    r.buffer = std::move(s.buffer);
    ++delivered_;
    lk.unlock();
    cv_.notify_all();
    if (r.n == 0 && !opt_.keep_empty_batches) continue;  // every sample of this batch was bad
    out = std::move(r);
    return true;
  }
}

std::vector<BadSample> ImageLoader::bad_samples() const {
  std::lock_guard<std::mutex> g(mu_);
  return bad_list_;
}

}  // namespace kiln
