// `kiln predict` of a segmentation model on images with equal file names in different folders (issue
// 34, item 2): seg/images/a/x.png and seg/images/b/x.png give a/x_mask.png and b/x_mask.png (the input's
// relative path kept) and two distinct summary.json entries; a second predict into the same --out is
// refused in one line naming an existing file, and --force overwrites. Tiny data: 16 px gray PNGs.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "data/image.h"
#include "data/png_io.h"
#include "support/cli/run_kiln.h"
#include "support/cli/segment_data.h"

using kiln_test::contains;
using kiln_test::run_kiln;
namespace fs = std::filesystem;

namespace {

// A 16x16 gray image with a bright square, and its mask (square = class 1 or 2 by brightness).
void write_pair(const std::string& root, const std::string& rel, int cls, int offset) {
  kiln::Image im, mask;
  im.w = im.h = mask.w = mask.h = 16;
  im.c = mask.c = 1;
  im.px.assign(256, 20);
  mask.px.assign(256, 0);
  for (int y = offset; y < offset + 6; ++y)
    for (int x = offset; x < offset + 6; ++x) {
      im.px[(size_t)(y * 16 + x)] = (uint8_t)(cls == 1 ? 120 : 230);
      mask.px[(size_t)(y * 16 + x)] = (uint8_t)cls;
    }
  fs::create_directories(fs::path(root + "/images/" + rel).parent_path());
  fs::create_directories(fs::path(root + "/masks/" + rel).parent_path());
  kiln::write_png(root + "/images/" + rel, im);
  kiln::write_png(root + "/masks/" + rel, mask);
}

}  // namespace

TEST_CASE("cli segment predict: equal file names in two folders keep their relative paths, an existing output needs --force") {
  const std::string dir = kiln_test::cli_temp_dir("segment_predict_paths");
  const std::string seg = dir + "/seg", out = dir + "/pred";
  for (int i = 0; i < 4; ++i) {
    write_pair(seg, "a/x" + std::to_string(i) + ".png", 1, 2 + i);
    write_pair(seg, "b/x" + std::to_string(i) + ".png", 2, 3 + i);
  }
  write_pair(seg, "a/x.png", 1, 4);
  write_pair(seg, "b/x.png", 2, 5);
  const std::string model = kiln_test::write_segment_model_file(dir, 16), weights = dir + "/w.safetensors";
  const kiln_test::CliRun t = run_kiln("train --task segment --model " + model + " --data " + seg +
                                       " --channels 1 --epochs 1 --batch 5 --threads 1 --device cpu --out " + dir +
                                       "/run --save " + weights);
  REQUIRE_MESSAGE(t.status == 0, t.output);

  const kiln_test::CliRun p = run_kiln("predict --weights " + weights + " --data " + seg + " --out " + out + " --threads 1");
  REQUIRE_MESSAGE(p.status == 0, p.output);
  CHECK(contains(p.output, "predict: 10 images from"));
  for (const char* f : {"a/x_mask.png", "b/x_mask.png", "a/x_overlay.png", "b/x_overlay.png", "a/x3_mask.png"}) {
    CAPTURE(f);
    CHECK(fs::is_regular_file(out + "/" + f));
  }
  CHECK_FALSE(fs::exists(out + "/x_mask.png"));
  std::ifstream sf(out + "/summary.json");
  const nlohmann::json s = nlohmann::json::parse(sf);
  REQUIRE(s["images"].size() == 10);
  std::set<std::string> stems;
  for (const nlohmann::json& e : s["images"]) stems.insert(e["stem"].get<std::string>());
  CHECK(stems.size() == 10);
  CHECK(stems.count("a/x") == 1);
  CHECK(stems.count("b/x") == 1);

  // Again into the same folder: refused before anything is written, one line; --force overwrites.
  const auto before = fs::last_write_time(out + "/a/x_mask.png");
  const kiln_test::CliRun again = run_kiln("predict --weights " + weights + " --data " + seg + " --out " + out);
  CAPTURE(again.output);
  CHECK(again.status == 1);
  CHECK(contains(again.output, "kiln: error: predict --task segment: --out " + out + " already holds 21 of the files"));
  CHECK(contains(again.output, "pass --force to overwrite them"));
  CHECK(fs::last_write_time(out + "/a/x_mask.png") == before);
  const kiln_test::CliRun forced = run_kiln("predict --weights " + weights + " --data " + seg + " --out " + out + " --force");
  CHECK_MESSAGE(forced.status == 0, forced.output);
}

TEST_CASE("cli segment predict: a segmentation folder's masks/ score the prediction as the training run's validation does") {
  const std::string dir = kiln_test::cli_temp_dir("segment_predict_masks");
  const std::string seg = dir + "/seg", weights = dir + "/w.safetensors";
  for (int i = 0; i < 6; ++i) {
    write_pair(seg + "/train", "x" + std::to_string(i) + ".png", 1 + i % 2, 2 + i);
    if (i < 4) write_pair(seg + "/val", "v" + std::to_string(i) + ".png", 1 + (i + 1) % 2, 3 + i);
  }
  const std::string model = kiln_test::write_segment_model_file(dir, 16);
  const kiln_test::CliRun t = run_kiln("train --task segment --model " + model + " --data " + seg +
                                       " --channels 1 --epochs 2 --batch 3 --lr 0.01 --optimizer adamw --threads 1 "
                                       "--device cpu --out " + dir + "/run --save " + weights);
  REQUIRE_MESSAGE(t.status == 0, t.output);
  const nlohmann::json ledger = kiln_test::last_ledger_line(dir + "/run/runs.jsonl");
  const kiln_test::CliRun p = run_kiln("predict --weights " + weights + " --data " + seg + " --out " + dir + "/pred");
  CAPTURE(p.output);
  REQUIRE(p.status == 0);
  CHECK(contains(p.output, "predict: 4 images from"));
  CHECK(contains(p.output, "against the data's masks: pixel accuracy"));
  std::ifstream sf(dir + "/pred/summary.json");
  const nlohmann::json s = nlohmann::json::parse(sf);
  const nlohmann::json& last = ledger["epochs"].back();
  CHECK(s["metrics"]["pixels"] == last["val_pixels"]);
  CHECK(s["metrics"]["mean_iou"] == last["val_miou"]);
  CHECK(s["metrics"]["pixel_accuracy"] == last["val_pixel_acc"]);
}
