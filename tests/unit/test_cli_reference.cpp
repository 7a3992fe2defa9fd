// docs/cli.md's help blocks are the built command's --help, command by command (scripts/cli_reference.sh
// writes them), so the reference page cannot drift from the flags.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "support/cli/run_kiln.h"

TEST_CASE("docs/cli.md matches --help") {
  std::ifstream in(std::string(KILN_SOURCE_DIR) + "/docs/cli.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  // Blocks: "<!-- help: COMMAND -->\n```text\nHELP\n```" (COMMAND: words of [a-z -], or "(none)"). Plain string
  // search, not std::regex: libstdc++'s regex recurses once per character of a block and overflowed the stack
  // on the longest help block in the sanitizer build (-O0 test code).
  const std::string open = "<!-- help: ", close_tag = " -->\n```text\n", fence = "\n```";
  int blocks = 0;
  for (size_t at = doc.find(open); at != std::string::npos; at = doc.find(open, at + 1)) {
    const size_t name_begin = at + open.size(), name_end = doc.find(close_tag, name_begin);
    REQUIRE_MESSAGE(name_end != std::string::npos, "docs/cli.md: a help marker at byte ", at, " has no ```text block");
    const std::string name = doc.substr(name_begin, name_end - name_begin);
    const bool words = !name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz -") == std::string::npos;
    REQUIRE_MESSAGE((words || name == "(none)"), "docs/cli.md: help marker '", name, "' is not a command");
    const size_t body_begin = name_end + close_tag.size(), body_end = doc.find(fence, body_begin);
    REQUIRE_MESSAGE(body_end != std::string::npos, "docs/cli.md: the block of '", name, "' is not closed");
    ++blocks;
    const std::string command = name == "(none)" ? "" : name;
    const kiln_test::CliRun r = kiln_test::run_kiln(command + " --help");
    REQUIRE(r.status == 0);
    std::string help = r.output;
    while (!help.empty() && (help.back() == '\n' || help.back() == ' ')) help.pop_back();
    CHECK_MESSAGE(help == doc.substr(body_begin, body_end - body_begin), "docs/cli.md's block for `kiln ", command,
                  " --help` differs from the command's: run scripts/cli_reference.sh");
  }
  CHECK(blocks >= 10);  // every command of `kiln --help`
}
