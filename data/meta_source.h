// The meta-device twin of a training or validation source, for a run's memory plan (engine/run/run_plan.h):
// the batches the real source would deliver (its epoch_batches: rows, the short last one, a --batch-memory
// plan; a data-parallel rank's shares; the input and target shapes of each epoch) as meta tensors, handed
// over exactly as every source hands a batch over (SourceBatch::release(), then x, then y, tag data). It
// reads no file and draws nothing. The plan may end an epoch early once its steps repeat
// (finish_epoch_early: the epoch's last batch comes next, then the end). Must not know models.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/data_source.h"
#include "engine/dist/shard.h"

namespace kiln {

class MetaSource : public DataSource {
 public:
  // `real` must outlive the twin. size > 0: every batch at size x size px instead of the real source's sizes
  // (a plan of a smaller --image-size; image data only).
  explicit MetaSource(const DataSource& real, int64_t size = 0);

  std::string source() const override { return "meta:" + real_.source(); }
  int64_t size() const override { return real_.size(); }
  int64_t channels() const override { return real_.channels(); }
  int64_t image_size(int64_t epoch) const override { return size_ > 0 ? size_ : real_.image_size(epoch); }
  int64_t max_label() const override { return real_.max_label(); }
  int64_t label(int64_t i) const override { return real_.label(i); }
  int64_t planned_steps_per_epoch() const override { return real_.planned_steps_per_epoch(); }
  std::vector<BatchShape> epoch_batches(int64_t epoch, int64_t batch, bool train) const override {
    return real_.epoch_batches(epoch, batch, train);
  }
  std::vector<int64_t> sample_shape(int64_t epoch) const override;
  std::vector<int64_t> target_shape(int64_t epoch) const override;
  int64_t start_epoch(int64_t epoch, int64_t batch, bool train) override;
  bool next(SourceBatch* out) override;
  // Shards when the real source does (it then reads only its rank's rows): the imitated rank's shares.
  bool shard(int rank, int ranks, int64_t accum) override;
  void skip_batches(int64_t n) override { pos_ += n; }

  // The plan's control of an epoch's length. `digest` (set by the plan) is the allocator's block-map digest:
  // when, at a call of next(), it equals the one at the previous call and the batch to deliver has the same
  // shape as the one before, everything from here repeats, so only the epoch's last batch (when its shape
  // differs) is delivered, then the epoch ends. The batches skipped are counted (skipped()).
  void set_repeat_check(std::function<uint64_t()> digest) { digest_ = std::move(digest); }
  // The epoch's batches delivered so far (skipped ones included) and the last one's shape.
  int64_t delivered() const { return pos_; }
  BatchShape last_shape() const { return pos_ > 0 ? batches_[(size_t)pos_ - 1] : BatchShape{}; }
  int64_t skipped() const { return skipped_; }
  // The batch delivered last is the epoch's last one and has fewer rows than its first.
  bool at_short_last() const {
    return pos_ == (int64_t)batches_.size() && pos_ > 1 && batches_.back().rows < batches_.front().rows;
  }

 private:
  const DataSource& real_;
  int64_t size_ = 0;
  bool real_shards_ = false;
  dist::RankShard shard_;
  std::vector<BatchShape> batches_;
  int64_t epoch_ = 0, pos_ = 0, skipped_ = 0;
  bool train_ = false;
  std::function<uint64_t()> digest_;
  uint64_t last_digest_ = 0;
  bool have_digest_ = false;
};

}  // namespace kiln
