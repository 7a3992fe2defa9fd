// The bounds and the estimate of a CUDA memory plan (see cuda_bounds.h).
#include "engine/run/cuda_bounds.h"

#include <algorithm>

#include "engine/memory/alloc_config.h"
#include "kernels/common/workspace_limit.h"

namespace kiln {

namespace {
int64_t round_up(int64_t v, int64_t m) { return m > 0 ? (v + m - 1) / m * m : v; }
}  // namespace

CudaBounds cuda_bounds(int64_t peak_reserved, bool expandable, int64_t granule) {
  CudaBounds e;
  e.cudnn_limit = (int64_t)cudnn_workspace_limit();
  // One kernel call runs at a time on the compute stream and frees its scratch when it returns: the
  // largest is a cuDNN workspace (<= the limit) or one of kiln's own kernels' partials (the loss target
  // check's per-block sums, grid-wide reduction chunks: at most kKernelScratchMax, whatever the batch).
  const int64_t scratch = std::max<int64_t>(e.cudnn_limit, (int64_t)kKernelScratchMax);
  // As reserved memory: the arena grows its free tail by whole granules; segments round a large request
  // to large_round, or map one shared large segment (20 MiB) for a smaller one.
  const AllocatorConfig cfg = alloc_config_from_env();
  e.scratch_bound = expandable ? round_up(scratch, granule)
                               : std::max(round_up(scratch, (int64_t)cfg.large_round), (int64_t)cfg.large_segment);
  e.allocator_bound = peak_reserved + e.scratch_bound;
  e.cublas_bound = (int64_t)cublas_workspace_bytes(0);
  e.context_estimate = kCudaContextEstimate;
  e.card_bound = e.allocator_bound + e.cublas_bound + e.context_estimate;
  return e;
}

}  // namespace kiln
