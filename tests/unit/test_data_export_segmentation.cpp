// `kiln export-images --segmentation` (data/export_segmentation.h) over a tiny IDX folder made
// here (not Debian's Fashion-MNIST, so the test runs anywhere): the same seed gives the same bytes,
// masks mark exactly the inked pixels with item class + 1, the folder opens as segmentation data
// with classes.txt's 11 names, the same request is skipped, another replaces kiln's own export, and
// a folder holding a user's file is refused (the command too, with its exit status).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/export_segmentation.h"
#include "data/png_io.h"
#include "data/segmentation_source.h"
#include "support/cli/run_kiln.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;
namespace fs = std::filesystem;

namespace {

std::string be32(uint32_t v) {
  std::string s;
  for (int sh = 24; sh >= 0; sh -= 8) s.push_back((char)(v >> sh));
  return s;
}

// n items of 28x28: a solid block (value 200) with a faint frame (value 30) around it, label i % 10.
void write_fake_fmnist(const std::string& dir, const char* prefix, int n) {
  std::string img = std::string("\0\0\x08\x03", 4) + be32(n) + be32(28) + be32(28);
  std::string lab = std::string("\0\0\x08\x01", 4) + be32(n);
  for (int i = 0; i < n; ++i) {
    const int a = 4 + i % 5, b = 20 + i % 4;
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x) {
        const bool in = x >= a && x < b && y >= a && y < b;
        const bool frame = !in && x >= a - 2 && x < b + 2 && y >= a - 2 && y < b + 2;
        img.push_back((char)(in ? 200 : frame ? 30 : 0));
      }
    lab.push_back((char)(i % 10));
  }
  write_bytes(dir + "/" + prefix + "-images-idx3-ubyte", img);
  write_bytes(dir + "/" + prefix + "-labels-idx1-ubyte", lab);
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("export segmentation: reproducible for a seed, masks mark exactly the ink with class + 1") {
  TempDir t;
  write_fake_fmnist(t / "fm", "train", 30);
  write_fake_fmnist(t / "fm", "t10k", 12);
  ExportSegmentationOptions o;
  o.data = t / "fm";
  o.count = 10;
  o.canvas = 48;
  o.seed = 5;
  o.out = t / "a";
  ExportSegmentationResult r = export_segmentation(o);
  CHECK(r.train == 10);
  CHECK(r.val == 2);
  o.out = t / "b";
  export_segmentation(o);
  o.seed = 6;
  o.out = t / "c";
  export_segmentation(o);
  int differ = 0;
  for (const char* split : {"train", "val"})
    for (const auto& e : fs::directory_iterator(t / (std::string("a/") + split + "/masks"))) {
      const std::string name = e.path().filename().string();
      for (const char* kind : {"images", "masks"}) {
        const std::string rel = std::string(split) + "/" + kind + "/" + name;
        CHECK(slurp(t / ("a/" + rel)) == slurp(t / ("b/" + rel)));
        differ += slurp(t / ("a/" + rel)) != slurp(t / ("c/" + rel));
      }
      const Image img = read_png_mask(t / (std::string("a/") + split + "/images/" + name));
      const Image m = read_png_mask(t / (std::string("a/") + split + "/masks/" + name));
      REQUIRE(img.w == 48);
      REQUIRE(m.w == 48);
      int inked = 0;
      for (size_t i = 0; i < m.px.size(); ++i) {
        REQUIRE(m.px[i] <= 10);
        // Noise (<= 15) and faint frames (30) are under the threshold: mask > 0 exactly where ink shows.
        REQUIRE((m.px[i] > 0) == (img.px[i] > o.threshold));
        inked += m.px[i] > 0;
      }
      CHECK(inked >= 14 * 14);  // at least one item's solid block
    }
  CHECK(differ > 0);
  CHECK(slurp(t / "a/classes.txt").rfind("background\nT-shirt/top\n", 0) == 0);
  // It opens as segmentation data: splits, 11 class names.
  SegmentationDataOptions so;
  so.data = t / "a";
  so.image.image_size = "32";
  so.image.workers = 1;
  TrainData d = open_segmentation_train_data(so, Device::cpu());
  CHECK(d.num_classes == 11);
  CHECK(d.classes.at(10) == "Ankle boot");
  CHECK(d.train->size() == 10);
  REQUIRE(d.val);
  CHECK(d.val->size() == 2);
}

TEST_CASE("export segmentation: same request skipped, another replaces kiln's export, a user folder is refused") {
  TempDir t;
  write_fake_fmnist(t / "fm", "train", 20);
  ExportSegmentationOptions o;
  o.data = t / "fm";
  o.count = 6;
  o.canvas = 32;
  o.out = t / "out";
  CHECK_FALSE(export_segmentation(o).skipped);
  CHECK(export_segmentation(o).skipped);
  o.count = 5;
  ExportSegmentationResult r = export_segmentation(o);
  CHECK_FALSE(r.skipped);
  CHECK(r.replaced.find("count") != std::string::npos);
  CHECK_FALSE(fs::exists(t / "out/train/images/000005.png"));  // the old export's files went
  // A user's folder: refused naming the foreign file, nothing written.
  write_bytes(t / "mine/notes.txt", "keep me");
  o.out = t / "mine";
  CHECK_THROWS_WITH_AS(export_segmentation(o), doctest::Contains("notes.txt"), Error);
  CHECK_FALSE(fs::exists(t / "mine/train"));
  // A user's file inside an export is foreign too, even with the export's marker present.
  o.out = t / "out";
  o.count = 4;
  write_bytes(t / "out/train/images/photo.jpg", "x");
  CHECK_THROWS_WITH_AS(export_segmentation(o), doctest::Contains("photo.jpg"), Error);
  CHECK(fs::exists(t / "out/train/images/photo.jpg"));
  o.force = true;
  export_segmentation(o);
  CHECK(fs::exists(t / "out/train/images/photo.jpg"));  // --force writes, and deletes nothing of the user's
  CHECK(fs::exists(t / "out/train/masks/000003.png"));
}

TEST_CASE("cli export-images --segmentation: writes, skips, refuses a user folder with status 1") {
  TempDir t;
  write_fake_fmnist(t / "fm", "train", 20);
  const std::string base = "export-images --data " + t / "fm" + " --count 4 --canvas 32 --segmentation ";
  CliRun r = run_kiln(base + t / "seg");
  CAPTURE(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("4 train + 1 val segmentation samples") != std::string::npos);
  CHECK(run_kiln(base + t / "seg").output.find("already holds") != std::string::npos);
  write_bytes(t / "user/x.txt", "x");
  r = run_kiln(base + t / "user");
  CHECK(r.status == 1);
  CHECK(r.output.find("kiln: error: ") != std::string::npos);
  CHECK(r.output.find("x.txt") != std::string::npos);
  CHECK(run_kiln(base + t / "seg2 --out " + t / "o").status == 2);
  CHECK(run_kiln("export-images --count 3").status == 2);
}

TEST_CASE("export segmentation: --classes shapes masks each item by its outline group, the four equally common") {
  TempDir t;
  write_fake_fmnist(t / "fm", "train", 40);  // labels 0..9, four of each
  write_fake_fmnist(t / "fm", "t10k", 10);
  ExportSegmentationOptions o;
  o.data = t / "fm";
  o.count = 200;
  o.canvas = 28;  // one item per canvas, covering it: the mask holds one group
  o.min_items = o.max_items = 1;
  o.classes = "shapes";
  o.out = t / "s";
  export_segmentation(o);
  CHECK(slurp(t / "s/classes.txt") == "background\ntop\ntrouser\nfootwear\nbag\n");
  int per_group[5] = {0, 0, 0, 0, 0};
  for (const auto& e : fs::directory_iterator(t / "s/train/masks")) {
    const Image m = read_png_mask(e.path().string());
    int group = 0;
    for (uint8_t v : m.px) {
      REQUIRE(v <= 4);
      if (v) {
        REQUIRE((group == 0 || group == v));
        group = v;
      }
    }
    REQUIRE(group > 0);
    ++per_group[group];
  }
  // Drawn by item, "top" (5 of the 10 labels) would take half; drawn by group each takes about 50.
  for (int g = 1; g <= 4; ++g) {
    CHECK(per_group[g] >= 30);
    CHECK(per_group[g] <= 70);
  }
  SegmentationDataOptions so;
  so.data = t / "s";
  so.image.image_size = "28";
  so.image.workers = 1;
  TrainData d = open_segmentation_train_data(so, Device::cpu());
  CHECK(d.num_classes == 5);
  CHECK(d.classes.at(3) == "footwear");
  // The items export of the same folder is another request: it replaces the shapes export.
  o.classes = "items";
  const ExportSegmentationResult r = export_segmentation(o);
  CHECK_FALSE(r.skipped);
  CHECK(r.replaced.find("classes") != std::string::npos);
  o.classes = "outlines";
  CHECK_THROWS_WITH_AS(export_segmentation(o), doctest::Contains("--classes must be items or shapes"), Error);
}
