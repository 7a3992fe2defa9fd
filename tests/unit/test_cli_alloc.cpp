// The allocator as `kiln train` users see it: --memory-snapshot / --trace / --alloc-trace write
// the first step's snapshot, Chrome trace and bench_alloc trace; the per-tag peak is printed after
// the first step and after every epoch; on a simulated 64 MiB device ResNet18 at batch 64 x 64 px
// (--force past the pre-run stop) fails with the full OOM account (not a crash) and the remedies
// from meta runs; a run that runs out of memory leaves
// the last checkpoint byte-for-byte intact.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::string& rgb64_dir() {
  static const std::string d = [] {
    std::string p = kiln_test::cli_temp_dir("alloc_rgb64");
    kiln_test::make_npy_folder(p, 64, 3, 64, 2);
    return p;
  }();
  return d;
}

}  // namespace

TEST_CASE("cli alloc: snapshot, Chrome trace, bench trace and per-tag peaks of the first step") {
  const std::string d = kiln_test::cli_temp_dir("alloc_small"), out = kiln_test::cli_temp_dir("alloc_small_out");
  kiln_test::make_npy_folder(d, 16, 1, 8, 2);
  auto r = run_kiln("train --model small_cnn --data " + d + " --epochs 2 --batch 8 --threads 1 --device cpu --out " +
                    out + " --memory-snapshot " + out + "/snap.json --trace " + out + "/trace.json --alloc-trace " +
                    out + "/step.trace --device-memory 256M");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "device memory: cpu limited to 256.00 MiB"));
  CHECK(contains(r.output, "memory after step 1: peak "));
  CHECK(contains(r.output, "memory epoch 1: peak "));
  CHECK(contains(r.output, "memory epoch 2: peak "));
  CHECK(contains(r.output, "param "));
  CHECK(contains(r.output, "grad "));
  CHECK(contains(r.output, "data "));

  const nlohmann::json snap = nlohmann::json::parse(slurp(out + "/snap.json"));
  CHECK(snap.dump().find("segments") != std::string::npos);
  const nlohmann::json trace = nlohmann::json::parse(slurp(out + "/trace.json"));
  CHECK(trace.contains("traceEvents"));
  CHECK(trace["traceEvents"].size() > 10);
  // op spans ("X" events) of the step's kernels, inside the memory counters' window
  int spans = 0, conv_spans = 0, counters = 0;
  for (const auto& e : trace["traceEvents"]) {
    const std::string ph = e.value("ph", "");
    if (ph == "C") ++counters;
    if (ph != "X") continue;
    ++spans;
    CHECK(e["ts"].get<double>() >= 0.0);
    CHECK(e["dur"].get<double>() >= 0.0);
    if (e["name"].get<std::string>().rfind("conv2d_forward", 0) == 0) ++conv_spans;
  }
  CHECK(counters > 10);
  CHECK(spans > 10);
  CHECK(conv_spans > 0);
  std::istringstream lines(slurp(out + "/step.trace"));
  std::string line;
  int allocs = 0, frees = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("a ", 0) == 0) ++allocs;
    if (line.rfind("f ", 0) == 0) ++frees;
  }
  CHECK(allocs > 10);
  CHECK(frees > 10);
}

TEST_CASE("cli alloc: ResNet18 at batch 64 x 64 px on a simulated 64 MiB device: the full OOM account") {
  const std::string out = kiln_test::cli_temp_dir("alloc_oom");
  auto r = run_kiln("train --model resnet18 --data " + rgb64_dir() + " --batch 64 --image-size 64 --epochs 1 "
                    "--threads 2 --device cpu --device-memory 64M --force --out " + out);
  CHECK(r.status == 1);  // an error exit, not a crash (-1) or a signal
  CHECK_MESSAGE(contains(r.output, "kiln: error: out of memory on cpu"), r.output);
  CHECK(contains(r.output, "asked for "));
  CHECK(contains(r.output, "capacity 64.00 MiB"));
  CHECK(contains(r.output, "allocated by tag:"));
  CHECK(contains(r.output, "param "));
  CHECK(contains(r.output, "modules holding the most live bytes:"));
  // The remedies come from the run's plan, as in the stop before the first step, not as proportional
  // guesses from what was live at the failure; the report names where it ran out and the plan's figures there.
  CHECK_FALSE(contains(r.output, "what to try:"));
  CHECK_FALSE(contains(r.output, "halving --batch frees"));
  CHECK(contains(r.output, "the plan did not fit the budget of 64.00 MiB (this run was started with --force)"));
  CHECK(contains(r.output, "the plan for this phase ("));
  CHECK(contains(r.output, "remedies for a budget of 64.00 MiB (each alone: the run's plan with that one change)"));
  // ResNet18's ~43 MiB of weights and as much gradient exceed 64 MiB by themselves: no remedy
  // that keeps the model fits, and none is searched (the remedies themselves, equal to the pre-run
  // stop's: test_cli_mem_stop.cpp, on a model that fits).
  CHECK(contains(r.output, "none can fit: parameters + gradients + optimizer state alone take "));
  CHECK_FALSE(contains(r.output, "\n  --amp: "));
}

TEST_CASE("cli alloc: an out-of-memory run leaves the last checkpoint intact") {
  const std::string out = kiln_test::cli_temp_dir("alloc_ckpt");
  auto first = run_kiln("train --model resnet18 --data " + rgb64_dir() + " --limit 4 --batch 4 --epochs 1 "
                        "--checkpoint-every 1 --threads 2 --device cpu --out " + out);
  REQUIRE_MESSAGE(first.status == 0, first.output);
  const std::string ckpt = out + "/checkpoint.safetensors";
  REQUIRE(std::filesystem::exists(ckpt));
  const std::string before = slurp(ckpt);
  const auto mtime = std::filesystem::last_write_time(ckpt);
  auto oom = run_kiln("train --model resnet18 --data " + rgb64_dir() + " --batch 64 --epochs 2 --resume " + ckpt +
                      " --resume-override --checkpoint-every 1 --threads 2 --device cpu --device-memory 64M --force --out " + out);
  CHECK(oom.status == 1);
  CHECK_MESSAGE(contains(oom.output, "out of memory"), oom.output);
  CHECK(slurp(ckpt) == before);
  CHECK(std::filesystem::last_write_time(ckpt) == mtime);
}

TEST_CASE("cli alloc: a malformed --device-memory is a one-line error") {
  const std::string d = kiln_test::cli_temp_dir("alloc_badmem");
  kiln_test::make_npy_folder(d, 4, 1, 8, 2);
  auto r = run_kiln("train --model small_cnn --data " + d + " --device cpu --device-memory lots --out " + d + "/o");
  CHECK(r.status != 0);
  CHECK(contains(r.output, "kiln: error: "));
  CHECK(contains(r.output, "lots"));
}
