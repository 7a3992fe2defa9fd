// im2col / col2im of one (H, W) plane: the data movement that turns a convolution into a GEMM.
// Single-threaded on purpose (callers parallelize over images and channels); no allocation.
// T: float, double; im2col_plane also uint16_t (bf16 bit patterns: the copy moves values unchanged).
#pragma once
#include <cstdint>

namespace kiln::cpu {

// Geometry of one channel plane: input (H, W), window (R, S), output (OH, OW).
struct Im2colGeom {
  int64_t H, W, R, S;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int64_t OH, OW;
};

// x: (H, W) plane. Writes R*S rows, row (r*S + s) at col + (r*S + s)*ld, each OH*OW long:
//   row[oh*OW + ow] = x[oh*sh - ph + r*dh][ow*sw - pw + s*dw]  (0 outside the input).
template <typename T>
void im2col_plane(const Im2colGeom& g, const T* x, T* col, int64_t ld);
// The same for output rows [oh0, oh1) only: row (r*S + s) gets (oh1 - oh0)*OW values, output row oh
// at (oh - oh0)*OW (conv2d unfolds a large plane in chunks that stay in cache).
template <typename T>
void im2col_plane_rows(const Im2colGeom& g, const T* x, T* col, int64_t ld, int64_t oh0, int64_t oh1);

// The adjoint of im2col_plane: dx (H, W) = sum of every row entry back at the input pixel it was
// read from. Overwrites dx (zeroes it first).
template <typename T>
void col2im_plane(const Im2colGeom& g, const T* col, int64_t ld, T* dx);

}  // namespace kiln::cpu
