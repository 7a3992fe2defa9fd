// Image pipeline vs PIL / torchvision: the corpus and PIL's answers are written at run time by
// tests/support/data/make_corpus.py (/usr/bin/python3 + PIL + torchvision) into a temp folder.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/decode.h"
#include "data/resize.h"
#include "data/sample_pipeline.h"
#include "data/transforms.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// Generated once per script version into the build folder (keyed by a hash of the script), so the
// test processes ctest starts share it; written to a temp name and renamed, so concurrent test
// processes never see half a corpus.
struct Corpus {
  std::string dir;
  Corpus() {
    const std::string script = std::string(KILN_SOURCE_DIR) + "/tests/support/data/make_corpus.py";
    std::ifstream in(script, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "missing " << script);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t h = 1469598103934665603ull;
    for (unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
    dir = std::string(KILN_BINARY_DIR) + "/data_parity_corpus_" + std::to_string(h);
    if (fs::exists(dir + "/manifest.txt")) return;
    std::string tmp = dir + ".tmp" + std::to_string(::getpid());
    fs::create_directories(tmp);
    std::string cmd = "/usr/bin/python3 " + script + " " + tmp + " > " + tmp + "/log.txt 2>&1";
    int rc = std::system(cmd.c_str());
    if (rc != 0) {
      std::ifstream log(tmp + "/log.txt");
      std::stringstream ss;
      ss << log.rdbuf();
      FAIL("make_corpus.py failed: " << ss.str());
    }
    std::error_code ec;
    fs::rename(tmp, dir, ec);
    if (ec) fs::remove_all(tmp, ec);  // another process won the race: use its copy
  }
  std::string path(const std::string& f) const { return dir + "/" + f; }
};

const Corpus& corpus() {
  static Corpus c;
  return c;
}

std::vector<uint8_t> read_raw(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing " << p);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct Diff {
  double mean = 0;
  int max = 0;
};
Diff diff(const uint8_t* a, const uint8_t* b, size_t n) {
  Diff d;
  double s = 0;
  for (size_t i = 0; i < n; ++i) {
    int e = std::abs((int)a[i] - (int)b[i]);
    s += e;
    d.max = std::max(d.max, e);
  }
  d.mean = n ? s / n : 0;
  return d;
}

}  // namespace

TEST_CASE("decode matches PIL (exif_transpose + convert RGB) on every corpus image") {
  std::ifstream man(corpus().path("manifest.txt"));
  std::string name, file;
  int w, h, count = 0;
  while (man >> name >> file >> w >> h) {
    CAPTURE(name);
    Image im = decode_image(corpus().path(file));
    REQUIRE(im.c == 3);
    REQUIRE(im.w == w);
    REQUIRE(im.h == h);
    std::vector<uint8_t> ref = read_raw(corpus().path(name + ".ref"));
    REQUIRE(ref.size() == im.px.size());
    Diff d = diff(im.px.data(), ref.data(), ref.size());
    // Bit-exact everywhere: PIL links the same libjpeg-turbo with the same defaults (islow IDCT,
    // fancy upsampling), and kiln's CMYK conversion and EXIF transforms follow PIL's.
    CHECK(d.max == 0);
    ++count;
  }
  CHECK(count >= 25);
}

TEST_CASE("bad corpus files: DecodeError naming the file, never a crash") {
  std::ifstream bad(corpus().path("bad.txt"));
  std::string f;
  int count = 0;
  while (bad >> f) {
    CAPTURE(f);
    std::string p = corpus().path(f);
    bool threw = false;
    try {
      decode_image(p);
    } catch (const DecodeError& e) {
      threw = true;
      CHECK(std::string(e.what()).find(p) != std::string::npos);
      CHECK(!e.reason().empty());
      if (f.rfind("huge", 0) == 0) CHECK_MESSAGE(e.reason().find("pixel limit") != std::string::npos, std::string(e.what()));
      if (f == "empty.jpg") CHECK(e.reason() == "empty file");
      if (f == "truncated.jpg") CHECK(e.reason().find("truncated") != std::string::npos);
    }
    CHECK(threw);
    ++count;
  }
  CHECK(count == 8);
}

TEST_CASE("resize matches PIL Image.resize(BILINEAR): mean abs diff < 0.1, max <= 1") {
  Image src = decode_image(corpus().path("resize_src.png"));
  std::ifstream sizes(corpus().path("resize.txt"));
  int w, h, count = 0;
  while (sizes >> w >> h) {
    CAPTURE(w);
    CAPTURE(h);
    Image r = resize_image(src, w, h);
    std::vector<uint8_t> ref = read_raw(corpus().path("resize_" + std::to_string(w) + "x" + std::to_string(h) + ".ref"));
    REQUIRE(ref.size() == r.px.size());
    Diff d = diff(r.px.data(), ref.data(), ref.size());
    CHECK(d.mean < 0.1);
    CHECK(d.max <= 1);
    MESSAGE("resize ", w, "x", h, ": mean ", d.mean, " max ", d.max);
    ++count;
  }
  CHECK(count == 9);
}

TEST_CASE("CenterCrop offsets match torchvision (round half even, padding when larger)") {
  std::ifstream crops(corpus().path("crops.txt"));
  int w, h, cw, ch, left, top, count = 0;
  while (crops >> w >> h >> cw >> ch >> left >> top) {
    CAPTURE(w); CAPTURE(h); CAPTURE(cw); CAPTURE(ch);
    CropBox b = center_crop_box(w, h, cw, ch);
    CHECK(b.x == left);
    CHECK(b.y == top);
    ++count;
  }
  CHECK(count == 10);
}

TEST_CASE("fused eval pipeline matches torchvision Resize(256)+CenterCrop(224)+ToTensor+Normalize") {
  for (const char* n : {"photo", "photo_tall"}) {
    CAPTURE(n);
    SampleTransform t;
    t.kind = SampleTransform::Kind::resize_center_crop;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
    for (int c = 0; c < 3; ++c) t.mean[c] = mean[c], t.std[c] = stdv[c];
    t.dct_scaling = false;
    std::vector<float> out(t.sample_elems());
    load_sample_file(corpus().path(std::string(n) + ".jpg"), t, 0, 0, out.data());
    std::vector<uint8_t> raw = read_raw(corpus().path(std::string(n) + ".pipeline.f32"));
    REQUIRE(raw.size() == out.size() * 4);
    const float* ref = reinterpret_cast<const float*>(raw.data());
    // One u8 level is 1/255/std ~ 0.0175 after normalization; count how many values differ.
    double sum = 0, mx = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      double e = std::fabs(out[i] - ref[i]);
      sum += e;
      mx = std::max(mx, e);
    }
    double mean_levels = sum / out.size() * 255 * 0.229;
    MESSAGE(n, ": mean diff ", mean_levels, " levels, max ", mx);
    CHECK(mean_levels < 0.1);
    CHECK(mx <= 1.0 / 255 / 0.224 + 1e-5);
    // With DCT-domain scaling (500x375 -> no reduction possible above 256, so still identical).
    t.dct_scaling = true;
    std::vector<float> out2(t.sample_elems());
    load_sample_file(corpus().path(std::string(n) + ".jpg"), t, 0, 0, out2.data());
    CHECK(out2 == out);
  }
}
