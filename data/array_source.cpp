// ArrayDataset batches as a DataSource (see array_source.h).
#include "data/array_source.h"

#include <algorithm>

#include "engine/dist/shard.h"

namespace kiln {

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
  std::vector<int64_t> sample_shape(int64_t) const override { return {d_.channels, d_.height, d_.width}; }
  int64_t max_label() const override { return d_.max_label(); }
  int64_t label(int64_t i) const override { return d_.labels[(size_t)i]; }
  int64_t start_epoch(int64_t epoch, int64_t batch, bool train) override {
    train_ = train;
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
    // Data-parallel training: this rank's rows of the global batch only.
    std::vector<int64_t> rows;
    for (int64_t k : (train_ ? shard_ : dist::RankShard{}).places(end - pos_, &out->micro_rows))
      rows.push_back(order_[(size_t)(pos_ + k)]);
    out->release();
    SourceBatch b = gather_batch(d_, rows, 0, (int64_t)rows.size(), device_);
    out->x = b.x;
    out->y = b.y;
    out->indices = std::move(b.indices);
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
  ArrayDataset d_;
  uint64_t seed_;
  Device device_;
  std::vector<int64_t> order_;
  int64_t batch_ = 1, pos_ = 0;
  bool train_ = false;
  dist::RankShard shard_;  // shard(): training batches are this rank's rows of each global batch
};

}  // namespace

std::unique_ptr<DataSource> make_array_source(ArrayDataset data, uint64_t seed, Device device) {
  return std::make_unique<ArraySource>(std::move(data), seed, device);
}

}  // namespace kiln
