// kiln's bounds on the CUDA libraries' scratch memory, shared by the CUDA backend (which enforces
// them) and the memory predictor (which states them, in builds with and without CUDA):
//   - one cuDNN call's workspace (from kiln's allocator, tag temporary, freed right after the
//     call): candidates needing more than cudnn_workspace_limit() are skipped;
//   - cuBLAS's own workspace pool (cuBLAS allocates it outside kiln's allocator, per handle):
//     CUBLAS_WORKSPACE_CONFIG when set, else the documented recommendation for the architecture.
// Pure functions of the environment; no CUDA calls here.
#pragma once
#include <cstddef>

namespace kiln {

// Default of cudnn_workspace_limit(): 256 MiB.
constexpr size_t kCudnnWorkspaceLimitDefault = size_t(256) << 20;

// The most scratch one of kiln's own kernels takes (from kiln's allocator, tag temporary, freed when
// the call returns): the grid-wide reduction's per-chunk partials (at most 4224 of 32 bytes) and the
// loss kernels' target statistics and per-block sums (a 32-byte header and at most 4224 doubles).
constexpr size_t kKernelScratchMax = size_t(4224) * 32 + 64;

// KILN_CUDNN_WORKSPACE_LIMIT ("64M", "1G", parse_bytes syntax) or the default; a bad value throws
// kiln::Error naming the variable.
size_t cudnn_workspace_limit();

// Bytes of cuBLAS's workspace pool per handle: the sum of CUBLAS_WORKSPACE_CONFIG's ":SIZE_KiB:COUNT"
// pairs when set (a malformed value throws naming it), else 32 MiB for compute capability >= 9
// (Hopper and later) and 4 MiB before (major = 0: unknown, the larger one).
size_t cublas_workspace_bytes(int compute_major = 0);

}  // namespace kiln
