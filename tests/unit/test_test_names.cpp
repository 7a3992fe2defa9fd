// Every doctest name in tests/ is free of ';': CTest splits a name at ';', so such a case is
// registered as two tests that match nothing and fail (it happened twice). Reads the sources, so
// it fails here, in one line naming the file and the case, rather than as two mystery failures. A name
// split over adjacent literals is read whole (a ';' in its second literal once slipped through).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

TEST_CASE("test names: no semicolon in any TEST_CASE name (CTest would split it)") {
  // The name may be several adjacent literals ("part one " "part two"): all of them are the name.
  const std::regex name(R"re(TEST_CASE\s*\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+))re");
  int cases = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(KILN_SOURCE_DIR) / "tests")) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext != ".cpp" && ext != ".h") continue;
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    for (std::sregex_iterator it(text.begin(), text.end(), name), end; it != end; ++it) {
      ++cases;
      const std::string n = (*it)[1].str();
      CHECK_MESSAGE(n.find(';') == std::string::npos, e.path().string(), ": TEST_CASE ", n, " holds ';'");
    }
  }
  CHECK(cases > 200);  // the scan really read the suites
}
