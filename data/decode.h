// decode_image: file or bytes -> RGB (or L) u8 HWC Image. JPEG through TurboJPEG (with DCT-domain
// downscaling and EXIF orientation), PNG/BMP/GIF/TGA through stb_image. The format is chosen by
// the file's magic bytes, never by its extension. Must not resize, crop or normalize (see
// transforms.h); must never crash on bad input: every failure is a DecodeError.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image.h"

namespace kiln {

struct DecodeOptions {
  // DCT-domain scaled JPEG decode: the largest reduction among 1/2, 1/4, 1/8 that keeps the
  // decoded (and EXIF-rotated) image at least min_w x min_h. 0 = no constraint on that side;
  // both 0 = always full scale. Other formats always decode at full scale.
  int min_w = 0, min_h = 0;
  bool apply_exif = true;  // rotate/flip JPEGs by their EXIF orientation (like ImageOps.exif_transpose)
  bool gray = false;       // output c = 1 (PIL convert('L') weights; a JPEG gives its luma channel)
  // JPEG fast paths, each giving the pixels TurboJPEG gives: progressive files at 1/4 or 1/8
  // scale through kiln's own decoder (data/jpeg_progressive.h), and with a window (below) the
  // other files through libjpeg computing only the window. false: TurboJPEG decodes every JPEG
  // whole.
  bool fast_paths = true;
  // The pixels the caller will read, [roi_x0, roi_x1) x [roi_y0, roi_y1) of the decoded (scaled,
  // oriented) image, and the size of image they refer to; ignored when the decode has another
  // size (roi_w = 0: the whole image). The fast paths leave the pixels outside it 0 (only for
  // EXIF orientation 1).
  int roi_w = 0, roi_h = 0, roi_x0 = 0, roi_y0 = 0, roi_x1 = 0, roi_y1 = 0;
  // Decompression-bomb guards: declared width*height and file size.
  uint64_t max_pixels = 178956970;  // PIL's hard limit (2 x MAX_IMAGE_PIXELS)
  uint64_t max_file_bytes = 512ull << 20;
};

// name is only used in error messages.
Image decode_image_bytes(const uint8_t* data, size_t n, const std::string& name,
                         const DecodeOptions& opt = {});
Image decode_image(const std::string& path, const DecodeOptions& opt = {});

// Reads a whole file (DecodeError naming it when missing, unreadable or over max_bytes).
std::string read_file_bytes(const std::string& path, uint64_t max_bytes);

// The DCT scale decode_jpeg picks: the largest d in {8, 4, 2} with ceil(w / d) >= min_w and
// ceil(h / d) >= min_h, else 1 (both minimums 0: 1).
int jpeg_scale_denom(int w, int h, int min_w, int min_h);

// Per-format decoders (decode_jpeg.cpp, decode_stb.cpp); bytes already checked non-empty.
Image decode_jpeg(const uint8_t* data, size_t n, const std::string& name, const DecodeOptions& opt);
Image decode_stb(const uint8_t* data, size_t n, const std::string& name, const DecodeOptions& opt);

// In-place conversions shared by the decoders (decode.cpp).
void rgb_to_gray_inplace(Image& im);  // PIL's L = (19595 R + 38470 G + 7471 B + 2^15) >> 16

}  // namespace kiln

namespace kiln {
// Reads only the JPEG header (and EXIF orientation when apply_exif): the size decode_image would
// return at full scale. False when the bytes are not a JPEG or the header is unreadable.
bool jpeg_probe_size(const uint8_t* data, size_t n, bool apply_exif, int* w, int* h);
}  // namespace kiln
