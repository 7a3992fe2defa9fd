// `kiln train --amp` end to end on a tiny npy data set (small_cnn): the progress line shows the
// loss scale and the skipped steps, runs.jsonl records them (per epoch and for the run); a run
// started with a loss scale that overflows f16 (--amp-init-scale) skips its first steps, backs off and finishes.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;

namespace {

nlohmann::json last_ledger_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  return last.empty() ? nlohmann::json() : nlohmann::json::parse(last);
}

std::string amp_args(const std::string& data, const std::string& out, int epochs, int batch) {
  return "train --model small_cnn --data " + data + " --epochs " + std::to_string(epochs) + " --batch " +
         std::to_string(batch) + " --optimizer sgd --lr 0.05 --momentum 0.9 --seed 3 --threads 1 --device cpu --amp "
         "--out " +
         out;
}

}  // namespace

TEST_CASE("cli train --amp: loss scale and skipped steps in the progress line and runs.jsonl") {
  const std::string data = kiln_test::cli_temp_dir("amp_data");
  kiln_test::make_npy_folder(data, 32, 1, 8, 2);
  const std::string out = kiln_test::cli_temp_dir("amp_run");
  auto r = run_kiln(amp_args(data, out, 2, 8) + " --amp-growth-interval 3");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "scale "));
  CHECK(contains(r.output, "skipped 0"));
  nlohmann::json j = last_ledger_line(out + "/runs.jsonl");
  REQUIRE(j.is_object());
  CHECK(j["config"]["amp"] == true);
  CHECK(j["amp"]["enabled"] == true);
  CHECK(j["amp"]["skipped_steps"] == 0);
  // 8 clean steps with growth every 3: 2^16 * 2^2
  CHECK(j["amp"]["loss_scale"].get<double>() == 65536.0 * 4);
  REQUIRE(j["epochs"].size() == 2);
  CHECK(j["epochs"][0]["loss_scale"].get<double>() == 65536.0 * 2);  // after 4 steps
  CHECK(j["epochs"][0]["skipped_steps"] == 0);
  CHECK(std::isfinite(j["final_train_loss"].get<double>()));

  const std::string out2 = kiln_test::cli_temp_dir("amp_overflow");
  // 2^24: the f16 gradients of the logits alone reach 2^24 / 4 / 2 > 65504.
  auto r2 = run_kiln(amp_args(data, out2, 3, 4) + " --amp-init-scale 16777216");
  REQUIRE_MESSAGE(r2.status == 0, r2.output);
  nlohmann::json j2 = last_ledger_line(out2 + "/runs.jsonl");
  REQUIRE(j2.is_object());
  const int64_t skipped = j2["amp"]["skipped_steps"].get<int64_t>();
  MESSAGE("init scale 2^24: " << skipped << " skipped steps, final scale " << j2["amp"]["loss_scale"]);
  CHECK(skipped > 0);
  CHECK(skipped < 24);  // recovered: some of the 24 steps ran
  CHECK(j2["amp"]["loss_scale"].get<double>() < 16777216.0);

  const std::string out3 = kiln_test::cli_temp_dir("no_amp");
  auto r3 = run_kiln("train --model small_cnn --data " + data +
                     " --epochs 1 --batch 8 --seed 3 --threads 1 --device cpu --out " + out3);
  REQUIRE_MESSAGE(r3.status == 0, r3.output);
  CHECK_FALSE(contains(r3.output, "scale "));
  nlohmann::json j3 = last_ledger_line(out3 + "/runs.jsonl");
  CHECK(j3["amp"]["enabled"] == false);
  CHECK_FALSE(j3["epochs"][0].contains("loss_scale"));
}
