// The one mean/std definition (data/channel_stats.h) vs numpy: `kiln train --normalize auto`'s
// scan (image_channel_stats) and `kiln data`'s report give numpy's mean and std over every decoded
// pixel of a folder of mixed sizes and modes. The folder and numpy's numbers are written at run time
// by tests/support/data/channel_stats.py (/usr/bin/python3 + PIL + numpy) into a temp folder; its
// second line (the mean of per-image means) shows the folder tells the two definitions apart.
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

#include "data/channel_stats.h"
#include "data/data_report.h"
#include "data/dataset.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

struct Folder {
  fs::path dir;
  std::vector<double> numpy, per_image;  // mean0..2 std0..2; per-image mean0..2
  Folder() {
    dir = fs::path(KILN_BINARY_DIR) / ("channel_stats_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    const std::string cmd = "/usr/bin/python3 " + std::string(KILN_SOURCE_DIR) +
                            "/tests/support/data/channel_stats.py " + dir.string() + " > " + dir.string() +
                            ".log 2>&1";
    REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "channel_stats.py failed, see " << dir.string() << ".log");
    std::ifstream in(dir / "stats.txt");
    std::string l1, l2;
    REQUIRE(std::getline(in, l1));
    REQUIRE(std::getline(in, l2));
    std::istringstream a(l1), b(l2);
    for (double v; a >> v;) numpy.push_back(v);
    for (double v; b >> v;) per_image.push_back(v);
    REQUIRE(numpy.size() == 6);
    REQUIRE(per_image.size() == 3);
  }
  ~Folder() {
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::remove(dir.string() + ".log", ec);
  }
};

}  // namespace

TEST_CASE("mean/std: --normalize auto's scan and kiln data's report both give numpy's numbers") {
  Folder f;
  // The folder separates the definitions by far more than any tolerance below.
  for (int c = 0; c < 3; ++c) CHECK(std::abs(f.per_image[c] - f.numpy[c]) > 0.1);

  const ImageDataset ds = image_folder(f.dir.string());
  REQUIRE(ds.size() == 6);
  float mean[3], stdv[3];
  // min_side 32: no file is large enough for a reduced DCT decode, so every pixel is the full decode.
  CHECK(image_channel_stats(ds, 3, 32, 2, 0, mean, stdv) == 6);
  for (int c = 0; c < 3; ++c) {
    CAPTURE(c);
    CHECK(std::abs(mean[c] - f.numpy[c]) < 1e-6);
    CHECK(std::abs(stdv[c] - f.numpy[3 + c]) < 1e-6);
  }

  std::ostringstream os;
  DataReportOptions o;
  o.path = f.dir.string();
  o.out_dir = "";
  o.workers = 2;
  o.out = &os;
  REQUIRE(run_data_report(o) == 0);
  const std::string r = os.str();
  const size_t at = r.find("--normalize ");
  REQUIRE_MESSAGE(at != std::string::npos, r);
  double m[3], s[3];
  REQUIRE(std::sscanf(r.c_str() + at, "--normalize %lf,%lf,%lf:%lf,%lf,%lf", &m[0], &m[1], &m[2], &s[0], &s[1],
                      &s[2]) == 6);
  for (int c = 0; c < 3; ++c) {
    CAPTURE(c);
    CHECK(std::abs(m[c] - f.numpy[c]) < 6e-5);  // printed with 4 decimals
    CHECK(std::abs(s[c] - f.numpy[3 + c]) < 6e-5);
  }
}
