// Data-parallel training over a dist::ProcessGroup: the gradient buckets and the start-up broadcast.
// - Buckets: the model's trainable parameters in reverse registration order (the order backward
//   finishes them), packed into flat f32 buckets of at most bucket_bytes (the first one, the first
//   gradients backward completes, at most first_bucket_bytes; a parameter larger than the cap gets a
//   bucket of its own). all_reduce_gradients() sums every gradient over the ranks, bucket by bucket,
//   after backward (synchronous: no overlap with backward yet). A gradient that is undefined on a rank
//   (a rank with no sample in a short last batch, or a parameter its forward did not use) counts as
//   zeros; after the sum it is defined on every rank where it was defined on any.
// - broadcast_state(): rank 0's parameters and buffers on every rank (at start, after --init or --resume).
// The data rule (which rows a rank takes, the loss weight) is engine/dist/shard.h; train_step and fit
// apply it when StepOptions::data_parallel is set. Must not know the CLI, files or data sources.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/dist/process_group.h"
#include "engine/nn/module.h"

namespace kiln::train {

struct DataParallelOptions {
  int64_t bucket_bytes = 25ll << 20;       // PyTorch DDP's default bucket_cap_mb = 25
  int64_t first_bucket_bytes = 1ll << 20;  // a small first bucket, so the first all-reduce starts early
};

// Bucket plan over gradient sizes in bytes, given in bucket order (reverse registration order):
// consecutive runs, each at most cap bytes (the first at most first_cap) or one oversized entry.
// Returns the indices (into `bytes`) of each bucket. Pure function: the unit tests pin it.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& bytes, int64_t cap, int64_t first_cap);

class DataParallel {
 public:
  DataParallel(dist::ProcessGroup& group, nn::Module& model, DataParallelOptions options = {});
  dist::ProcessGroup& group() const { return group_; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }

  // Every parameter and buffer of the model takes root's values.
  void broadcast_state(int root = 0);
  // The sum over ranks of every trainable parameter's gradient (see the header comment).
  void all_reduce_gradients();

  struct Bucket {
    std::vector<size_t> params;  // indices into model.parameters()
    int64_t numel = 0;           // f32 elements of the flat buffer (without the defined flags)
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }
  int64_t bucket_bytes_total() const;  // host bytes the buckets hold (for memory accounting)

 private:
  dist::ProcessGroup& group_;
  nn::Module& model_;
  std::vector<Tensor> params_;        // model.parameters(), registration order
  std::vector<Bucket> buckets_;
  std::vector<std::vector<float>> buffers_;  // one per bucket: gradients, then one defined flag per parameter
};

}  // namespace kiln::train
