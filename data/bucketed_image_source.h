// Image folders and CSV lists of mixed image sizes as DataSources whose batches are planned by
// image size (`kiln train --batch-memory`): each image keeps (about) its own resolution, in the
// bucket of data/batch_plan.h's rule, and every batch comes from one bucket at that bucket's batch
// size, which the caller sets (set_batches) from memory predictions. Training: RandomResizedCrop or
// flip at the bucket size when --augment asks, else Resize(shorter side) + CenterCrop (--crop none:
// Resize(S, S)); evaluation: the latter, buckets in order. On the CPU each batch is copied into the
// device allocator when it is handed over, so the data tag holds exactly the current batch during
// a step (the loader's decoded-ahead buffers are plain host memory) — what a meta-device
// prediction of that step counts. Must not know models or predict memory.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data/batch_plan.h"
#include "data/data_source.h"
#include "data/image_source.h"
#include "engine/dist/shard.h"

namespace kiln {

class ImageLoader;

// The width and height of an image file from its header (JPEG, PNG; other formats are decoded).
// False when it cannot be read (the loader reports such a file as a bad sample later).
bool probe_image_dims(const std::string& path, int* w, int* h);

// Opens the data as open_image_train_data does (splits, --val, --limit, normalization, checks),
// then buckets every training (and validation) image by its size. --image-size, --resize and
// --balance are refused: the buckets decide the sizes and the plan the order. Every bucket's
// batch is 1 until set_batches.
TrainData open_bucketed_image_train_data(const ImageDataOptions& c, Device device);

class BucketedImageSource : public DataSource {
 public:
  BucketedImageSource(ImageDataset ds, const ImageOptions& o, const std::vector<double>& mean,
                      const std::vector<double>& std, uint64_t seed, Device device);
  ~BucketedImageSource() override;

  const std::vector<SizeBucket>& buckets() const { return buckets_; }
  // One batch size per bucket (in buckets() order), each >= 1.
  void set_batches(const std::vector<int64_t>& batches);
  // The bucket of the batch handed out last by next() (its index into buckets()).
  size_t current_bucket() const { return current_bucket_; }

  std::string source() const override { return "images:" + ds_.root; }
  int64_t size() const override { return (int64_t)ds_.size(); }
  int64_t channels() const override { return o_.channels; }
  int64_t image_size(int64_t) const override { return buckets_.empty() ? 0 : buckets_.back().size; }  // the largest
  int64_t max_label() const override;
  int64_t label(int64_t i) const override { return ds_.samples[(size_t)i].label; }
  std::string path(int64_t i) const override { return ds_.samples[(size_t)i].path; }
  std::vector<std::string> class_names() const override { return ds_.classes; }
  int64_t planned_steps_per_epoch() const override { return planned_batches(buckets_); }
  // `batch` is unused: the plan decides.
  int64_t start_epoch(int64_t epoch, int64_t batch, bool train) override;
  std::vector<BatchShape> epoch_batches(int64_t epoch, int64_t batch, bool train) const override;
  bool can_shard() const override { return true; }
  bool next(SourceBatch* out) override;
  void skip_batches(int64_t n) override;
  // Data-parallel: each planned batch is a global batch; this rank decodes and delivers its share
  // (ImageLoader's shard; --batch-memory refuses --accum, so accum is 1).
  bool shard(int rank, int ranks, int64_t accum) override;
  std::vector<std::string> take_bad_reports() override;
  int64_t bad_count() const override { return (int64_t)reported_.size(); }

 private:
  void collect_bad();

  ImageDataset ds_;
  ImageOptions o_;
  float mean_[3] = {0, 0, 0}, std_[3] = {1, 1, 1};
  uint64_t seed_;
  Device device_;
  std::vector<SizeBucket> buckets_;
  std::vector<PlannedStep> plan_;        // the current epoch's
  std::unique_ptr<ImageLoader> loader_;
  bool train_ = false, pinned_ = false;
  int64_t epoch_ = 0;
  dist::RankShard shard_;  // shard(): training batches are this rank's rows of each planned batch
  size_t current_bucket_ = 0;
  std::set<std::string> reported_;
  std::vector<std::string> pending_;
};

}  // namespace kiln
