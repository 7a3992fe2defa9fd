// JPEG decode through TurboJPEG (libjpeg-turbo 2.1, the tj2 API): header, bomb check, DCT-domain
// scale choice, CMYK/YCCK -> RGB by kiln (PIL's formula, Adobe-inverted polarity), EXIF
// orientation. Two fast paths come first, each handing back what it does not handle: progressive
// files at 1/4 and 1/8 scale go to kiln's own decoder (jpeg_progressive.h), and with a window the
// others to libjpeg computing only that window. Must not resize beyond the 1/2, 1/4, 1/8 DCT
// reductions.
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE
#include <cstring>
#include <memory>

#include <jpeglib.h>

#include "data/decode.h"
#include "data/exif.h"
#include "data/jpeg_progressive.h"

namespace kiln {
namespace {

// A TurboJPEG decompressor. decode_jpeg takes a fresh one per file (0.6 us): libjpeg keeps the
// Huffman and quantization tables of earlier files in a decompressor (abbreviated-datastream
// semantics), so a file that uses a table it never defines would decode with the previous file's
// table on a reused handle, and its result (picture, warning or error) would depend on what the
// thread decoded before. jpeg_probe_size reads only headers and keeps one per thread.
struct TjHandle {
  tjhandle h = nullptr;
  TjHandle() : h(tjInitDecompress()) {}
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

TjHandle& thread_handle() {
  thread_local TjHandle t;
  return t;
}
tjhandle thread_decompressor() { return thread_handle().h; }

// libjpeg-turbo 2.1 can leave a handle in a bad state after a failed header read (the next
// header then reads as 0x0), so a handle that saw an error is replaced before the next file.
void reset_decompressor() {
  TjHandle& t = thread_handle();
  if (t.h) tjDestroy(t.h);
  t.h = tjInitDecompress();
}

// Whether msg is one of libjpeg's warning texts (the JWRN_ entries of jerror.h, each conversion
// such as %u or %02x standing for one number). TurboJPEG 2.1's warning flag is sticky within a call:
// a fatal error after a warning ("extraneous bytes", then "Invalid component ID 2 in SOS") is also
// reported as TJERR_WARNING, with the fatal error's text and nothing decoded; the text tells them apart.
bool format_matches(const char* fmt, const char* msg) {
  auto is_num = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  while (*fmt) {
    if (*fmt != '%') {
      if (*fmt++ != *msg++) return false;
      continue;
    }
    ++fmt;
    while (*fmt && !((*fmt >= 'a' && *fmt <= 'z') || (*fmt >= 'A' && *fmt <= 'Z'))) ++fmt;  // flags, width
    if (*fmt == 'l') ++fmt;
    if (!*fmt) return false;
    ++fmt;
    if (*msg == '-') ++msg;
    if (!is_num(*msg)) return false;
    while (is_num(*msg)) ++msg;
  }
  return *msg == 0;
}
bool is_libjpeg_warning(const char* msg) {
  struct Message {
    const char* code;
    const char* text;
  };
  static const Message kMessages[] = {
// (Two entries name macros of libjpeg's private jversion.h: empty here.)
#define JVERSION ""
#define JCOPYRIGHT_SHORT ""
#define JMESSAGE(code, string) {#code, string},
#include <jerror.h>
#undef JVERSION
#undef JCOPYRIGHT_SHORT
  };
  for (const Message& m : kMessages)
    if (std::strncmp(m.code, "JWRN_", 5) == 0 && format_matches(m.text, msg)) return true;
  return false;
}

[[noreturn]] void fail(const std::string& name, const std::string& reason) {
  throw DecodeError(name, reason);
}

// (255 - C) (255 - K) / 255 with PIL's rounding (MULDIV255). Values stored in the file are
// Adobe-inverted (PIL assumes so for every CMYK JPEG: rawmode "CMYK;I"), i.e. v = 255 - ink.
inline uint8_t cmyk_channel(uint32_t ink, uint32_t nk) {
  uint32_t t = ink * nk + 128;
  uint32_t m = ((t >> 8) + t) >> 8;
  int v = (int)nk - (int)m;
  return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

const char* colorspace_mode(int cs) {
  switch (cs) {
    case TJCS_GRAY: return "L";
    case TJCS_CMYK: case TJCS_YCCK: return "CMYK";
    default: return "RGB";
  }
}

// libjpeg's own API (the same libjpeg-turbo 2.1 as TurboJPEG, whose tj2 API cannot crop): decodes
// only the columns (jpeg_crop_scanline) and rows (jpeg_skip_scanlines; the entropy decoding still
// runs over the whole file) around the window, with a margin of 16 output pixels so that the
// upsampling next to the cropped edges sees the same neighbours as in a whole decode. Pixels
// outside are 0. False on any libjpeg error or warning: the caller then decodes the whole file
// with TurboJPEG, which reports it.
struct WindowError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  bool warned;
};
void window_error_exit(j_common_ptr c) { std::longjmp(reinterpret_cast<WindowError*>(c->err)->jump, 1); }
void window_emit_message(j_common_ptr c, int level) {
  if (level < 0) reinterpret_cast<WindowError*>(c->err)->warned = true;
}

bool decode_jpeg_window(const uint8_t* data, size_t n, int denom, int channels, const int roi[4], Image* out) {
  constexpr int kMargin = 16;
  jpeg_decompress_struct cinfo;
  WindowError err;
  err.warned = false;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = window_error_exit;
  err.pub.emit_message = window_emit_message;
  jpeg_create_decompress(&cinfo);
  if (setjmp(err.jump)) {  // nothing with a destructor lives in this frame
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_mem_src(&cinfo, data, (unsigned long)n);
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_EXT_RGB;
  cinfo.scale_num = 1;
  cinfo.scale_denom = (unsigned)denom;
  cinfo.dct_method = JDCT_ISLOW;  // TurboJPEG's default flags: accurate IDCT, fancy upsampling
  jpeg_start_decompress(&cinfo);
  const int ow = (int)cinfo.output_width, oh = (int)cinfo.output_height;
  const int x0 = std::max(0, roi[0] - kMargin), x1 = std::min(ow, roi[2] + kMargin);
  const int y0 = std::max(0, roi[1] - kMargin), y1 = std::min(oh, roi[3] + kMargin);
  if (x1 <= x0 || y1 <= y0 || (int)cinfo.output_components != channels) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  JDIMENSION xoff = (JDIMENSION)x0, cw = (JDIMENSION)(x1 - x0);
  jpeg_crop_scanline(&cinfo, &xoff, &cw);  // may widen to iMCU boundaries
  out->w = ow;
  out->h = oh;
  out->c = channels;
  out->px.assign((size_t)ow * oh * channels, 0);
  if (y0 > 0) jpeg_skip_scanlines(&cinfo, (JDIMENSION)y0);
  while ((int)cinfo.output_scanline < y1) {
    JSAMPROW row = out->px.data() + ((size_t)cinfo.output_scanline * ow + xoff) * channels;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  if ((int)cinfo.output_scanline < oh) jpeg_skip_scanlines(&cinfo, (JDIMENSION)(oh - (int)cinfo.output_scanline));
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return !err.warned;
}

}  // namespace

Image decode_jpeg(const uint8_t* data, size_t n, const std::string& name, const DecodeOptions& opt) {
  TjHandle handle;  // fresh: see TjHandle
  tjhandle tj = handle.h;
  if (!tj) throw DecodeError(name, "cannot create a TurboJPEG decompressor");
  int w = 0, h = 0, subsamp = 0, cs = 0;
  if (tjDecompressHeader3(tj, data, (unsigned long)n, &w, &h, &subsamp, &cs) != 0)
    fail(name, str_cat("bad JPEG header (", tjGetErrorStr2(tj), ")"));
  if (w <= 0 || h <= 0) fail(name, "JPEG with zero width or height");
  if ((uint64_t)w * (uint64_t)h > opt.max_pixels)
    fail(name, str_cat("declared size ", w, "x", h, " exceeds the pixel limit ", opt.max_pixels,
                                    " (decompression bomb?)"));
  JpegMarkers mk = opt.apply_exif ? scan_jpeg_markers(data, n) : JpegMarkers{};

  // Largest reduction keeping the output (after rotation) >= the requested minimum.
  int min_w = opt.min_w, min_h = opt.min_h;
  if (orientation_swaps_axes(mk.orientation)) std::swap(min_w, min_h);
  const int denom = jpeg_scale_denom(w, h, min_w, min_h);
  tjscalingfactor sf = {1, denom};
  const int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);

  const bool cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  int pf = cmyk ? TJPF_CMYK : (opt.gray ? TJPF_GRAY : TJPF_RGB);
  const int pc = tjPixelSize[pf];
  std::unique_ptr<uint8_t[]> raw;
  Image im;
  im.file_w = w;
  im.file_h = h;
  im.mode = colorspace_mode(cs);
  im.format = "JPEG";
  im.w = sw;
  im.h = sh;
  im.c = opt.gray ? 1 : 3;
  const bool roi = mk.orientation == 1 && opt.roi_w == sw && opt.roi_h == sh;
  const int window[4] = {opt.roi_x0, opt.roi_y0, opt.roi_x1, opt.roi_y1};
  if (!cmyk && opt.fast_paths) {
    Image fast;
    const bool progressive = jpeg_is_progressive(data, n);
    // Progressive at 1/4 or 1/8: kiln's own decoder. Otherwise, with a window: libjpeg computing
    // only the window's columns and rows. Both hand back what they do not handle.
    bool ok = progressive && (denom == 4 || denom == 8) &&
              decode_jpeg_progressive_scaled(data, n, denom, im.c, &fast, roi ? window : nullptr);
    if (!ok && roi) ok = decode_jpeg_window(data, n, denom, im.c, window, &fast);
    if (ok && fast.w == sw && fast.h == sh) {
      im.px = std::move(fast.px);
      if (mk.orientation != 1) im = apply_orientation(im, mk.orientation);
      return im;
    }
  }
  uint8_t* dst;
  if (cmyk) {
    raw.reset(new (std::nothrow) uint8_t[(size_t)sw * sh * 4]);
    if (!raw) throw DecodeError(name, "out of memory");
    dst = raw.get();
  } else {
    im.px.resize((size_t)sw * sh * pc);
    dst = im.px.data();
  }
  // Default flags: accurate integer IDCT (JDCT_ISLOW) and fancy upsampling, as PIL's libjpeg does.
  int rc = tjDecompress2(tj, data, (unsigned long)n, dst, sw, sw * pc, sh, pf, 0);
  if (rc != 0) {
    const char* msg = tjGetErrorStr2(tj);
    bool warning = tjGetErrorCode(tj) == TJERR_WARNING && is_libjpeg_warning(msg);
    // Harmless warnings (extraneous bytes, ...) leave a complete image; a premature end of data
    // means the file is truncated and the rest of the picture is made up: reject it.
    if (!warning || std::strstr(msg, "Premature end") != nullptr)
      fail(name, str_cat(warning ? "truncated JPEG (" : "corrupt JPEG (", msg, ")"));
  }
  if (cmyk) {
    im.px.resize((size_t)sw * sh * im.c);
    const uint8_t* s = raw.get();
    uint8_t* o = im.px.data();
    for (size_t i = 0, np = (size_t)sw * sh; i < np; ++i, s += 4) {
      uint32_t nk = s[3];  // stored inverted: 255 - K
      uint8_t r = cmyk_channel(255u - s[0], nk), g = cmyk_channel(255u - s[1], nk),
              b = cmyk_channel(255u - s[2], nk);
      if (im.c == 3) {
        o[0] = r; o[1] = g; o[2] = b;
        o += 3;
      } else {
        *o++ = (uint8_t)((19595u * r + 38470u * g + 7471u * b + 0x8000u) >> 16);
      }
    }
  }
  if (mk.orientation != 1) im = apply_orientation(im, mk.orientation);
  return im;
}

}  // namespace kiln

namespace kiln {

int jpeg_scale_denom(int w, int h, int min_w, int min_h) {
  if (min_w <= 0 && min_h <= 0) return 1;
  for (int d : {8, 4, 2})
    if ((w + d - 1) / d >= min_w && (h + d - 1) / d >= min_h) return d;  // libjpeg's ceil(w / d)
  return 1;
}

bool jpeg_probe_size(const uint8_t* data, size_t n, bool apply_exif, int* w, int* h) {
  if (n < 3 || data[0] != 0xFF || data[1] != 0xD8 || data[2] != 0xFF) return false;
  tjhandle tj = thread_decompressor();
  int sub = 0, cs = 0;
  if (!tj) return false;
  if (tjDecompressHeader3(tj, data, (unsigned long)n, w, h, &sub, &cs) != 0) {
    reset_decompressor();
    return false;
  }
  if (apply_exif && orientation_swaps_axes(scan_jpeg_markers(data, n).orientation)) std::swap(*w, *h);
  return *w > 0 && *h > 0;
}

}  // namespace kiln
