// The index math and the chunking of the per-channel bias kernels (kernels/cpu/bias.cpp,
// kernels/cuda/bias.cu), shared by both so they visit the same elements: a tensor seen as
// (outer, K, inner) -- NCHW conv output: outer = N, inner = H*W; channels-last conv output or a linear
// layer's (rows, K): outer = rows, inner = 1. Channel k owns outer * inner elements; its j-th one
// (j = n * inner + s) lives at (n * K + k) * inner + s. The bias gradient cuts each channel into
// chunks (the grid-wide reduction's first pass); tested on the CPU (tests/cuda_cpu/test_cuda_cpu_bias.cpp:
// every element of every channel covered exactly once). Plain arithmetic only: no memory, no CUDA types.
#pragma once
#include <cstdint>

#include "engine/core/host_device.h"
#include "kernels/common/workspace_limit.h"

namespace kiln::bias_math {

// Offset of channel k's j-th element (0 <= j < outer * inner) in the (outer, K, inner) buffer.
KILN_HOST_DEVICE int64_t elem_offset(int64_t j, int64_t k, int64_t K, int64_t inner) {
  const int64_t n = j / inner, s = j - n * inner;
  return (n * K + k) * inner + s;
}

// Elements per chunk below which a channel is not cut further (one block of 256 threads reads
// at least 8 elements each). The partial sums of the first pass (part_bytes each: f32, or f64 for f64
// data) live in a kernel scratch buffer bounded by kKernelScratchMax, which the cuda memory plan states.
constexpr int64_t kMinChunk = 2048;

struct ChunkPlan {
  int64_t chunks = 1;     // chunks per channel (1: one block per channel, no second pass)
  int64_t chunk_len = 0;  // elements per chunk (the last one may be shorter; none is empty)
};

// count = outer * inner elements per channel, K channels; K * chunks * part_bytes <= kKernelScratchMax.
KILN_HOST_DEVICE ChunkPlan chunk_plan(int64_t K, int64_t count, int64_t part_bytes) {
  ChunkPlan p;
  p.chunk_len = count;
  if (K <= 0 || count <= kMinChunk) return p;
  int64_t chunks = (count + kMinChunk - 1) / kMinChunk;
  const int64_t most = (int64_t)kKernelScratchMax / part_bytes / K;
  if (chunks > most) chunks = most;
  if (chunks < 2) return p;
  p.chunk_len = (count + chunks - 1) / chunks;
  p.chunks = (count + p.chunk_len - 1) / p.chunk_len;  // no empty chunk
  return p;
}

}  // namespace kiln::bias_math
