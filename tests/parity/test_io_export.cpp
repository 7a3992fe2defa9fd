// The model export scripts (tests/support/oracle/small_cnn.py, export_common.py) produce files kiln
// reads, with torch's names, dtypes and shapes, and self-consistent references: the SGD-momentum
// and AdamW first steps recomputed here from model + grads match the exported after-step weights.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/io/npy.h"
#include "engine/io/safetensors.h"

using namespace kiln;
namespace fs = std::filesystem;

TEST_CASE("small_cnn.py export: names, shapes, dtypes, and first SGD / AdamW steps") {
  const std::string dir = (fs::temp_directory_path() / ("kiln_parity_export_" + std::to_string(::getpid()))).string();
  const std::string cmd = std::string("/usr/bin/python3 ") + KILN_SOURCE_DIR +
                          "/tests/support/oracle/small_cnn.py --out '" + dir +
                          "' --seed 3 --batch 4 --lr 0.05 --momentum 0.9 --weight-decay 0.01 --adamw-lr 0.001 > /dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);

  SafetensorsFile model = read_safetensors(dir + "/model.safetensors");
  const std::vector<std::pair<std::string, Shape>> expect = {
      {"conv1.weight", {32, 1, 3, 3}}, {"conv1.bias", {32}}, {"bn1.weight", {32}}, {"bn1.bias", {32}},
      {"bn1.running_mean", {32}}, {"bn1.running_var", {32}}, {"bn1.num_batches_tracked", {}},
      {"conv2.weight", {64, 32, 3, 3}}, {"conv2.bias", {64}}, {"bn2.weight", {64}}, {"bn2.bias", {64}},
      {"bn2.running_mean", {64}}, {"bn2.running_var", {64}}, {"bn2.num_batches_tracked", {}},
      {"fc1.weight", {128, 3136}}, {"fc1.bias", {128}}, {"fc2.weight", {10, 128}}, {"fc2.bias", {10}}};
  REQUIRE(model.tensors.size() == expect.size());
  for (size_t i = 0; i < expect.size(); ++i) {
    CAPTURE(expect[i].first);
    CHECK(model.tensors[i].name == expect[i].first);
    CHECK(model.tensors[i].array.shape == expect[i].second);
    bool nbt = expect[i].first.find("num_batches_tracked") != std::string::npos;
    CHECK(model.tensors[i].array.dtype == (nbt ? DType::i64 : DType::f32));
  }
  CHECK(model.metadata.at("seed") == "3");
  CHECK(model.at("bn1.num_batches_tracked").data<int64_t>()[0] == 0);

  HostArray x = read_npy(dir + "/input.npy"), y = read_npy(dir + "/labels.npy");
  CHECK(x.shape == Shape{4, 1, 28, 28});
  CHECK(y.dtype == DType::i64);
  SafetensorsFile fwd = read_safetensors(dir + "/forward.safetensors");
  CHECK(fwd.at("eval.logits").shape == Shape{4, 10});
  CHECK(fwd.at("train.loss").shape.empty());
  std::ifstream cf(dir + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(cf);
  CHECK(fwd.at("train.loss").data<float>()[0] == doctest::Approx(cfg["train_loss"].get<double>()).epsilon(1e-6));

  SafetensorsFile grads = read_safetensors(dir + "/grads.safetensors");
  SafetensorsFile sgd = read_safetensors(dir + "/after_sgd.safetensors");
  SafetensorsFile adamw = read_safetensors(dir + "/after_adamw.safetensors");
  CHECK(sgd.at("bn2.num_batches_tracked").data<int64_t>()[0] == 1);
  // Train-mode BN buffers after the step equal those after the reference forward.
  SafetensorsFile bufs = read_safetensors(dir + "/train_buffers.safetensors");
  CHECK(bufs.at("bn1.running_mean").bytes == sgd.at("bn1.running_mean").bytes);
  CHECK(bufs.at("bn1.running_mean").bytes != model.at("bn1.running_mean").bytes);

  // First step, from PyTorch's update rules: SGD's momentum buffer starts as g + wd*w, so
  // w1 = w - lr*(g + wd*w). AdamW: m_hat = g, v_hat = g^2, w1 = w*(1 - lr*wd) - lr*g/(|g| + eps).
  const double lr = 0.05, wd = 0.01, alr = 0.001, eps = 1e-8;
  int checked = 0;
  for (const NamedArray& g : grads.tensors) {
    CAPTURE(g.name);
    const float* w = model.at(g.name).data<float>();
    const float* gr = g.array.data<float>();
    const float* ws = sgd.at(g.name).data<float>();
    const float* wa = adamw.at(g.name).data<float>();
    for (int64_t i = 0; i < g.array.numel(); ++i) {
      double s = w[i] - lr * (gr[i] + wd * w[i]);
      double a = w[i] * (1 - alr * wd) - alr * gr[i] / (std::fabs((double)gr[i]) + eps);
      if (std::fabs(ws[i] - s) > 1e-6 + 1e-5 * std::fabs(s) || std::fabs(wa[i] - a) > 1e-6 + 1e-5 * std::fabs(a)) {
        CAPTURE(i);
        CHECK(ws[i] == doctest::Approx(s));
        CHECK(wa[i] == doctest::Approx(a));
        break;
      }
      ++checked;
    }
  }
  CHECK(checked > 400000);
  fs::remove_all(dir);
}
