// ImageLoader: worker threads turn an ImageDataset into batches of normalized pixels (B, C, H, W)
// in f32 or f16, int64 labels and sample paths, delivered in order through a bounded prefetch
// window. Batch memory comes from caller callbacks (pinned memory, kiln's allocator) or plain
// aligned host memory. Must not know about tensors or devices: it hands out raw buffers.
//
// Planned batches (plan set): the epoch's batches come from the caller, each with its own sample
// count and output size (data/bucketed_image_source.h: --batch-memory's buckets); batch_size,
// drop_last and the sampler are then unused. Buffers are sized to each batch.
//
// Determinism: the epoch's index order comes from the sampler (seed, epoch); the augmentation of
// the k-th sample of the epoch uses Philox(seed) at sample_stream(epoch, k). Which worker decodes
// a sample never matters, so the same seed gives the same batches with any worker count, and a
// data-parallel rank's share (shard_rank) gives the same rows as the whole batch.
//
// Bad samples: a sample that fails to decode is left out of its batch; the batch's remaining good
// samples are packed to the front, so that batch comes out smaller (n < batch_size). A batch whose
// samples all failed is skipped. Each bad path is reported once per loader (on_bad_sample or
// stderr) and counted; the loader never throws for a bad sample.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/sample_pipeline.h"
#include "data/sampler.h"

namespace kiln {

// One batch of a planned epoch: data set indices and the square output size (0: the transform's).
struct PlannedBatch {
  std::vector<size_t> indices;
  int size = 0;
};

struct ImageLoaderOptions {
  size_t batch_size = 32;
  bool drop_last = false;
  SamplerSpec sampler;        // order of samples (its own seed)
  SampleTransform transform;  // decode + crop + resize + flip + normalize
  uint64_t seed = 0;          // augmentation seed
  int workers = 0;            // 0 = half the cores, at least 1
  int prefetch_batches = 4;   // batches decoded ahead of the consumer (>= 1)
  // Batch buffers: alloc(bytes) -> pointer, release(pointer, bytes). Default: 64-byte aligned host memory.
  std::function<void*(size_t)> alloc;
  std::function<void(void*, size_t)> release;
  // Called once per distinct bad path, from a worker thread. Default: one line on stderr.
  std::function<void(const std::string& path, const std::string& reason)> on_bad_sample;
  // A batch whose every sample was bad: delivered with n = 0 (true: a trainer counts it as a step,
  // so its step numbers and a resumed run's batch position agree) or left out (false).
  bool keep_empty_batches = false;
  // Planned batches (see above): the batches of an epoch, in delivery order; unset: the sampler's
  // order cut into batch_size batches.
  std::function<std::vector<PlannedBatch>(uint64_t epoch)> plan;
  // Data-parallel (shard_ranks > 1): each batch above is a global batch; this loader decodes and delivers
  // only rank shard_rank's rows of it (engine/dist/shard.h's split of the batch's samples, before bad ones
  // are left out), so the ranks share the decoding. A sample keeps the augmentation draws of its place in
  // the whole epoch, so a rank's rows are the same pixels the whole batch has there. A rank's share may
  // be empty (a short last batch): delivered with n = 0 when keep_empty_batches. shard_accum > 1: the
  // rank's rows are its shares of the batch's shard_accum micro-batches (engine/dist/shard.h's
  // shard_pieces), and ImageBatch::micro_rows counts the delivered rows of each share.
  int shard_rank = 0, shard_ranks = 1;
  int64_t shard_accum = 1;
};

struct ImageBatch {
  size_t index = 0;  // batch number within the epoch
  int64_t n = 0, c = 0, h = 0, w = 0;
  PixelDType dtype = PixelDType::f32;
  std::shared_ptr<void> buffer;  // n*c*h*w values (capacity batch_size samples); released on last drop
  std::vector<int64_t> labels;
  std::vector<std::string> paths;
  std::vector<size_t> indices;   // data set indices
  std::vector<int64_t> micro_rows;  // shard_accum > 1: good rows of each micro-batch's share, in order
  float* f32() const { return dtype == PixelDType::f32 ? static_cast<float*>(buffer.get()) : nullptr; }
  uint16_t* f16() const { return dtype == PixelDType::f16 ? static_cast<uint16_t*>(buffer.get()) : nullptr; }
};

struct BadSample {
  std::string path, reason;
};

class ImageLoader {
 public:
  ImageLoader(ImageDataset ds, ImageLoaderOptions opt);
  ~ImageLoader();
  ImageLoader(const ImageLoader&) = delete;
  ImageLoader& operator=(const ImageLoader&) = delete;

  // Starts (or restarts) an epoch; an unfinished previous epoch is abandoned. first_batch > 0
  // starts it at that batch (a run resumed mid-epoch): the batches before it are not decoded, and
  // the ones after it are those of the whole epoch (same samples, same augmentation draws).
  void start_epoch(uint64_t epoch, size_t first_batch = 0);
  // The next batch in order; false when the epoch is over.
  bool next(ImageBatch& out);

  size_t batches_per_epoch() const { return batches_.size(); }
  size_t samples_per_epoch() const { return total_items_; }
  size_t samples_done() const { return samples_done_.load(); }
  size_t bad_count() const { return bad_count_.load(); }    // bad samples met (with repeats)
  size_t batches_delivered() const { return delivered_; }
  std::vector<BadSample> bad_samples() const;                // distinct, in first-seen order
  int workers() const { return workers_; }
  const ImageDataset& dataset() const { return ds_; }

 private:
  struct Slot;
  void stop_workers();
  void worker_loop();

  ImageDataset ds_;
  ImageLoaderOptions opt_;
  int workers_ = 1;
  uint64_t epoch_ = 0;
  std::vector<std::vector<size_t>> batches_;  // data set indices per batch
  std::vector<size_t> first_item_;            // item number of each batch's first sample (+ the total)
  std::vector<std::vector<size_t>> streams_;  // each batch's samples' places in the whole epoch
                                              // (their augmentation streams; not first_item_ + k when sharded)
  std::vector<std::vector<int64_t>> pieces_;  // shard_accum > 1: each batch's rows per micro-batch share
  std::vector<int> sizes_;                    // each batch's output size (0: the transform's)
  SampleTransform transform_of(size_t b) const;
  size_t total_items_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Slot>> slots_;  // one per batch of the epoch
  size_t next_item_ = 0, delivered_ = 0;
  bool stop_ = false;
  std::string fatal_;  // set when a batch buffer cannot be allocated
  std::vector<std::thread> threads_;
  std::atomic<size_t> samples_done_{0}, bad_count_{0};
  std::set<std::string> bad_seen_;
  std::vector<BadSample> bad_list_;
};

}  // namespace kiln
