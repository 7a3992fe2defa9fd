// End-to-end CPU emulation of kiln's Tensor Core GEMM (kernels/cuda/hgemm_tile.h): the kernel's
// loop structure (blocks in grouped order, split-K ranges, stages copied chunk by chunk into
// swizzled shared memory, warps and lanes as loops, ldmatrix.x4 and mma.m16n8k16 emulated from the
// PTX ISA's definitions, fragments as arrays, predicated epilogue) run with the same tile_*.h
// functions on random f16 data, compared with a naive f32-accumulate reference: plain GEMM in all
// four transpose layouts with ragged and unaligned sizes, and the three convolution passes.
// This is what proves the index math end to end without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/core/half.h"
#include "kernels/common/tile_conv.h"
#include "kernels/common/tile_grid.h"
#include "kernels/common/tile_mma.h"
#include "kernels/common/tile_smem.h"

using namespace kiln;
using namespace kiln::tile;
using T = TileShape;

namespace {

float hf(uint16_t h) { return half_bits_to_float(h); }

// ldmatrix.x4 as the PTX ISA defines it: lanes 8j..8j+7 give the row addresses (half offsets into
// `smem`) of matrix j; register j of lane l gets row l/4, elements 2(l%4), 2(l%4)+1 of matrix j,
// or with .trans elements [2(l%4)][l/4] and [2(l%4)+1][l/4].
void ldmatrix_x4(const std::vector<uint16_t>& smem, const int (&addr)[32], bool trans, uint16_t (&regs)[32][4][2]) {
  for (int l = 0; l < 32; ++l)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) {
        const int row = trans ? 2 * (l % 4) + h : l / 4, col = trans ? l / 4 : 2 * (l % 4) + h;
        regs[l][j][h] = smem[addr[8 * j + row] + col];
      }
}

// mma.m16n8k16: D += A B, A and B rebuilt from the lanes' registers by the fragment layouts.
void mma_16816(float (&d)[32][4], const uint16_t (&a)[32][4][2], const uint16_t (&b)[32][2][2]) {
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    for (int r = 0; r < 4; ++r)
      for (int h = 0; h < 2; ++h) {
        RowCol x = mma_a_coord(l, r, h);
        A[x.row][x.col] = hf(a[l][r][h]);
      }
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h) {
        RowCol x = mma_b_coord(l, r, h);
        B[x.row][x.col] = hf(b[l][r][h]);
      }
  }
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      RowCol x = mma_c_coord(l, i);
      float s = 0;
      for (int k = 0; k < 16; ++k) s += A[x.row][k] * B[k][x.col];
      d[l][i] += s;
    }
}

LdsmAddr ldsm_addr(Layout l, int lane) {
  switch (l) {
    case Layout::mk: return ldsm_a_mk(lane);
    case Layout::km: return ldsm_a_km(lane);
    case Layout::kn: return ldsm_b_kn(lane);
    default: return ldsm_b_nk(lane);
  }
}

// One operand tile of one stage, copied as the kernel's load_tile does (all threads, all rounds).
template <class P>
void load_tile(const P& p, bool is_a, Layout l, const std::vector<uint16_t>& g, std::vector<uint16_t>& s,
               long long outer0, long long k0) {
  const int outer = is_a ? T::BM : T::BN, cols = stored_cols(l, outer, T::BK), rows = stored_rows(l, outer, T::BK);
  s.assign(rows * cols, 0xFFFF);  // NaN: any element the copy misses poisons the result
  for (int round = 0; round < copy_rounds(rows, cols, T::THREADS); ++round)
    for (int tid = 0; tid < T::THREADS; ++tid) {
      const ChunkPos c = copy_chunk(tid, round, cols, T::THREADS);
      const int dst = swizzled_offset(c.row, c.chunk * 8, cols);
      const ChunkLoad ld = chunk_load(p, is_a, l, outer0, k0, c.row, c.chunk * 8);
      for (int e = 0; e < 8; ++e) {
        long long off = ld.kind == ChunkKind::vector ? ld.offset + e
                        : ld.kind == ChunkKind::zero ? -1
                                                     : chunk_element_offset(p, is_a, l, outer0, k0, c.row, c.chunk * 8, e);
        if (ld.kind == ChunkKind::vector) REQUIRE(ld.offset % 8 == 0);  // 16-byte aligned source
        s[dst + e] = off >= 0 ? g[off] : 0;
      }
    }
}

// The kernel, emulated: C[c_offset(m, n)] = sum over all splits (split-K partials added).
template <class P>
std::vector<float> emulate(const P& p, Layout la, Layout lb, const std::vector<uint16_t>& A,
                           const std::vector<uint16_t>& B, size_t c_size, int splits) {
  std::vector<float> C(c_size, 0.f);
  const long long tiles_m = ceil_div(p.M, T::BM), tiles_n = ceil_div(p.N, T::BN);
  const int a_cols = stored_cols(la, T::BM, T::BK), b_cols = stored_cols(lb, T::BN, T::BK);
  std::vector<uint16_t> sA, sB;
  for (int z = 0; z < splits; ++z)
    for (long long pid = 0; pid < tiles_m * tiles_n; ++pid) {
      const TileIdx bt = block_tile(pid, tiles_m, tiles_n, T::GROUP_M);
      const long long m0 = bt.tm * T::BM, n0 = bt.tn * T::BN;
      const Range kr = split_k_range(ceil_div(p.K, T::BK), splits, z);
      static float acc[T::WARPS][T::MI][T::NI][32][4];
      for (auto& w : acc) for (auto& a : w) for (auto& b : a) for (auto& l : b) for (float& v : l) v = 0;
      for (long long kt = kr.begin; kt < kr.end; ++kt) {
        load_tile(p, true, la, A, sA, m0, kt * T::BK);
        load_tile(p, false, lb, B, sB, n0, kt * T::BK);
        for (int warp = 0; warp < T::WARPS; ++warp) {
          const RowCol wo = warp_origin(warp, T::WARPS_N, T::WM, T::WN);
          for (int ks = 0; ks < T::BK / 16; ++ks) {
            uint16_t af[T::MI][32][4][2], bf[T::NI][32][2][2];
            for (int mi = 0; mi < T::MI; ++mi) {
              int addr[32];
              const int mo = wo.row + mi * 16;
              for (int lane = 0; lane < 32; ++lane) {
                const LdsmAddr a = ldsm_addr(la, lane);
                const int row = (k_major(la) ? ks * 16 : mo) + a.row;
                const int chunk = (k_major(la) ? mo / 8 : ks * 2) + a.chunk;
                addr[lane] = swizzled_offset(row, chunk * 8, a_cols);
              }
              ldmatrix_x4(sA, addr, ldsm_addr(la, 0).trans, af[mi]);
            }
            for (int np = 0; np < T::NI / 2; ++np) {
              int addr[32];
              const int no = wo.col + np * 16;
              for (int lane = 0; lane < 32; ++lane) {
                const LdsmAddr b = ldsm_addr(lb, lane);
                const int row = (k_major(lb) ? ks * 16 : no) + b.row;
                const int chunk = (k_major(lb) ? no / 8 : ks * 2) + b.chunk;
                addr[lane] = swizzled_offset(row, chunk * 8, b_cols);
              }
              uint16_t r[32][4][2];
              ldmatrix_x4(sB, addr, ldsm_addr(lb, 0).trans, r);
              for (int lane = 0; lane < 32; ++lane)
                for (int h = 0; h < 2; ++h)
                  for (int j = 0; j < 2; ++j) {
                    bf[2 * np][lane][j][h] = r[lane][j][h];
                    bf[2 * np + 1][lane][j][h] = r[lane][2 + j][h];
                  }
            }
            for (int mi = 0; mi < T::MI; ++mi)
              for (int ni = 0; ni < T::NI; ++ni) mma_16816(acc[warp][mi][ni], af[mi], bf[ni]);
          }
        }
      }
      for (int warp = 0; warp < T::WARPS; ++warp) {
        const RowCol wo = warp_origin(warp, T::WARPS_N, T::WM, T::WN);
        for (int mi = 0; mi < T::MI; ++mi)
          for (int ni = 0; ni < T::NI; ++ni)
            for (int lane = 0; lane < 32; ++lane)
              for (int r = 0; r < 4; ++r) {
                const RowCol c = mma_c_coord(lane, r);
                const long long m = m0 + wo.row + mi * 16 + c.row, n = n0 + wo.col + ni * 8 + c.col;
                if (in_bounds(m, n, p.M, p.N)) C[p.c_offset(m, n)] += acc[warp][mi][ni][lane][r];
              }
      }
    }
  return C;
}

std::vector<uint16_t> rand_half(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_half_bits(u(g));
  return v;
}

double rel_err(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    num = std::max(num, std::fabs((double)ref[i] - got[i]));
    den = std::max(den, std::fabs((double)ref[i]));
  }
  return num / den;
}

}  // namespace

TEST_CASE("tile emulation: tiled GEMM equals naive f32 GEMM (4 layouts, ragged, unaligned, split-K)") {
  std::mt19937 g(11);
  struct Case { long long M, N, K; int splits; };
  for (Case c : {Case{128, 128, 64, 1}, Case{130, 136, 40, 1}, Case{37, 201, 77, 1}, Case{200, 24, 200, 3}})
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        GemmProblem p;
        p.M = c.M; p.N = c.N; p.K = c.K; p.a_trans = ta; p.b_trans = tb;
        p.lda = (ta ? c.M : c.K) + 3 * (c.K % 2);  // odd K also gets a padded, unaligned stride
        p.ldb = tb ? c.K : c.N;
        p.ldc = c.N + 5;
        p.a_vec = p.lda % 8 == 0;
        p.b_vec = p.ldb % 8 == 0;
        auto A = rand_half((ta ? c.K : c.M) * p.lda, g), B = rand_half((tb ? c.N : c.K) * p.ldb, g);
        std::vector<float> ref(c.M * p.ldc, 0.f);
        for (long long m = 0; m < c.M; ++m)
          for (long long n = 0; n < c.N; ++n) {
            float s = 0;
            for (long long k = 0; k < c.K; ++k)
              s += hf(A[ta ? k * p.lda + m : m * p.lda + k]) * hf(B[tb ? n * p.ldb + k : k * p.ldb + n]);
            ref[m * p.ldc + n] = s;
          }
        Layout la = ta ? Layout::km : Layout::mk, lb = tb ? Layout::nk : Layout::kn;
        auto got = emulate(p, la, lb, A, B, ref.size(), c.splits);
        INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << ta << " tb=" << tb);
        CHECK(rel_err(ref, got) < 1e-5);
      }
}

TEST_CASE("tile emulation: implicit-GEMM fprop, dgrad, wgrad equal a direct NHWC convolution") {
  std::mt19937 g(5);
  struct Case { int N, C, H, W, K, R, S, st, pad, dil; };
  for (Case k : {Case{2, 8, 6, 7, 16, 3, 3, 1, 1, 1}, Case{1, 3, 9, 9, 8, 3, 3, 2, 1, 1},
                 Case{2, 16, 5, 5, 24, 1, 1, 2, 0, 1}, Case{1, 5, 8, 8, 6, 3, 3, 1, 2, 2}}) {
    Conv2dDesc desc;
    desc.N = k.N; desc.C = k.C; desc.H = k.H; desc.W = k.W; desc.K = k.K; desc.R = k.R; desc.S = k.S;
    desc.stride_h = desc.stride_w = k.st; desc.pad_h = desc.pad_w = k.pad; desc.dil_h = desc.dil_w = k.dil;
    const ConvDims d = conv_dims(desc);
    const size_t nx = (size_t)d.N * d.H * d.W * d.C, nw = (size_t)d.K * d.R * d.S * d.C,
                 ny = (size_t)d.N * d.P * d.Q * d.K;
    auto x = rand_half(nx, g), w = rand_half(nw, g), dy = rand_half(ny, g);
    std::vector<float> y(ny, 0.f), dx(nx, 0.f), dw(nw, 0.f);
    for (int n = 0; n < d.N; ++n)
      for (int p = 0; p < d.P; ++p)
        for (int q = 0; q < d.Q; ++q)
          for (int kk = 0; kk < d.K; ++kk)
            for (int r = 0; r < d.R; ++r)
              for (int s = 0; s < d.S; ++s)
                for (int c = 0; c < d.C; ++c) {
                  const long long xo = x_offset(d, n, p * d.stride_h - d.pad_h + r * d.dil_h,
                                                q * d.stride_w - d.pad_w + s * d.dil_w, c);
                  if (xo < 0) continue;
                  const size_t wo = (((size_t)kk * d.R + r) * d.S + s) * d.C + c;
                  const size_t yo = (((size_t)n * d.P + p) * d.Q + q) * d.K + kk;
                  y[yo] += hf(x[xo]) * hf(w[wo]);
                  dx[xo] += hf(dy[yo]) * hf(w[wo]);
                  dw[wo] += hf(dy[yo]) * hf(x[xo]);
                }
    INFO("N=" << k.N << " C=" << k.C << " H=" << k.H << " K=" << k.K << " R=" << k.R << " stride=" << k.st);
    CHECK(rel_err(y, emulate(ConvFprop(d), Layout::mk, Layout::nk, x, w, ny, 1)) < 1e-5);
    CHECK(rel_err(dx, emulate(ConvDgrad(d), Layout::mk, Layout::kn, dy, w, nx, 1)) < 1e-5);
    CHECK(rel_err(dw, emulate(ConvWgrad(d), Layout::km, Layout::kn, dy, x, nw, 2)) < 1e-5);
  }
}
