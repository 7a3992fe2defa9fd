// Mask pictures (data/segmentation_overlay.h): distinct palette colours, nearest-neighbour mask
// resizing (exact duplication when enlarging by 2, the loader's own rule for resize_exact), mask
// colouring, and the side-by-side overlay's two halves.
#include <doctest/doctest.h>

#include <set>

#include "data/png_io.h"
#include "data/segmentation_overlay.h"
#include "data/segmentation_sample.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

namespace {

Image pattern_mask(int w, int h, int k) {
  Image m;
  m.w = w;
  m.h = h;
  m.c = 1;
  m.px.resize((size_t)w * h);
  for (size_t i = 0; i < m.px.size(); ++i) m.px[i] = (uint8_t)((i * 5 + i / (size_t)w) % (size_t)k);
  return m;
}

}  // namespace

TEST_CASE("segmentation overlay: palette colours are distinct, background black, fixed") {
  for (int k : {2, 11, 21, 256}) {
    std::vector<PngColor> p = class_palette(k);
    REQUIRE(p.size() == (size_t)k);
    CHECK(p[0] == PngColor{0, 0, 0});
    std::set<PngColor> seen(p.begin(), p.end());
    if (k <= 21) CHECK(seen.size() == (size_t)k);
  }
  CHECK(class_palette(11) == class_palette(11));
  CHECK_THROWS_AS(class_palette(0), Error);
}

TEST_CASE("segmentation overlay: nearest-neighbour resize duplicates exactly and matches the loader's rule") {
  Image m = pattern_mask(5, 3, 4);
  Image up = resize_mask_nearest(m, 10, 6);
  for (int y = 0; y < 6; ++y)
    for (int x = 0; x < 10; ++x) REQUIRE(up.px[(size_t)y * 10 + x] == m.px[(size_t)(y / 2) * 5 + x / 2]);
  CHECK(resize_mask_nearest(m, 5, 3).px == m.px);
  // The loader's resize_exact geometry (no flip) gives the same mask as resize_mask_nearest.
  for (int s : {3, 7, 16}) {
    SampleTransform t;
    t.kind = SampleTransform::Kind::resize_exact;
    t.out_w = t.out_h = s;
    std::vector<int64_t> y((size_t)s * s);
    transform_mask(m, "m.png", t, SampleInfo{}, 0, y.data());
    Image r = resize_mask_nearest(m, s, s);
    for (size_t i = 0; i < y.size(); ++i) REQUIRE(y[i] == r.px[i]);
  }
}

TEST_CASE("segmentation overlay: colour picture and side-by-side overlay") {
  Image m = pattern_mask(6, 4, 3);
  m.px[0] = 255;
  std::vector<PngColor> pal = class_palette(3);
  Image c = colorize_mask(m, pal);
  REQUIRE(c.c == 3);
  CHECK(c.px[0] == 255);  // ignore: white
  for (size_t i = 1; i < m.px.size(); ++i) CHECK(c.px[3 * i + 1] == pal[m.px[i]][1]);
  Image img = synth_photo(6, 4, 9);
  Image o = side_by_side_overlay(img, m, pal, 0.25f);
  REQUIRE(o.w == 12);
  REQUIRE(o.h == 4);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 6; ++x)
      for (int ch = 0; ch < 3; ++ch) {
        const uint8_t p = img.row(y)[x * 3 + ch], v = m.px[(size_t)y * 6 + x];
        CHECK(o.row(y)[x * 3 + ch] == p);
        const int want = (v == 0 || v == 255) ? p : (int)std::lround(0.75 * p + 0.25 * pal[v][(size_t)ch]);
        CHECK(std::abs((int)o.row(y)[(x + 6) * 3 + ch] - want) <= 1);
      }
  Image gray = pattern_mask(6, 4, 200);
  CHECK(side_by_side_overlay(gray, m, pal).c == 3);
  CHECK_THROWS_WITH_AS(side_by_side_overlay(img, pattern_mask(5, 4, 3), pal), doctest::Contains("5x4"), Error);
}
