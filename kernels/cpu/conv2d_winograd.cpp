// Winograd F(2x2, 3x3) on the CPU (see conv2d_winograd.h).
//
// One output tile is 2x2 outputs, read from a 4x4 input patch d (rows from 2*th - pad_h). With
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]    G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
//   A^T = [1 1 1 0; 0 1 -1 -1]
// the tile is  Y = A^T [ sum_c (G g_kc G^T) .* (B^T d_c B) ] A,  i.e. for each of the 16 positions
// xi of the 4x4 transformed tile one GEMM over channels:
//   U : (16, K, C)        weights, G g G^T per (k, c)      (g flipped 180 degrees for the input grad)
//   V : (16, Cin, tb)     input tiles of one block, B^T d B (tb = tiles of the block)
//   M : (16, Cout, tb)    M[xi] = op(U[xi]) @ V[xi]          (op = U for forward, U^T for input grad)
// then Y = A^T M A per tile. Forward: in = x (Cin = C, Hin x Win = H x W), out = y (Cout = K).
// Input grad: in = dy (Cin = K, OH x OW), out = dx (Cout = C, H x W), padding 2 - p, w flipped:
//   dx[c, i, j] = sum_{k,r,s} dy[k, i + p - r, j + p - s] w[k, c, r, s].
// Weight grad, the adjoint of the forward in U (forward geometry, same tiles, same V):
//   Md : (16, K, tb)      A dy_t A^T per tile (dy's 2x2 block, zeros past OH / OW)
//   dU : (16, K, C)       dU[xi] += Md[xi] @ V[xi]^T, summed over the blocks of images
// then dw[k, c] = G^T dU[., k, c] G, and the taps the direct sum makes exactly 0 set to 0
// (zero_unmet_taps).
//
// Blocking: nb whole images per block (enough tiles for the GEMM's columns, kTargetTiles), so
//   workspace elements = 16*K*C + 16*(C + K) * nb*TPI     (TPI = ceil(Hout/2) * ceil(Wout/2))
// maximised over the forward and input-grad geometry (their TPI differs when pad != 1). For ResNet18
// at 8 x 224 this is at most ~3x the im2col buffer (layer4: U = 16*512*512 dominates).
//
// NaN: every output of a tile depends structurally only on the inputs of its 3x3 windows (rows
// 0..2 of B^T read d rows 0..2 and row 0 of A^T reads M rows 0..2; likewise for the other
// output), and a NaN never cancels, so a NaN input gives NaN exactly where the direct sum does. inf
// does not (inf - inf inside B^T d B), so the entry points refuse non-finite and huge values
// (return false before writing the output) and conv2d.cpp runs im2col instead.
#include "kernels/cpu/conv2d_winograd.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/gemm.h"

namespace kiln::cpu {

namespace {

// Tiles a block should hold before more images join it: the 16 GEMMs have this many columns.
// 128 (Intel Xeon, bench_conv_cpu --algos at 32x64 and the train step, alternating builds): 256 was
// 3% slower at 1 thread and 5% at 2 on the 32x64 step (a block's V and M outgrow the 2 MiB L2:
// 16 * (C + K) * tiles values), 512 slower still, 64 no better than 128; 8x224 unchanged.
constexpr int64_t kTargetTiles = 128;

// One 3x3 stride-1 convolution as this file computes it (forward or input grad).
struct Geom {
  int64_t N, Cin, Hin, Win, Cout, Hout, Wout, ph, pw;
  int64_t TH, TW, TPI, nb;  // tile rows, tile columns, tiles per image, images per block
};

Geom make_geom(int64_t N, int64_t Cin, int64_t Hin, int64_t Win, int64_t Cout, int64_t Hout, int64_t Wout,
               int64_t ph, int64_t pw) {
  Geom g{N, Cin, Hin, Win, Cout, Hout, Wout, ph, pw, 0, 0, 0, 0};
  g.TH = (Hout + 1) / 2;
  g.TW = (Wout + 1) / 2;
  g.TPI = g.TH * g.TW;
  g.nb = std::max<int64_t>(1, std::min(N, (kTargetTiles + g.TPI - 1) / g.TPI));
  return g;
}

Geom forward_geom(const Conv2dDesc& d) {
  return make_geom(d.N, d.C, d.H, d.W, d.K, d.out_h(), d.out_w(), d.pad_h, d.pad_w);
}
Geom backward_geom(const Conv2dDesc& d) {
  return make_geom(d.N, d.K, d.out_h(), d.out_w(), d.C, d.H, d.W, 2 - d.pad_h, 2 - d.pad_w);
}

int64_t u_elems(const Conv2dDesc& d) { return 16 * d.K * d.C; }
int64_t vm_elems(const Geom& g) { return 16 * (g.Cin + g.Cout) * g.nb * g.TPI; }

// The largest |value| of x, dy or w that Winograd takes (see winograd_values_in_range).
template <typename T>
constexpr T value_limit() {
  return sizeof(T) == sizeof(float) ? T(1e15) : T(1e150);
}

// U[xi][k][c] = (G g G^T)[xi] for every (k, c); g = w[k, c] turned 180 degrees when flip (tap
// r*3 + s read from 8 - (r*3 + s)). Channels go in chunks of 64 through a transposed stack copy
// gt[tap][c], so every loop runs contiguously over c. Returns false when some |w| is NaN, inf or
// above value_limit (U is then garbage and must not be used).
template <typename T>
bool transform_weights(const Conv2dDesc& d, const T* w, bool flip, T* U) {
  constexpr int64_t kC = 64;
  const int64_t KC = d.K * d.C;
  const T lim = value_limit<T>();
  int64_t bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad)
  for (int64_t k = 0; k < d.K; ++k) {
    for (int64_t c0 = 0; c0 < d.C; c0 += kC) {
      const int64_t nc = std::min(kC, d.C - c0);
      const T* src = w + (k * d.C + c0) * 9;
      T gt[9][kC];
      for (int64_t c = 0; c < nc; ++c)
        for (int j = 0; j < 9; ++j) gt[flip ? 8 - j : j][c] = src[c * 9 + j];
      int64_t nbad = 0;
      for (int j = 0; j < 9; ++j)
        for (int64_t c = 0; c < nc; ++c) nbad += !(std::abs(gt[j][c]) <= lim);  // NaN fails too
      bad += nbad;
      T t[4][3][kC];  // G g
      for (int sc = 0; sc < 3; ++sc)
        for (int64_t c = 0; c < nc; ++c) {
          const T g0 = gt[sc][c], g1 = gt[3 + sc][c], g2 = gt[6 + sc][c];
          t[0][sc][c] = g0;
          t[1][sc][c] = T(0.5) * (g0 + g1 + g2);
          t[2][sc][c] = T(0.5) * (g0 - g1 + g2);
          t[3][sc][c] = g2;
        }
      T* dst = U + k * d.C + c0;
      for (int i = 0; i < 4; ++i) {  // (G g) G^T
        T* u0 = dst + (i * 4 + 0) * KC;
        T* u1 = dst + (i * 4 + 1) * KC;
        T* u2 = dst + (i * 4 + 2) * KC;
        T* u3 = dst + (i * 4 + 3) * KC;
        for (int64_t c = 0; c < nc; ++c) {
          const T a = t[i][0][c], b = t[i][1][c], e = t[i][2][c];
          u0[c] = a;
          u1[c] = T(0.5) * (a + b + e);
          u2[c] = T(0.5) * (a - b + e);
          u3[c] = e;
        }
      }
    }
  }
  return bad == 0;
}

// Tiles handled together in the transforms: their rows live in small stack buffers, so the inner
// loops are branch-free and contiguous (the compiler vectorizes them; no -march flags needed).
constexpr int64_t kChunk = 64;

// Copies and zero fills of the transforms' short runs (2..130 values) as plain loops: std::copy and
// std::fill become a memmove / memset call per run, which cost more than the run on 4..16 px maps
// (memmove was 5% of a 32x64 ResNet18 step). This file is built with -fno-tree-loop-distribute-patterns
// (CMakeLists.txt) so the compiler does not turn these loops back into the calls.
template <typename T>
inline void copy_run(const T* src, int64_t n, T* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}
template <typename T>
inline void zero_run(T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = T(0);
}

// The 4 input rows [ih0, ih0 + 4) of one row of tiles, columns [iw0, iw0 + ncols), zeros outside
// the plane x (Hin x Win), combined vertically: q = B^T d, column by column.
template <typename T>
inline void vertical(const Geom& g, const T* x, int64_t ih0, int64_t iw0, int64_t ncols, T (*rows)[2 * kChunk + 2],
                     T (*q)[2 * kChunk + 2]) {
  // Input columns [iw0 + lo, iw0 + hi) are inside the plane.
  const int64_t lo = std::min(ncols, std::max<int64_t>(0, -iw0));
  const int64_t hi = std::max(lo, std::min(ncols, g.Win - iw0));
  for (int a = 0; a < 4; ++a) {
    const int64_t ih = ih0 + a;
    if (ih < 0 || ih >= g.Hin) {
      zero_run(rows[a], ncols);
      continue;
    }
    const T* src = x + ih * g.Win + iw0;
    zero_run(rows[a], lo);
    copy_run(src + lo, hi - lo, rows[a] + lo);
    zero_run(rows[a] + hi, ncols - hi);
  }
  for (int64_t j = 0; j < ncols; ++j) {
    q[0][j] = rows[0][j] - rows[2][j];
    q[1][j] = rows[1][j] + rows[2][j];
    q[2][j] = rows[2][j] - rows[1][j];
    q[3][j] = rows[1][j] - rows[3][j];
  }
}

// Entries [lo, hi) of a deinterleaved column run (index t reads input column 2t + off) lie inside a
// row of W columns; n entries in all.
struct DeinterleavedCols {
  int64_t lo, hi;
};
inline DeinterleavedCols deinterleaved_cols(int64_t off, int64_t W, int64_t n) {
  const int64_t lo = std::min(n, off >= 0 ? int64_t(0) : (-off + 1) / 2);
  const int64_t hi = std::max(lo, std::min(n, W - off > 0 ? (W - off + 1) / 2 : int64_t(0)));
  return {lo, hi};
}
// out[t] = row[2t + off] inside the row, 0 outside (and everywhere when row is null: a padding row).
template <typename T>
inline void load_deinterleaved(const T* row, int64_t off, DeinterleavedCols r, int64_t n, T* out) {
  if (!row) return zero_run(out, n);
  zero_run(out, r.lo);
  for (int64_t t = r.lo; t < r.hi; ++t) out[t] = row[2 * t + off];
  zero_run(out + r.hi, n - r.hi);
}

// V[xi][c][t] = (B^T d B)[xi] for the tiles of images [n0, n0+nb); t = b*TPI + th*TW + tw.
// Per row of tiles: the 4 input rows of a chunk of tiles are copied (zeros outside the input) into
// rows[4][2*kChunk + 2], combined vertically (B^T d, contiguous), then horizontally (stride 2).
// Narrow planes (TW <= kChunk / 2: ResNet18's 16..4 px maps at 64 px) take several rows of tiles
// per step, so each of the 16 planes of V gets one run of up to kChunk tiles instead of 16 runs of
// TW: the rows of tiles of all the block's images are one sequence r = b * TH + th (row r starts at
// tile r * TW of V), and a step takes rows_per of them, across images (the 4x4 maps' runs of 2 made
// this transform 12% of a 32x64 ResNet18 step; one image's 2 rows of 2 tiles per step still left
// it 9%).
template <typename T>
void transform_input(const Geom& g, const T* in, int64_t n0, int64_t nb, T* V) {
  const int64_t tb = nb * g.TPI, plane = g.Hin * g.Win, vs = g.Cin * tb;
  if (g.TW <= kChunk / 2) {
    const int64_t rows_per = kChunk / g.TW, nrows = nb * g.TH, groups = (nrows + rows_per - 1) / rows_per;
    const int64_t TW1 = g.TW + 1;
    // An input row split into its even and odd columns: E[t] = row[2t - pw], O[t] = row[2t + 1 - pw]
    // (zero outside the plane), t <= TW. Tile t reads E[t], O[t], E[t + 1], O[t + 1]: contiguous.
    const DeinterleavedCols ec = deinterleaved_cols(-g.pw, g.Win, TW1), oc = deinterleaved_cols(1 - g.pw, g.Win, TW1);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t c = 0; c < g.Cin; ++c)
      for (int64_t gr = 0; gr < groups; ++gr) {
        T ebuf[4][kChunk / 2 + 1], obuf[4][kChunk / 2 + 1];
        T* E[4] = {ebuf[0], ebuf[1], ebuf[2], ebuf[3]};
        T* O[4] = {obuf[0], obuf[1], obuf[2], obuf[3]};
        const int64_t r0 = gr * rows_per, r1 = std::min(nrows, r0 + rows_per), nu = (r1 - r0) * g.TW;
        T e[4][4][kChunk];  // e[i][j][u] = (B^T d)[i][2 tw + j] of tile u = (r - r0) * TW + tw
        int64_t prev_b = -1, prev_th = -1;
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t b = r / g.TH, th = r - b * g.TH;
          const T* x = in + ((n0 + b) * g.Cin + c) * plane;
          int a0 = 0;
          if (b == prev_b && th == prev_th + 1) {  // input rows 2th, 2th + 1 were the last row's 2 and 3
            std::swap(E[0], E[2]);
            std::swap(E[1], E[3]);
            std::swap(O[0], O[2]);
            std::swap(O[1], O[3]);
            a0 = 2;
          }
          for (int a = a0; a < 4; ++a) {
            const int64_t ih = 2 * th - g.ph + a;
            const T* row = ih >= 0 && ih < g.Hin ? x + ih * g.Win : nullptr;
            load_deinterleaved(row, -g.pw, ec, TW1, E[a]);
            load_deinterleaved(row, 1 - g.pw, oc, TW1, O[a]);
          }
          prev_b = b;
          prev_th = th;
          T qe[4][kChunk / 2 + 1], qo[4][kChunk / 2 + 1];  // B^T d on the even and odd columns
          for (int64_t t = 0; t < TW1; ++t) {
            qe[0][t] = E[0][t] - E[2][t];
            qe[1][t] = E[1][t] + E[2][t];
            qe[2][t] = E[2][t] - E[1][t];
            qe[3][t] = E[1][t] - E[3][t];
            qo[0][t] = O[0][t] - O[2][t];
            qo[1][t] = O[1][t] + O[2][t];
            qo[2][t] = O[2][t] - O[1][t];
            qo[3][t] = O[1][t] - O[3][t];
          }
          const int64_t u0 = (r - r0) * g.TW;
          for (int i = 0; i < 4; ++i) {
            copy_run(qe[i], g.TW, e[i][0] + u0);
            copy_run(qo[i], g.TW, e[i][1] + u0);
            copy_run(qe[i] + 1, g.TW, e[i][2] + u0);
            copy_run(qo[i] + 1, g.TW, e[i][3] + u0);
          }
        }
        T* v = V + c * tb + r0 * g.TW;
        for (int i = 0; i < 4; ++i) {  // (B^T d) B over the group's tiles
          T* v0 = v + (i * 4 + 0) * vs;
          T* v1 = v + (i * 4 + 1) * vs;
          T* v2 = v + (i * 4 + 2) * vs;
          T* v3 = v + (i * 4 + 3) * vs;
          const T *e0 = e[i][0], *e1 = e[i][1], *e2 = e[i][2], *e3 = e[i][3];
          for (int64_t u = 0; u < nu; ++u) {
            v0[u] = e0[u] - e2[u];
            v1[u] = e1[u] + e2[u];
            v2[u] = e2[u] - e1[u];
            v3[u] = e1[u] - e3[u];
          }
        }
      }
    return;
  }
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t c = 0; c < g.Cin; ++c)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t th = 0; th < g.TH; ++th) {
        const T* x = in + ((n0 + b) * g.Cin + c) * plane;
        T rows[4][2 * kChunk + 2];
        T q[4][2 * kChunk + 2];  // B^T d, column by column
        const int64_t ih0 = 2 * th - g.ph;
        T* v = V + c * tb + b * g.TPI + th * g.TW;
        for (int64_t tw0 = 0; tw0 < g.TW; tw0 += kChunk) {
          const int64_t nt = std::min(kChunk, g.TW - tw0), ncols = 2 * nt + 2, iw0 = 2 * tw0 - g.pw;
          vertical(g, x, ih0, iw0, ncols, rows, q);
          for (int i = 0; i < 4; ++i) {  // (B^T d) B, tile by tile
            const T* r = q[i];
            T* v0 = v + (i * 4 + 0) * vs + tw0;
            T* v1 = v + (i * 4 + 1) * vs + tw0;
            T* v2 = v + (i * 4 + 2) * vs + tw0;
            T* v3 = v + (i * 4 + 3) * vs + tw0;
            for (int64_t t = 0; t < nt; ++t) {
              const T e0 = r[2 * t], e1 = r[2 * t + 1], e2 = r[2 * t + 2], e3 = r[2 * t + 3];
              v0[t] = e0 - e2;
              v1[t] = e1 + e2;
              v2[t] = e2 - e1;
              v3[t] = e1 - e3;
            }
          }
        }
      }
}

// out tiles of images [n0, n0+nb) = A^T M A (+ bias[k]); outputs past Hout / Wout are dropped.
// Per row of tiles and chunk: A^T M (contiguous over tiles), then the 2 output rows interleaved
// into a stack buffer, copied out up to Wout.
// Narrow planes: A^T M A over groups of rows of tiles across images, as transform_input (runs of up
// to kChunk tiles of M), then each row's outputs scattered to its image.
template <typename T>
void transform_output(const Geom& g, const T* M, const T* bias, int64_t n0, int64_t nb, T* out) {
  const int64_t tb = nb * g.TPI, plane = g.Hout * g.Wout, ms = g.Cout * tb;
  if (g.TW <= kChunk / 2) {
    const int64_t rows_per = kChunk / g.TW, nrows = nb * g.TH, groups = (nrows + rows_per - 1) / rows_per;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t k = 0; k < g.Cout; ++k)
      for (int64_t gr = 0; gr < groups; ++gr) {
        const int64_t r0 = gr * rows_per, r1 = std::min(nrows, r0 + rows_per), nu = (r1 - r0) * g.TW;
        const T* m = M + k * tb + r0 * g.TW;
        const T bk = bias ? bias[k] : T(0);
        T q[2][4][kChunk];  // A^T M: q[i][e][u]
        for (int e = 0; e < 4; ++e) {
          const T* m0 = m + (0 * 4 + e) * ms;
          const T* m1 = m + (1 * 4 + e) * ms;
          const T* m2 = m + (2 * 4 + e) * ms;
          const T* m3 = m + (3 * 4 + e) * ms;
          for (int64_t u = 0; u < nu; ++u) {
            q[0][e][u] = m0[u] + m1[u] + m2[u];
            q[1][e][u] = m1[u] - m2[u] - m3[u];
          }
        }
        T z[2][2][kChunk];  // (A^T M) A: z[i][j][u] = output (2 th + i, 2 tw + j) of tile u
        for (int i = 0; i < 2; ++i) {
          const T *e0 = q[i][0], *e1 = q[i][1], *e2 = q[i][2], *e3 = q[i][3];
          for (int64_t u = 0; u < nu; ++u) {
            z[i][0][u] = e0[u] + e1[u] + e2[u] + bk;
            z[i][1][u] = e1[u] - e2[u] - e3[u] + bk;
          }
        }
        const int64_t ncols = std::min(2 * g.TW, g.Wout);
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t b = r / g.TH, th = r - b * g.TH, u0 = (r - r0) * g.TW;
          const int64_t oh = 2 * th, nr = std::min<int64_t>(2, g.Hout - oh);
          T* y = out + ((n0 + b) * g.Cout + k) * plane;
          for (int64_t i = 0; i < nr; ++i) {
            T row[2 * kChunk];
            for (int64_t t = 0; t < g.TW; ++t) {
              row[2 * t] = z[i][0][u0 + t];
              row[2 * t + 1] = z[i][1][u0 + t];
            }
            copy_run(row, ncols, y + (oh + i) * g.Wout);
          }
        }
      }
    return;
  }
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t k = 0; k < g.Cout; ++k)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t th = 0; th < g.TH; ++th) {
        T* y = out + ((n0 + b) * g.Cout + k) * plane;
        const T* m = M + k * tb + b * g.TPI + th * g.TW;
        const T bk = bias ? bias[k] : T(0);
        const int64_t oh = 2 * th, nrows = std::min<int64_t>(2, g.Hout - oh);
        for (int64_t tw0 = 0; tw0 < g.TW; tw0 += kChunk) {
          const int64_t nt = std::min(kChunk, g.TW - tw0);
          T q[2][4][kChunk];  // A^T M: q[i][e][t]
          for (int e = 0; e < 4; ++e) {
            const T* m0 = m + (0 * 4 + e) * ms + tw0;
            const T* m1 = m + (1 * 4 + e) * ms + tw0;
            const T* m2 = m + (2 * 4 + e) * ms + tw0;
            const T* m3 = m + (3 * 4 + e) * ms + tw0;
            for (int64_t t = 0; t < nt; ++t) {
              q[0][e][t] = m0[t] + m1[t] + m2[t];
              q[1][e][t] = m1[t] - m2[t] - m3[t];
            }
          }
          const int64_t ow0 = 2 * tw0, ncols = std::min(2 * nt, g.Wout - ow0);
          for (int64_t i = 0; i < nrows; ++i) {  // (A^T M) A
            T row[2 * kChunk];
            const T *e0 = q[i][0], *e1 = q[i][1], *e2 = q[i][2], *e3 = q[i][3];
            for (int64_t t = 0; t < nt; ++t) {
              row[2 * t] = e0[t] + e1[t] + e2[t] + bk;
              row[2 * t + 1] = e1[t] - e2[t] - e3[t] + bk;
            }
            copy_run(row, ncols, y + (oh + i) * g.Wout + ow0);
          }
        }
      }
}

// Md[xi][k][t] = (A dy A^T)[xi] for the tiles of images [n0, n0+nb) of the output plane (Cout = K
// channels of g): the 2x2 block of dy a tile produced (zeros past Hout / Wout) spread back to the
// 4x4 transformed tile, with A = [1 0; 1 1; 1 -1; 0 -1] (the transpose of the output transform).
// Per row of tiles and chunk: A over the 2 dy rows (contiguous over columns), then over the columns
// (stride 2) into the 16 planes.
// Narrow planes: groups of rows of tiles across images, as transform_input; each of the 16 planes of
// Md then gets one run of up to kChunk tiles.
template <typename T>
void transform_grad_output(const Geom& g, const T* dy, int64_t n0, int64_t nb, T* Md) {
  const int64_t tb = nb * g.TPI, plane = g.Hout * g.Wout, ms = g.Cout * tb;
  if (g.TW <= kChunk / 2) {
    const int64_t rows_per = kChunk / g.TW, nrows = nb * g.TH, groups = (nrows + rows_per - 1) / rows_per;
    const int64_t ncols = std::min(2 * g.TW, g.Wout);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t k = 0; k < g.Cout; ++k)
      for (int64_t gr = 0; gr < groups; ++gr) {
        const int64_t r0 = gr * rows_per, r1 = std::min(nrows, r0 + rows_per), nu = (r1 - r0) * g.TW;
        T e[4][4][kChunk];  // e[i][j][u] = (A dy A^T)[i][j] of tile u = (r - r0) * TW + tw
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t b = r / g.TH, th = r - b * g.TH, u0 = (r - r0) * g.TW;
          const int64_t oh = 2 * th, nr = std::min<int64_t>(2, g.Hout - oh);
          const T* src = dy + ((n0 + b) * g.Cout + k) * plane;
          T rows[2][2 * kChunk];
          for (int64_t i = 0; i < 2; ++i) {
            if (i < nr) copy_run(src + (oh + i) * g.Wout, ncols, rows[i]);
            zero_run(rows[i] + (i < nr ? ncols : 0), 2 * g.TW - (i < nr ? ncols : 0));
          }
          T q[4][2 * kChunk];  // A dy, column by column
          for (int64_t j = 0; j < 2 * g.TW; ++j) {
            q[0][j] = rows[0][j];
            q[1][j] = rows[0][j] + rows[1][j];
            q[2][j] = rows[0][j] - rows[1][j];
            q[3][j] = -rows[1][j];
          }
          for (int i = 0; i < 4; ++i)  // (A dy) A^T, tile by tile
            for (int64_t t = 0; t < g.TW; ++t) {
              const T e0 = q[i][2 * t], e1 = q[i][2 * t + 1];
              e[i][0][u0 + t] = e0;
              e[i][1][u0 + t] = e0 + e1;
              e[i][2][u0 + t] = e0 - e1;
              e[i][3][u0 + t] = -e1;
            }
        }
        T* m = Md + k * tb + r0 * g.TW;
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) copy_run(e[i][j], nu, m + (i * 4 + j) * ms);
      }
    return;
  }
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t k = 0; k < g.Cout; ++k)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t th = 0; th < g.TH; ++th) {
        const T* src = dy + ((n0 + b) * g.Cout + k) * plane;
        T* m = Md + k * tb + b * g.TPI + th * g.TW;
        const int64_t oh = 2 * th, nrows = std::min<int64_t>(2, g.Hout - oh);
        for (int64_t tw0 = 0; tw0 < g.TW; tw0 += kChunk) {
          const int64_t nt = std::min(kChunk, g.TW - tw0), ow0 = 2 * tw0, ncols = std::min(2 * nt, g.Wout - ow0);
          T rows[2][2 * kChunk];
          for (int64_t i = 0; i < 2; ++i) {
            if (i < nrows) copy_run(src + (oh + i) * g.Wout + ow0, ncols, rows[i]);
            zero_run(rows[i] + (i < nrows ? ncols : 0), 2 * nt - (i < nrows ? ncols : 0));
          }
          T q[4][2 * kChunk];  // A dy, column by column
          for (int64_t j = 0; j < 2 * nt; ++j) {
            q[0][j] = rows[0][j];
            q[1][j] = rows[0][j] + rows[1][j];
            q[2][j] = rows[0][j] - rows[1][j];
            q[3][j] = -rows[1][j];
          }
          for (int i = 0; i < 4; ++i) {  // (A dy) A^T, tile by tile
            const T* r = q[i];
            T* m0 = m + (i * 4 + 0) * ms + tw0;
            T* m1 = m + (i * 4 + 1) * ms + tw0;
            T* m2 = m + (i * 4 + 2) * ms + tw0;
            T* m3 = m + (i * 4 + 3) * ms + tw0;
            for (int64_t t = 0; t < nt; ++t) {
              const T e0 = r[2 * t], e1 = r[2 * t + 1];
              m0[t] = e0;
              m1[t] = e0 + e1;
              m2[t] = e0 - e1;
              m3[t] = -e1;
            }
          }
        }
      }
}

// dw[k][c] = G^T dU[.][k][c] G (3x3 from the 4x4 transformed sums), G = [1 0 0; .5 .5 .5; .5 -.5 .5;
// 0 0 1]: the adjoint of the weight transform. Channels in chunks of 64 through stack buffers, so
// the loops run contiguously over c; the 9 taps are then interleaved into dw (K, C, 3, 3).
// Returns max |dw|.
template <typename T>
T transform_weight_grad(const Conv2dDesc& d, const T* dU, T* dw) {
  constexpr int64_t kC = 64;
  const int64_t KC = d.K * d.C;
  T big = 0;
#pragma omp parallel for schedule(static) reduction(max : big)
  for (int64_t k = 0; k < d.K; ++k)
    for (int64_t c0 = 0; c0 < d.C; c0 += kC) {
      const int64_t nc = std::min(kC, d.C - c0);
      const T* src = dU + k * d.C + c0;
      T t[3][4][kC];  // G^T dU: t[r][b][c]
      for (int b = 0; b < 4; ++b) {
        const T* u0 = src + (0 * 4 + b) * KC;
        const T* u1 = src + (1 * 4 + b) * KC;
        const T* u2 = src + (2 * 4 + b) * KC;
        const T* u3 = src + (3 * 4 + b) * KC;
        for (int64_t c = 0; c < nc; ++c) {
          const T h1 = T(0.5) * u1[c], h2 = T(0.5) * u2[c];
          t[0][b][c] = u0[c] + h1 + h2;
          t[1][b][c] = h1 - h2;
          t[2][b][c] = h1 + h2 + u3[c];
        }
      }
      T out[9][kC];  // (G^T dU) G: out[r*3 + s][c]
      for (int r = 0; r < 3; ++r)
        for (int64_t c = 0; c < nc; ++c) {
          const T h1 = T(0.5) * t[r][1][c], h2 = T(0.5) * t[r][2][c];
          out[r * 3 + 0][c] = t[r][0][c] + h1 + h2;
          out[r * 3 + 1][c] = h1 - h2;
          out[r * 3 + 2][c] = h1 + h2 + t[r][3][c];
        }
      T m = 0;
      for (int j = 0; j < 9; ++j)
        for (int64_t c = 0; c < nc; ++c) m = std::max(m, std::abs(out[j][c]));
      big = std::max(big, m);
      T* dst = dw + (k * d.C + c0) * 9;
      for (int64_t c = 0; c < nc; ++c)
        for (int j = 0; j < 9; ++j) dst[c * 9 + j] = out[j][c];
    }
  return big;
}

// Exact zeros of the weight gradient. dw[k, c, r, s] = sum_{n,i,j} dy[n, k, i, j] x[n, c, i+r-ph, j+s-pw]
// is exactly 0 when no nonzero dy meets a nonzero x under tap (r, s): sparse ReLU activations and
// small planes make that common (a ResNet50 at 32 px: ~2% of layer1's 3x3 weights). Winograd leaves
// roundoff there (the other taps' terms cancelling in G^T dU G), and an optimizer that divides by
// the gradient's size (AdamW's first step is ~lr * sign(g)) turns it into a full step where the
// direct sum gives none. Such roundoff is ~1e-6 of the tensor's largest |dw| (measured up to 8e-7
// on ResNet18's layers), so every tap at most kSuspect = 2^-10 of it is checked: it keeps its value
// if some nonzero dy meets a nonzero x under it (the scan stops at the first meeting: a few pixels
// for dense channels), and becomes 0 otherwise. A tap is never zeroed unless the direct sum is
// exactly 0. Cost: the scan of a tap that truly is 0 reads N * OH * OW pixels of dy and x, so a
// gradient with many exact zeros pays up to a direct convolution's reads for them.
constexpr double kSuspect = 1.0 / 1024;

// big: max |dw|. Each row of dw (one k, C * 9 taps) is read 16 taps at a time by a branch-free
// test (vectorized), and only groups holding a suspect tap are looked at one by one.
template <typename T>
void zero_unmet_taps(const Conv2dDesc& d, const Geom& g, const T* x, const T* dy, T big, T* dw) {
  constexpr int64_t kGroup = 16;
  const int64_t row = d.C * 9, plane_x = d.H * d.W, plane_y = g.Hout * g.Wout;
  const T lim = T(kSuspect) * big;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < d.K; ++k)
    for (int64_t e0 = 0; e0 < row; e0 += kGroup) {
      const int64_t ne = std::min(kGroup, row - e0);
      T* w = dw + k * row + e0;
      int suspects = 0;
      for (int64_t e = 0; e < ne; ++e) suspects += (w[e] != T(0)) & (std::abs(w[e]) <= lim);
      if (suspects == 0) continue;
      for (int64_t e = 0; e < ne; ++e) {
        T& v = w[e];
        if (v == T(0) || std::abs(v) > lim) continue;
        const int64_t c = (e0 + e) / 9, tap = (e0 + e) % 9;
        // Outputs (i, j) whose input (i + r - ph, j + s - pw) is inside the plane.
        const int64_t dr = tap / 3 - g.ph, ds = tap % 3 - g.pw;
        const int64_t i0 = std::max<int64_t>(0, -dr), i1 = std::min(g.Hout, d.H - dr);
        const int64_t j0 = std::max<int64_t>(0, -ds), j1 = std::min(g.Wout, d.W - ds);
        bool met = false;
        for (int64_t n = 0; n < d.N && !met; ++n) {
          const T* yk = dy + (n * d.K + k) * plane_y;
          const T* xc = x + (n * d.C + c) * plane_x;
          for (int64_t i = i0; i < i1 && !met; ++i)
            for (int64_t j = j0; j < j1; ++j)
              if (yk[i * g.Wout + j] != T(0) && xc[(i + dr) * d.W + j + ds] != T(0)) {
                met = true;
                break;
              }
        }
        if (!met) v = T(0);
      }
    }
}

// The whole convolution of geometry g with weights U already transformed.
template <typename T>
void run(const Geom& g, const T* in, const T* U, bool trans_u, const T* bias, T* out, T* V) {
  for (int64_t n0 = 0; n0 < g.N; n0 += g.nb) {
    const int64_t nb = std::min(g.nb, g.N - n0), tb = nb * g.TPI;
    T* M = V + g.Cin * tb * 16;
    transform_input(g, in, n0, nb, V);
    // M[xi] (Cout, tb) = op(U[xi]) (Cout, Cin) @ V[xi] (Cin, tb); U[xi] is stored (K, C).
    gemm_batched<T>(trans_u, false, g.Cout, tb, g.Cin, T(1), U, trans_u ? g.Cout : g.Cin, g.Cout * g.Cin, V,
                    tb, g.Cin * tb, T(0), M, tb, g.Cout * tb, 16);
    transform_output(g, M, bias, n0, nb, out);
  }
}

}  // namespace

bool winograd_applies(const Conv2dDesc& d) {
  return d.R == 3 && d.S == 3 && d.stride_h == 1 && d.stride_w == 1 && d.dil_h == 1 && d.dil_w == 1 &&
         d.groups == 1 && d.pad_h >= 0 && d.pad_h <= 2 && d.pad_w >= 0 && d.pad_w <= 2;
}

int64_t winograd_images_per_block(const Conv2dDesc& d) { return forward_geom(d).nb; }

size_t winograd_workspace_bytes(const Conv2dDesc& d, size_t elem_size) {
  const int64_t vm = std::max(vm_elems(forward_geom(d)), vm_elems(backward_geom(d)));
  return (size_t)(u_elems(d) + vm) * elem_size;
}

template <typename T>
bool winograd_values_in_range(const T* p, int64_t n) {
  const T lim = value_limit<T>();
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) bad += !(std::abs(p[i]) <= lim);  // NaN fails the comparison
  return bad == 0;
}

int64_t winograd_u_elems(const Conv2dDesc& d) { return u_elems(d); }

template <typename T>
bool winograd_transform_weights(const Conv2dDesc& d, const T* w, bool flip, T* U) {
  return transform_weights(d, w, flip, U);
}

template <typename T>
void winograd_forward_u(const Conv2dDesc& d, const T* x, const T* U, const T* bias, T* y, T* vm) {
  run(forward_geom(d), x, U, false, bias, y, vm);
}

template <typename T>
void winograd_backward_input_u(const Conv2dDesc& d, const T* dy, const T* U, T* dx, T* vm) {
  run(backward_geom(d), dy, U, true, static_cast<const T*>(nullptr), dx, vm);
}

template <typename T>
bool winograd_forward(const Conv2dDesc& d, const T* x, const T* w, const T* bias, T* y, void* workspace) {
  T* U = static_cast<T*>(workspace);
  if (!winograd_values_in_range(x, d.N * d.C * d.H * d.W) || !transform_weights(d, w, false, U)) return false;
  winograd_forward_u(d, x, U, bias, y, U + u_elems(d));
  return true;
}

template <typename T>
bool winograd_backward_input(const Conv2dDesc& d, const T* dy, const T* w, T* dx, void* workspace) {
  T* U = static_cast<T*>(workspace);
  if (!winograd_values_in_range(dy, d.N * d.K * d.out_h() * d.out_w()) || !transform_weights(d, w, true, U))
    return false;
  winograd_backward_input_u(d, dy, U, dx, U + u_elems(d));
  return true;
}

template <typename T>
bool winograd_backward_weight(const Conv2dDesc& d, const T* x, const T* dy, T* dw, void* workspace) {
  if (!winograd_values_in_range(x, d.N * d.C * d.H * d.W) ||
      !winograd_values_in_range(dy, d.N * d.K * d.out_h() * d.out_w()))
    return false;
  const Geom g = forward_geom(d);
  T* dU = static_cast<T*>(workspace);  // (16, K, C): sum over tiles of Md[xi] @ V[xi]^T
  T* V = dU + u_elems(d);
  if (d.N == 0) std::fill(dU, dU + u_elems(d), T(0));
  for (int64_t n0 = 0; n0 < g.N; n0 += g.nb) {
    const int64_t nb = std::min(g.nb, g.N - n0), tb = nb * g.TPI;
    T* Md = V + g.Cin * tb * 16;
    transform_input(g, x, n0, nb, V);
    transform_grad_output(g, dy, n0, nb, Md);
    // dU[xi] (K, C) (+)= Md[xi] (K, tb) @ V[xi]^T (tb, C)
    gemm_batched<T>(false, true, g.Cout, g.Cin, tb, T(1), Md, tb, g.Cout * tb, V, tb, g.Cin * tb,
                    n0 == 0 ? T(0) : T(1), dU, g.Cin, g.Cout * g.Cin, 16);
  }
  const T big = transform_weight_grad(d, dU, dw);
  zero_unmet_taps(d, g, x, dy, big, dw);
  return true;
}

#define KILN_INSTANTIATE_WINOGRAD(T)                                                              \
  template bool winograd_values_in_range<T>(const T*, int64_t);                                   \
  template bool winograd_forward<T>(const Conv2dDesc&, const T*, const T*, const T*, T*, void*); \
  template bool winograd_backward_input<T>(const Conv2dDesc&, const T*, const T*, T*, void*);        \
  template bool winograd_backward_weight<T>(const Conv2dDesc&, const T*, const T*, T*, void*);         \
  template bool winograd_transform_weights<T>(const Conv2dDesc&, const T*, bool, T*);                \
  template void winograd_forward_u<T>(const Conv2dDesc&, const T*, const T*, const T*, T*, T*);       \
  template void winograd_backward_input_u<T>(const Conv2dDesc&, const T*, const T*, T*, T*);
KILN_INSTANTIATE_WINOGRAD(float)
KILN_INSTANTIATE_WINOGRAD(double)
#undef KILN_INSTANTIATE_WINOGRAD

}  // namespace kiln::cpu
