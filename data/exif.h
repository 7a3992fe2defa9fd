// JPEG marker scan (EXIF orientation, Adobe APP14) and the 8 EXIF orientations applied to an
// Image. Must not decode pixels: it only reads the segments before the first scan.
#pragma once
#include <cstddef>
#include <cstdint>

#include "data/image.h"

namespace kiln {

struct JpegMarkers {
  int orientation = 1;   // EXIF tag 0x0112, 1..8; 1 when absent or unreadable
  bool adobe = false;    // APP14 "Adobe" segment present
};

// Never throws: malformed segments just leave the defaults.
JpegMarkers scan_jpeg_markers(const uint8_t* data, size_t n);

// True for orientations 5..8, which swap width and height.
inline bool orientation_swaps_axes(int o) { return o >= 5 && o <= 8; }

// Applies EXIF orientation o (as PIL's ImageOps.exif_transpose does) and returns the new image.
Image apply_orientation(const Image& im, int o);

}  // namespace kiln
