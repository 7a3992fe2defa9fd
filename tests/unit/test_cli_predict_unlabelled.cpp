// `kiln predict` on images without labels (issue 34, item 1): a flat folder, one image file, a glob,
// a list of files and a CSV of paths only each write one row per image, path,class,score and the
// top classes (all of them when the model has fewer than 5), and print no accuracy; training on a
// CSV of paths only is one clear error. Tiny data: a 2-class 16 px grayscale JPEG folder.
#include <doctest/doctest.h>

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> v;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) v.push_back(line);
  return v;
}

}  // namespace

TEST_CASE("cli predict unlabelled: a flat folder, a file, a glob, a list and a paths-only CSV write path,class,score") {
  const std::string d = kiln_test::cli_temp_dir("predict_unlabelled");
  kiln_test::make_image_folder(d + "/set", 2, 8, 16, 1, false);
  const kiln_test::CliRun t =
      run_kiln("train --model small_cnn --data " + d + "/set --channels 1 --epochs 1 --batch 8 --threads 1 --out " + d +
               "/out --save " + d + "/w.safetensors");
  REQUIRE_MESSAGE(t.status == 0, t.output);
  // A flat folder: the val images of both classes side by side, no class folders.
  fs::create_directories(d + "/flat");
  for (const char* k : {"class0", "class1"})
    for (int i = 0; i < 4; ++i)
      fs::copy_file(d + "/set/val/" + k + "/" + std::to_string(i) + ".jpg",
                    d + "/flat/" + k + "_" + std::to_string(i) + ".jpg");
  std::ofstream(d + "/paths.csv") << "path\nflat/class0_0.jpg\nflat/class1_1.jpg\nflat/class1_2.jpg\n";
  struct Case {
    std::string data;
    size_t rows;
  };
  const std::vector<Case> cases = {{d + "/flat", 8},
                                   {d + "/flat/class0_0.jpg", 1},
                                   {"'" + d + "/flat/class1_*.jpg'", 4},
                                   {d + "/flat/class0_1.jpg " + d + "/flat/class1_3.jpg", 2},
                                   {d + "/paths.csv", 3}};
  for (const Case& c : cases) {
    CAPTURE(c.data);
    const std::string out = d + "/p.csv";
    fs::remove(out);
    const kiln_test::CliRun p = run_kiln("predict --weights " + d + "/w.safetensors --data " + c.data + " --out " + out);
    CAPTURE(p.output);
    REQUIRE(p.status == 0);
    CHECK(contains(p.output, "predict: " + std::to_string(c.rows) + " images from "));
    CHECK(contains(p.output, "(no labels: "));
    CHECK_FALSE(contains(p.output, "; accuracy"));
    const std::vector<std::string> rows = lines_of(out);
    REQUIRE(rows.size() == c.rows + 1);
    // 2 classes: fewer than 5, so the top list is all of them.
    CHECK(rows[0] == "path,class,score,class_1,score_1,class_2,score_2");
    for (size_t i = 1; i < rows.size(); ++i) {
      CAPTURE(rows[i]);
      CHECK(contains(rows[i], ".jpg,class"));
      CHECK(std::count(rows[i].begin(), rows[i].end(), ',') == 6);
    }
  }
  // The whole flat folder: the two scores of a row sum to 1, class == class_1 and score == score_1.
  run_kiln("predict --weights " + d + "/w.safetensors --data " + d + "/flat --out " + d + "/f.csv");
  for (const std::string& row : lines_of(d + "/f.csv")) {
    if (row.rfind("path,", 0) == 0) continue;
    std::vector<std::string> f;
    std::stringstream ss(row);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    REQUIRE(f.size() == 7);
    CHECK(f[1] == f[3]);
    CHECK(f[2] == f[4]);
    CHECK(std::stod(f[4]) >= std::stod(f[6]));
    CHECK(std::stod(f[4]) + std::stod(f[6]) == doctest::Approx(1.0).epsilon(1e-5));
  }
  // Labelled data still prints the accuracy.
  const kiln_test::CliRun l =
      run_kiln("predict --weights " + d + "/w.safetensors --data " + d + "/set --out " + d + "/l.csv");
  CHECK(contains(l.output, "; accuracy "));
  // A glob that matches nothing, and training on paths only, are one-line errors.
  const kiln_test::CliRun g =
      run_kiln("predict --weights " + d + "/w.safetensors --data '" + d + "/flat/none_*.jpg' --out " + d + "/g.csv");
  CHECK(g.status != 0);
  CHECK(contains(g.output, "the pattern matches no image file"));
  const kiln_test::CliRun tr = run_kiln("train --model small_cnn --data " + d + "/paths.csv --image-size 16 --out " + d + "/o2");
  CHECK(tr.status != 0);
  CHECK(contains(tr.output, "a list of paths without labels"));
  const kiln_test::CliRun v = run_kiln("train --model small_cnn --data " + d + "/set --val " + d + "/paths.csv --out " + d + "/o3");
  CHECK(v.status != 0);
  CHECK(contains(v.output, "--val " + d + "/paths.csv: a list of paths without labels"));
  // kiln data on it: no classes, the images still looked at (sizes, statistics).
  const kiln_test::CliRun k = run_kiln("data " + d + "/paths.csv --out " + d + "/sheets");
  CAPTURE(k.output);
  CHECK(k.status == 0);
  CHECK(contains(k.output, "(none: a list of paths without labels)"));
  CHECK(contains(k.output, "--normalize "));
}
