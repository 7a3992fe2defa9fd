// Batch normalization in stages, for statistics summed over data-parallel ranks (SyncBatchNorm,
// engine/ops/nn_norm_sync.cpp): each stage is one pass over this rank's (N, C, HW) rows, and the
// caller sums the per-channel doubles over the ranks between the stages. The arithmetic is the
// fused kernels' (kernels/cpu/batch_norm.cpp): a two-pass variance (the global mean first, then the
// sum of squares centred on it, never E[x^2] - E[x]^2), (x - mean) in double, one rounding on store;
// with the sums of one process the stages give the fused kernels' bits. N may be 0 (a rank without
// rows: zero sums). The CUDA backend has the same stages (kernels/cuda/batch_norm.cu). Never allocates,
// never communicates.
#pragma once
#include <cstdint>

namespace kiln::cpu {

#include "kernels/common/api/batch_norm_sync.inc"

}  // namespace kiln::cpu
