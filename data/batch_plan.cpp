// The bucketing rule and epoch batch plans of --batch-memory (see batch_plan.h).
#include "data/batch_plan.h"

#include <algorithm>

#include "data/sampler.h"
#include "engine/core/error.h"

namespace kiln {

int bucket_size_for(int w, int h) {
  const int s = std::min(w, h);
  return std::max(kBucketMultiple, s / kBucketMultiple * kBucketMultiple);
}

int64_t planned_batches(const std::vector<SizeBucket>& buckets) {
  int64_t n = 0;
  for (const SizeBucket& b : buckets) {
    KILN_CHECK(b.batch >= 1, "batch plan: bucket ", b.size, " px has batch ", b.batch, " (must be >= 1)");
    n += ((int64_t)b.members.size() + b.batch - 1) / b.batch;
  }
  return n;
}

std::vector<PlannedStep> plan_epoch(const std::vector<SizeBucket>& buckets, uint64_t seed, uint64_t epoch,
                                    bool train) {
  std::vector<PlannedStep> steps;
  steps.reserve((size_t)planned_batches(buckets));
  for (size_t k = 0; k < buckets.size(); ++k) {
    const SizeBucket& b = buckets[k];
    std::vector<size_t> order = b.members;
    if (train) {
      // A stream of its own per bucket size: adding images of another size leaves this order alone.
      const std::vector<size_t> perm =
          random_permutation(order.size(), seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)b.size), epoch);
      for (size_t i = 0; i < perm.size(); ++i) order[i] = b.members[perm[i]];
    }
    for (size_t i = 0; i < order.size(); i += (size_t)b.batch) {
      PlannedStep s;
      s.bucket = k;
      s.indices.assign(order.begin() + (std::ptrdiff_t)i,
                       order.begin() + (std::ptrdiff_t)std::min(order.size(), i + (size_t)b.batch));
      steps.push_back(std::move(s));
    }
  }
  if (train) {
    const std::vector<size_t> perm = random_permutation(steps.size(), seed ^ 0xb7e151628aed2a6bULL, epoch);
    std::vector<PlannedStep> mixed(steps.size());
    for (size_t i = 0; i < perm.size(); ++i) mixed[i] = std::move(steps[perm[i]]);
    steps.swap(mixed);
  }
  return steps;
}

}  // namespace kiln
