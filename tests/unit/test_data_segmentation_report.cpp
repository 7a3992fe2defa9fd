// `kiln data` on segmentation data (data/segmentation_report.h): class pixel counts and shares
// exact on a small synthetic set, bad pairs listed with their reasons and left out of the counts,
// masks without an image listed, classes.txt names used and a class past them reported; the
// command line dispatches to it.
#include <doctest/doctest.h>

#include <cstdio>
#include <sstream>

#include "data/data_report.h"
#include "data/png_io.h"
#include "support/cli/run_kiln.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

namespace {

Image mask_of(int w, int h, const std::vector<uint8_t>& v) {
  Image m;
  m.w = w;
  m.h = h;
  m.c = 1;
  m.px = v;
  return m;
}

// The row format the report promises, written independently with printf.
std::string row(const char* value, const char* name, int width, unsigned long long pixels, double share) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "  %3s  %-*s%14llu%9.2f%%\n", value, width, name, pixels, share);
  return buf;
}

std::string report(const std::string& path) {
  std::ostringstream out, err;
  DataReportOptions o;
  o.path = path;
  o.out = &out;
  o.err = &err;
  o.workers = 2;
  o.out_dir = "";
  CHECK(run_data_report(o) == 0);
  return out.str() + err.str();
}

}  // namespace

TEST_CASE("kiln data on segmentation: exact class pixel counts and shares, bad pairs left out and listed") {
  TempDir t;
  // a: 4x4, ten 0s, four 1s, two 255s. b: 4x2, three 0s, five 2s. c: mask 3x3 for a 4x4 image (bad).
  std::vector<uint8_t> a(16, 0);
  for (int i : {1, 5, 9, 13}) a[(size_t)i] = 1;
  a[3] = a[7] = 255;
  write_bytes(t / "images/a.png", encode_png(synth_photo(4, 4, 1)));
  write_bytes(t / "masks/a.png", encode_png(mask_of(4, 4, a)));
  write_bytes(t / "images/b.png", encode_png(synth_photo(4, 2, 2)));
  write_bytes(t / "masks/b.png", encode_png(mask_of(4, 2, {0, 2, 2, 0, 2, 2, 2, 0})));
  write_bytes(t / "images/c.png", encode_png(synth_photo(4, 4, 3)));
  write_bytes(t / "masks/c.png", encode_png(mask_of(3, 3, std::vector<uint8_t>(9, 2))));
  write_bytes(t / "images/d.png", encode_png(synth_photo(4, 4, 4)));  // no mask
  write_bytes(t / "masks/zz_orphan.png", encode_png(mask_of(1, 1, {0})));
  const std::string r = report(t.path);
  CAPTURE(r);
  CHECK(r.find("(4 image/mask pairs, 3 classes, the largest mask value + 1)") != std::string::npos);
  CHECK(r.find("over the 2 usable pairs") != std::string::npos);
  // 24 usable pixels: 13 / 4 / 5 and 2 ignored.
  CHECK(r.find(row("0", "", 5, 13, 100.0 * 13 / 24)) != std::string::npos);
  CHECK(r.find(row("1", "", 5, 4, 100.0 * 4 / 24)) != std::string::npos);
  CHECK(r.find(row("2", "", 5, 5, 100.0 * 5 / 24)) != std::string::npos);
  CHECK(r.find(row("255", "(ignore)", 5, 2, 100.0 * 2 / 24)) != std::string::npos);
  CHECK(r.find("bad pairs: 2") != std::string::npos);
  CHECK(r.find(t / "images/c.png" + ": image is 4x4 but its mask") != std::string::npos);
  CHECK(r.find(t / "images/d.png" + ": no mask") != std::string::npos);
  CHECK(r.find("masks without an image: 1") != std::string::npos);
  CHECK(r.find("zz_orphan.png") != std::string::npos);
  CHECK(r.find("--normalize ") != std::string::npos);
}

TEST_CASE("kiln data on segmentation: classes.txt names the rows, a class past it is a bad pair, empty classes warned") {
  TempDir t;
  write_bytes(t / "train/images/a.png", encode_png(synth_photo(2, 2, 1)));
  write_bytes(t / "train/masks/a.png", encode_png(mask_of(2, 2, {0, 0, 0, 2})));
  write_bytes(t / "train/images/b.png", encode_png(synth_photo(2, 2, 2)));
  write_bytes(t / "train/masks/b.png", encode_png(mask_of(2, 2, {0, 3, 0, 0})));
  write_bytes(t / "val/images/v.png", encode_png(synth_photo(2, 2, 3)));
  write_bytes(t / "val/masks/v.png", encode_png(mask_of(2, 2, {1, 1, 1, 1})));
  write_bytes(t / "classes.txt", "background\ncat\ndog\n");
  const std::string r = report(t.path);
  CAPTURE(r);
  CHECK(r.find("== train: ") != std::string::npos);
  CHECK(r.find("== val: ") != std::string::npos);
  CHECK(r.find(row("0", "background", 10, 3, 75.0)) != std::string::npos);
  CHECK(r.find(row("2", "dog", 10, 1, 25.0)) != std::string::npos);
  CHECK(r.find("mask holds class 3, but classes.txt names 3 classes") != std::string::npos);
  CHECK(r.find("warning: class 'cat' has no pixels in train") != std::string::npos);
  CHECK(r.find(row("1", "cat", 10, 4, 100.0)) != std::string::npos);  // val
  // The command dispatches to this report.
  CliRun c = run_kiln("data " + t.path + " --out ''");
  CHECK(c.status == 0);
  CHECK(c.output.find("class pixels") != std::string::npos);
}
