// What a memory plan for a CUDA device holds beyond the meta replay of kiln's own allocations, and how
// sure each figure is (docs/memory.md, "Plans for a GPU you don't have"):
//   - kernel scratch: the largest per-call scratch kiln's allocator serves on the compute stream and frees
//     right after the call (a cuDNN workspace, at most kiln's limit, kernels/common/workspace_limit.h, or
//     a loss kernel's partial sums), as reserved bytes: a bound (cuDNN picks the workspace at run time);
//   - cuBLAS's workspace pool (cuBLAS's own, outside kiln's allocator): a bound;
//   - the CUDA context and the libraries' kernel modules (outside kiln's allocator): an estimate.
// Shared by `kiln mem --device cuda:N` and `kiln train --dry-run --device cuda:N`. Pure arithmetic.
#pragma once
#include <cstdint>

namespace kiln {

// The CUDA context's own memory (context, cuBLAS/cuDNN kernel modules with lazy loading): not measured,
// an estimate of what current drivers take on a data-centre or laptop card.
constexpr int64_t kCudaContextEstimate = int64_t(512) << 20;

struct CudaBounds {
  int64_t cudnn_limit = 0;       // kiln's per-call cuDNN workspace limit
  int64_t scratch_bound = 0;     // bound: kernel scratch as reserved bytes
  int64_t allocator_bound = 0;   // bound: kiln's allocator's peak reserved with the scratch
  int64_t cublas_bound = 0;      // bound: cuBLAS's own workspace pool (outside kiln's allocator)
  int64_t context_estimate = 0;  // estimate: the CUDA context and the libraries' modules
  int64_t card_bound = 0;        // allocator bound + cuBLAS + context
};

// peak_reserved: the meta replay's (exact for the policy); expandable/granule: the policy (an arena grows
// by whole granules; else a large request gets its own segment, at least KILN_ALLOC_CONF's large segment).
CudaBounds cuda_bounds(int64_t peak_reserved, bool expandable, int64_t granule);

}  // namespace kiln
