// PNG, BMP, GIF (first frame), TGA through stb_image, compiled here with static linkage so no
// other translation unit sees its symbols. Conversion to RGB follows PIL's convert('RGB'): gray
// is replicated, alpha is dropped (not composited), palettes are expanded, 16-bit samples keep
// their high byte. Must not decode JPEG (decode_jpeg.cpp does).
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_ONLY_GIF
#define STBI_ONLY_TGA
#define STBI_NO_STDIO
#define STBI_MAX_DIMENSIONS (1 << 20)
// Zeroed allocations: stb's TGA reader ignores a short read of the pixel data, so a file that ends early left
// the rest of the image uninitialized (a different picture on every decode; found by fuzz_jpeg). Pixels past
// the end of a file now read as 0, the value stb's reader returns there.
#define STBI_MALLOC(sz) std::calloc(1, (sz))
#define STBI_REALLOC(p, newsz) std::realloc((p), (newsz))
#define STBI_FREE(p) std::free(p)
#include <cstdlib>
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#include <cstring>

#include "data/decode.h"

namespace kiln {
namespace {

const char* sniff_format(const uint8_t* d, size_t n) {
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return "PNG";
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return "BMP";
  if (n >= 6 && (std::memcmp(d, "GIF87a", 6) == 0 || std::memcmp(d, "GIF89a", 6) == 0)) return "GIF";
  return "TGA";  // TGA has no magic number: whatever is left is tried as TGA
}

// PIL-style mode name from what stb reports, refined by the PNG header (palette, bit depth).
std::string mode_name(const char* fmt, const uint8_t* d, size_t n, int comp, bool is16) {
  if (std::strcmp(fmt, "PNG") == 0 && n >= 26 && d[25] == 3) return "P";
  if (std::strcmp(fmt, "GIF") == 0) return "P";
  const char* base = comp == 1 ? "L" : comp == 2 ? "LA" : comp == 3 ? "RGB" : "RGBA";
  return is16 ? str_cat(base, ";16") : std::string(base);
}

// Width and height as declared in the header (PNG IHDR, GIF screen, BMP info header), read before
// stb so a bomb is reported as one (stb's own "too large" gets lost when it falls through formats).
bool declared_size(const char* fmt, const uint8_t* d, size_t n, uint64_t* w, uint64_t* h) {
  auto be32 = [&](size_t o) { return ((uint64_t)d[o] << 24) | ((uint64_t)d[o + 1] << 16) | ((uint64_t)d[o + 2] << 8) | d[o + 3]; };
  auto le32 = [&](size_t o) { return (int64_t)(int32_t)((uint32_t)d[o] | ((uint32_t)d[o + 1] << 8) | ((uint32_t)d[o + 2] << 16) | ((uint32_t)d[o + 3] << 24)); };
  if (std::strcmp(fmt, "PNG") == 0 && n >= 24) {
    *w = be32(16);
    *h = be32(20);
    return true;
  }
  if (std::strcmp(fmt, "GIF") == 0 && n >= 10) {
    *w = (uint64_t)(d[6] | (d[7] << 8));
    *h = (uint64_t)(d[8] | (d[9] << 8));
    return true;
  }
  if (std::strcmp(fmt, "BMP") == 0 && n >= 26) {
    int64_t bw = le32(18), bh = le32(22);
    *w = (uint64_t)(bw < 0 ? -bw : bw);
    *h = (uint64_t)(bh < 0 ? -bh : bh);
    return true;
  }
  return false;
}

std::string stb_chunk_name(const std::string& type) {  // 'IDAT', or its bytes in hex when not printable
  for (char c : type)
    if (c < 0x20 || c > 0x7e) {
      std::string hex = "0x";
      const char* digits = "0123456789abcdef";
      for (unsigned char b : type) hex += {digits[b >> 4], digits[b & 15]};
      return hex;
    }
  return "'" + type + "'";
}

// A PNG chunk that claims more bytes than the file has left is corrupt. stb_image grows its IDAT buffer to the
// claimed length before reading it, so a 100-byte file could make it allocate 2 GiB (found by fuzz_image).
void check_png_chunks(const uint8_t* d, size_t n, const std::string& name) {
  size_t pos = 8;
  while (pos + 8 <= n) {
    const uint64_t len = ((uint64_t)d[pos] << 24) | ((uint64_t)d[pos + 1] << 16) | ((uint64_t)d[pos + 2] << 8) | d[pos + 3];
    const std::string type(reinterpret_cast<const char*>(d + pos + 4), 4);
    const size_t left = n - pos - 8;
    if (len > left)
      throw DecodeError(name, str_cat("corrupt or truncated PNG (chunk ", stb_chunk_name(type), " at byte ", pos,
                                      " claims ", len, " bytes, the file has ", left, " left)"));
    if (type == "IEND") return;
    pos += 8 + (size_t)len + 4;  // length, type, data, CRC
  }
}

// A TGA whose header promises more pixel bytes than the file can hold is truncated: uncompressed, every pixel
// needs its bytes; run-length encoded, every 128 pixels need at least a packet byte and one pixel. stb_image
// reads past the end as zeros and decodes it anyway (after allocating the whole picture: a few bytes of
// garbage, which any file without another format's magic number is tried as, made it convert megapixels).
void check_tga_size(const uint8_t* d, size_t n, const std::string& name) {
  if (n < 18) return;  // stb's header check reports it
  const int type = d[2];
  const uint64_t idlen = d[0], cmap_len = d[1] ? (uint64_t)(d[5] | (d[6] << 8)) : 0, cmap_bits = d[7];
  const uint64_t w = (uint64_t)(d[12] | (d[13] << 8)), h = (uint64_t)(d[14] | (d[15] << 8));
  const uint64_t pixel_bytes = ((uint64_t)d[16] + 7) / 8;
  const uint64_t head = 18 + idlen + cmap_len * ((cmap_bits + 7) / 8);
  uint64_t need = 0;
  if (type >= 1 && type <= 3) need = head + w * h * pixel_bytes;
  else if (type >= 9 && type <= 11) need = head + (w * h + 127) / 128 * (1 + pixel_bytes);
  else return;  // not a TGA image type stb reads: its header check reports it
  if (need > n)
    throw DecodeError(name, str_cat("truncated or not an image (as TGA: ", w, "x", h, " ", type >= 9 ? "run-length " : "",
                                    "pixels need at least ", need, " bytes, the file has ", n,
                                    "; not JPEG, PNG, BMP or GIF either)"));
}

}  // namespace

Image decode_stb(const uint8_t* data, size_t n, const std::string& name, const DecodeOptions& opt) {
  const char* fmt = sniff_format(data, n);
  if (n > (size_t)0x7fffffff) throw DecodeError(name, "file too large for the decoder");
  if (std::strcmp(fmt, "PNG") == 0) check_png_chunks(data, n, name);
  if (std::strcmp(fmt, "TGA") == 0) check_tga_size(data, n, name);
  uint64_t dw = 0, dh = 0;
  if (declared_size(fmt, data, n, &dw, &dh) && dw * dh > opt.max_pixels)
    throw DecodeError(name, str_cat("declared size ", dw, "x", dh, " exceeds the pixel limit ", opt.max_pixels,
                                    " (decompression bomb?)"));
  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_memory(data, (int)n, &w, &h, &comp)) {
    const char* why = stbi_failure_reason();
    if (std::strcmp(fmt, "TGA") == 0)
      throw DecodeError(name, "not an image (unknown format: not JPEG, PNG, BMP, GIF or TGA)");
    throw DecodeError(name, str_cat("bad ", fmt, " header (", why ? why : "unknown", ")"));
  }
  if (w <= 0 || h <= 0) throw DecodeError(name, str_cat(fmt, " with zero width or height"));
  if ((uint64_t)w * (uint64_t)h > opt.max_pixels)
    throw DecodeError(name, str_cat("declared size ", w, "x", h, " exceeds the pixel limit ", opt.max_pixels,
                                    " (decompression bomb?)"));
  bool is16 = stbi_is_16_bit_from_memory(data, (int)n) != 0;
  // Gray sources decode straight to one channel when gray output is asked for; color sources go
  // through RGB so the luma uses PIL's weights, not stb's.
  int want = (opt.gray && comp <= 2) ? 1 : 3;
  int x = 0, y = 0, got = 0;
  stbi_uc* px = stbi_load_from_memory(data, (int)n, &x, &y, &got, want);
  if (!px) {
    const char* why = stbi_failure_reason();
    throw DecodeError(name, str_cat("corrupt or truncated ", fmt, " (", why ? why : "unknown", ")"));
  }
  Image im;
  im.w = x;
  im.h = y;
  im.c = want;
  im.file_w = x;
  im.file_h = y;
  im.format = fmt;
  im.mode = mode_name(fmt, data, n, comp, is16);
  im.px.assign(px, px + (size_t)x * y * want);
  stbi_image_free(px);
  if (opt.gray && im.c == 3) rgb_to_gray_inplace(im);
  return im;
}

}  // namespace kiln
