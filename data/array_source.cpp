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
    if (train_ && ranks_ > 1) {  // data-parallel training: this rank's rows of the global batch only
      std::vector<int64_t> rows;
      out->micro_rows.clear();
      for (const dist::ShardRange& r : dist::shard_pieces(end - pos_, rank_, ranks_, accum_)) {
        rows.insert(rows.end(), order_.begin() + pos_ + r.offset, order_.begin() + pos_ + r.offset + r.rows);
        if (accum_ > 1) out->micro_rows.push_back(r.rows);
      }
      Batch b = gather_batch(d_, rows, 0, (int64_t)rows.size(), device_);
      out->x = b.x;
      out->y = b.y;
      out->indices = std::move(rows);
    } else {
      Batch b = gather_batch(d_, order_, pos_, end, device_);
      out->x = b.x;
      out->y = b.y;
      out->indices.assign(order_.begin() + pos_, order_.begin() + end);
      out->micro_rows.clear();
    }
    pos_ = end;
    return true;
  }
  bool shard(int rank, int ranks, int64_t accum) override {
    rank_ = rank;
    ranks_ = ranks;
    accum_ = accum;
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
  int rank_ = 0, ranks_ = 1;  // shard(): training batches are this rank's rows of each global batch
  int64_t accum_ = 1;         // in this many micro-batches' shares
};

}  // namespace

std::unique_ptr<DataSource> make_array_source(ArrayDataset data, uint64_t seed, Device device) {
  return std::make_unique<ArraySource>(std::move(data), seed, device);
}

}  // namespace kiln
