// kiln's own decoder for progressive JPEGs at the 1/4 and 1/8 DCT scales, the scales a photo
// takes on its way to a 224-pixel crop. libjpeg-turbo 2.1 decodes a progressive file by keeping
// every coefficient of every scan and is ~5x slower on such files than on baseline ones; at 1/8
// scale the luma output needs only the DC scans, so this decoder skips the AC scans it does not
// need and decodes the rest into a coefficient buffer it reuses from image to image.
//
// Output is byte-identical to TurboJPEG's scaled decode (accurate integer IDCT, default flags):
// the reduced IDCTs, the range limiting, the chroma scaling choice, the h2v1 fancy upsampling of
// 4:2:2 chroma and the YCbCr -> RGB tables
// follow libjpeg's arithmetic, and tests compare the two on every file they make.
//
// Must not throw or guess: anything outside what it handles (baseline or arithmetic coding,
// 12-bit samples, RGB/CMYK/YCCK colour, subsampling other than 4:4:4, 4:2:2 and 4:2:0, a progression
// that leaves coefficients unrefined (libjpeg would smooth blocks), a truncated or corrupt scan,
// a missing EOI) returns false, and the caller decodes the file with TurboJPEG, which reports
// errors and warnings as before.
#pragma once
#include <cstddef>
#include <cstdint>

#include "data/image.h"

namespace kiln {

// denom: 4 or 8 (output ceil(w / denom) x ceil(h / denom)); channels: 3 (RGB) or 1 (luma).
// roi: {x0, y0, x1, y1} in output pixels, or null: only those pixels are computed (the entropy
// decoding is the same; the IDCT and colour conversion skip the rest), the others are 0.
// On success fills out->w, h, c, px (HWC) and returns true; on false *out is unspecified.
bool decode_jpeg_progressive_scaled(const uint8_t* data, size_t n, int denom, int channels, Image* out,
                                    const int* roi = nullptr);

// True when the bytes hold a progressive (SOF2) frame marker before the first scan.
bool jpeg_is_progressive(const uint8_t* data, size_t n);

}  // namespace kiln
