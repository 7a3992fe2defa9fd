// CPU checks of the index math of kiln's Tensor Core kernels (kernels/common/tile_*.h): every
// element covered exactly once by the mma fragments, the cp.async copy mapping, the block / warp /
// split-K decomposition and the ragged-edge predicates; the swizzle is a bijection and keeps
// ldmatrix phases and cp.async waves free of bank conflicts; the implicit-GEMM mapping of every
// convolution pass enumerates exactly the (x, w, y) element triples of a direct convolution.
// The end-to-end CPU emulation of the kernel lives in test_tile_math_emulate.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "kernels/common/tile_conv.h"
#include "kernels/common/tile_grid.h"
#include "kernels/common/tile_mma.h"
#include "kernels/common/tile_smem.h"

using namespace kiln;
using namespace kiln::tile;
using T = TileShape;

TEST_CASE("tile: mma m16n8k16 fragments cover A, B and C exactly once") {
  std::vector<int> a(16 * 16, 0), b(16 * 8, 0), c(16 * 8, 0);
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) {
        RowCol x = mma_a_coord(lane, r, h);
        REQUIRE((x.row >= 0 && x.row < 16 && x.col >= 0 && x.col < 16));
        ++a[x.row * 16 + x.col];
      }
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h) {
        RowCol x = mma_b_coord(lane, r, h);
        REQUIRE((x.row >= 0 && x.row < 16 && x.col >= 0 && x.col < 8));
        ++b[x.row * 8 + x.col];
      }
    for (int i = 0; i < 4; ++i) {
      RowCol x = mma_c_coord(lane, i);
      REQUIRE((x.row >= 0 && x.row < 16 && x.col >= 0 && x.col < 8));
      ++c[x.row * 8 + x.col];
    }
  }
  CHECK(std::all_of(a.begin(), a.end(), [](int v) { return v == 1; }));
  CHECK(std::all_of(b.begin(), b.end(), [](int v) { return v == 1; }));
  CHECK(std::all_of(c.begin(), c.end(), [](int v) { return v == 1; }));
}

TEST_CASE("tile: mma fragments match the PTX ISA figures at sample lanes") {
  // Lane 0 (g 0, t 0) and lane 21 (g 5, t 1), read off the PTX ISA figures for m16n8k16 .f16.
  auto eq = [](RowCol x, int r, int c) { return x.row == r && x.col == c; };
  CHECK(eq(mma_a_coord(0, 0, 0), 0, 0));
  CHECK(eq(mma_a_coord(0, 0, 1), 0, 1));
  CHECK(eq(mma_a_coord(0, 1, 0), 8, 0));
  CHECK(eq(mma_a_coord(0, 2, 0), 0, 8));
  CHECK(eq(mma_a_coord(0, 3, 1), 8, 9));
  CHECK(eq(mma_a_coord(21, 0, 0), 5, 2));
  CHECK(eq(mma_a_coord(21, 3, 1), 13, 11));
  CHECK(eq(mma_b_coord(21, 0, 0), 2, 5));
  CHECK(eq(mma_b_coord(21, 1, 1), 11, 5));
  CHECK(eq(mma_c_coord(21, 0), 5, 2));
  CHECK(eq(mma_c_coord(21, 3), 13, 3));
}

TEST_CASE("tile: swizzle is a bijection within each row") {
  for (int cpr : {1, 2, 4, 8, 16}) {
    for (int row = 0; row < 64; ++row) {
      std::vector<int> seen(cpr, 0);
      for (int ch = 0; ch < cpr; ++ch) {
        int p = swizzle_chunk(row, ch, cpr);
        REQUIRE((p >= 0 && p < cpr));
        ++seen[p];
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
    }
  }
}

namespace {

LdsmAddr ldsm_addr(Layout l, int lane) {
  switch (l) {
    case Layout::mk: return ldsm_a_mk(lane);
    case Layout::km: return ldsm_a_km(lane);
    case Layout::kn: return ldsm_b_kn(lane);
    default: return ldsm_b_nk(lane);
  }
}

// Stored (row0, chunk0) of the 16x16 block at GEMM (outer0, k0) of a tile stored in layout l.
RowCol block_origin(Layout l, int outer0, int k0) {
  return k_major(l) ? RowCol{k0, outer0 / 8} : RowCol{outer0, k0 / 8};
}

}  // namespace

TEST_CASE("tile: every ldmatrix phase of the warp tiles reads 8 distinct bank groups") {
  for (Layout l : {Layout::mk, Layout::km, Layout::kn, Layout::nk}) {
    const bool is_a = l == Layout::mk || l == Layout::km;
    const int outer = is_a ? T::BM : T::BN;
    const int cols = stored_cols(l, outer, T::BK);
    for (int warp = 0; warp < T::WARPS; ++warp) {
      RowCol wo = warp_origin(warp, T::WARPS_N, T::WM, T::WN);
      const int w_outer = is_a ? wo.row : wo.col, blocks = is_a ? T::MI : T::NI / 2;
      for (int ks = 0; ks < T::BK / 16; ++ks)
        for (int bi = 0; bi < blocks; ++bi) {
          RowCol o = block_origin(l, w_outer + bi * 16, ks * 16);
          for (int phase = 0; phase < 4; ++phase) {
            std::set<int> groups;
            for (int lane = phase * 8; lane < phase * 8 + 8; ++lane) {
              LdsmAddr a = ldsm_addr(l, lane);
              groups.insert(bank_group(swizzled_offset(o.row + a.row, (o.col + a.chunk) * 8, cols)));
            }
            CHECK(groups.size() == 8);
          }
        }
    }
  }
}

TEST_CASE("tile: cp.async mapping copies every chunk of a tile exactly once, conflict-free") {
  for (Layout l : {Layout::mk, Layout::km, Layout::kn, Layout::nk}) {
    const bool is_a = l == Layout::mk || l == Layout::km;
    const int outer = is_a ? T::BM : T::BN;
    const int rows = stored_rows(l, outer, T::BK), cols = stored_cols(l, outer, T::BK);
    const int rounds = copy_rounds(rows, cols, T::THREADS);
    REQUIRE(rounds * T::THREADS * 8 == rows * cols);
    std::vector<int> seen(rows * cols / 8, 0);
    for (int round = 0; round < rounds; ++round)
      for (int tid = 0; tid < T::THREADS; ++tid) {
        ChunkPos c = copy_chunk(tid, round, cols, T::THREADS);
        REQUIRE((c.row < rows && c.chunk < cols / 8));
        ++seen[swizzled_offset(c.row, c.chunk * 8, cols) / 8];
      }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
    // Each quarter warp (8 threads, one shared-memory wavefront of 16-byte stores) hits 8 groups.
    for (int round = 0; round < rounds; ++round)
      for (int q = 0; q < T::THREADS; q += 8) {
        std::set<int> groups;
        for (int tid = q; tid < q + 8; ++tid) {
          ChunkPos c = copy_chunk(tid, round, cols, T::THREADS);
          groups.insert(bank_group(swizzled_offset(c.row, c.chunk * 8, cols)));
        }
        CHECK(groups.size() == 8);
      }
  }
}

TEST_CASE("tile: grouped block order is a bijection, warps tile the block, split-K covers K") {
  for (long long tm : {1, 3, 8, 9, 17})
    for (long long tn : {1, 2, 7, 16}) {
      std::vector<int> seen(tm * tn, 0);
      for (long long pid = 0; pid < tm * tn; ++pid) {
        TileIdx t = block_tile(pid, tm, tn, T::GROUP_M);
        REQUIRE((t.tm >= 0 && t.tm < tm && t.tn >= 0 && t.tn < tn));
        ++seen[t.tm * tn + t.tn];
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
    }
  std::vector<int> cover(T::BM * T::BN, 0);
  for (int warp = 0; warp < T::WARPS; ++warp) {
    RowCol o = warp_origin(warp, T::WARPS_N, T::WM, T::WN);
    for (int i = 0; i < T::WM; ++i)
      for (int j = 0; j < T::WN; ++j) ++cover[(o.row + i) * T::BN + o.col + j];
  }
  CHECK(std::all_of(cover.begin(), cover.end(), [](int v) { return v == 1; }));
  for (long long kt : {1, 5, 64, 1000})
    for (int splits : {1, 2, 3, 7, 64}) {
      long long next = 0;
      for (int z = 0; z < splits; ++z) {
        Range r = split_k_range(kt, splits, z);
        CHECK(r.begin == next);
        CHECK(r.end >= r.begin);
        next = r.end;
      }
      CHECK(next == kt);
    }
}

TEST_CASE("tile: epilogue predicates store each in-bounds C element exactly once (ragged M, N)") {
  for (long long M : {1, 16, 127, 129, 300})
    for (long long N : {1, 8, 100, 128, 131}) {
      const long long tm = ceil_div(M, T::BM), tn = ceil_div(N, T::BN);
      std::vector<int> seen(M * N, 0);
      long long outside = 0;
      for (long long pid = 0; pid < tm * tn; ++pid) {
        TileIdx b = block_tile(pid, tm, tn, T::GROUP_M);
        for (int warp = 0; warp < T::WARPS; ++warp) {
          RowCol wo = warp_origin(warp, T::WARPS_N, T::WM, T::WN);
          for (int lane = 0; lane < 32; ++lane)
            for (int mi = 0; mi < T::MI; ++mi)
              for (int ni = 0; ni < T::NI; ++ni)
                for (int i = 0; i < 4; ++i) {
                  RowCol c = mma_c_coord(lane, i);
                  long long m = b.tm * T::BM + wo.row + mi * 16 + c.row;
                  long long n = b.tn * T::BN + wo.col + ni * 8 + c.col;
                  if (in_bounds(m, n, M, N)) ++seen[m * N + n];
                  else ++outside;
                }
        }
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
      CHECK(outside == tm * tn * T::BM * T::BN - M * N);
    }
}

TEST_CASE("tile: chunk loads read exactly the in-range operand elements (ragged K, unaligned)") {
  for (bool vec : {false, true})
    for (long long K : {8, 24, 40, 77}) {
      if (vec && K % 8) continue;
      GemmProblem p;
      p.M = 70; p.N = 50; p.K = K; p.lda = K; p.ldb = p.N; p.ldc = p.N;
      p.a_vec = vec; p.b_vec = false;
      // Every A element (m, k) must be read once over all k tiles of block row 0.
      std::vector<int> seen(p.M * p.K, 0);
      const int rows = stored_rows(Layout::mk, T::BM, T::BK), cols = stored_cols(Layout::mk, T::BM, T::BK);
      for (long long k0 = 0; k0 < K; k0 += T::BK)
        for (int round = 0; round < copy_rounds(rows, cols, T::THREADS); ++round)
          for (int tid = 0; tid < T::THREADS; ++tid) {
            ChunkPos c = copy_chunk(tid, round, cols, T::THREADS);
            ChunkLoad ld = chunk_load(p, true, Layout::mk, 0, k0, c.row, c.chunk * 8);
            for (int e = 0; e < 8; ++e) {
              long long off = ld.kind == ChunkKind::vector ? ld.offset + e
                              : ld.kind == ChunkKind::zero ? -1
                                                           : chunk_element_offset(p, true, Layout::mk, 0, k0, c.row, c.chunk * 8, e);
              if (off >= 0) {
                REQUIRE(off < p.M * p.K);
                CHECK(off == c.row * K + k0 + c.chunk * 8 + e);
                ++seen[off];
              }
            }
          }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
    }
}

namespace {

using Triple = std::tuple<long long, long long, long long>;  // (x offset, w offset, y offset)

// Direct NHWC convolution: every (x, w, y) element triple that contributes a product.
std::vector<Triple> direct_triples(const ConvDims& d) {
  std::vector<Triple> t;
  for (int n = 0; n < d.N; ++n)
    for (int p = 0; p < d.P; ++p)
      for (int q = 0; q < d.Q; ++q)
        for (int k = 0; k < d.K; ++k)
          for (int r = 0; r < d.R; ++r)
            for (int s = 0; s < d.S; ++s)
              for (int c = 0; c < d.C; ++c) {
                int h = p * d.stride_h - d.pad_h + r * d.dil_h, w = q * d.stride_w - d.pad_w + s * d.dil_w;
                if (h < 0 || h >= d.H || w < 0 || w >= d.W) continue;
                long long xo = (((long long)n * d.H + h) * d.W + w) * d.C + c;
                long long wo = (((long long)k * d.R + r) * d.S + s) * d.C + c;
                long long yo = (((long long)n * d.P + p) * d.Q + q) * d.K + k;
                t.emplace_back(xo, wo, yo);
              }
  std::sort(t.begin(), t.end());
  return t;
}

// Every (m, k, n) of a pass's GEMM with both operands non-zero, as (x, w, y) triples. `role`
// says which tensor A, B and C index: fprop (x, w, y), dgrad (dy, w, dx), wgrad (dy, x, dw).
template <class P>
std::vector<Triple> gemm_triples(const P& p, int pass) {
  std::vector<Triple> t;
  for (long long m = 0; m < p.M; ++m)
    for (long long k = 0; k < p.K; ++k) {
      long long a = operand_offset(p, true, m, k);
      if (a < 0) continue;
      for (long long n = 0; n < p.N; ++n) {
        long long b = operand_offset(p, false, n, k);
        if (b < 0) continue;
        long long c = p.c_offset(m, n);
        if (pass == 0) t.emplace_back(a, b, c);       // x, w, y
        else if (pass == 1) t.emplace_back(c, b, a);  // dx, w, dy
        else t.emplace_back(b, c, a);                 // x, dw, dy
      }
    }
  std::sort(t.begin(), t.end());
  return t;
}

}  // namespace

TEST_CASE("tile: implicit-GEMM fprop, dgrad and wgrad enumerate exactly the direct conv's products") {
  struct Case { int N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw; };
  for (Case k : {Case{2, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1}, Case{1, 2, 7, 7, 3, 3, 3, 2, 2, 1, 1, 1, 1},
                 Case{2, 2, 8, 7, 2, 3, 2, 1, 2, 2, 0, 2, 1}, Case{1, 4, 6, 6, 2, 1, 1, 2, 2, 0, 0, 1, 1},
                 Case{1, 1, 9, 9, 2, 3, 3, 3, 2, 2, 1, 2, 3}}) {
    Conv2dDesc desc;
    desc.N = k.N; desc.C = k.C; desc.H = k.H; desc.W = k.W; desc.K = k.K; desc.R = k.R; desc.S = k.S;
    desc.stride_h = k.sh; desc.stride_w = k.sw; desc.pad_h = k.ph; desc.pad_w = k.pw;
    desc.dil_h = k.dh; desc.dil_w = k.dw;
    ConvDims d = conv_dims(desc);
    std::vector<Triple> ref = direct_triples(d);
    REQUIRE(!ref.empty());
    CHECK(std::adjacent_find(ref.begin(), ref.end()) == ref.end());
    // Sorted and duplicate-free equality means each product appears exactly once in each pass.
    CHECK(gemm_triples(ConvFprop(d), 0) == ref);
    CHECK(gemm_triples(ConvDgrad(d), 1) == ref);
    CHECK(gemm_triples(ConvWgrad(d), 2) == ref);
  }
}
