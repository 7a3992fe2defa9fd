// Test helpers for the `kiln` command: run the built binary (KILN_BINARY_DIR "/kiln") with
// arguments, capture stdout+stderr and the exit status; make small npy data folders.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/io/npy.h"
#include "tests/support/process_temp_dir.h"

namespace kiln_test {

struct CliRun {
  int status = -1;  // exit status (-1: did not exit normally)
  std::string output;
};

// Runs a shell command line, collecting its standard output (the caller adds 2>&1) and exit status.
inline CliRun run_command(const std::string& cmd) {
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline CliRun run_kiln(const std::string& args, const std::string& env = "") {
  return run_command(env + " OMP_WAIT_POLICY=passive " + std::string(KILN_BINARY_DIR) + "/kiln " + args + " 2>&1");
}

inline std::string cli_temp_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = process_temp_root("kiln_test_cli_") / name;  // removed at exit
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// n samples of (c, s, s) f32 in [0,1) whose class (0..k-1) is visible in the mean brightness of
// the top rows, so a small model can learn it; deterministic.
inline void make_npy_folder(const std::string& dir, int64_t n, int64_t c, int64_t s, int64_t k) {
  std::vector<float> x((size_t)(n * c * s * s));
  std::vector<int64_t> y((size_t)n);
  uint32_t state = 12345;
  auto next = [&]() {
    state = state * 1664525u + 1013904223u;
    return (float)(state >> 8) / 16777216.0f;
  };
  for (int64_t i = 0; i < n; ++i) {
    y[(size_t)i] = i % k;
    for (int64_t j = 0; j < c * s * s; ++j) {
      const int64_t row = (j % (s * s)) / s;
      const float signal = row < s / 2 ? (float)(y[(size_t)i]) / (float)k : 0.0f;
      x[(size_t)(i * c * s * s + j)] = 0.5f * next() + signal;
    }
  }
  kiln::write_npy(dir + "/x.npy", kiln::host_array_from(kiln::DType::f32, {n, c, s, s}, x));
  kiln::write_npy(dir + "/y.npy", kiln::host_array_from(kiln::DType::i64, {n}, y));
}

inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// The last non-empty line of a run ledger (OUT/runs.jsonl) as JSON; null when there is none.
inline nlohmann::json last_ledger_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  return last.empty() ? nlohmann::json() : nlohmann::json::parse(last);
}

// The end records of a run ledger (one a finished or failed run, in order; engine/train/run_ledger.h):
// lines with "record":"end", and lines from before records (no "record" key).
inline std::vector<nlohmann::json> ledger_end_records(const std::string& path) {
  std::vector<nlohmann::json> v;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("record") || j["record"] == "end") v.push_back(j);
  }
  return v;
}

}  // namespace kiln_test
