// Test helper for tests that drive scripts (tools/gpu-check, the dependency bundle): run a shell
// command, capture its stdout + stderr and exit status (128 + the signal when killed), and read a
// whole text file. Not for the kiln command itself (support/cli/run_kiln.h sets its environment).
#pragma once
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace kiln_test {

struct ShellRun {
  std::string out;
  int status = -1;
};

inline ShellRun run_shell(const std::string& cmd) {
  ShellRun r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int w = ::pclose(p);
  r.status = WIFEXITED(w) ? WEXITSTATUS(w) : 128 + WTERMSIG(w);
  return r;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace kiln_test
