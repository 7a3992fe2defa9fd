// run_data_report on a generated folder: counts, imbalance warning, bad files with reasons,
// exact mean/std on solid-colour BMPs, contact sheets that decode back to 3x3 tiles.
#include <doctest/doctest.h>

#include <sstream>

#include "data/decode.h"
#include "data/data_report.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

namespace {
// Minimal 24-bit BMP of one colour (rows bottom-up, padded to 4 bytes).
std::string solid_bmp(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  int row = (w * 3 + 3) / 4 * 4;
  uint32_t size = 54 + (uint32_t)row * h;
  std::string s(size, '\0');
  auto put32 = [&](size_t o, uint32_t v) {
    for (int k = 0; k < 4; ++k) s[o + k] = (char)(v >> (8 * k));
  };
  s[0] = 'B';
  s[1] = 'M';
  put32(2, size);
  put32(10, 54);
  put32(14, 40);
  put32(18, (uint32_t)w);
  put32(22, (uint32_t)h);
  s[26] = 1;
  s[28] = 24;
  put32(34, (uint32_t)row * h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      size_t o = 54 + (size_t)y * row + (size_t)x * 3;
      s[o] = (char)b;
      s[o + 1] = (char)g;
      s[o + 2] = (char)r;
    }
  return s;
}
}  // namespace

TEST_CASE("data report: counts, imbalance, bad files, exact mean/std, contact sheets") {
  TempDir d;
  for (int i = 0; i < 8; ++i) write_bytes(d / ("data/many/w" + std::to_string(i) + ".bmp"), solid_bmp(30, 20, 255, 255, 255));
  for (int i = 0; i < 8; ++i) write_bytes(d / ("data/many/k" + std::to_string(i) + ".bmp"), solid_bmp(30, 20, 0, 0, 0));
  write_bytes(d / "data/few/k.bmp", solid_bmp(30, 20, 0, 0, 0));
  write_bytes(d / "data/few/w.bmp", solid_bmp(30, 20, 255, 255, 255));
  write_bytes(d / "data/few/broken.jpg", "not a jpeg");
  std::ostringstream os;
  DataReportOptions o;
  o.path = d / "data";
  o.out_dir = d / "sheets";
  o.workers = 2;
  o.tile = 32;
  o.out = &os;
  CHECK(run_data_report(o) == 0);
  std::string r = os.str();
  CHECK(r.find("few") != std::string::npos);
  CHECK(r.find("warning: imbalanced classes: 'many' has 16 images, 'few' 2") != std::string::npos);
  CHECK(r.find("broken.jpg: not an image") != std::string::npos);
  CHECK(r.find("unreadable files: 1") != std::string::npos);
  CHECK(r.find("--normalize 0.5000,0.5000,0.5000:0.5000,0.5000,0.5000") != std::string::npos);
  CHECK(r.find("BMP RGB: 18") != std::string::npos);
  CHECK(r.find("width 30 / 30 / 30") != std::string::npos);
  Image sheet = decode_image(d / "sheets/data_many.jpg");
  CHECK(sheet.w == 96);
  CHECK(sheet.h == 96);
  Image few = decode_image(d / "sheets/data_few.jpg");
  // Only 2 readable images: the bottom-right tile is empty (dark gray 40).
  CHECK(std::abs((int)few.row(90)[90 * 3] - 40) <= 3);

  std::ostringstream e;
  o.path = d / "missing";
  o.out = &e;
  o.err = &e;
  CHECK(run_data_report(o) == 1);
  CHECK(e.str().rfind("kiln: error: data: ", 0) == 0);
  CHECK(e.str().find(d / "missing") != std::string::npos);
}
