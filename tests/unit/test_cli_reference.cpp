// docs/cli.md's help blocks are the built command's --help, command by command (scripts/cli_reference.sh
// writes them), so the reference page cannot drift from the flags.
#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "support/cli/run_kiln.h"

TEST_CASE("docs/cli.md matches --help") {
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/docs/cli.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::regex block(R"(<!-- help: ([a-z -]+|\(none\)) -->\n```text\n([\s\S]*?)\n```)");
  int blocks = 0;
  for (std::sregex_iterator it(doc.begin(), doc.end(), block), end; it != end; ++it) {
    ++blocks;
    const std::string command = (*it)[1].str() == "(none)" ? "" : (*it)[1].str();
    const kiln_test::CliRun r = kiln_test::run_kiln(command + " --help");
    REQUIRE(r.status == 0);
    std::string help = r.output;
    while (!help.empty() && (help.back() == '\n' || help.back() == ' ')) help.pop_back();
    CHECK_MESSAGE(help == (*it)[2].str(), "docs/cli.md's block for `kiln ", command,
                  " --help` differs from the command's: run scripts/cli_reference.sh");
  }
  CHECK(blocks >= 10);  // every command of `kiln --help`
}
