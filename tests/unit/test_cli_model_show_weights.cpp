// `kiln model show W.safetensors` (issue 34, item 8): a trained file's layers, at the input size, channels
// and classes it was trained with, what a user tries first (it once failed: "no model file form"); a model
// file's text travels in the weights, so the table needs no .json on disk; flags still win.
#include <doctest/doctest.h>

#include <filesystem>

#include "support/cli/run_kiln.h"
#include "support/cli/segment_data.h"

using kiln_test::contains;
using kiln_test::run_kiln;

TEST_CASE("cli model show: a weights file shows its model at the trained input, channels and classes") {
  const std::string d = kiln_test::cli_temp_dir("model_show_weights");
  std::filesystem::create_directories(d + "/npy");
  kiln_test::make_npy_folder(d + "/npy", 12, 1, 8, 3);
  const kiln_test::CliRun t = run_kiln("train --model small_cnn --data " + d + "/npy --epochs 1 --batch 6 --threads 1 "
                                       "--out " + d + "/out --save " + d + "/w.safetensors");
  REQUIRE_MESSAGE(t.status == 0, t.output);
  const kiln_test::CliRun s = run_kiln("model show " + d + "/w.safetensors");
  CAPTURE(s.output);
  CHECK(s.status == 0);
  CHECK(contains(s.output, "w.safetensors: weights of small_cnn (task classify)"));
  CHECK(contains(s.output, "model small_cnn (built in): input (1, 8, 8), 3 classes"));
  CHECK(contains(s.output, "fc2"));
  const kiln_test::CliRun b = run_kiln("model show " + d + "/w.safetensors --batch 4 --num-classes 5");
  CAPTURE(b.output);
  CHECK(b.status == 0);
  CHECK(contains(b.output, "input (1, 8, 8), 5 classes"));
  CHECK(contains(b.output, "activations kept for backward at batch 4"));
  // The training-state file carries the same card.
  CHECK(contains(run_kiln("model show " + d + "/out/checkpoint.safetensors").output, "a training-state file of small_cnn"));

  // A model file's weights, the .json gone: its text travels in the weights.
  std::filesystem::create_directories(d + "/seg");
  kiln_test::make_segment_npy_folder(d + "/seg", 8, 16, 5);
  const std::string model = kiln_test::write_segment_model_file(d, 16);
  const kiln_test::CliRun ts = run_kiln("train --task segment --model " + model + " --data " + d + "/seg --epochs 1 "
                                        "--batch 4 --threads 1 --out " + d + "/out2 --save " + d + "/seg.safetensors");
  REQUIRE_MESSAGE(ts.status == 0, ts.output);
  std::filesystem::remove(model);
  const kiln_test::CliRun ss = run_kiln("model show " + d + "/seg.safetensors");
  CAPTURE(ss.output);
  CHECK(ss.status == 0);
  CHECK(contains(ss.output, "(task segment)"));
  CHECK(contains(ss.output, "input (1, 16, 16), 3 classes"));
  CHECK(contains(ss.output, "head"));
}
