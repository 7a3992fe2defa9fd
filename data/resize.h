// Separable antialiased bilinear resampling of u8 interleaved images, with the arithmetic of PIL's
// Image.resize(BILINEAR): a triangle filter whose support grows with the downscale factor, taps
// normalized to sum 1, 22-bit fixed-point weights, horizontal pass then vertical pass, each
// rounded to u8. Must not know about files, crops policies or normalization.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

// The region of the source that maps onto the output, in source pixel units (may be fractional),
// and the window of source pixels the filter may read (integers, within the image). For a plain
// resize: box = clamp = the whole image. For crop-then-resize: both are the crop rectangle, so the
// filter never reads outside it (as after PIL's Image.crop).
struct ResampleBox {
  double x0, y0, x1, y1;
  int cx0, cy0, cx1, cy1;
};

// src: (sh, sw, c) with row stride src_stride bytes; dst: (dh, dw, c) contiguous.
// c in {1, 3, 4}. Throws kiln::Error on empty sizes or a box outside the image.
void resample_bilinear_u8(const uint8_t* src, int sw, int sh, int c, size_t src_stride, const ResampleBox& box,
                          uint8_t* dst, int dw, int dh);

// The source pixels resample_bilinear_u8 reads for this box and output size: [x0, x1) x [y0, y1)
// (a decoder told so may skip the rest).
void resample_source_window(const ResampleBox& box, int dw, int dh, int* x0, int* y0, int* x1, int* y1);

// Convenience: whole image to (dw, dh).
void resize_bilinear_u8(const uint8_t* src, int sw, int sh, int c, uint8_t* dst, int dw, int dh);

}  // namespace kiln
