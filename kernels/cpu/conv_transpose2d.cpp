// conv_transpose2d forward / backward on the CPU (see conv_transpose2d.h).
//
// One image at a time; the column matrix col: (K*R*S, H*W) is the im2col layout of the OUTPUT y
// (N, K, OH, OW) seen as a conv2d input whose conv2d output is x's (H, W) plane. Group g owns rows
// [g*Kg*R*S, (g+1)*Kg*R*S) of col, channels [g*Cg, (g+1)*Cg) of x and w, w_g: (Cg, Kg*R*S).
//   forward         col_g = w_g^T @ x_g (Cg, H*W)   then col2im -> y (+ bias)
//   backward_input  col = im2col(dy);  dx_g = w_g @ col_g
//   backward_weight col = im2col(dy);  dw_g += x_g @ col_g^T   summed over images
// Data movement runs in OpenMP loops over channels; the GEMMs use OpenBLAS's own threads, never
// from inside an OpenMP region.
#include "kernels/cpu/conv_transpose2d.h"

#include <algorithm>

#include "kernels/common/upsample_check.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/im2col.h"

namespace kiln::cpu {

namespace {

// The conv2d geometry that maps an output plane (OH, OW) to an input plane (H, W).
Im2colGeom geom_of(const ConvTranspose2dDesc& d) {
  return Im2colGeom{d.out_h(), d.out_w(), d.R,     d.S,     d.stride_h, d.stride_w,
                    d.pad_h,   d.pad_w,   d.dil_h, d.dil_w, d.H,        d.W};
}

// col (K*R*S, H*W) <- im2col of image n of dy (N, K, OH, OW).
template <typename T>
void im2col_image(const ConvTranspose2dDesc& d, const Im2colGeom& g, const T* dy, int64_t n, T* col) {
  const int64_t HW = d.H * d.W, P = g.H * g.W, RS = d.R * d.S;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < d.K; ++k) im2col_plane(g, dy + (n * d.K + k) * P, col + k * RS * HW, HW);
}

}  // namespace

size_t conv_transpose2d_workspace_bytes(const ConvTranspose2dDesc& d, size_t elem_size) {
  conv_transpose2d_check(d, "conv_transpose2d_workspace_bytes");
  return (size_t)(d.K * d.R * d.S * d.H * d.W) * elem_size;
}

template <typename T>
void conv_transpose2d_forward(const ConvTranspose2dDesc& d, const T* x, const T* w, const T* bias, T* y,
                              void* workspace) {
  conv_transpose2d_check(d, "conv_transpose2d_forward");
  const Im2colGeom geom = geom_of(d);
  const int64_t G = d.groups, Cg = d.C / G, Kg = d.K / G, RS = d.R * d.S, KRSg = Kg * RS, HW = d.H * d.W;
  const int64_t P = geom.H * geom.W;
  T* col = static_cast<T*>(workspace);
  for (int64_t n = 0; n < d.N; ++n) {
    for (int64_t g = 0; g < G; ++g)
      gemm<T>(true, false, KRSg, HW, Cg, T(1), w + g * Cg * KRSg, KRSg, x + (n * d.C + g * Cg) * HW, HW, T(0),
              col + g * KRSg * HW, HW);
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < d.K; ++k) {
      T* dst = y + (n * d.K + k) * P;
      col2im_plane(geom, col + k * RS * HW, HW, dst);
      if (bias)
        for (int64_t i = 0; i < P; ++i) dst[i] += bias[k];
    }
  }
}

template <typename T>
void conv_transpose2d_backward_input(const ConvTranspose2dDesc& d, const T* dy, const T* w, T* dx,
                                     void* workspace) {
  conv_transpose2d_check(d, "conv_transpose2d_backward_input");
  const Im2colGeom geom = geom_of(d);
  const int64_t G = d.groups, Cg = d.C / G, Kg = d.K / G, KRSg = Kg * d.R * d.S, HW = d.H * d.W;
  T* col = static_cast<T*>(workspace);
  for (int64_t n = 0; n < d.N; ++n) {
    im2col_image(d, geom, dy, n, col);
    for (int64_t g = 0; g < G; ++g)
      gemm<T>(false, false, Cg, HW, KRSg, T(1), w + g * Cg * KRSg, KRSg, col + g * KRSg * HW, HW, T(0),
              dx + (n * d.C + g * Cg) * HW, HW);
  }
}

template <typename T>
void conv_transpose2d_backward_weight(const ConvTranspose2dDesc& d, const T* x, const T* dy, T* dw, T* dbias,
                                      void* workspace) {
  conv_transpose2d_check(d, "conv_transpose2d_backward_weight");
  const Im2colGeom geom = geom_of(d);
  const int64_t G = d.groups, Cg = d.C / G, Kg = d.K / G, KRSg = Kg * d.R * d.S, HW = d.H * d.W;
  const int64_t P = geom.H * geom.W;
  T* col = static_cast<T*>(workspace);
  if (d.N == 0) std::fill(dw, dw + d.C * KRSg, T(0));
  for (int64_t n = 0; n < d.N; ++n) {
    im2col_image(d, geom, dy, n, col);
    const T beta = n == 0 ? T(0) : T(1);
    for (int64_t g = 0; g < G; ++g)
      gemm<T>(false, true, Cg, KRSg, HW, T(1), x + (n * d.C + g * Cg) * HW, HW, col + g * KRSg * HW, HW, beta,
              dw + g * Cg * KRSg, KRSg);
  }
  if (dbias) {
    // Summed in double per channel, as conv2d: N*P terms of mixed sign lose digits in float.
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < d.K; ++k) {
      double acc = 0;
      for (int64_t n = 0; n < d.N; ++n) {
        const T* src = dy + (n * d.K + k) * P;
        for (int64_t i = 0; i < P; ++i) acc += (double)src[i];
      }
      dbias[k] = (T)acc;
    }
  }
}

#define KILN_INSTANTIATE_CONVT(T)                                                                         \
  template void conv_transpose2d_forward<T>(const ConvTranspose2dDesc&, const T*, const T*, const T*, T*, void*); \
  template void conv_transpose2d_backward_input<T>(const ConvTranspose2dDesc&, const T*, const T*, T*, void*);   \
  template void conv_transpose2d_backward_weight<T>(const ConvTranspose2dDesc&, const T*, const T*, T*, T*, void*);
KILN_INSTANTIATE_CONVT(float)
KILN_INSTANTIATE_CONVT(double)
#undef KILN_INSTANTIATE_CONVT

}  // namespace kiln::cpu
