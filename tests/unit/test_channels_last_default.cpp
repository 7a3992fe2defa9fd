// The batches' layout as three states (engine/run/run_config.h): --channels-last, --no-channels-last, neither
// (automatic: channels-last for --amp bf16 on the CPU, NCHW otherwise). The rule as resolve_channels_last()
// applies it, its JSON form (the resolved bool under the old key), a resumed run not comparing it, and the CLI:
// the automatic choice logged and recorded, flags winning both ways, both flags one usage error.
// The plan against the run under the automatic layout: tests/unit/test_memory_plan.cpp.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/usage_error.h"
#include "engine/run/resume_check.h"
#include "engine/run/run_config.h"
#include "support/cli/run_kiln.h"

using namespace kiln;

namespace {

// The resolved layout of a config with these options on `device`.
bool resolved(bool amp, DType dtype, bool on, bool off, const Device& device) {
  RunConfig c;
  c.amp = amp;
  c.amp_dtype = dtype;
  c.channels_last = on;
  c.no_channels_last = off;
  resolve_channels_last(&c, device);
  CHECK(c.no_channels_last == !c.channels_last);  // resolved: one state, the other its negation
  return c.channels_last;
}

nlohmann::json last_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, l;
  while (std::getline(f, line))
    if (!line.empty()) l = line;
  return nlohmann::json::parse(l);
}

}  // namespace

TEST_CASE("channels_last default: the rule resolves as documented, flags win both ways") {
  const Device cpu = Device::cpu(), gpu = Device::parse("cuda:0");
  // Neither flag: on for --amp bf16 on the CPU only.
  CHECK(resolved(true, DType::bf16, false, false, cpu));
  CHECK_FALSE(resolved(false, DType::f16, false, false, cpu));   // f32
  CHECK_FALSE(resolved(false, DType::bf16, false, false, cpu));  // amp_dtype without --amp: f32
  CHECK_FALSE(resolved(true, DType::f16, false, false, cpu));    // --amp f16
  CHECK_FALSE(resolved(true, DType::bf16, false, false, gpu));   // CUDA keeps its opt-in
  // --no-channels-last wins over the rule, --channels-last over its absence.
  CHECK_FALSE(resolved(true, DType::bf16, false, true, cpu));
  CHECK(resolved(false, DType::f16, true, false, cpu));
  CHECK(resolved(true, DType::f16, true, false, gpu));
  // Both: one usage error naming the two flags.
  RunConfig both;
  both.channels_last = both.no_channels_last = true;
  CHECK_THROWS_WITH_AS(resolve_channels_last(&both, cpu), doctest::Contains("--channels-last and --no-channels-last"),
                       UsageError);
  // Resolving again changes nothing (the memory plan resolves the run's already-resolved config once more),
  // also on another device: a resolved config carries its layout.
  RunConfig c;
  c.amp = true;
  c.amp_dtype = DType::bf16;
  CHECK(c.to_json()["channels_last"] == false);  // unresolved: neither flag
  resolve_channels_last(&c, cpu);
  CHECK(c.channels_last);
  resolve_channels_last(&c, gpu);
  CHECK(c.channels_last);
  // The JSON keeps its one bool key, the resolved layout; no new key.
  const nlohmann::json j = c.to_json();
  CHECK(j["channels_last"] == true);
  CHECK_FALSE(j.contains("no_channels_last"));
  // A state saved before the default (NCHW bf16) resumes under the automatic layout without a difference, and
  // the reverse.
  nlohmann::json saved = j;
  saved["channels_last"] = false;
  CHECK(resume_differences(saved, c).empty());
  RunConfig nchw = c;
  nchw.channels_last = false;
  nchw.no_channels_last = true;
  CHECK(resume_differences(j, nchw).empty());
}

TEST_CASE("cli train channels-last default: automatic for --amp bf16 on the CPU, logged and recorded, flags win") {
  const std::string data = kiln_test::cli_temp_dir("cld_data");
  kiln_test::make_npy_folder(data, 8, 3, 8, 2);
  auto args = [&](const std::string& out) {
    return "train --model small_cnn --data " + data + " --epochs 1 --batch 8 --optimizer sgd --lr 0.05 --seed 3 "
           "--threads 1 --device cpu --out " + out;
  };
  struct Case {
    const char* flags;
    bool layout;
    const char* log;  // the log line's text ("" : no channels-last line)
  };
  const Case cases[] = {
      {" --amp bf16", true, "channels-last: training batches are NHWC in memory (automatic for --amp bf16"},
      {" --amp bf16 --no-channels-last", false, ""},
      {"", false, ""},
      {" --amp", false, ""},
      {" --channels-last", true, "channels-last: training batches are NHWC in memory\n"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.flags);
    const std::string out = kiln_test::cli_temp_dir("cld_run");
    const auto r = kiln_test::run_kiln(args(out) + k.flags);
    REQUIRE_MESSAGE(r.status == 0, r.output);
    if (*k.log) CHECK_MESSAGE(kiln_test::contains(r.output, k.log), r.output);
    else CHECK_FALSE(kiln_test::contains(r.output, "channels-last"));
    CHECK(last_line(out + "/runs.jsonl")["config"]["channels_last"] == k.layout);
  }
  // Both flags: one usage error (exit 2) naming them, before anything runs.
  const auto both = kiln_test::run_kiln(args(kiln_test::cli_temp_dir("cld_both")) + " --channels-last --no-channels-last");
  CHECK(both.status == 2);
  CHECK_MESSAGE(kiln_test::contains(both.output, "--channels-last excludes --no-channels-last"), both.output);
  CHECK_FALSE(kiln_test::contains(both.output, "epoch 1/1"));
}
