// PNG through libpng, for segmentation: masks read as 8-bit class indices (gray values, or a
// palette PNG's palette *indices*, never its colours, which is what stb_image would give), and
// PNG writing (8-bit gray, palette with a given colour table, RGB) for predicted masks and
// overlays. Must not resize, convert colours to classes or know what a class is; every failure
// is a DecodeError (reading) or kiln::Error (writing) naming the file, never a crash.
//
// Masks accepted:
//   8-bit gray                   -> the gray value
//   1/2/4-bit gray               -> the raw value (0..2^bits-1), not scaled to 0..255
//   palette, 1/2/4/8-bit         -> the palette index (tRNS transparency ignored)
//   16-bit gray, every value < 256 -> that value (some tools write class maps at 16 bits);
//                                  a value >= 256 is an error naming it
// Refused with an error that names the file and what it holds: RGB, RGBA, gray+alpha (a colour
// image is not a class-index mask: convert it to a palette or gray PNG).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/image.h"

namespace kiln {

struct PngMaskOptions {
  uint64_t max_pixels = 178956970;  // decompression-bomb guard on the declared width * height
  uint64_t max_file_bytes = 512ull << 20;
};

// A mask: Image with c = 1, px = class indices; mode "L" (gray, any depth), "P" (palette) or
// "I;16" (16-bit gray); format "PNG"; file_w/file_h = w/h. name is only used in messages.
Image read_png_mask_bytes(const uint8_t* data, size_t n, const std::string& name, const PngMaskOptions& opt = {});
Image read_png_mask(const std::string& path, const PngMaskOptions& opt = {});

// True when the bytes start with the PNG signature.
bool is_png_bytes(const uint8_t* data, size_t n);

using PngColor = std::array<uint8_t, 3>;

// Encoders: im.c = 1 (8-bit gray), 3 (RGB); encode_png_palette: im.c = 1 holding indices, each
// < palette.size() <= 256 (checked). name is only used in messages. Throw kiln::Error.
std::string encode_png(const Image& im, const std::string& name = "png");
std::string encode_png_palette(const Image& im, const std::vector<PngColor>& palette, const std::string& name = "png");
// The same, written atomically (temporary + rename) to path.
void write_png(const std::string& path, const Image& im);
void write_png_palette(const std::string& path, const Image& im, const std::vector<PngColor>& palette);

}  // namespace kiln
