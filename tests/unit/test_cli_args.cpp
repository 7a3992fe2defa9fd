// The `kiln` binary's command line: help texts, and that an unknown option, a bad value, a
// missing path or a missing subcommand each give one "kiln: error:" line and a non-zero exit.
// Also `kiln devices` explaining why there is no GPU.
#include <doctest/doctest.h>

#include <algorithm>

#include "support/cli/run_kiln.h"
#include "kernels/cpu/bf16_path.h"

using kiln_test::contains;
using kiln_test::run_kiln;

namespace {
// The last line is the only "kiln: error:" line (informational lines on stdout may precede it).
bool one_error_line(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  const size_t nl = s.rfind('\n');
  const std::string last = nl == std::string::npos ? s : s.substr(nl + 1);
  size_t count = 0;
  for (size_t p = s.find("kiln: error:"); p != std::string::npos; p = s.find("kiln: error:", p + 1)) ++count;
  return last.rfind("kiln: error:", 0) == 0 && count == 1;
}
}  // namespace

TEST_CASE("cli args: help") {
  auto r = run_kiln("--help");
  CHECK(r.status == 0);
  CHECK(contains(r.output, "train"));
  CHECK(contains(r.output, "predict"));
  CHECK(contains(r.output, "devices"));
  r = run_kiln("train --help");
  CHECK(r.status == 0);
  for (const char* opt : {"--model", "--data", "--val", "--accum", "--schedule", "--class-weights", "--resume",
                          "--checkpoint-every", "--limit", "--device", "--clip", "--warmup", "--workers",
                          "--pin-memory", "--prefetch", "--drop-last"})
    CHECK_MESSAGE(contains(r.output, opt), opt);
  r = run_kiln("predict --help");
  CHECK(r.status == 0);
  CHECK(contains(r.output, "--weights"));
}

TEST_CASE("cli args: user errors are one line and a non-zero exit") {
  const std::string d = kiln_test::cli_temp_dir("args");
  kiln_test::make_npy_folder(d, 8, 1, 8, 2);
  const std::string ok = "train --model small_cnn --data " + d + " --out " + d + "/out ";
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"", "subcommand"},
      {"frobnicate", "frobnicate"},
      {ok + "--bogus 1", "--bogus"},
      {ok + "--epochs zero", "--epochs"},
      {ok + "--epochs -1", "--epochs"},
      {ok + "--optimizer lion", "lion"},
      {ok + "--schedule linear", "--schedule"},
      {ok + "--schedule step:0:0.1", "--schedule"},
      {ok + "--class-weights 1,x", "--class-weights"},
      {ok + "--class-weights 1,2,3", "3 weights for 2 classes"},
      {ok + "--device tpu:0", "tpu"},
      {ok + "--resume /nonexistent/ckpt.safetensors", "/nonexistent"},
      {ok + "--accum 64 --batch 8", "--accum"},
      {ok + "--prefetch 0", "--prefetch"},
      {"train --model small_cnn --data /nonexistent/data", "/nonexistent/data"},
      {"train --data " + d, "--model"},
      {"train --model no_such_model --data " + d + " --out " + d + "/out", "no_such_model"},
      {"predict --model small_cnn --weights /nonexistent.safetensors --data " + d + " --out x.csv",
       "/nonexistent.safetensors"},
  };
  for (const Case& c : cases) {
    auto r = run_kiln(c.args);
    CHECK_MESSAGE(r.status != 0, c.args);
    CHECK_MESSAGE(one_error_line(r.output), c.args, " -> ", r.output);
    CHECK_MESSAGE(contains(r.output, c.expect), c.args, " -> ", r.output);
  }
}

TEST_CASE("cli args: kiln devices says why there is no GPU") {
  auto r = run_kiln("devices");
  CHECK(r.status == 0);
  CHECK(contains(r.output, "cpu: available"));
  // The CPU's model, ISA and bf16 paths (kernels/cpu/bf16_path.h); the lowest level forces the portable path.
  CHECK(contains(r.output, "cpu model: "));
  CHECK(contains(r.output, "cpu bf16 conv: "));
  // matmul/linear take the same path as the convolutions (kernels/cpu/matmul_bf16.h), from a product size on.
  const bool onednn_matmul = kiln::cpu::bf16_path_wanted() != kiln::cpu::Bf16Path::portable;
  CHECK(contains(r.output, std::string("cpu bf16 matmul/linear: ") +
                               kiln::cpu::bf16_path_name(kiln::cpu::bf16_path_wanted()) +
                               (onednn_matmul ? " (products with M*N*K >= 65536" : "\n")));
  CHECK(contains(r.output, "onednn: "));
  auto low = run_kiln("devices", "KILN_CPU_ISA=baseline");
  CHECK(contains(low.output, "cpu isa: baseline"));
  CHECK(contains(low.output, "cpu bf16 conv: portable (f32 staging, slow)"));
  CHECK(contains(low.output, "cpu bf16 matmul/linear: portable (f32 staging, slow)\n"));
#ifndef KILN_WITH_CUDA
  CHECK(contains(r.output, "no GPU: this kiln build has no CUDA backend"));
#else
  CHECK((contains(r.output, "cuda:0:") || contains(r.output, "no GPU:")));
  auto hidden = run_kiln("devices", "CUDA_VISIBLE_DEVICES=");
  CHECK(contains(hidden.output, "CUDA_VISIBLE_DEVICES is set but empty"));
#endif
}
