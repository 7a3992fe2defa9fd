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
//
// Blocking: nb whole images per block (enough tiles for the GEMM's columns, kTargetTiles), so
//   workspace elements = 16*K*C + 16*(C + K) * nb*TPI     (TPI = ceil(Hout/2) * ceil(Wout/2))
// maximised over the forward and input-grad geometry (their TPI differs when pad != 1). For ResNet18
// at 8 x 224 this is at most ~3x the im2col buffer (layer4: U = 16*512*512 dominates).
//
// NaN: every output of a tile depends structurally only on the inputs of its 3x3 windows (rows
// 0..2 of B^T read d rows 0..2 and row 0 of A^T reads M rows 0..2; likewise for the other
// output), and a NaN never cancels, so a NaN input gives NaN exactly where the direct sum does. inf
// does not (inf - inf inside B^T d B); conv2d.cpp keeps non-finite values off this path.
#include "kernels/cpu/conv2d_winograd.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/gemm.h"

namespace kiln::cpu {

namespace {

// Tiles a block should hold before more images join it: the 16 GEMMs have this many columns.
constexpr int64_t kTargetTiles = 256;

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

// U[xi][k][c] = (G g G^T)[xi] for every (k, c); g = w[k, c] turned 180 degrees when flip.
template <typename T>
void transform_weights(const Conv2dDesc& d, const T* w, bool flip, T* U) {
  const int64_t KC = d.K * d.C;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < d.K; ++k) {
    for (int64_t c = 0; c < d.C; ++c) {
      const T* src = w + (k * d.C + c) * 9;
      T g[3][3];
      for (int r = 0; r < 3; ++r)
        for (int s = 0; s < 3; ++s) g[r][s] = flip ? src[(2 - r) * 3 + (2 - s)] : src[r * 3 + s];
      T t[4][3];  // G g
      for (int s = 0; s < 3; ++s) {
        t[0][s] = g[0][s];
        t[1][s] = T(0.5) * (g[0][s] + g[1][s] + g[2][s]);
        t[2][s] = T(0.5) * (g[0][s] - g[1][s] + g[2][s]);
        t[3][s] = g[2][s];
      }
      T* dst = U + k * d.C + c;
      for (int i = 0; i < 4; ++i) {  // (G g) G^T
        dst[(i * 4 + 0) * KC] = t[i][0];
        dst[(i * 4 + 1) * KC] = T(0.5) * (t[i][0] + t[i][1] + t[i][2]);
        dst[(i * 4 + 2) * KC] = T(0.5) * (t[i][0] - t[i][1] + t[i][2]);
        dst[(i * 4 + 3) * KC] = t[i][2];
      }
    }
  }
}

// V[xi][c][t] = (B^T d B)[xi] for the tiles of images [n0, n0+nb); t = b*TPI + th*TW + tw.
template <typename T>
void transform_input(const Geom& g, const T* in, int64_t n0, int64_t nb, T* V) {
  const int64_t tb = nb * g.TPI, plane = g.Hin * g.Win, vs = g.Cin * tb;
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t c = 0; c < g.Cin; ++c)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t th = 0; th < g.TH; ++th) {
        const T* x = in + ((n0 + b) * g.Cin + c) * plane;
        const int64_t ih0 = 2 * th - g.ph;
        const bool rows_in = ih0 >= 0 && ih0 + 4 <= g.Hin;
        T* v = V + c * tb + b * g.TPI + th * g.TW;
        for (int64_t tw = 0; tw < g.TW; ++tw) {
          const int64_t iw0 = 2 * tw - g.pw;
          T p[4][4];
          if (rows_in && iw0 >= 0 && iw0 + 4 <= g.Win) {
            for (int a = 0; a < 4; ++a)
              for (int e = 0; e < 4; ++e) p[a][e] = x[(ih0 + a) * g.Win + iw0 + e];
          } else {  // a tile over the border: zeros outside the input
            for (int a = 0; a < 4; ++a)
              for (int e = 0; e < 4; ++e) {
                const int64_t ih = ih0 + a, iw = iw0 + e;
                p[a][e] = (ih >= 0 && ih < g.Hin && iw >= 0 && iw < g.Win) ? x[ih * g.Win + iw] : T(0);
              }
          }
          T q[4][4];  // B^T p
          for (int e = 0; e < 4; ++e) {
            q[0][e] = p[0][e] - p[2][e];
            q[1][e] = p[1][e] + p[2][e];
            q[2][e] = p[2][e] - p[1][e];
            q[3][e] = p[1][e] - p[3][e];
          }
          for (int i = 0; i < 4; ++i) {  // (B^T p) B
            v[(i * 4 + 0) * vs + tw] = q[i][0] - q[i][2];
            v[(i * 4 + 1) * vs + tw] = q[i][1] + q[i][2];
            v[(i * 4 + 2) * vs + tw] = q[i][2] - q[i][1];
            v[(i * 4 + 3) * vs + tw] = q[i][1] - q[i][3];
          }
        }
      }
}

// out tiles of images [n0, n0+nb) = A^T M A (+ bias[k]); outputs past Hout / Wout are dropped.
template <typename T>
void transform_output(const Geom& g, const T* M, const T* bias, int64_t n0, int64_t nb, T* out) {
  const int64_t tb = nb * g.TPI, plane = g.Hout * g.Wout, ms = g.Cout * tb;
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t k = 0; k < g.Cout; ++k)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t th = 0; th < g.TH; ++th) {
        T* y = out + ((n0 + b) * g.Cout + k) * plane;
        const T* m = M + k * tb + b * g.TPI + th * g.TW;
        const T bk = bias ? bias[k] : T(0);
        const int64_t oh = 2 * th;
        const bool two_rows = oh + 1 < g.Hout;
        for (int64_t tw = 0; tw < g.TW; ++tw) {
          T q[2][4];  // A^T M
          for (int e = 0; e < 4; ++e) {
            const T m0 = m[(0 * 4 + e) * ms + tw], m1 = m[(1 * 4 + e) * ms + tw];
            const T m2 = m[(2 * 4 + e) * ms + tw], m3 = m[(3 * 4 + e) * ms + tw];
            q[0][e] = m0 + m1 + m2;
            q[1][e] = m1 - m2 - m3;
          }
          const int64_t ow = 2 * tw;
          const bool two_cols = ow + 1 < g.Wout;
          for (int i = 0; i < (two_rows ? 2 : 1); ++i) {  // (A^T M) A
            T* row = y + (oh + i) * g.Wout + ow;
            row[0] = q[i][0] + q[i][1] + q[i][2] + bk;
            if (two_cols) row[1] = q[i][1] - q[i][2] - q[i][3] + bk;
          }
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
  const T lim = sizeof(T) == sizeof(float) ? T(1e15) : T(1e150);
  int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) bad += !(std::abs(p[i]) <= lim);  // NaN fails the comparison
  return bad == 0;
}

template <typename T>
void winograd_forward(const Conv2dDesc& d, const T* x, const T* w, const T* bias, T* y, void* workspace) {
  T* U = static_cast<T*>(workspace);
  transform_weights(d, w, false, U);
  run(forward_geom(d), x, U, false, bias, y, U + u_elems(d));
}

template <typename T>
void winograd_backward_input(const Conv2dDesc& d, const T* dy, const T* w, T* dx, void* workspace) {
  T* U = static_cast<T*>(workspace);
  transform_weights(d, w, true, U);
  run(backward_geom(d), dy, U, true, static_cast<const T*>(nullptr), dx, U + u_elems(d));
}

#define KILN_INSTANTIATE_WINOGRAD(T)                                                              \
  template bool winograd_values_in_range<T>(const T*, int64_t);                                   \
  template void winograd_forward<T>(const Conv2dDesc&, const T*, const T*, const T*, T*, void*); \
  template void winograd_backward_input<T>(const Conv2dDesc&, const T*, const T*, T*, void*);
KILN_INSTANTIATE_WINOGRAD(float)
KILN_INSTANTIATE_WINOGRAD(double)
#undef KILN_INSTANTIATE_WINOGRAD

}  // namespace kiln::cpu
