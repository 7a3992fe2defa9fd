// libFuzzer target: segmentation masks through read_png_mask_bytes (data/png_io.cpp, libpng with a
// setjmp/longjmp error callback). libpng itself is a system library and not instrumented; kiln's
// glue is (the jump back, the row buffers, the 16-bit check). kiln::Error is the expected outcome
// for bad input; any other exception, a sanitizer report (a leak after a jump included) or a mask
// whose pixel count disagrees with its size is a finding. A mask that reads is written back as a
// palette PNG and read again: the indices must survive.
#include <cstdint>
#include <vector>

#include "data/png_io.h"
#include "fuzz/fuzz_support.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  PngMaskOptions opt;
  opt.max_pixels = 1 << 22;  // bounds the fuzzer's memory; the guard itself is tested in the unit suite
  try {
    Image m = read_png_mask_bytes(data, size, "fuzz.png", opt);
    FUZZ_ASSERT(m.w > 0 && m.h > 0 && m.c == 1);
    FUZZ_ASSERT(m.px.size() == (size_t)m.w * m.h);
    FUZZ_ASSERT(m.mode == "L" || m.mode == "P" || m.mode == "I;16");
    if ((size_t)m.w * m.h <= 4096) {
      std::vector<PngColor> pal(256);
      for (int i = 0; i < 256; ++i) pal[(size_t)i] = {(uint8_t)i, (uint8_t)(255 - i), (uint8_t)(i * 7)};
      std::string again = encode_png_palette(m, pal, "fuzz-out.png");
      Image back = read_png_mask_bytes(reinterpret_cast<const uint8_t*>(again.data()), again.size(), "fuzz-out.png");
      FUZZ_ASSERT(back.px == m.px);
    }
  } catch (const Error&) {
  }
  return 0;
}
