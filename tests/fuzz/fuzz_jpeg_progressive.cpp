// libFuzzer target: kiln's own progressive JPEG decoder (data/jpeg_progressive.h) called directly.
// Input: one option byte, then the file. Option bits: 0 scale 1/8 (else 1/4), 1 luma only (else
// RGB), 2 a window (the middle of the output). The decoder must never crash, and whatever it
// decodes must have the promised size and equal TurboJPEG's scaled decode (decode_image_bytes with
// the fast paths off) inside the window; a file it accepts must be one TurboJPEG accepts.
#include <cstdint>
#include <cstring>

#include "data/decode.h"
#include "data/jpeg_progressive.h"
#include "fuzz/fuzz_support.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  ++data;
  --size;
  const int denom = (flags & 1) ? 8 : 4, channels = (flags & 2) ? 1 : 3;
  int w = 0, h = 0;
  // The header's size, as decode_jpeg checks it against its pixel limit before this decoder runs.
  if (!jpeg_probe_size(data, size, false, &w, &h) || (uint64_t)w * h > (1u << 22)) return 0;
  const int sw = (w + denom - 1) / denom, sh = (h + denom - 1) / denom;
  const int roi[4] = {sw / 4, sh / 4, sw - sw / 4, sh - sh / 4};
  const bool window = flags & 4;
  Image out;
  if (!decode_jpeg_progressive_scaled(data, size, denom, channels, &out, window ? roi : nullptr)) return 0;
  FUZZ_ASSERT(out.w == sw && out.h == sh && out.c == channels);
  FUZZ_ASSERT(out.px.size() == (size_t)sw * sh * channels);
  DecodeOptions opt;
  opt.fast_paths = false;
  opt.apply_exif = false;
  opt.gray = channels == 1;
  opt.min_w = sw;
  opt.min_h = sh;
  Image ref;
  try {
    ref = decode_image_bytes(data, size, "fuzz.jpg", opt);
  } catch (const Error& e) {
    std::fprintf(stderr, "the progressive decoder decoded a file TurboJPEG rejects: %s\n", e.what());
    std::abort();
  }
  FUZZ_ASSERT(ref.w == sw && ref.h == sh && ref.c == channels);
  int x0 = 0, y0 = 0, x1 = sw, y1 = sh;
  if (window) x0 = roi[0], y0 = roi[1], x1 = roi[2], y1 = roi[3];
  for (int y = y0; y < y1; ++y)
    FUZZ_ASSERT(std::memcmp(out.row(y) + (size_t)x0 * channels, ref.row(y) + (size_t)x0 * channels,
                            (size_t)(x1 - x0) * channels) == 0);
  return 0;
}
