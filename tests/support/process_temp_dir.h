// A test process's own folder under TMPDIR (PREFIX + pid), removed with everything in it when the test program
// exits: ctest runs one test case a process, so the files of a CLI or oracle test are gone after its case (they
// piled up in /tmp by the thousand before: tens of MB a case). KILN_TEST_KEEP_TMP=1 keeps them, to look at a
// failure's files. The pid is read at exit, so a forked child that exits removes only its own folders.
// Test-only; nothing here runs in kiln itself.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace kiln_test {

struct ProcessTempDirs {
  std::vector<std::string> prefixes;  // each folder handed out: TMPDIR/PREFIX<pid>
  static std::filesystem::path root(const std::string& prefix) {
    return std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()));
  }
  ~ProcessTempDirs() {
    if (std::getenv("KILN_TEST_KEEP_TMP")) return;
    for (const std::string& p : prefixes) {
      std::error_code ec;
      std::filesystem::remove_all(root(p), ec);
    }
  }
};

// TMPDIR/PREFIX<pid> (not created here), removed at exit.
inline std::filesystem::path process_temp_root(const std::string& prefix) {
  static ProcessTempDirs dirs;
  if (std::find(dirs.prefixes.begin(), dirs.prefixes.end(), prefix) == dirs.prefixes.end())
    dirs.prefixes.push_back(prefix);
  return ProcessTempDirs::root(prefix);
}

}  // namespace kiln_test
