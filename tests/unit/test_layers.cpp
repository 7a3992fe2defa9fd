// The `layers` test: every `#include "..."` in kiln's source folders goes down (or stays on) the
// layer order written in docs/architecture.md; no source file lives outside a listed folder. And the
// checker's own test: a planted upward include in a temporary tree is found, named, and counted.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/layer_check.h"

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "cannot read ", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << s;
}

}  // namespace

TEST_CASE("layers") {
  const fs::path root = KILN_SOURCE_DIR;
  const kiln_test::LayerOrder order = kiln_test::parse_layer_order(read_text(root / "docs/architecture.md"));
  const kiln_test::LayerReport r = kiln_test::check_layers(root, order);
  MESSAGE("layers: ", r.edges, " include edges checked, ", r.upward.size(), " go up");
  for (const std::string& u : r.upward) MESSAGE("upward: ", u);
  for (const std::string& u : r.unplaced) MESSAGE("in no listed folder: ", u);
  CHECK(r.edges > 500);  // the scan really read the tree
  CHECK(r.upward.empty());
  CHECK(r.unplaced.empty());
}

TEST_CASE("layers: the checker finds a planted upward include") {
  const fs::path root = fs::temp_directory_path() / "kiln_layers_planted";
  fs::remove_all(root);
  const std::string doc = "# order\n```layers\nlow\nmid/a mid/b\nhigh\n```\n";
  write_text(root / "low/base.h", "#pragma once\n#include <vector>\n");
  write_text(root / "mid/a/a.h", "#pragma once\n#include \"low/base.h\"\n#include \"mid/b/b.h\"\n");
  write_text(root / "mid/b/b.h", "#pragma once\n#include \"mid/a/a.h\"\n");  // same layer: allowed
  write_text(root / "high/top.cpp", "#include \"mid/a/a.h\"\n#include \"local.h\"\n");
  write_text(root / "high/local.h", "#pragma once\n");
  const kiln_test::LayerOrder order = kiln_test::parse_layer_order(doc);

  SUBCASE("a clean tree passes") {
    const kiln_test::LayerReport r = kiln_test::check_layers(root, order);
    CHECK(r.upward.empty());
    CHECK(r.unplaced.empty());
    CHECK(r.edges == 5);  // local.h resolves next to its includer
  }
  SUBCASE("an upward include fails, naming file, line and layers") {
    write_text(root / "low/base.cpp", "#include \"low/base.h\"\n\n#include \"high/local.h\"\n");
    const kiln_test::LayerReport r = kiln_test::check_layers(root, order);
    REQUIRE(r.upward.size() == 1);
    CHECK(r.upward[0] == "low/base.cpp:3 includes high/local.h (high is above low)");
  }
  SUBCASE("a file in no listed folder is reported") {
    write_text(root / "mid/c.cpp", "#include \"low/base.h\"\n");
    const kiln_test::LayerReport r = kiln_test::check_layers(root, order);
    CHECK(r.unplaced == std::vector<std::string>{"mid/c.cpp"});
  }
  SUBCASE("an order without a layers block is an error") {
    CHECK_THROWS(kiln_test::parse_layer_order("no block here"));
    CHECK_THROWS(kiln_test::parse_layer_order("```layers\na\na\n```\n"));
  }
  fs::remove_all(root);
}
