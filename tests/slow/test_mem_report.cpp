// The HTML memory report in a real browser: `kiln mem --report` and `kiln train --memory-report`
// write pages that headless Chromium (Debian's chromium) loads; the test checks the sections and
// numbers in the page and that the screenshot is a PNG with a drawing on it (many colours, not one
// flat background). Skips with a message when chromium is not installed.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/decode.h"
#include "support/chromium.h"
#include "support/cli/run_kiln.h"

using kiln_test::check_screenshot;
using kiln_test::contains;
using kiln_test::have_chromium;
using kiln_test::read_all;
using kiln_test::run_kiln;

namespace {

// Screenshot of file://html into png; returns chromium's exit status.
int screenshot(const std::string& html, const std::string& png) {
  const std::string cmd = "timeout 120 chromium --headless --disable-gpu --no-sandbox --hide-scrollbars "
                          "--user-data-dir=" + std::filesystem::path(png).parent_path().string() +
                          "/chrome-profile --screenshot=" + png + " --window-size=1200,1600 file://" + html +
                          " > /dev/null 2>&1";
  return std::system(cmd.c_str());
}

void check_page(const std::string& page) {
  for (const char* id : {"id=accounts", "id=timeline", "id=layers", "id=segments", "<polygon", "layer1.0.conv1"})
    CHECK_MESSAGE(contains(page, id), id);
  kiln_test::check_no_network(page);
}

}  // namespace

TEST_CASE("memory report: kiln mem --report renders in headless chromium") {
  if (!have_chromium()) {
    MESSAGE("SKIPPED: chromium is not installed (apt-get install chromium)");
    return;
  }
  const std::string dir = kiln_test::cli_temp_dir("mem_report");
  const std::string html = dir + "/mem.html", png = dir + "/mem.png";
  auto r = run_kiln("mem --model resnet18_small --batch 8 --image-size 32 --optimizer adamw --report " + html +
                    " --json");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto j = nlohmann::json::parse(r.output);
  const std::string page = read_all(html);
  check_page(page);
  // The page shows the predicted peak the command printed (exact bytes in the title attribute).
  CHECK(contains(page, "title='" + std::to_string(j["peak_allocated"].get<int64_t>()) + " B'"));
  REQUIRE(screenshot(html, png) == 0);
  check_screenshot(png, 1200, 1600, 20, 10000);  // text, the tag colours of the timeline and the segment map; the stacked timeline alone covers > 10000
}

TEST_CASE("memory report: kiln train --memory-report has measured beside predicted") {
  if (!have_chromium()) {
    MESSAGE("SKIPPED: chromium is not installed (apt-get install chromium)");
    return;
  }
  const std::string dir = kiln_test::cli_temp_dir("train_report"), data = dir + "/data";
  std::filesystem::create_directories(data);
  kiln_test::make_npy_folder(data, 8, 3, 16, 4);
  const std::string html = dir + "/train.html", png = dir + "/train.png";
  auto r = run_kiln("train --model resnet18_small --data " + data + " --num-classes 4 --batch 4 --epochs 1 "
                    "--threads 2 --device cpu --checkpoint 3 --out " + dir + "/out --memory-report " + html);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const std::string page = read_all(html);
  check_page(page);
  CHECK(contains(page, "measured (first step)"));
  CHECK(contains(page, "Measured allocator trace"));
  REQUIRE(screenshot(html, png) == 0);
  check_screenshot(png, 1200, 1600, 20, 10000);  // text, the tag colours of the timeline and the segment map; the stacked timeline alone covers > 10000
}
