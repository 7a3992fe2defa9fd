// libFuzzer target: the JPEG front end of decode_image_bytes (data/decode_jpeg.cpp: TurboJPEG,
// EXIF orientation, DCT scaling, the windowed libjpeg path and kiln's progressive decoder).
// Input: one option byte, then the file. Option bits: 0-1 the DCT scale (1, 1/2, 1/4, 1/8),
// 2 gray, 3 apply EXIF, 4 fast paths off, 5 a window (the middle of the output).
// With the fast paths on, the result must equal TurboJPEG's whole decode (fast paths off) inside
// the window, and a file the fast paths accept must be one TurboJPEG accepts: the contract of
// DecodeOptions::fast_paths. kiln::Error is the expected outcome for bad input; any other exception,
// a sanitizer report or a broken invariant is a finding.
#include <cstdint>
#include <cstring>

#include "data/decode.h"
#include "fuzz/fuzz_support.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  ++data;
  --size;
  DecodeOptions opt;
  opt.max_pixels = 1 << 22;  // bounds the fuzzer's memory; the guard itself is tested in the unit suite
  opt.gray = flags & 4;
  opt.apply_exif = flags & 8;
  opt.fast_paths = !(flags & 16);
  const int denom = 1 << (flags & 3);
  int w = 0, h = 0;
  const bool probed = jpeg_probe_size(data, size, opt.apply_exif, &w, &h);
  if (probed && denom > 1) {
    opt.min_w = (w + denom - 1) / denom;
    opt.min_h = (h + denom - 1) / denom;
  }
  const int sw = (w + denom - 1) / denom, sh = (h + denom - 1) / denom;
  const bool window = (flags & 32) && probed;
  if (window) {
    opt.roi_w = sw;
    opt.roi_h = sh;
    opt.roi_x0 = sw / 4;
    opt.roi_y0 = sh / 4;
    opt.roi_x1 = sw - sw / 4;
    opt.roi_y1 = sh - sh / 4;
  }
  Image im;
  try {
    im = decode_image_bytes(data, size, "fuzz.jpg", opt);
  } catch (const Error&) {
    return 0;
  }
  FUZZ_ASSERT(im.w > 0 && im.h > 0 && (im.c == 1 || im.c == 3));
  FUZZ_ASSERT(im.px.size() == (size_t)im.w * im.h * im.c);
  if (probed) FUZZ_ASSERT(im.file_w > 0 && im.file_h > 0);
  if (!opt.fast_paths) return 0;
  DecodeOptions whole = opt;
  whole.fast_paths = false;
  Image ref;
  try {
    ref = decode_image_bytes(data, size, "fuzz.jpg", whole);
  } catch (const Error& e) {
    std::fprintf(stderr, "the fast paths decoded a file TurboJPEG rejects: %s\n", e.what());
    std::abort();
  }
  FUZZ_ASSERT(ref.w == im.w && ref.h == im.h && ref.c == im.c);
  int x0 = 0, y0 = 0, x1 = im.w, y1 = im.h;
  if (window && im.w == sw && im.h == sh) x0 = opt.roi_x0, y0 = opt.roi_y0, x1 = opt.roi_x1, y1 = opt.roi_y1;
  for (int y = y0; y < y1; ++y)
    FUZZ_ASSERT(std::memcmp(im.row(y) + (size_t)x0 * im.c, ref.row(y) + (size_t)x0 * im.c, (size_t)(x1 - x0) * im.c) == 0);
  return 0;
}
