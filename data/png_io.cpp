// libpng glue for data/png_io.h. libpng reports errors by calling our error callback, which must
// not return: it records the message and longjmps back to the setjmp of the phase that called
// libpng. Each phase (header, pixels, write) is a function whose frame holds no C++ object with a
// destructor after its setjmp, and libpng's own frames are C, so the jump skips no destructor;
// buffers are owned by the callers, the png structs by a guard that frees them on every path, and
// the caller turns the recorded message into a DecodeError / Error naming the file. Callbacks
// never throw (an exception through libpng's C frames is undefined).
#include "data/png_io.h"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "data/decode.h"
#include "engine/io/atomic_file.h"

namespace kiln {
namespace {

struct PngJump {
  std::jmp_buf jb;
  char msg[200];
};

extern "C" void png_on_error(png_structp png, png_const_charp m) {
  PngJump* j = static_cast<PngJump*>(png_get_error_ptr(png));
  std::snprintf(j->msg, sizeof j->msg, "%s", m ? m : "libpng error");
  std::longjmp(j->jb, 1);
}

extern "C" void png_on_warning(png_structp, png_const_charp) {}  // benign (bad ancillary chunks, ...)

struct MemReader {
  const uint8_t* data;
  size_t n, pos;
};

extern "C" void png_read_mem(png_structp png, png_bytep out, png_size_t len) {
  MemReader* r = static_cast<MemReader*>(png_get_io_ptr(png));
  if (len > r->n - r->pos) png_error(png, "truncated file (data ends early)");
  std::memcpy(out, r->data + r->pos, len);
  r->pos += len;
}

struct MemWriter {  // malloc'd, so growing it cannot throw through libpng
  uint8_t* data;
  size_t n, cap;
};

extern "C" void png_write_mem(png_structp png, png_bytep in, png_size_t len) {
  MemWriter* w = static_cast<MemWriter*>(png_get_io_ptr(png));
  if (len > w->cap - w->n) {
    size_t cap = w->cap ? w->cap : 4096;
    while (cap - w->n < len) cap *= 2;
    void* p = std::realloc(w->data, cap);
    if (!p) png_error(png, "out of memory");
    w->data = static_cast<uint8_t*>(p);
    w->cap = cap;
  }
  std::memcpy(w->data + w->n, in, len);
  w->n += len;
}

extern "C" void png_flush_mem(png_structp) {}

struct ReadGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~ReadGuard() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

struct Header {
  png_uint_32 w, h;
  int depth, color, interlace;
};

// Phase 1: signature, IHDR and the chunks before the pixels; sets the transformations. False with
// j->msg set on a libpng error.
bool read_header(png_structp png, png_infop info, PngJump* j, MemReader* r, uint64_t max_pixels, Header* hd) {
  if (setjmp(j->jb)) return false;
  png_set_read_fn(png, r, png_read_mem);
  png_set_user_limits(png, 1u << 24, 1u << 24);
  png_set_chunk_malloc_max(png, 64u << 20);  // metadata chunks (text, ICC); pixel rows are ours
  png_read_info(png, info);
  png_get_IHDR(png, info, &hd->w, &hd->h, &hd->depth, &hd->color, &hd->interlace, nullptr, nullptr);
  if ((uint64_t)hd->w * hd->h > max_pixels) {
    std::snprintf(j->msg, sizeof j->msg, "%ux%u pixels, over the limit of %llu (decompression bomb guard)",
                  (unsigned)hd->w, (unsigned)hd->h, (unsigned long long)max_pixels);
    return false;
  }
  if ((hd->color == PNG_COLOR_TYPE_GRAY || hd->color == PNG_COLOR_TYPE_PALETTE) && hd->depth < 8)
    png_set_packing(png);  // one byte per pixel, values unscaled
  if (hd->interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
  png_read_update_info(png, info);
  return true;
}

// Phase 2: the pixels into rows the caller allocated.
bool read_pixels(png_structp png, png_infop info, PngJump* j, png_bytepp rows) {
  if (setjmp(j->jb)) return false;
  png_read_image(png, rows);
  png_read_end(png, info);
  return true;
}

const char* color_name(int color, int depth, char* buf, size_t n) {
  const char* what = color == PNG_COLOR_TYPE_RGB          ? "an RGB image"
                     : color == PNG_COLOR_TYPE_RGB_ALPHA  ? "an RGBA image"
                     : color == PNG_COLOR_TYPE_GRAY_ALPHA ? "a gray+alpha image"
                                                          : "an image of unknown colour type";
  std::snprintf(buf, n, "%s (%d bits per channel)", what, depth);
  return buf;
}

}  // namespace

bool is_png_bytes(const uint8_t* data, size_t n) { return n >= 8 && png_sig_cmp(data, 0, 8) == 0; }

Image read_png_mask_bytes(const uint8_t* data, size_t n, const std::string& name, const PngMaskOptions& opt) {
  if (n == 0 || data == nullptr) throw DecodeError(name, "empty file");
  if (n > opt.max_file_bytes)
    throw DecodeError(name, str_cat("file is ", n, " bytes, over the limit of ", opt.max_file_bytes));
  if (!is_png_bytes(data, n)) throw DecodeError(name, "not a PNG file (masks must be PNG)");
  PngJump j;
  j.msg[0] = 0;
  ReadGuard g;
  g.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &j, png_on_error, png_on_warning);
  if (!g.png) throw DecodeError(name, "libpng: cannot create a read struct");
  g.info = png_create_info_struct(g.png);
  if (!g.info) throw DecodeError(name, "libpng: cannot create an info struct");
  MemReader r{data, n, 0};
  Header hd{};
  if (!read_header(g.png, g.info, &j, &r, opt.max_pixels, &hd)) throw DecodeError(name, str_cat("PNG: ", j.msg));
  const bool gray = hd.color == PNG_COLOR_TYPE_GRAY, pal = hd.color == PNG_COLOR_TYPE_PALETTE;
  if (!gray && !pal) {
    char buf[96];
    throw DecodeError(name, str_cat("mask PNG holds ", color_name(hd.color, hd.depth, buf, sizeof buf),
                                    "; a mask must be a gray or palette PNG of class indices"));
  }
  const size_t w = hd.w, h = hd.h, bpp = (gray && hd.depth == 16) ? 2 : 1;
  const size_t rowbytes = png_get_rowbytes(g.png, g.info);
  if (rowbytes != w * bpp) throw DecodeError(name, str_cat("PNG: unexpected row size ", rowbytes, " for width ", w));
  std::vector<uint8_t> buf(w * h * bpp);
  std::vector<png_bytep> rows(h);
  for (size_t y = 0; y < h; ++y) rows[y] = buf.data() + y * rowbytes;
  if (!read_pixels(g.png, g.info, &j, rows.data())) throw DecodeError(name, str_cat("PNG: ", j.msg));
  Image im;
  im.w = im.file_w = (int)w;
  im.h = im.file_h = (int)h;
  im.c = 1;
  im.format = "PNG";
  im.mode = pal ? "P" : bpp == 2 ? "I;16" : "L";
  if (bpp == 1) {
    im.px = std::move(buf);
    return im;
  }
  im.px.resize(w * h);
  for (size_t i = 0; i < w * h; ++i) {  // PNG samples are big-endian
    const unsigned v = (unsigned)buf[2 * i] << 8 | buf[2 * i + 1];
    if (v > 255)
      throw DecodeError(name, str_cat("16-bit gray mask holds the value ", v, " at (x ", i % w, ", y ", i / w,
                                      "); class indices must be < 256 (255 = ignore)"));
    im.px[i] = (uint8_t)v;
  }
  return im;
}

Image read_png_mask(const std::string& path, const PngMaskOptions& opt) {
  std::string bytes = read_file_bytes(path, opt.max_file_bytes);
  return read_png_mask_bytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, opt);
}

namespace {

struct WriteGuard {
  png_structp png = nullptr;
  png_infop info = nullptr;
  MemWriter out{nullptr, 0, 0};
  ~WriteGuard() {
    png_destroy_write_struct(&png, info ? &info : nullptr);
    std::free(out.data);
  }
};

bool write_all(png_structp png, png_infop info, PngJump* j, MemWriter* out, const Image* im, int color,
               const png_color* plte, int nplte, png_bytepp rows) {
  if (setjmp(j->jb)) return false;
  png_set_write_fn(png, out, png_write_mem, png_flush_mem);
  png_set_IHDR(png, info, (png_uint_32)im->w, (png_uint_32)im->h, 8, color, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (plte) png_set_PLTE(png, info, plte, nplte);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, info);
  return true;
}

std::string encode(const Image& im, const std::vector<PngColor>* palette, const std::string& name) {
  KILN_CHECK(im.w > 0 && im.h > 0, "encode PNG ", name, ": empty image (", im.w, "x", im.h, ")");
  KILN_CHECK(im.c == 1 || (im.c == 3 && !palette), "encode PNG ", name, ": ",
             palette ? "a palette PNG needs 1 channel of indices" : "need 1 (gray) or 3 (RGB) channels", ", got ",
             im.c);
  KILN_CHECK(im.px.size() == (size_t)im.w * im.h * im.c, "encode PNG ", name, ": ", im.px.size(),
             " bytes for ", im.w, "x", im.h, "x", im.c);
  std::vector<png_color> plte;
  if (palette) {
    KILN_CHECK(!palette->empty() && palette->size() <= 256, "encode PNG ", name, ": a palette holds 1..256 colours, got ",
               palette->size());
    for (size_t i = 0; i < im.px.size(); ++i)
      KILN_CHECK(im.px[i] < palette->size(), "encode PNG ", name, ": index ", (int)im.px[i], " at pixel ", i,
                 " is past the palette's ", palette->size(), " colours");
    for (const PngColor& c : *palette) plte.push_back(png_color{c[0], c[1], c[2]});
  }
  PngJump j;
  j.msg[0] = 0;
  WriteGuard g;
  g.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &j, png_on_error, png_on_warning);
  KILN_CHECK(g.png, "encode PNG ", name, ": libpng cannot create a write struct");
  g.info = png_create_info_struct(g.png);
  KILN_CHECK(g.info, "encode PNG ", name, ": libpng cannot create an info struct");
  std::vector<png_bytep> rows((size_t)im.h);
  for (int y = 0; y < im.h; ++y) rows[(size_t)y] = const_cast<png_bytep>(im.row(y));
  const int color = palette ? PNG_COLOR_TYPE_PALETTE : im.c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB;
  bool ok = write_all(g.png, g.info, &j, &g.out, &im, color, palette ? plte.data() : nullptr, (int)plte.size(),
                      rows.data());
  KILN_CHECK(ok, "encode PNG ", name, ": libpng: ", j.msg);
  return std::string(reinterpret_cast<const char*>(g.out.data), g.out.n);
}

}  // namespace

std::string encode_png(const Image& im, const std::string& name) { return encode(im, nullptr, name); }

std::string encode_png_palette(const Image& im, const std::vector<PngColor>& palette, const std::string& name) {
  return encode(im, &palette, name);
}

void write_png(const std::string& path, const Image& im) {
  std::string b = encode_png(im, path);
  atomic_write_file(path, b.data(), b.size());
}

void write_png_palette(const std::string& path, const Image& im, const std::vector<PngColor>& palette) {
  std::string b = encode_png_palette(im, palette, path);
  atomic_write_file(path, b.data(), b.size());
}

}  // namespace kiln
