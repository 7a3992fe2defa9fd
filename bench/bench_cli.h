// The command line of every bench program, as the `kiln` command has it (CLI11): --help prints the
// flags and exits 0; an unknown flag or a malformed value is one line "NAME: error: ... (see NAME --help)"
// and exit status 2; an exception from the benchmark is one line "NAME: error: WHAT" and exit status 1,
// never an uncaught exception. Header only: each bench program is one .cpp.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

namespace kiln_bench {

// Parses argv into `app`'s options, then runs body() (the benchmark) and returns its status.
template <typename Body>
int run(CLI::App& app, int argc, char** argv, Body&& body) {
  const std::string name = app.get_name();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s (see %s --help)\n", name.c_str(), e.what(), name.c_str());
    return 2;
  }
  try {
    return body();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
}

}  // namespace kiln_bench
