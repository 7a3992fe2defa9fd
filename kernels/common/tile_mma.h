// Register fragment layouts of the Tensor Core instruction mma.sync.aligned.m16n8k16 (f16 inputs,
// f32 accumulators) and the ldmatrix.x4 lane addressing that fills them from shared memory.
// Plain index math shared by kiln's CUDA kernels (kernels/cuda/hgemm_tile.h) and the CPU tests
// (tests/unit/test_tile_math*.cpp); no PTX, no memory access here.
//
// Notation of the PTX ISA ("Matrix fragments for mma.m16n8k16 with floating point type"):
//   lane in [0, 32), group g = lane / 4, thread-in-group t = lane % 4.
//   A: 16 x 16 (rows m, cols k), 4 b32 registers = 8 halves, register r holds halves h = 0, 1.
//   B: 16 x 8  (rows k, cols n), 2 b32 registers = 4 halves.
//   C/D: 16 x 8 (rows m, cols n), 4 f32 registers.
#pragma once
#include "engine/core/host_device.h"

namespace kiln::tile {

struct RowCol {
  int row, col;
};

// A (16x16, "row" operand): register r, half h of `lane` holds A[g + 8*(r&1)][2t + h + 8*(r>>1)].
KILN_HOST_DEVICE RowCol mma_a_coord(int lane, int reg, int half) {
  const int g = lane >> 2, t = lane & 3;
  return {g + 8 * (reg & 1), 2 * t + half + 8 * (reg >> 1)};
}
// B (16x8, "col" operand): register r, half h of `lane` holds B[k = 2t + h + 8r][n = g].
KILN_HOST_DEVICE RowCol mma_b_coord(int lane, int reg, int half) {
  const int g = lane >> 2, t = lane & 3;
  return {2 * t + half + 8 * reg, g};
}
// C/D (16x8, f32): register i of `lane` holds C[g + 8*(i>>1)][2t + (i&1)].
KILN_HOST_DEVICE RowCol mma_c_coord(int lane, int i) {
  const int g = lane >> 2, t = lane & 3;
  return {g + 8 * (i >> 1), 2 * t + (i & 1)};
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 loads four 8x8 b16 matrices; lanes 8j..8j+7
// supply the shared-memory addresses of the 8 rows of matrix j (16 contiguous bytes each), and
// register j of lane l receives matrix j's row l/4, elements 2(l%4), 2(l%4)+1 (with .trans: the
// elements [2(l%4)][l/4] and [2(l%4)+1][l/4], i.e. the transposed matrix).
//
// A shared-memory tile is stored as rows of contiguous 16-byte chunks (8 halves). For a 16x16
// block of an operand whose stored rows start at `row0` and whose chunks start at `chunk0`, lane
// `lane` supplies the address of stored row row0 + row, chunk chunk0 + chunk:
struct LdsmAddr {
  int row, chunk;
  bool trans;  // use ldmatrix .trans
};
// A stored m-major (row = m, 8 k per chunk): the x4 registers are a0..a3 of one 16x16 A block.
KILN_HOST_DEVICE LdsmAddr ldsm_a_mk(int lane) { return {lane & 15, lane >> 4, false}; }
// A stored k-major (row = k, 8 m per chunk), i.e. A^T in memory: .trans, registers a0..a3.
KILN_HOST_DEVICE LdsmAddr ldsm_a_km(int lane) { return {(lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1, true}; }
// B stored k-major (row = k, 8 n per chunk; row-major B): .trans; registers {b0, b1} of the n8
// block at n0 and {b0, b1} of the n8 block at n0 + 8.
KILN_HOST_DEVICE LdsmAddr ldsm_b_kn(int lane) { return {lane & 15, lane >> 4, true}; }
// B stored n-major (row = n, 8 k per chunk; B^T in memory, e.g. KRSC weights): no .trans;
// registers as ldsm_b_kn.
KILN_HOST_DEVICE LdsmAddr ldsm_b_nk(int lane) { return {(lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1, false}; }

}  // namespace kiln::tile
