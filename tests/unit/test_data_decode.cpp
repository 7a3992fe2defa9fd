// Decode and fused-pipeline unit tests with files made in C++ (TurboJPEG encoder): round trips,
// malformed inputs, DCT-scaled decode sizes, fused == unfused, gray output, f16 output.
#include <doctest/doctest.h>

#include <cmath>

#include "data/decode.h"
#include "data/exif.h"
#include "data/jpeg_encode.h"
#include "data/sample_pipeline.h"
#include "data/transforms.h"
#include "engine/core/half.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

static Image decode_str(const std::string& b, const DecodeOptions& o = {}) {
  return decode_image_bytes(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "mem.jpg", o);
}

TEST_CASE("jpeg round trip at quality 100 stays close, size and mode reported") {
  Image src;  // smooth, so 4:2:0 chroma costs little
  src.w = 64;
  src.h = 48;
  src.px.resize(64 * 48 * 3);
  for (int y = 0; y < 48; ++y)
    for (int x = 0; x < 64; ++x) {
      uint8_t* p = src.row(y) + x * 3;
      p[0] = (uint8_t)(x * 4);
      p[1] = (uint8_t)(y * 5);
      p[2] = (uint8_t)(128 + 60 * std::sin((x + y) / 9.0));
    }
  std::string jpg = encode_jpeg(src, 100);
  Image im = decode_str(jpg);
  REQUIRE(im.w == 64);
  REQUIRE(im.h == 48);
  CHECK(im.mode == "RGB");
  CHECK(im.format == "JPEG");
  double err = 0;
  for (size_t i = 0; i < im.px.size(); ++i) err += std::abs((int)im.px[i] - (int)src.px[i]);
  CHECK(err / im.px.size() < 1.5);
}

TEST_CASE("malformed inputs give DecodeError with the file name, never a crash") {
  std::string jpg = encode_jpeg(synth_photo(80, 60, 2), 90);
  auto expect_error = [](const std::string& bytes, const char* what) {
    CAPTURE(what);
    bool threw = false;
    try {
      decode_str(bytes);
    } catch (const DecodeError& e) {
      threw = true;
      CHECK(e.file() == "mem.jpg");
      CHECK(std::string(e.what()).find("mem.jpg") != std::string::npos);
    }
    CHECK(threw);
  };
  expect_error("", "empty");
  expect_error("hello world, not an image", "text");
  expect_error(jpg.substr(0, jpg.size() / 2), "truncated half");
  expect_error(jpg.substr(0, 3), "just the SOI");
  for (size_t cut = 10; cut < jpg.size(); cut += jpg.size() / 17) expect_error(jpg.substr(0, cut), "truncated");
  // Corrupt bytes in the entropy-coded data must not crash (they may decode to garbage or fail).
  for (int k = 0; k < 20; ++k) {
    std::string c = jpg;
    for (size_t i = c.size() / 2; i < c.size() - 2; i += 37 + k) c[i] = (char)(c[i] ^ (0x5a + k));
    try {
      decode_str(c);
    } catch (const DecodeError&) {
    }
  }
  // Limits.
  DecodeOptions small;
  small.max_pixels = 1000;
  CHECK_THROWS_AS(decode_str(jpg, small), DecodeError);
  small = DecodeOptions{};
  small.max_file_bytes = 100;
  CHECK_THROWS_AS(decode_str(jpg, small), DecodeError);
  CHECK_THROWS_AS(decode_image("/nonexistent/kiln/file.jpg"), DecodeError);
}

TEST_CASE("DCT-scaled decode picks the largest reduction that keeps the minimum size") {
  std::string jpg = encode_jpeg(synth_photo(800, 600, 3), 85);
  DecodeOptions o;
  o.min_w = 100;
  o.min_h = 75;
  Image im = decode_str(jpg, o);
  CHECK(im.w == 100);
  CHECK(im.h == 75);
  CHECK(im.file_w == 800);
  o.min_w = 101;
  im = decode_str(jpg, o);
  CHECK(im.w == 200);  // 1/8 would be too small in width
  o.min_w = 0;
  o.min_h = 301;
  im = decode_str(jpg, o);
  CHECK(im.w == 800);
  o.min_h = 300;
  im = decode_str(jpg, o);
  CHECK(im.h == 300);
}

TEST_CASE("gray output: JPEG luma and PIL weights for color sources") {
  Image src = synth_photo(40, 30, 4);
  Image g = src;
  rgb_to_gray_inplace(g);
  REQUIRE(g.c == 1);
  const uint8_t* p = src.row(5) + 7 * 3;
  CHECK(g.row(5)[7] == (uint8_t)((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 0x8000u) >> 16));
  DecodeOptions o;
  o.gray = true;
  Image dj = decode_str(encode_jpeg(g, 95), o);
  CHECK(dj.c == 1);
  CHECK(dj.mode == "L");
  CHECK(dj.px.size() == (size_t)40 * 30);
}

TEST_CASE("EXIF orientation transforms are consistent (6 then 8 is the identity, 3 twice too)") {
  Image a = synth_photo(7, 5, 5);
  Image r6 = apply_orientation(a, 6);
  CHECK(r6.w == 5);
  CHECK(r6.h == 7);
  CHECK(apply_orientation(r6, 8).px == a.px);
  CHECK(apply_orientation(apply_orientation(a, 3), 3).px == a.px);
  CHECK(apply_orientation(a, 2).px == hflip_image(a).px);
  // Orientation 6 (rotate 90 CW): output top-left is the input's bottom-left.
  CHECK(std::equal(r6.row(0), r6.row(0) + 3, a.row(4)));
}

TEST_CASE("fused sample pipeline equals the unfused chain bit for bit (no DCT scaling)") {
  TempDir dir;
  Image src = synth_photo(300, 200, 6);
  write_bytes(dir / "a.jpg", encode_jpeg(src, 92));
  Image full = decode_image(dir / "a.jpg");
  const float mean[3] = {0.5f, 0.4f, 0.3f}, stdv[3] = {0.2f, 0.25f, 0.3f};
  SampleTransform t;
  for (int c = 0; c < 3; ++c) t.mean[c] = mean[c], t.std[c] = stdv[c];
  t.dct_scaling = false;
  t.out_w = 96;
  t.out_h = 80;
  t.resize = 110;
  std::vector<float> fused(t.sample_elems()), ref(t.sample_elems());

  SUBCASE("resize shorter + center crop") {
    t.kind = SampleTransform::Kind::resize_center_crop;
    load_sample_file(dir / "a.jpg", t, 1, 0, fused.data());
    Image r = resize_shorter(full, 110);
    Image c = crop_image(r, center_crop_box(r.w, r.h, 96, 80));
    normalize_to_chw_f32(c, mean, stdv, ref.data());
    CHECK(fused == ref);
  }
  SUBCASE("random resized crop + flip, several streams") {
    t.kind = SampleTransform::Kind::random_resized_crop;
    t.random_hflip = true;
    int flips = 0;
    for (uint64_t k = 0; k < 12; ++k) {
      SampleInfo info = load_sample_file(dir / "a.jpg", t, 9, sample_stream(0, k), fused.data());
      CHECK(info.crop.x + info.crop.w <= 300);
      CHECK(info.crop.y + info.crop.h <= 200);
      Image c = resize_image(crop_image(full, info.crop), 96, 80);
      if (info.flipped) c = hflip_image(c), ++flips;
      normalize_to_chw_f32(c, mean, stdv, ref.data());
      CHECK(fused == ref);
    }
    CHECK(flips > 0);
    CHECK(flips < 12);
  }
  SUBCASE("center crop larger than the image pads with zeros") {
    t.kind = SampleTransform::Kind::center_crop;
    t.out_w = 320;
    t.out_h = 210;
    std::vector<float> o(t.sample_elems()), r(t.sample_elems());
    load_sample_file(dir / "a.jpg", t, 1, 0, o.data());
    normalize_to_chw_f32(crop_image(full, center_crop_box(300, 200, 320, 210)), mean, stdv, r.data());
    CHECK(o == r);
    CHECK(o[0] == doctest::Approx((0 - mean[0]) / stdv[0]));
  }
  SUBCASE("f16 output is the f32 output rounded") {
    t.kind = SampleTransform::Kind::resize_exact;
    load_sample_file(dir / "a.jpg", t, 1, 0, fused.data());
    t.dtype = PixelDType::f16;
    std::vector<uint16_t> h(t.sample_elems());
    load_sample_file(dir / "a.jpg", t, 1, 0, h.data());
    for (size_t i = 0; i < h.size(); i += 97) CHECK(h[i] == float_to_half_bits(fused[i]));
  }
}

TEST_CASE("DCT-scaled fused pipeline stays close to the full-scale one") {
  TempDir dir;
  write_bytes(dir / "big.jpg", encode_jpeg(synth_photo(1600, 1200, 7), 90));
  SampleTransform t;  // Resize(256) + CenterCrop(224), ToTensor only
  std::vector<float> a(t.sample_elems()), b(t.sample_elems());
  t.dct_scaling = false;
  load_sample_file(dir / "big.jpg", t, 0, 0, a.data());
  t.dct_scaling = true;
  SampleInfo info = load_sample_file(dir / "big.jpg", t, 0, 0, b.data());
  CHECK(info.decoded_w == 400);  // 1/4: 1/8 would give 150 rows < 256
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::fabs(a[i] - b[i]) * 255;
  MESSAGE("mean |full - dct-scaled| = ", s / a.size(), " levels");
  CHECK(s / a.size() < 3.0);
}
