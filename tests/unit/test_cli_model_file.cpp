// `--model FILE.json` through the kiln command: train on a tiny npy data set (16 samples, 1x8x8) saves
// weights named after the file's layers with the file's text as "model_json" metadata; predict reads
// them back; `kiln mem` predicts on the meta device with per-layer rows; `kiln model show` lists
// layers, shapes, parameters and (--batch) activation bytes, and --json prints a built-in model's
// file, which builds back to the same table.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"
#include "models/model_file_builtin.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;

namespace {

const char* kNet = R"({
  "format": "kiln-model-1",
  "input": {"channels": 1},
  "layers": [
    {"name": "features", "type": "block", "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
      {"type": "batch_norm"},
      {"type": "relu"},
      {"type": "max_pool", "kernel": 2}]},
    {"name": "skip", "type": "conv2d", "input": "input", "out_channels": 4, "kernel": 2, "stride": 2},
    {"name": "join", "type": "concat", "inputs": ["features", "skip"]},
    {"name": "flatten", "type": "flatten"},
    {"name": "fc", "type": "linear", "out_features": "num_classes"}
  ]
}
)";

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("cli: --model FILE.json trains, saves the file with the weights, predicts, and kiln mem predicts it") {
  const std::string dir = kiln_test::cli_temp_dir("model_file");
  std::filesystem::create_directories(dir + "/data");
  kiln_test::make_npy_folder(dir + "/data", 16, 1, 8, 2);
  const std::string net = dir + "/net.json";
  std::ofstream(net) << kNet;

  auto t = run_kiln("train --model " + net + " --data " + dir + "/data --epochs 2 --batch 8 --lr 0.05 --seed 3 "
                    "--threads 1 --device cpu --out " + dir + "/out --save " + dir + "/w.safetensors");
  REQUIRE_MESSAGE(t.status == 0, t.output);
  CHECK(contains(t.output, "epoch 2/2"));
  kiln::SafetensorsFile w = kiln::read_safetensors(dir + "/w.safetensors");
  CHECK(w.find("features.0.weight") != nullptr);
  CHECK(w.find("features.1.running_var") != nullptr);
  CHECK(w.find("skip.weight") != nullptr);
  CHECK(w.find("fc.weight") != nullptr);
  REQUIRE(w.metadata.count("model_json"));
  CHECK(w.metadata["model_json"] == std::string(kNet));
  kiln::SafetensorsFile ck = kiln::read_safetensors(dir + "/out/checkpoint.safetensors");
  CHECK(ck.metadata["model_json"] == std::string(kNet));

  auto p = run_kiln("predict --model " + net + " --weights " + dir + "/w.safetensors --data " + dir +
                    "/data --out " + dir + "/p.csv --device cpu --threads 1");
  REQUIRE_MESSAGE(p.status == 0, p.output);
  std::istringstream csv(slurp(dir + "/p.csv"));
  int rows = 0;
  for (std::string line; std::getline(csv, line);) ++rows;
  CHECK(rows == 17);

  auto m = run_kiln("mem --model " + net + " --image-size 8 --in-channels 1 --num-classes 2 --batch 4 --device cpu");
  REQUIRE_MESSAGE(m.status == 0, m.output);
  CHECK(contains(m.output, "kiln mem: " + net));
  CHECK(contains(m.output, "features.0"));
  CHECK(contains(m.output, "peak reserved"));

  // A file that the data does not fit, and one that does not exist: one line each.
  auto bad = run_kiln("mem --model " + net + " --image-size 8 --in-channels 3 --batch 4 --device cpu");
  CHECK(bad.status == 1);
  CHECK(contains(bad.output, "kiln: error: model file " + net + ": the file is for input channels 1 but the data has 3"));
  auto missing = run_kiln("train --model " + dir + "/nope.json --data " + dir + "/data --device cpu --out " + dir + "/o2");
  CHECK(missing.status == 1);
  CHECK(contains(missing.output, "--model " + dir + "/nope.json: no such model file"));
}

TEST_CASE("cli: kiln model show lists layers, shapes, parameters and activation bytes, and --json round-trips") {
  const std::string dir = kiln_test::cli_temp_dir("model_show");
  const std::string net = dir + "/net.json";
  std::ofstream(net) << kNet;
  auto s = run_kiln("model show " + net + " --image-size 8 --num-classes 2 --batch 4");
  REQUIRE_MESSAGE(s.status == 0, s.output);
  CHECK(contains(s.output, "model " + net + ": input (1, 8, 8), 2 classes"));
  CHECK(contains(s.output, "activations @4"));
  CHECK(contains(s.output, "(4, 8, 8)"));   // features.0
  CHECK(contains(s.output, "(8, 4, 4)"));   // join
  CHECK(contains(s.output, "total: 326 parameters"));  // conv 40 + bn 8 + skip 20 + fc 128*2+2
  CHECK(contains(s.output, "activations kept for backward at batch 4"));

  auto j = run_kiln("model show small_cnn --json");
  REQUIRE_MESSAGE(j.status == 0, j.output);
  CHECK(nlohmann::json::parse(j.output) == kiln::models::builtin_model_json("small_cnn"));
  std::ofstream(dir + "/small.json") << j.output;
  auto a = run_kiln("model show small_cnn");
  auto b = run_kiln("model show " + dir + "/small.json --channels 1 --image-size 28");
  REQUIRE_MESSAGE(a.status == 0, a.output);
  REQUIRE_MESSAGE(b.status == 0, b.output);
  // Same rows but for the first line (the source's name).
  CHECK(a.output.substr(a.output.find('\n')) == b.output.substr(b.output.find('\n')));
  CHECK(contains(a.output, "fc1"));
  CHECK(contains(a.output, "401,536"));  // fc1: 3136*128 + 128

  std::ofstream(dir + "/bad.json") << "{\"layers\": [\n  {\"type\": \"relu\"\n";
  auto e = run_kiln("model show " + dir + "/bad.json");
  CHECK(e.status == 1);
  CHECK(contains(e.output, "kiln: error: model file " + dir + "/bad.json: not JSON: line 3"));
  auto u = run_kiln("model show vgg");
  CHECK(u.status == 1);
  CHECK(contains(u.output, "no model file form for 'vgg'"));
}
