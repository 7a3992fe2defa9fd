// `kiln train --amp` end to end on a tiny npy data set (small_cnn): the progress line shows the
// loss scale and the skipped steps, runs.jsonl records them (per epoch and for the run); a run
// started with a loss scale that overflows f16 (--amp-init-scale) skips its first steps, backs off and finishes;
// the scaler's state travels in the training checkpoint (2 epochs == 1 epoch + --resume 1 epoch);
// --kernels kiln|vendor is parsed and checked.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"
#include "support/cli/run_kiln.h"
#include "engine/train/kernel_option.h"

using kiln_test::contains;
using kiln_test::last_ledger_line;
using kiln_test::run_kiln;

namespace {

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
  // An initial scale of 2^8: this model's f16 gradients overflow from a constant scale of 2^17 on
  // (2 of 8 steps skipped at 2^17, none at 2^16), so the 2^8..2^10 used here leave a margin of 64x
  // whatever the CPU's rounding; the default 2^16 with growth reached 2^18 and passed by luck.
  auto r = run_kiln(amp_args(data, out, 2, 8) + " --amp-init-scale 256 --amp-growth-interval 3");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "scale "));
  CHECK(contains(r.output, "skipped 0"));
  nlohmann::json j = last_ledger_line(out + "/runs.jsonl");
  REQUIRE(j.is_object());
  CHECK(j["config"]["amp"] == true);
  CHECK(j["amp"]["enabled"] == true);
  CHECK(j["amp"]["skipped_steps"] == 0);
  // 8 clean steps with growth every 3: 2^8 * 2^2
  CHECK(j["amp"]["loss_scale"].get<double>() == 256.0 * 4);
  REQUIRE(j["epochs"].size() == 2);
  CHECK(j["epochs"][0]["loss_scale"].get<double>() == 256.0 * 2);  // after 4 steps
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

TEST_CASE("cli train --amp: 2 epochs equal 1 epoch + --resume 1 epoch (weights, loss scale, skipped steps)") {
  const std::string data = kiln_test::cli_temp_dir("amp_resume_data");
  kiln_test::make_npy_folder(data, 32, 1, 8, 2);
  const std::string a = kiln_test::cli_temp_dir("amp_resume_a"), b = kiln_test::cli_temp_dir("amp_resume_b");
  // An overflowing initial scale (skipped steps, back-offs) and growth every 3 clean steps: the
  // scale, the growth tracker and the skip count all move during the first epoch.
  const std::string extra = " --amp-init-scale 16777216 --amp-growth-interval 3";
  auto ra = run_kiln(amp_args(data, a, 2, 4) + extra + " --save " + a + "/w.safetensors");
  REQUIRE_MESSAGE(ra.status == 0, ra.output);
  auto rb1 = run_kiln(amp_args(data, b, 1, 4) + extra);
  REQUIRE_MESSAGE(rb1.status == 0, rb1.output);
  const std::map<std::string, std::string> meta = kiln::read_safetensors(b + "/checkpoint.safetensors").metadata;
  REQUIRE(meta.count("amp_scale"));
  CHECK(meta.at("amp_scale") != "16777216");  // it moved in epoch 1
  CHECK(std::stoll(meta.at("amp_skipped_steps")) > 0);
  auto rb2 = run_kiln(amp_args(data, b, 2, 4) + extra + " --resume " + b + "/checkpoint.safetensors --save " + b +
                      "/w.safetensors");
  REQUIRE_MESSAGE(rb2.status == 0, rb2.output);
  CHECK(contains(rb2.output, "resume:"));

  const nlohmann::json ja = last_ledger_line(a + "/runs.jsonl"), jb = last_ledger_line(b + "/runs.jsonl");
  MESSAGE("straight: scale " << ja["amp"]["loss_scale"] << ", skipped " << ja["amp"]["skipped_steps"]
                             << "; resumed: scale " << jb["amp"]["loss_scale"] << ", skipped "
                             << jb["amp"]["skipped_steps"]);
  CHECK(ja["amp"]["loss_scale"] == jb["amp"]["loss_scale"]);
  CHECK(ja["amp"]["skipped_steps"] == jb["amp"]["skipped_steps"]);
  const kiln::SafetensorsFile wa = kiln::read_safetensors(a + "/w.safetensors");
  const kiln::SafetensorsFile wb = kiln::read_safetensors(b + "/w.safetensors");
  REQUIRE(wa.tensors.size() == wb.tensors.size());
  for (size_t i = 0; i < wa.tensors.size(); ++i) {
    CHECK(wa.tensors[i].name == wb.tensors[i].name);
    CHECK_MESSAGE(wa.tensors[i].array.bytes == wb.tensors[i].array.bytes, wa.tensors[i].name);
  }
  // A checkpoint saved without --amp resumes an --amp run from the initial scale, with a note.
  const std::string c = kiln_test::cli_temp_dir("amp_resume_c");
  auto rc1 = run_kiln("train --model small_cnn --data " + data + " --epochs 1 --batch 4 --optimizer sgd --lr 0.05 --momentum 0.9 "
                      "--seed 3 --threads 1 --device cpu --out " + c);
  REQUIRE_MESSAGE(rc1.status == 0, rc1.output);
  auto rc2 = run_kiln(amp_args(data, c, 2, 4) + " --resume " + c + "/checkpoint.safetensors");
  REQUIRE_MESSAGE(rc2.status == 0, rc2.output);
  CHECK(contains(rc2.output, "has no loss scaler state"));
}

TEST_CASE("--kernels kiln|vendor: parsed and checked in every build") {
  CHECK(kiln::check_kernels_option("vendor") == "vendor");
  CHECK(kiln::check_kernels_option("kiln") == "kiln");
  CHECK_THROWS_WITH_AS(kiln::check_kernels_option("cudnn"), doctest::Contains("expected vendor"), kiln::Error);
  std::ostringstream log;
  kiln::apply_kernels_option("vendor", log);
  CHECK(log.str().empty());
#if !defined(KILN_WITH_CUDA)
  kiln::apply_kernels_option("kiln", log);
  CHECK(contains(log.str(), "only affects CUDA kernels"));
#endif
  const std::string data = kiln_test::cli_temp_dir("kernels_data");
  kiln_test::make_npy_folder(data, 8, 1, 8, 2);
  auto bad = run_kiln(amp_args(data, kiln_test::cli_temp_dir("kernels_bad"), 1, 8) + " --kernels fast");
  CHECK(bad.status != 0);
  CHECK(contains(bad.output, "--kernels: 'fast'"));
  const std::string out = kiln_test::cli_temp_dir("kernels_ok");
  auto ok = run_kiln(amp_args(data, out, 1, 8) + " --kernels kiln");
  REQUIRE_MESSAGE(ok.status == 0, ok.output);
  CHECK(last_ledger_line(out + "/runs.jsonl")["config"]["kernels"] == "kiln");
}
