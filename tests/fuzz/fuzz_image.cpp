// libFuzzer target: PNG, BMP, GIF and TGA through decode_image_bytes (data/decode_stb.cpp, stb_image
// compiled into kiln, so it is instrumented too). Input: one option byte (bit 0: gray output), then
// the file. kiln::Error is the expected outcome for bad input; any other exception, a sanitizer
// report or an image whose pixel count disagrees with its size is a finding.
#include <cstdint>

#include "data/decode.h"
#include "fuzz/fuzz_support.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  DecodeOptions opt;
  opt.gray = data[0] & 1;
  opt.max_pixels = 1 << 22;  // bounds the fuzzer's memory; the guard itself is tested in the unit suite
  try {
    Image im = decode_image_bytes(data + 1, size - 1, "fuzz.img", opt);
    FUZZ_ASSERT(im.w > 0 && im.h > 0 && im.c == (opt.gray ? 1 : 3));
    FUZZ_ASSERT(im.px.size() == (size_t)im.w * im.h * im.c);
  } catch (const Error&) {
  }
  return 0;
}
