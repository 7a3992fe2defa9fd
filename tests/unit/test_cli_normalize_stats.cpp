// `kiln data FOLDER` and `kiln train --normalize auto` give one set of statistics (issue 34, item 4):
// both are every pixel of every readable training image decoded at full size, and both say so. The
// images are RGB JPEGs of 64-96 px and the model sees 32 px, the case where training once measured
// reduced-scale decodes (a channel's std 0.169 against kiln data's 0.196).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "data/jpeg_encode.h"
#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;
namespace fs = std::filesystem;

namespace {

// The values after `prefix` (up to the next space or line end).
std::string normalize_values(const std::string& output, const std::string& prefix) {
  size_t p = output.find(prefix);
  if (p == std::string::npos) return "(no '" + prefix + "')";
  p += prefix.size();
  const size_t e = output.find_first_of(" \n", p);
  return output.substr(p, e - p);
}

// Sharp, channel-specific detail (stripes and noise), so a reduced-scale decode averages it away.
void write_images(const std::string& dir, int label, int n, uint32_t* state) {
  fs::create_directories(dir);
  for (int i = 0; i < n; ++i) {
    kiln::Image im;
    im.w = 64 + 8 * ((i + label) % 5);
    im.h = 64 + 4 * (i % 9);
    im.c = 3;
    im.px.resize((size_t)im.w * im.h * 3);
    for (int y = 0; y < im.h; ++y)
      for (int x = 0; x < im.w; ++x)
        for (int c = 0; c < 3; ++c) {
          *state = *state * 1664525u + 1013904223u;
          const int stripe = ((x + c) % 2) * 120 + ((y % 3) == 0 ? 60 : 0);
          im.px[((size_t)y * im.w + x) * 3 + c] = (uint8_t)std::min(255, stripe + 40 * label + (int)(*state >> 27));
        }
    kiln::write_jpeg(dir + "/" + std::to_string(i) + ".jpg", im, 95);
  }
}

}  // namespace

TEST_CASE("cli normalize statistics: kiln data and kiln train --normalize auto print the same numbers and say which pixels") {
  const std::string d = kiln_test::cli_temp_dir("normalize_stats");
  uint32_t state = 99;
  for (int k = 0; k < 2; ++k) {
    write_images(d + "/set/train/c" + std::to_string(k), k, 6, &state);
    write_images(d + "/set/val/c" + std::to_string(k), k, 2, &state);
  }
  const kiln_test::CliRun data = run_kiln("data " + d + "/set --out " + d + "/sheets --workers 1");
  REQUIRE_MESSAGE(data.status == 0, data.output);
  const kiln_test::CliRun train =
      run_kiln("train --model small_cnn --data " + d + "/set --image-size 32 --normalize auto --epochs 1 --batch 6 "
               "--threads 1 --workers 2 --out " + d + "/out");
  REQUIRE_MESSAGE(train.status == 0, train.output);
  CAPTURE(data.output);
  CAPTURE(train.output);
  const std::string from_data = normalize_values(data.output, "normalize auto):\n  --normalize ");
  const std::string from_train = normalize_values(train.output, "normalize auto: --normalize ");
  CHECK(from_data.size() == 41);  // 6 values of 4 decimals
  CHECK(from_data == from_train);
  const std::string scope = "every pixel of every readable training image, decoded at full size";
  CHECK(contains(data.output, scope));
  CHECK(contains(train.output, scope));
  // One "--normalize " in kiln data's report: the values (tests/parity/test_channel_stats.cpp reads the first).
  CHECK(kiln_test::count_of(data.output, "--normalize ") == 1);
}
