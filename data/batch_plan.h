// Batches planned by image size (`kiln train --batch-memory`): the bucketing rule and an epoch's
// batch plan. An image goes to the bucket of its shorter side rounded down to a multiple of
// kBucketMultiple px (at least that); every image of a bucket is resized (shorter side) and
// center-cropped, or randomly crop-resized when training with --augment rrc, to that square size:
// one size per bucket, no padding. Each bucket has its own batch size (chosen by the caller, from
// memory predictions); an epoch cuts each bucket's shuffled members into batches of that size (the
// last one shorter) and shuffles the batches of all buckets together. Every random choice is
// Philox keyed by (seed, epoch), so a plan is a pure function of its inputs: a resumed run skips
// its first k batches and gets the rest of the same plan. Must not read files or know models.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

// The bucket granularity: 32 px is the total stride of the ResNets (and a multiple of a UNet's
// 2^depth for depth <= 5), so every bucket size passes through them without rounding.
constexpr int kBucketMultiple = 32;

// The bucket size of a w x h image: min(w, h) rounded down to a multiple of kBucketMultiple, at
// least kBucketMultiple (smaller images are scaled up to it).
int bucket_size_for(int w, int h);

struct SizeBucket {
  int size = 0;                  // H = W of its batches
  std::vector<size_t> members;   // data set indices, ascending
  int64_t batch = 1;             // samples per batch (the last batch of an epoch may be shorter)
};

struct PlannedStep {
  size_t bucket = 0;             // index into the buckets
  std::vector<size_t> indices;   // data set indices of the batch
};

// Batches of one epoch over every bucket's members. train: each bucket's members in a random order
// of (seed, bucket size, epoch), the batches of all buckets in a random order of (seed, epoch); else
// (evaluation) the buckets in order, members in data set order. Throws kiln::Error for a batch < 1.
std::vector<PlannedStep> plan_epoch(const std::vector<SizeBucket>& buckets, uint64_t seed, uint64_t epoch, bool train);

// Batches of an epoch: sum over buckets of ceil(members / batch) (the same every epoch).
int64_t planned_batches(const std::vector<SizeBucket>& buckets);

}  // namespace kiln
