// Shared-memory tiles of kiln's Tensor Core kernels: how an operand tile is stored (which GEMM
// dimension is the stored row), the XOR swizzle of its 16-byte chunks (so that the 8 rows an
// ldmatrix phase reads, and the chunks a cp.async wave writes, fall in 8 distinct bank groups),
// and which thread copies which chunk of a tile from global memory. Index math only.
#pragma once
#include "engine/core/host_device.h"

namespace kiln::tile {

constexpr int kChunkHalves = 8;  // one 16-byte chunk = 8 f16; cp.async and ldmatrix move chunks
constexpr int kBankGroups = 8;   // 32 banks x 4 bytes = 128 bytes = 8 chunks per wavefront

// How an operand tile is stored, named (stored row dim, contiguous dim):
//   mk: A with row = m (row-major A)      km: A with row = k (A^T in memory)
//   kn: B with row = k (row-major B)      nk: B with row = n (B^T in memory)
enum class Layout { mk, km, kn, nk };

KILN_HOST_DEVICE bool k_major(Layout l) { return l == Layout::km || l == Layout::kn; }

// Stored rows / columns (halves) of an operand tile of `outer` x `bk` (outer = BM for A, BN for B).
KILN_HOST_DEVICE int stored_rows(Layout l, int outer, int bk) { return k_major(l) ? bk : outer; }
KILN_HOST_DEVICE int stored_cols(Layout l, int outer, int bk) { return k_major(l) ? outer : bk; }

// Physical chunk of logical chunk `chunk` of stored row `row`, in a tile whose rows hold
// `chunks_per_row` chunks (a power of two). Rows of >= 8 chunks (>= 128 bytes): chunk ^ (row % 8).
// Shorter rows share a 128-byte wavefront with their neighbours, so the XOR key is taken from the
// row bits above those that already pick the position within the wavefront: 4 chunks per row
// (64 bytes): key (row / 2) % 4; 2 chunks: key (row / 4) % 2. A bijection within each row.
KILN_HOST_DEVICE int swizzle_chunk(int row, int chunk, int chunks_per_row) {
  if (chunks_per_row >= 8) return chunk ^ (row & 7);
  if (chunks_per_row == 4) return chunk ^ ((row >> 1) & 3);
  if (chunks_per_row == 2) return chunk ^ ((row >> 2) & 1);
  return chunk;
}

// Offset in halves of element (row, col) of a swizzled tile with `cols` halves per row.
KILN_HOST_DEVICE int swizzled_offset(int row, int col, int cols) {
  const int cpr = cols / kChunkHalves;
  return row * cols + swizzle_chunk(row, col / kChunkHalves, cpr) * kChunkHalves + col % kChunkHalves;
}

// The 16-byte bank group (0..7) that a chunk at `offset_halves` (chunk-aligned) falls in.
KILN_HOST_DEVICE int bank_group(int offset_halves) { return (offset_halves / kChunkHalves) % kBankGroups; }

// cp.async mapping: a tile of rows x cols halves is copied by `threads` threads in
// rows*cols/8/threads rounds (the kernel requires an exact multiple); in round i, thread tid copies
// chunk id = i*threads + tid, i.e. stored row id / (cols/8), chunk id % (cols/8). Consecutive
// threads take consecutive chunks of a row, so a warp reads contiguous global bytes.
KILN_HOST_DEVICE int copy_rounds(int rows, int cols, int threads) { return rows * cols / kChunkHalves / threads; }
struct ChunkPos {
  int row, chunk;
};
KILN_HOST_DEVICE ChunkPos copy_chunk(int tid, int round, int cols, int threads) {
  const int id = round * threads + tid, cpr = cols / kChunkHalves;
  return {id / cpr, id % cpr};
}

// GEMM coordinates of stored (row, col) of an operand tile whose origin is (outer0, k0):
// outer = m for A, n for B.
struct OuterK {
  long long outer, k;
};
KILN_HOST_DEVICE OuterK stored_to_gemm(Layout l, int row, int col, long long outer0, long long k0) {
  if (k_major(l)) return {outer0 + col, k0 + row};
  return {outer0 + row, k0 + col};
}

}  // namespace kiln::tile
