// Every bench program speaks the `kiln` command's language (issue 34, item 10): --help prints its flags
// and exits 0; an unknown flag is one line "NAME: error: ..." and exit status 2, never an uncaught
// exception (bench_alloc --help once aborted in read_trace, bench_loader took --help for a folder,
// bench_decode started a benchmark). The programs are bench/*.cpp, found in the build folder; a build
// without them (KILN_BENCH=OFF) skips with a message.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "support/cli/run_kiln.h"

using kiln_test::contains;
namespace fs = std::filesystem;

TEST_CASE("bench programs: --help exits 0 with the flags, an unknown flag is one error line and status 2") {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "bench"))
    if (e.path().extension() == ".cpp") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  REQUIRE(names.size() >= 10);
  int ran = 0;
  for (const std::string& name : names) {
    CAPTURE(name);
    const std::string bin = std::string(KILN_BINARY_DIR) + "/" + name;
    if (!fs::exists(bin)) continue;
    ++ran;
    const kiln_test::CliRun help = kiln_test::run_command(bin + " --help 2>&1");
    CAPTURE(help.output);
    CHECK(help.status == 0);
    CHECK(contains(help.output, "Usage: " + name + " [OPTIONS]"));
    CHECK(contains(help.output, "-h,--help"));
    const kiln_test::CliRun bad = kiln_test::run_command(bin + " --no-such-flag 2>&1");
    CAPTURE(bad.output);
    CHECK(bad.status == 2);
    CHECK(bad.output.rfind(name + ": error: ", 0) == 0);
    CHECK(std::count(bad.output.begin(), bad.output.end(), '\n') == 1);
    CHECK_FALSE(contains(bad.output, "terminate called"));
  }
  if (ran == 0) MESSAGE("skipped: no bench program in " KILN_BINARY_DIR " (built with KILN_BENCH=OFF?)");
}
