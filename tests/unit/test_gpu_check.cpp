// tools/gpu-check on a machine with no GPU, against stand-ins (tests/support/gpu_check/make_fakes.sh): an
// nvidia-smi that lists an H200, cuda test cases that skip, benchmarks that find no GPU, a PyTorch peer that
// crashes, a compute-sanitizer that refuses the device (or records its commands, or reports errors).
// gpu-check must say FAIL, SKIP or "not run" for every
// one of them, never ok, exit non-zero, print its table and never let its time budget go negative.
// Runs gpu-check with --prebuilt (no configure, no build): about a second per run.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/shell.h"

namespace {

using Run = kiln_test::ShellRun;
using kiln_test::read_text;
using kiln_test::run_shell;

// The table's rows: name -> {result, detail} (columns: 36-wide name, 9-wide result).
struct Row {
  std::string result, detail;
};
std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}
std::map<std::string, Row> table_rows(const std::string& table) {
  std::map<std::string, Row> rows;
  std::istringstream in(table);
  std::string line;
  bool body = false;
  while (std::getline(in, line)) {
    if (line.rfind("check ", 0) == 0) { body = true; continue; }
    if (!body || line.rfind("total ", 0) == 0 || line.rfind("====", 0) == 0 || line.size() < 47) continue;
    rows[trim(line.substr(0, 36))] = Row{trim(line.substr(37, 9)), line.substr(47)};
  }
  return rows;
}

const std::string kSrc = KILN_SOURCE_DIR;
const std::string kDir = std::string(KILN_BINARY_DIR) + "/gpu-check-test";

// Makes the stand-ins in kDir/NAME and runs gpu-check against them with ENV and ARGS.
Run gpu_check(const std::string& name, const std::string& env, const std::string& args, bool gpu = true) {
  const std::string d = kDir + "/" + name;
  const Run mk = run_shell("rm -rf '" + d + "' && bash '" + kSrc + "/tests/support/gpu_check/make_fakes.sh' '" + d +
                           "'" + (gpu ? "" : " no-gpu"));
  REQUIRE_MESSAGE(mk.status == 0, mk.out);
  return run_shell("env PATH='" + d + "/bin':\"$PATH\" KILN_GPU_CHECK_OUT='" + d + "/out' " + env + " bash '" + kSrc +
                   "/tools/gpu-check' --prebuilt '" + d + "/build' " + args);
}

void check_nothing_ok(const std::map<std::string, Row>& rows) {
  for (const auto& kv : rows) {  // no structured binding: clang's C++17 cannot capture one in INFO
    const std::string& name = kv.first;
    const Row& row = kv.second;
    INFO("row '" << name << "': " << row.result << " " << row.detail);
    CHECK(row.result != "ok");
    CHECK(row.result.find("PASS") == std::string::npos);
  }
}

}  // namespace

TEST_CASE("gpu-check: without a GPU no row says ok and every stand-in is FAIL or SKIP with exit 1") {
  const Run r = gpu_check("full", "", "");
  INFO(r.out);
  CHECK(r.status == 1);
  const std::string table = read_text(kDir + "/full/out/table.txt");
  REQUIRE(!table.empty());
  CHECK(r.out.find(table.substr(0, 40)) != std::string::npos);  // printed, not only written
  const auto rows = table_rows(table);
  REQUIRE(rows.size() >= 20);
  check_nothing_ok(rows);
  // The cuda test cases: one prints the shared skip line and exits 0, one doctest did not run, one passed
  // (its summary counts the cases the filter left out as "skipped": that must not make it a skip).
  REQUIRE(rows.count("cuda tests"));
  CHECK(rows.at("cuda tests").result == "FAIL");
  CHECK(rows.at("cuda tests").detail.find("1/3 passed, 0 failed, 2 skipped") != std::string::npos);
  CHECK(rows.at("cuda tests").detail.find("cuda tests skipped: fake") != std::string::npos);
  for (const char* b : {"bench_gpu_gemm", "bench_gpu_conv"}) {
    REQUIRE(rows.count(b));
    CHECK(rows.at(b).result == "FAIL");
    CHECK(rows.at(b).detail.find("found no GPU") != std::string::npos);
  }
  for (const char* t : {"torch resnet18 b256 224 f32", "torch resnet18 b256 224 amp"}) {
    REQUIRE(rows.count(t));
    CHECK(rows.at(t).result == "FAIL");
    CHECK(rows.at(t).detail.find("peer script exit 1") != std::string::npos);
  }
  CHECK(rows.count("compute-sanitizer memcheck") == 0);  // the sanitizer rows are --sanitize's
  for (const char* m : {"mem resnet18 b16 f32", "mem resnet18 b16 --amp", "mem resnet18 b16 --checkpoint 4",
                        "mem resnet18 b16 --accum 4", "kiln resnet18 b256 224 f32", "kiln devices"}) {
    REQUIRE(rows.count(m));
    CHECK(rows.at(m).result == "FAIL");
  }
  // NCCL: no "nccl:" case ran (the stand-in has none), so the row cannot be ok; one GPU: the 2-GPU row skips.
  REQUIRE(rows.count("nccl 1 rank"));
  CHECK(rows.at("nccl 1 rank").result == "not run");
  REQUIRE(rows.count("nccl 2 GPUs"));
  CHECK(rows.at("nccl 2 GPUs").result == "SKIP");
  // The skipped case's escaped name reached the program (a comma splits doctest filters).
  CHECK(read_text(kDir + "/full/out/cuda-tests.log").find("unexpected arguments") == std::string::npos);
}

TEST_CASE("gpu-check: a zero budget leaves every row not run for lack of time and never a negative time") {
  const Run r = gpu_check("budget0", "KILN_GPU_CHECK_BUDGET=0", "");
  INFO(r.out);
  CHECK(r.status == 1);  // the cuda tests did not run: FAIL, not ok
  const auto rows = table_rows(read_text(kDir + "/budget0/out/table.txt"));
  check_nothing_ok(rows);
  REQUIRE(rows.count("cuda tests"));
  CHECK(rows.at("cuda tests").result == "FAIL");
  CHECK(rows.at("cuda tests").detail.find("3 not run: out of time") != std::string::npos);
  for (const char* n : {"bench_gpu_gemm", "bench_gpu_conv", "torch resnet18 b256 224 amp",
                        "mem resnet18 b16 --accum 4"}) {
    REQUIRE(rows.count(n));
    CHECK(rows.at(n).result == "not run");
    CHECK(rows.at(n).detail.find("out of time") != std::string::npos);
  }
  CHECK_FALSE(std::regex_search(r.out, std::regex("(^|[ (])-[0-9]+ ?s")));
  CHECK(r.out.find("timeout: invalid") == std::string::npos);
}

TEST_CASE("gpu-check: --quick has only the cuda-test rows and a driver that answers nothing stops it with FAIL") {
  const Run q = gpu_check("quick", "", "--quick");
  INFO(q.out);
  CHECK(q.status == 1);
  auto rows = table_rows(read_text(kDir + "/quick/out/table.txt"));
  check_nothing_ok(rows);
  CHECK(rows.count("cuda tests") == 1);
  CHECK(rows.count("bench_gpu_gemm") == 0);

  const Run n = gpu_check("nogpu", "", "", /*gpu=*/false);
  INFO(n.out);
  CHECK(n.status == 1);
  rows = table_rows(read_text(kDir + "/nogpu/out/table.txt"));
  check_nothing_ok(rows);
  REQUIRE(rows.count("gpu"));
  CHECK(rows.at("gpu").result == "FAIL");
  REQUIRE(rows.count("cuda tests"));
  CHECK(rows.at("cuda tests").result == "not run");
  CHECK(rows.at("cuda tests").detail.find("no GPU") != std::string::npos);
}

TEST_CASE("gpu-check: the skip line it looks for is the one the cuda tests print") {
  // gpu-check greps this text; tests/support/cuda_test.h prints it. If one changes, both must.
  CHECK(read_text(kSrc + "/tools/gpu-check").find("SKIP_MARK=\"cuda tests skipped:\"") != std::string::npos);
  CHECK(read_text(kSrc + "/tests/support/cuda_test.h").find("MESSAGE(\"cuda tests skipped: \"") != std::string::npos);
}

namespace {
const char* const kSanitizerRows[] = {"compute-sanitizer memcheck", "compute-sanitizer racecheck",
                                      "compute-sanitizer synccheck", "compute-sanitizer initcheck"};
}  // namespace

TEST_CASE("gpu-check --sanitize: memcheck, racecheck, synccheck and initcheck rows, each SKIP when the device is refused") {
  const Run r = gpu_check("san-refused", "", "--sanitize");
  INFO(r.out);
  CHECK(r.status == 3);  // nothing failed, nothing ran on a GPU
  const auto rows = table_rows(read_text(kDir + "/san-refused/out/table.txt"));
  check_nothing_ok(rows);
  for (const char* s : kSanitizerRows) {
    REQUIRE(rows.count(s));
    CHECK(rows.at(s).result == "SKIP");
    CHECK(rows.at(s).detail.find("Device not supported") != std::string::npos);
  }
  CHECK(rows.count("cuda tests") == 0);
  CHECK(rows.count("bench_gpu_gemm") == 0);

  const Run m = gpu_check("san-missing", "KILN_COMPUTE_SANITIZER=/nonexistent/compute-sanitizer", "--sanitize");
  INFO(m.out);
  CHECK(m.status == 3);
  const auto mrows = table_rows(read_text(kDir + "/san-missing/out/table.txt"));
  for (const char* s : kSanitizerRows) {
    REQUIRE(mrows.count(s));
    CHECK(mrows.at(s).result == "SKIP");
    CHECK(mrows.at(s).detail.find("compute-sanitizer not found") != std::string::npos);
  }
}

TEST_CASE("gpu-check --sanitize: the exact commands, over every cuda test case, and tests that skip are FAIL") {
  const std::string log = kDir + "/san-record/sanitizer-commands.txt";
  const Run r = gpu_check("san-record", "FAKE_SANITIZER=record FAKE_SANITIZER_LOG='" + log + "'", "--sanitize");
  INFO(r.out);
  CHECK(r.status == 1);
  const auto rows = table_rows(read_text(kDir + "/san-record/out/table.txt"));
  check_nothing_ok(rows);
  for (const char* s : kSanitizerRows) {  // the fake cuda tests print the skip line: not a GPU result
    REQUIRE(rows.count(s));
    CHECK(rows.at(s).result == "FAIL");
    CHECK(rows.at(s).detail.find("tests skipped under") != std::string::npos);
    CHECK(rows.at(s).detail.find("cuda tests skipped: fake") != std::string::npos);
  }
  const std::string cmds = read_text(log);
  const std::string b = kDir + "/san-record/build";
  CHECK(cmds.find(b + ": --tool memcheck --error-exitcode 99 " + b + "/kiln_tests_cuda\n") != std::string::npos);
  CHECK(cmds.find(b + ": --tool racecheck --error-exitcode 99 " + b +
                  "/kiln_tests_cuda --source-file=*test_hgemm.cpp,*test_cuda_conv16.cpp,*test_cuda_nn_kernels.cpp,"
                  "*test_cuda_reduce_adversarial.cpp\n") != std::string::npos);
  CHECK(cmds.find(b + ": --tool synccheck --error-exitcode 99 " + b + "/kiln_tests_cuda\n") != std::string::npos);
  CHECK(cmds.find(b + ": --tool initcheck --error-exitcode 99 " + b + "/kiln_tests_cuda\n") != std::string::npos);
  // Each row's log starts with the command it ran.
  CHECK(read_text(kDir + "/san-record/out/compute_sanitizer_initcheck.log").find("--tool initcheck") !=
        std::string::npos);
  // The dry run prints the same command lines.
  const Run d = run_shell("bash '" + kSrc + "/tools/gpu-check' --dry-run --sanitize");
  CHECK(d.status == 0);
  CHECK(d.out.find("compute-sanitizer synccheck: compute-sanitizer --tool synccheck --error-exitcode 99 ") !=
        std::string::npos);

  const Run e = gpu_check("san-errors", "FAKE_SANITIZER=errors", "--sanitize");
  INFO(e.out);
  CHECK(e.status == 1);
  const auto erows = table_rows(read_text(kDir + "/san-errors/out/table.txt"));
  for (const char* s : kSanitizerRows) {
    REQUIRE(erows.count(s));
    CHECK(erows.at(s).result == "FAIL");
    CHECK(erows.at(s).detail.find("ERROR SUMMARY: 2 errors") != std::string::npos);
  }
}
