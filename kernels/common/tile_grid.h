// Block / warp decomposition of kiln's tiled Tensor Core GEMM (also used by the implicit-GEMM
// convolution): the tile shape, the order in which blocks walk the output tiles, the warp tiles
// inside a block, split-K ranges, ragged-edge predicates, the plain strided GEMM problem, and the
// per-chunk load decision (vector copy, zero fill, or element by element at ragged edges).
// Index math only; the CUDA kernel (kernels/cuda/hgemm_tile.h) and the CPU emulation in
// tests/unit/test_tile_math_emulate.cpp both call these functions.
#pragma once
#include "engine/core/host_device.h"
#include "kernels/common/tile_mma.h"
#include "kernels/common/tile_smem.h"

namespace kiln::tile {

// One thread block computes a BM x BN tile of C, stepping over K by BK; 8 warps in a 2 x 4 grid
// each own a WM x WN warp tile = (WM/16) x (WN/8) mma tiles of 16x8. STAGES shared-memory stages
// are in flight (cp.async multi-stage pipeline).
struct TileShape {
  static constexpr int BM = 128, BN = 128, BK = 32;
  static constexpr int WM = 64, WN = 32;
  static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, WARPS = WARPS_M * WARPS_N;
  static constexpr int THREADS = 32 * WARPS;
  static constexpr int MI = WM / 16, NI = WN / 8;  // mma tiles per warp along m and n
  static constexpr int STAGES = 4;
  static constexpr int GROUP_M = 8;  // block rows walked together (L2 reuse of B)
};

KILN_HOST_DEVICE long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// Output tile of linear block id `pid` over a tiles_m x tiles_n grid, walking GROUP_M tile rows
// column by column (as Triton's grouped ordering) so that consecutive blocks share A and B tiles
// in L2. A bijection of [0, tiles_m*tiles_n).
struct TileIdx {
  long long tm, tn;
};
KILN_HOST_DEVICE TileIdx block_tile(long long pid, long long tiles_m, long long tiles_n, int group_m) {
  const long long per_group = (long long)group_m * tiles_n;
  const long long group = pid / per_group, first_m = group * group_m;
  const long long rows = tiles_m - first_m < group_m ? tiles_m - first_m : group_m;
  const long long in_group = pid % per_group;
  return {first_m + in_group % rows, in_group / rows};
}

// Origin (m, n) of warp `warp`'s tile inside the block tile (warps row-major over WARPS_M x WARPS_N).
KILN_HOST_DEVICE RowCol warp_origin(int warp, int warps_n, int wm, int wn) {
  return {(warp / warps_n) * wm, (warp % warps_n) * wn};
}

// K tiles [begin, end) of split `z` of `splits` over `ktiles` K tiles: contiguous, sizes differ by
// at most one, together exactly [0, ktiles).
struct Range {
  long long begin, end;
};
KILN_HOST_DEVICE Range split_k_range(long long ktiles, int splits, int z) {
  const long long base = ktiles / splits, extra = ktiles % splits;
  const long long begin = z * base + (z < extra ? z : extra);
  return {begin, begin + base + (z < extra ? 1 : 0)};
}

// Ragged-edge predicate of the epilogue: C element (m, n) exists.
KILN_HOST_DEVICE bool in_bounds(long long m, long long n, long long M, long long N) { return m < M && n < N; }

// C (M x N, row stride ldc) = A (M x K) * B (K x N), all row-major unless transposed:
// a_trans: A is stored as K x M (A^T row-major, row stride lda); b_trans: B is stored N x K.
// a_vec / b_vec: the contiguous dimension may be copied in aligned 16-byte chunks (its row stride
// is a multiple of 8 halves and the base pointer is 16-byte aligned); the host decides.
struct GemmProblem {
  long long M = 0, N = 0, K = 0;
  long long lda = 0, ldb = 0, ldc = 0;
  bool a_trans = false, b_trans = false;
  bool a_vec = false, b_vec = false;
  KILN_HOST_DEVICE long long a_offset(long long m, long long k) const { return a_trans ? k * lda + m : m * lda + k; }
  KILN_HOST_DEVICE long long b_offset(long long k, long long n) const { return b_trans ? n * ldb + k : k * ldb + n; }
  KILN_HOST_DEVICE long long c_offset(long long m, long long n) const { return m * ldc + n; }
};

// Offset of operand element (outer, k) (outer = m for A, n for B) in its global array, or -1 when
// it reads as zero: outside the GEMM or in a convolution's padding. Problem P provides M, N, K,
// a_offset(m, k), b_offset(k, n) (each -1 for padding) and a_vec, b_vec.
template <class P>
KILN_HOST_DEVICE long long operand_offset(const P& p, bool is_a, long long outer, long long k) {
  if (outer >= (is_a ? p.M : p.N) || k >= p.K) return -1;
  return is_a ? p.a_offset(outer, k) : p.b_offset(k, outer);
}

// How one 16-byte chunk of an operand tile is filled: stored (row, first col) of a tile at GEMM
// origin (outer0, k0). vector: 16 bytes from `offset`; zero: all 8 halves are 0 (also used for
// padding); elements: 8 separate operand_offset look-ups (ragged edge, or a_vec/b_vec false).
enum class ChunkKind { zero, vector, elements };
struct ChunkLoad {
  ChunkKind kind;
  long long offset;
};
template <class P>
KILN_HOST_DEVICE ChunkLoad chunk_load(const P& p, bool is_a, Layout l, long long outer0, long long k0, int row,
                                      int col) {
  const OuterK g = stored_to_gemm(l, row, col, outer0, k0);
  const long long outer_ext = is_a ? p.M : p.N;
  // Stored row coordinate and contiguous coordinate with their extents.
  const bool km = k_major(l);
  const long long r = km ? g.k : g.outer, r_ext = km ? p.K : outer_ext;
  const long long c = km ? g.outer : g.k, c_ext = km ? outer_ext : p.K;
  if (r >= r_ext || c >= c_ext) return {ChunkKind::zero, -1};
  if ((is_a ? p.a_vec : p.b_vec) && c + kChunkHalves <= c_ext) {
    const long long off = operand_offset(p, is_a, g.outer, g.k);
    return off < 0 ? ChunkLoad{ChunkKind::zero, -1} : ChunkLoad{ChunkKind::vector, off};
  }
  return {ChunkKind::elements, -1};
}
// Element e (0..7) of an `elements` chunk: operand_offset of stored (row, col + e).
template <class P>
KILN_HOST_DEVICE long long chunk_element_offset(const P& p, bool is_a, Layout l, long long outer0, long long k0,
                                                int row, int col, int e) {
  const OuterK g = stored_to_gemm(l, row, col + e, outer0, k0);
  return operand_offset(p, is_a, g.outer, g.k);
}

}  // namespace kiln::tile

namespace kiln::tile {

// Split-K factor for a GEMM of `tiles` output tiles and `ktiles` K tiles on `sms` multiprocessors:
// 1 when the tiles alone fill the GPU; else enough splits for ~2 waves, each split keeping >= 4
// K tiles, at most 64. (Convolution weight gradients: few output tiles, a huge K = N*P*Q.)
inline int choose_splits(long long tiles, long long ktiles, int sms) {
  if (tiles <= 0 || tiles >= sms) return 1;
  long long s = ceil_div(2LL * sms, tiles);
  const long long cap = ktiles / 4 > 1 ? ktiles / 4 : 1;
  if (s > cap) s = cap;
  if (s > 64) s = 64;
  return (int)(s < 1 ? 1 : s);
}

}  // namespace kiln::tile
