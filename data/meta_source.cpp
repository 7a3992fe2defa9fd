// The meta twin of a source (see meta_source.h).
#include "data/meta_source.h"

#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln {

MetaSource::MetaSource(const DataSource& real, int64_t size) : real_(real), size_(size) {}

std::vector<int64_t> MetaSource::sample_shape(int64_t epoch) const {
  std::vector<int64_t> s = real_.sample_shape(epoch);
  if (size_ > 0)
    for (size_t k = 1; k < s.size(); ++k) s[k] = size_;
  return s;
}

std::vector<int64_t> MetaSource::target_shape(int64_t epoch) const {
  std::vector<int64_t> s = real_.target_shape(epoch);
  if (size_ > 0)
    for (int64_t& d : s) d = size_;
  return s;
}

int64_t MetaSource::start_epoch(int64_t epoch, int64_t batch, bool train) {
  batches_ = real_.epoch_batches(epoch, batch, train);
  if (size_ > 0)
    for (BatchShape& b : batches_) b.size = size_;
  epoch_ = epoch;
  train_ = train;
  pos_ = 0;
  skipped_ = 0;
  have_digest_ = false;
  return (int64_t)batches_.size();
}

bool MetaSource::shard(int rank, int ranks, int64_t accum) {
  // A source that cannot shard leaves the cut to train::fit (take_shard), which the plan then replays too.
  real_shards_ = real_.can_shard();
  if (real_shards_) shard_ = {rank, ranks, accum};
  return real_shards_;
}

bool MetaSource::next(SourceBatch* out) {
  auto same = [](const BatchShape& a, const BatchShape& b) { return a.rows == b.rows && a.size == b.size; };
  if (digest_ && pos_ < (int64_t)batches_.size()) {
    const uint64_t d = digest_();
    if (have_digest_ && d == last_digest_ && pos_ >= 2 && same(batches_[(size_t)pos_], batches_[(size_t)pos_ - 1])) {
      // The state at this point repeats the one a batch ago, before a batch of the same shape: every batch of
      // that shape from here gives the same. Go on with the first batch of another shape (the epoch's short
      // last one), or end the epoch.
      int64_t k = pos_;
      while (k < (int64_t)batches_.size() && same(batches_[(size_t)k], batches_[(size_t)pos_ - 1])) ++k;
      skipped_ += k - pos_;
      pos_ = k;
      have_digest_ = false;
    } else {
      last_digest_ = d;
      have_digest_ = true;
    }
  }
  if (pos_ >= (int64_t)batches_.size()) return false;
  const BatchShape b = batches_[(size_t)pos_++];
  // A training batch of a sharding source: this rank's rows of it, with each micro-batch's share.
  const int64_t rows = train_ && real_shards_ ? (int64_t)shard_.places(b.rows, &out->micro_rows).size() : b.rows;
  if (!(train_ && real_shards_)) out->micro_rows.clear();
  std::vector<int64_t> xs = {rows}, ys = {rows};
  for (int64_t d : sample_shape(epoch_)) xs.push_back(d);
  for (int64_t d : target_shape(epoch_)) ys.push_back(d);
  if (real_.planned_steps_per_epoch() > 0) {  // a planned batch: its own square size
    for (size_t k = 2; k < xs.size(); ++k) xs[k] = b.size;
    for (size_t k = 1; k < ys.size(); ++k) ys[k] = b.size;
  }
  out->release();
  MemoryScope scope(MemoryTag::data);
  out->x = empty(xs, DType::f32, Device::meta());
  out->y = empty(ys, DType::i64, Device::meta());
  out->indices.assign((size_t)rows, 0);
  return true;
}

}  // namespace kiln
