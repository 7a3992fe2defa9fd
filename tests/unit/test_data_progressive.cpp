// kiln's progressive JPEG decoder (data/jpeg_progressive.h) against TurboJPEG: byte-identical
// output at 1/4 and 1/8 scale over files made here with libjpeg (4:4:4, 4:2:0, 4:2:2, gray; sizes;
// restart intervals; spectral-only and successive-approximation scripts; extreme content), the
// files it must hand back (4:4:0, baseline, unrefined coefficients, Adobe RGB, truncated), random
// corruptions (handled => identical, never a crash), and the fused sample pipeline with its ROI;
// then the windowed libjpeg decode of the other files (crop + skip): the window equals TurboJPEG's.
#include <doctest/doctest.h>

#include <cstdio>
#include <jpeglib.h>
#include <turbojpeg.h>

#include <vector>

#include "data/decode.h"
#include "data/jpeg_progressive.h"
#include "data/sample_pipeline.h"
#include "engine/core/philox.h"
#include "engine/core/error.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

namespace {

struct EncodeSpec {
  int quality = 90;
  int luma_h = 1, luma_v = 1;  // chroma is 1x1: 1,1 = 4:4:4, 2,2 = 4:2:0, 2,1 = 4:2:2
  bool progressive = true;
  int restart_interval = 0;                // in MCUs
  std::vector<jpeg_scan_info> script;      // empty: libjpeg's standard progression
  int exif_orientation = 0;                // 0: no EXIF segment
  bool adobe_rgb = false;                  // colour stored as RGB (Adobe transform 0)
};

// libjpeg's (6.2 API) compressor: TurboJPEG's cannot set restart intervals or scan scripts.
std::string encode(const Image& im, const EncodeSpec& s) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = (JDIMENSION)im.w;
  c.image_height = (JDIMENSION)im.h;
  c.input_components = im.c;
  c.in_color_space = im.c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  if (s.adobe_rgb) jpeg_set_colorspace(&c, JCS_RGB);
  jpeg_set_quality(&c, s.quality, TRUE);
  if (im.c == 3) {
    c.comp_info[0].h_samp_factor = s.adobe_rgb ? 1 : s.luma_h;
    c.comp_info[0].v_samp_factor = s.adobe_rgb ? 1 : s.luma_v;
    for (int i = 1; i < 3; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  }
  if (s.progressive) jpeg_simple_progression(&c);
  if (!s.script.empty()) {
    c.scan_info = s.script.data();
    c.num_scans = (int)s.script.size();
  }
  c.restart_interval = (unsigned)s.restart_interval;
  jpeg_start_compress(&c, TRUE);
  if (s.exif_orientation) {
    const uint8_t exif[] = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0,
                            0, 1, 0, (uint8_t)s.exif_orientation, 0, 0, 0, 0, 0, 0};
    jpeg_write_marker(&c, JPEG_APP0 + 1, exif, sizeof exif);
  }
  std::vector<uint8_t> row((size_t)im.w * im.c);
  while (c.next_scanline < c.image_height) {
    const uint8_t* r = im.row((int)c.next_scanline);
    std::copy(r, r + row.size(), row.begin());
    JSAMPROW rp = row.data();
    jpeg_write_scanlines(&c, &rp, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string out(reinterpret_cast<const char*>(buf), size);
  std::free(buf);
  return out;
}

// A photo-like image with noise (nonzero high frequencies), optionally gray.
Image content(int w, int h, int seed, int channels) {
  Image im = synth_photo(w, h, seed);
  if (channels == 1) {
    Image g;
    g.w = w;
    g.h = h;
    g.c = 1;
    g.px.resize((size_t)w * h);
    for (size_t i = 0; i < g.px.size(); ++i) g.px[i] = im.px[i * 3];
    return g;
  }
  return im;
}

// Hard 0/255 edges: the largest coefficients, IDCT outputs far outside 0..255 (range limiting).
Image checkerboard(int w, int h) {
  Image im;
  im.w = w;
  im.h = h;
  im.c = 3;
  im.px.resize((size_t)w * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < 3; ++k) im.row(y)[x * 3 + k] = (uint8_t)((((x >> k) ^ (y >> 1)) & 1) ? 255 : 0);
  return im;
}

// TurboJPEG's scaled decode, the reference.
bool tj_decode(const std::string& b, int denom, int channels, Image* out, bool* warned = nullptr) {
  tjhandle tj = tjInitDecompress();
  int w = 0, h = 0, sub = 0, cs = 0;
  const auto* d = reinterpret_cast<const unsigned char*>(b.data());
  bool ok = tjDecompressHeader3(tj, d, b.size(), &w, &h, &sub, &cs) == 0;
  tjscalingfactor sf = {1, denom};
  out->w = TJSCALED(w, sf);
  out->h = TJSCALED(h, sf);
  out->c = channels;
  out->px.assign((size_t)out->w * out->h * channels, 0);
  const int pf = channels == 1 ? TJPF_GRAY : TJPF_RGB;
  if (warned) *warned = false;
  if (ok && tjDecompress2(tj, d, b.size(), out->px.data(), out->w, 0, out->h, pf, 0) != 0) {
    ok = warned && tjGetErrorCode(tj) == TJERR_WARNING;
    if (ok) *warned = true;
  }
  tjDestroy(tj);
  return ok;
}

bool kiln_decode(const std::string& b, int denom, int channels, Image* out, const int* roi = nullptr) {
  return decode_jpeg_progressive_scaled(reinterpret_cast<const uint8_t*>(b.data()), b.size(), denom, channels, out,
                                        roi);
}

// Decodes at both scales and both channel counts; every case must be handled and identical.
void check_identical(const std::string& b, const std::string& what) {
  for (int denom : {4, 8})
    for (int ch : {3, 1}) {
      CAPTURE(what);
      CAPTURE(denom);
      CAPTURE(ch);
      Image k, t;
      REQUIRE(tj_decode(b, denom, ch, &t));
      REQUIRE(kiln_decode(b, denom, ch, &k));
      CHECK(k.w == t.w);
      CHECK(k.h == t.h);
      CHECK(k.c == ch);
      CHECK(k.px == t.px);
    }
}

// What a user sees: decode_image accepts or rejects the bytes the same way with the fast paths on
// (options `on`) and off, with the same reason, and gives the same pixels.
void check_same_outcome(const std::string& c, const DecodeOptions& on) {
  DecodeOptions off = on;
  off.fast_paths = false;
  std::string e_on, e_off;
  Image a, z;
  try {
    a = decode_image_bytes(reinterpret_cast<const uint8_t*>(c.data()), c.size(), "bad.jpg", on);
  } catch (const DecodeError& e) {
    e_on = e.reason();
  }
  try {
    z = decode_image_bytes(reinterpret_cast<const uint8_t*>(c.data()), c.size(), "bad.jpg", off);
  } catch (const DecodeError& e) {
    e_off = e.reason();
  }
  CHECK(e_on == e_off);
  CHECK(a.px == z.px);
}

}  // namespace

TEST_CASE("progressive decoder: byte-identical to TurboJPEG at 1/4 and 1/8 (4:4:4, 4:2:0, 4:2:2, gray)") {
  const int sizes[][2] = {{1, 1}, {8, 8}, {17, 9}, {33, 20}, {64, 48}, {173, 97}, {333, 250}, {640, 427}};
  int cases = 0;
  for (auto& wh : sizes)
    for (int sub = 0; sub < 4; ++sub)
      for (int q : {35, 92}) {
        const int ch = sub == 3 ? 1 : 3;
        EncodeSpec s;
        s.quality = q;
        s.luma_h = sub == 1 || sub == 2 ? 2 : 1;
        s.luma_v = sub == 1 ? 2 : 1;
        Image im = content(wh[0], wh[1], wh[0] + q, ch);
        check_identical(encode(im, s), str_cat(wh[0], "x", wh[1], " sub ", sub, " q ", q));
        ++cases;
      }
  CHECK(cases == 64);
}

TEST_CASE("progressive decoder: restart intervals, spectral-only scripts, extreme content") {
  Image im = content(300, 211, 3, 3);
  for (int ri : {1, 7, 64})
    for (int sub : {1, 2, 3}) {
      EncodeSpec s;
      s.restart_interval = ri;
      s.luma_h = sub == 1 ? 1 : 2;
      s.luma_v = sub == 2 ? 2 : 1;
      check_identical(encode(im, s), str_cat("restart ", ri, " sub ", sub));
    }
  // Spectral selection only (no successive approximation), bands split unevenly.
  EncodeSpec spectral;
  spectral.script = {{3, {0, 1, 2}, 0, 0, 0, 0}, {1, {0}, 1, 2, 0, 0},  {1, {0}, 3, 40, 0, 0},
                     {1, {0}, 41, 63, 0, 0},     {1, {1}, 1, 63, 0, 0}, {1, {2}, 1, 63, 0, 0}};
  check_identical(encode(im, spectral), "spectral only");
  // Deep successive approximation: DC in 3 passes, AC refined bit by bit from Al = 3.
  EncodeSpec deep;
  deep.script = {{3, {0, 1, 2}, 0, 0, 0, 2}, {1, {0}, 1, 63, 0, 3}, {1, {1}, 1, 63, 0, 2}, {1, {2}, 1, 63, 0, 2},
                 {3, {0, 1, 2}, 0, 0, 2, 1}, {1, {0}, 1, 63, 3, 2}, {1, {0}, 1, 63, 2, 1}, {1, {1}, 1, 63, 2, 1},
                 {1, {2}, 1, 63, 2, 1},      {3, {0, 1, 2}, 0, 0, 1, 0}, {1, {0}, 1, 63, 1, 0}, {1, {1}, 1, 63, 1, 0},
                 {1, {2}, 1, 63, 1, 0}};
  check_identical(encode(im, deep), "deep successive approximation");
  for (int q : {50, 100}) {
    EncodeSpec s;
    s.quality = q;
    check_identical(encode(checkerboard(123, 77), s), str_cat("checkerboard q ", q));
    s.luma_h = s.luma_v = 2;
    check_identical(encode(checkerboard(123, 77), s), str_cat("checkerboard 4:2:0 q ", q));
    s.luma_v = 1;
    check_identical(encode(checkerboard(123, 77), s), str_cat("checkerboard 4:2:2 q ", q));
  }
}

TEST_CASE("progressive decoder: hands back the files it does not handle, and decode_image still decodes them") {
  Image im = content(200, 120, 9, 3);
  EncodeSpec s440;  // chroma halved vertically: libjpeg upsamples it with context rows
  s440.luma_v = 2;
  EncodeSpec baseline;
  baseline.progressive = false;
  EncodeSpec rgb;
  rgb.adobe_rgb = true;
  // Never refined to the last bit: libjpeg smooths such blocks, this decoder does not.
  EncodeSpec unrefined;
  unrefined.script = {{3, {0, 1, 2}, 0, 0, 0, 0}, {1, {0}, 1, 63, 0, 1}, {1, {1}, 1, 63, 0, 1}, {1, {2}, 1, 63, 0, 1}};
  const std::pair<const char*, EncodeSpec> cases[] = {
      {"4:4:0", s440}, {"baseline", baseline}, {"Adobe RGB", rgb}, {"unrefined", unrefined}};
  for (const auto& named : cases) {
    const char* name = named.first;  // not a structured binding: clang's C++17 cannot capture one (CAPTURE)
    const EncodeSpec& spec = named.second;
    CAPTURE(name);
    const std::string b = encode(im, spec);
    Image k;
    CHECK_FALSE(kiln_decode(b, 4, 3, &k));
    // Through decode_image the fallback is TurboJPEG: the same pixels with the option on or off.
    DecodeOptions on, off;
    on.min_w = off.min_w = 50;
    off.fast_paths = false;
    Image a = decode_image_bytes(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "x.jpg", on);
    Image c = decode_image_bytes(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "x.jpg", off);
    CHECK(a.w == 50);
    CHECK(a.px == c.px);
  }
  Image k;
  CHECK_FALSE(kiln_decode(std::string("not a jpeg at all"), 4, 3, &k));
  CHECK_FALSE(kiln_decode(encode(im, EncodeSpec{}), 2, 3, &k));  // 1/2 is TurboJPEG's
}

TEST_CASE("progressive decoder: truncated files are handed back and still fail as truncated") {
  const std::string b = encode(content(160, 100, 4, 3), EncodeSpec{});
  for (size_t cut : {b.size() / 5, b.size() / 2, b.size() - 40, b.size() - 2}) {
    CAPTURE(cut);
    const std::string t = b.substr(0, cut);
    Image k;
    CHECK_FALSE(kiln_decode(t, 4, 3, &k));
    CHECK_FALSE(kiln_decode(t, 8, 3, &k));
    DecodeOptions o;
    o.min_w = 40;
    CHECK_THROWS_AS(decode_image_bytes(reinterpret_cast<const uint8_t*>(t.data()), t.size(), "cut.jpg", o),
                    DecodeError);
  }
}

TEST_CASE("progressive decoder: corrupt scan data never crashes, and what it decodes equals TurboJPEG") {
  std::string b = encode(content(180, 140, 8, 3), EncodeSpec{});
  size_t first_sos = b.find("\xFF\xDA");
  REQUIRE(first_sos != std::string::npos);
  int handled = 0, refused = 0, compared = 0, warned_n = 0;
  for (uint32_t trial = 0; trial < 200; ++trial) {
    std::string c = b;
    const uint32_t r = philox_word(77, trial, 0);
    const size_t pos = first_sos + 20 + r % (c.size() - first_sos - 22);
    c[pos] = (char)(philox_word(77, trial, 1) & 0xFF);
    for (int denom : {4, 8}) {
      Image k, t;
      if (kiln_decode(c, denom, 3, &k)) {
        ++handled;
        // Handled means the pixels TurboJPEG gives (with or without a warning).
        bool warned = false;
        if (tj_decode(c, denom, 3, &t, &warned)) {
          ++compared;
          warned_n += warned;
          CHECK(k.px == t.px);
        }
      } else {
        ++refused;
      }
      DecodeOptions on;
      on.min_w = (180 + denom - 1) / denom;
      check_same_outcome(c, on);
    }
  }
  // Some of the handled ones are files TurboJPEG warns about and still decodes (a bad code in an AC
  // scan this decoder skips at 1/8, where the output reads only DC terms): same pixels too.
  MESSAGE("corruptions handled ", handled, " (", compared, " compared with TurboJPEG, ", warned_n,
          " of them with a warning), handed back ", refused);
  CHECK(handled + refused == 400);
  CHECK(compared == handled);
  CHECK(handled > 50);
}

TEST_CASE("progressive decoder: a window computes its pixels exactly and leaves the rest 0") {
  for (int luma_v : {2, 1})  // 4:2:0, 4:2:2 (upsampled chroma: the window's edges read neighbours)
    for (int denom : {4, 8}) {
      EncodeSpec s;
      s.luma_h = 2;
      s.luma_v = luma_v;
      const std::string b = encode(content(517, 333, 12, 3), s);
      Image full;
      REQUIRE(kiln_decode(b, denom, 3, &full));
      const int rois[][4] = {{37, 11, 60, 40}, {0, 0, 5, 3}, {1, 2, 2, 9}, {full.w - 3, full.h - 2, full.w, full.h}};
      for (auto& roi : rois) {
        CAPTURE(luma_v);
        CAPTURE(denom);
        CAPTURE(roi[0]);
        Image part;
        REQUIRE(kiln_decode(b, denom, 3, &part, roi));
        REQUIRE(part.w == full.w);
        REQUIRE(part.h == full.h);
        int inside = 0, outside_zero = 0, outside = 0;
        for (int y = 0; y < full.h; ++y)
          for (int x = 0; x < full.w; ++x) {
            const bool in = x >= roi[0] && x < roi[2] && y >= roi[1] && y < roi[3];
            for (int k = 0; k < 3; ++k) {
              const uint8_t a = full.row(y)[x * 3 + k], p = part.row(y)[x * 3 + k];
              if (in) inside += a == p;
              else ++outside, outside_zero += p == 0;
            }
          }
        CHECK(inside == (roi[2] - roi[0]) * (roi[3] - roi[1]) * 3);
        CHECK(outside_zero == outside);
      }
    }
}

TEST_CASE("progressive decoder: the fused pipeline gives the same sample with it on or off (ROI, EXIF)") {
  // 1700x1100 decodes at 1/4 for Resize(256), 2200x2100 at 1/8: both through this decoder.
  const int sizes[][3] = {{1700, 1100, 4}, {2200, 2100, 8}};
  for (auto& sz : sizes)
    for (int orient : {1, 6})
      for (int sub : {1, 2, 3}) {
        EncodeSpec s;
        s.exif_orientation = orient;
        s.luma_h = sub == 1 ? 1 : 2;
        s.luma_v = sub == 2 ? 2 : 1;
        s.quality = 80;
        const std::string b = encode(content(sz[0], sz[1], 11, 3), s);
        for (auto kind : {SampleTransform::Kind::resize_center_crop, SampleTransform::Kind::random_resized_crop}) {
          CAPTURE(sz[0]);
          CAPTURE(orient);
          CAPTURE(sub);
          SampleTransform on;
          on.kind = kind;
          on.resize = 256;
          SampleTransform off = on;
          off.decode.fast_paths = false;
          std::vector<float> a(on.sample_elems()), c(on.sample_elems());
          for (uint64_t stream = 0; stream < 3; ++stream) {
            SampleInfo ia = load_sample(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "p.jpg", on, 5,
                                        stream, a.data());
            SampleInfo ic = load_sample(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "p.jpg", off, 5,
                                        stream, c.data());
            CHECK(ia.decoded_w == ic.decoded_w);
            if (kind == SampleTransform::Kind::resize_center_crop) {
              // The scale this test means to reach (oriented width / denominator, rounded up).
              const int ow = orient == 6 ? sz[1] : sz[0];
              CHECK(ia.decoded_w == (ow + sz[2] - 1) / sz[2]);
            }
            CHECK(a == c);
          }
        }
      }
}

TEST_CASE("jpeg_is_progressive tells SOF2 from SOF0") {
  Image im = content(40, 30, 1, 3);
  const std::string p = encode(im, EncodeSpec{});
  EncodeSpec base;
  base.progressive = false;
  const std::string q = encode(im, base);
  CHECK(jpeg_is_progressive(reinterpret_cast<const uint8_t*>(p.data()), p.size()));
  CHECK_FALSE(jpeg_is_progressive(reinterpret_cast<const uint8_t*>(q.data()), q.size()));
  CHECK_FALSE(jpeg_is_progressive(reinterpret_cast<const uint8_t*>("\xFF\xD8"), 2));
}

TEST_CASE("windowed decode (libjpeg crop and skip): the window's pixels equal TurboJPEG's whole decode") {
  // Baseline files of every subsampling and gray ones (and progressive ones kiln's decoder hands
  // back: 4:4:0, or scales 1 and 1/2), every scale, windows in the middle and at the edges.
  struct Case {
    int luma_h, luma_v;
    bool progressive;
    int restart;
    int file_channels;  // 1: a grayscale JPEG
  };
  const Case cases[] = {{1, 1, false, 0, 3}, {2, 2, false, 0, 3}, {2, 1, false, 0, 3}, {1, 2, false, 0, 3},
                        {2, 2, false, 5, 3}, {1, 2, true, 0, 3},  {2, 2, true, 0, 3},  {1, 1, false, 0, 1}};
  int windowed = 0;
  for (const Case& cs : cases)
    for (int ch : {3, 1}) {
      EncodeSpec s;
      s.luma_h = cs.luma_h;
      s.luma_v = cs.luma_v;
      s.progressive = cs.progressive;
      s.restart_interval = cs.restart;
      const std::string b = encode(content(403, 301, 21, cs.file_channels), s);
      const auto* d = reinterpret_cast<const uint8_t*>(b.data());
      for (int denom : {1, 2, 4, 8}) {
        DecodeOptions whole;
        whole.fast_paths = false;
        whole.gray = ch == 1;
        whole.min_w = (403 + denom - 1) / denom;
        whole.min_h = (301 + denom - 1) / denom;
        const Image ref = decode_image_bytes(d, b.size(), "w.jpg", whole);
        REQUIRE(ref.w == whole.min_w);
        const int W = ref.w, H = ref.h;
        const int rois[][4] = {{W / 3, H / 4, 2 * W / 3, 3 * H / 4}, {0, 0, 3, 2}, {W - 1, H - 5, W, H}, {5, 0, 9, H}};
        for (auto& r : rois) {
          CAPTURE(cs.luma_h);
          CAPTURE(cs.luma_v);
          CAPTURE(cs.progressive);
          CAPTURE(ch);
          CAPTURE(denom);
          CAPTURE(r[0]);
          DecodeOptions o = whole;
          o.fast_paths = true;
          o.roi_w = W;
          o.roi_h = H;
          o.roi_x0 = r[0];
          o.roi_y0 = r[1];
          o.roi_x1 = r[2];
          o.roi_y1 = r[3];
          const Image im = decode_image_bytes(d, b.size(), "w.jpg", o);
          REQUIRE(im.w == W);
          REQUIRE(im.h == H);
          size_t same = 0, skipped = 0;
          for (int y = 0; y < H; ++y)
            for (int x = 0; x < W; ++x)
              for (int k = 0; k < ch; ++k) {
                const size_t i = ((size_t)y * W + x) * ch + k;
                if (x >= r[0] && x < r[2] && y >= r[1] && y < r[3]) same += im.px[i] == ref.px[i];
                else skipped += im.px[i] == 0 && ref.px[i] != 0;
              }
          CHECK(same == (size_t)(r[2] - r[0]) * (r[3] - r[1]) * ch);
          windowed += skipped > 0;  // the window path ran: it left pixels far from the window 0
        }
      }
    }
  MESSAGE("windowed decodes: ", windowed, " of 256");
  CHECK(windowed > 128);
}

TEST_CASE("windowed decode: truncated and corrupt baseline files behave as TurboJPEG's whole decode") {
  EncodeSpec base;
  base.progressive = false;
  base.luma_h = base.luma_v = 2;
  const std::string b = encode(content(300, 200, 3, 3), base);
  const size_t sos = b.find("\xFF\xDA");
  REQUIRE(sos != std::string::npos);
  std::vector<std::string> bad;
  for (size_t cut : {b.size() / 3, b.size() - 50, b.size() - 2}) bad.push_back(b.substr(0, cut));
  for (uint32_t t = 0; t < 60; ++t) {
    std::string c = b;
    c[sos + 20 + philox_word(9, t, 0) % (c.size() - sos - 22)] = (char)(philox_word(9, t, 1) & 0xFF);
    bad.push_back(c);
  }
  for (size_t i = 0; i < bad.size(); ++i) {
    CAPTURE(i);
    DecodeOptions on;
    on.min_w = 75;
    on.roi_w = 75;
    on.roi_h = 50;
    on.roi_x0 = 0;
    on.roi_y0 = 0;
    on.roi_x1 = 75;  // the whole image as the window: every pixel comparable
    on.roi_y1 = 50;
    check_same_outcome(bad[i], on);
  }
}
