// Non-finite values in f32 training are never swallowed (issue 14): a NaN in one image, a NaN
// parameter or an inf gradient stops train::fit with one error naming the step, the first op and
// its module path, with or without detect_anomaly (without, the failing step is re-run under it);
// `kiln train` then keeps the last training-state file byte for byte and writes no --save file;
// neither file is ever written with inf/NaN in it. Under a loss scaler, skipping is its job, but
// max_skipped_steps consecutive skips end the run. A batch whose loss is undefined by construction
// (every target ignore_index, or of class weight 0) is left out and counted, not an anomaly.
// Small in-memory data (8 images of 1x8x8), small_cnn, a few steps: well under a second.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include "data/array_source.h"
#include "engine/autograd/anomaly_mode.h"
#include "engine/autograd/grad_mode.h"
#include "engine/io/tensor_io.h"
#include "engine/ops/ops.h"
#include "engine/optim/sgd.h"
#include "engine/train/fit.h"
#include "models/registry.h"
#include "support/cli/run_kiln.h"
#include "engine/train/train_state.h"

using namespace kiln;
using kiln_test::contains;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// 8 images (1, 8, 8), labels i % 2 (or `label` for all); image `nan_image` (>= 0) gets one NaN pixel.
std::unique_ptr<DataSource> eight(int64_t nan_image, int64_t label = -1, bool all_nan = false) {
  ArrayDataset d;
  d.n = 8;
  d.channels = 1;
  d.height = d.width = 8;
  for (int64_t i = 0; i < 8 * 64; ++i) d.images.push_back((float)((i * 13) % 7) / 3.0f - 1.0f);
  for (int64_t i = 0; i < 8; ++i) d.labels.push_back(label >= 0 ? label : i % 2);
  if (nan_image >= 0) d.images[(size_t)(nan_image * 64 + 27)] = kNaN;
  if (all_nan)
    for (float& v : d.images) v = kNaN;
  d.source = "eight";
  return make_array_source(std::move(d), 0, Device::cpu());
}

struct Run {
  nn::ModulePtr model = models::make_model("small_cnn", 2, 1, 8);
  optim::SGD opt{model->named_parameters(), optim::SGDOptions{0.01, 0.0}};
  optim::LossScaler scaler;
  explicit Run(bool scaled = false) : scaler(options(scaled)) {}
  static optim::LossScalerOptions options(bool scaled) {
    optim::LossScalerOptions o;
    o.enabled = scaled;
    return o;
  }
  std::vector<float> params() const {
    std::vector<float> v;
    for (const auto& [n, p] : model->named_parameters())
      for (float x : p.to_vector<float>()) v.push_back(x);
    return v;
  }
};

std::string fit_error(Run& run, DataSource& src, train::FitOptions fo) {
  try {
    train::fit(*run.model, run.opt, run.scaler, src, nullptr, fo);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A model whose forward is finite and whose backward is not: sqrt(scale * x) with a parameter
// scale = 0 is 0, and sqrt's gradient there is 1 / (2 sqrt(0)) = inf.
struct RootThenCnn : nn::Module {
  struct Root : nn::Module {
    Tensor scale;
    Root() : Module("Root") { scale = register_parameter("scale", zeros({1})); }
    Tensor forward(const Tensor& x) override { return sqrt(mul(x, scale)); }
  };
  std::shared_ptr<nn::Module> root, cnn;
  RootThenCnn() : Module("RootThenCnn") {
    root = register_module("root", std::make_shared<Root>());
    cnn = register_module("cnn", models::make_model("small_cnn", 2, 1, 8));
  }
  Tensor forward(const Tensor& x) override { return (*cnn)((*root)(x)); }
};

}  // namespace

TEST_CASE("non-finite: a NaN in one image stops fit naming the step, the op, the module and the sample") {
  for (bool detect : {false, true}) {
    CAPTURE(detect);
    Run run;
    auto src = eight(5);
    const std::vector<float> before = run.params();
    train::FitOptions fo;
    fo.epochs = 2;
    fo.batch = 4;
    fo.detect_anomaly = detect;
    int64_t steps_done = 0;
    fo.callbacks.on_step_end = [&](const train::FitStep&) { ++steps_done; };
    const std::string err = fit_error(run, *src, fo);
    CAPTURE(err);
    // The batch holding sample 5 is the first or the second step of epoch 1; no later step runs.
    CHECK(steps_done <= 1);
    CHECK(contains(err, "at step " + std::to_string(steps_done + 1) + " (epoch 1, batch " +
                            std::to_string(steps_done + 1) + " of 2)"));
    CHECK(contains(err, "conv2d in conv1: output 0"));
    CHECK(contains(err, "holds NaN"));
    CHECK(contains(err, "input 0 ((4, 1, 8, 8)) already held NaN"));
    CHECK(contains(err, "= sample 5 of eight"));
    CHECK(contains(err, detect ? "(--detect-anomaly)" : "non-finite loss (NaN)"));
    CHECK_FALSE(anomaly_mode_enabled());  // the re-run's guard is gone
    if (steps_done == 0) CHECK(run.params() == before);  // not updated by the failing step
  }
}

TEST_CASE("non-finite: a NaN parameter is named as the input of the first op that meets it") {
  Run run;
  auto src = eight(-1);
  {
    NoGradGuard ng;
    for (auto& [n, p] : run.model->named_parameters())
      if (n == "fc2.weight") fill_(p, std::nan(""));
  }
  train::FitOptions fo;
  fo.batch = 4;
  const std::string err = fit_error(run, *src, fo);
  CAPTURE(err);
  CHECK(contains(err, "at step 1 (epoch 1, batch 1 of 2)"));
  CHECK(contains(err, "in fc2: output 0"));
  CHECK(contains(err, "(fc2.weight, (2, 128)) already held NaN"));
}

TEST_CASE("non-finite: an inf gradient with a finite loss names the backward op and its module") {
  for (bool detect : {false, true}) {
    CAPTURE(detect);
    auto model = std::make_shared<RootThenCnn>();
    model->name_tensors();
    optim::SGD opt(model->named_parameters(), optim::SGDOptions{0.01, 0.0});
    optim::LossScaler scaler(Run::options(false));
    auto src = eight(-1);
    train::FitOptions fo;
    fo.batch = 4;
    fo.detect_anomaly = detect;
    std::string err;
    try {
      train::fit(*model, opt, scaler, *src, nullptr, fo);
    } catch (const Error& e) {
      err = e.what();
    }
    CAPTURE(err);
    CHECK(contains(err, "at step 1 (epoch 1, batch 1 of 2)"));
    CHECK(contains(err, "sqrt backward in root: the gradient of input 0"));
    if (!detect) CHECK(contains(err, "non-finite gradient (root.scale (1,) holds"));
  }
}

TEST_CASE("non-finite: under a loss scaler, N consecutive skipped steps end the run") {
  Run run(true);
  auto src = eight(-1, -1, true);  // every image NaN: every step is skipped
  train::FitOptions fo;
  fo.epochs = 2;
  fo.batch = 4;  // 2 steps per epoch: the count goes on across epochs
  fo.step.autocast = true;
  fo.max_skipped_steps = 3;
  const std::string err = fit_error(run, *src, fo);
  CAPTURE(err);
  CHECK(contains(err, "3 consecutive steps skipped by the loss scaler"));
  CHECK(contains(err, "the last at step 3 (epoch 2, batch 1 of 2)"));
  CHECK(contains(err, "first non-finite value: "));
  CHECK(run.scaler.skipped_steps() == 3);
  // No limit: the scaler skips every step and the run ends normally.
  Run free_run(true);
  fo.max_skipped_steps = 0;
  const train::FitResult r = train::fit(*free_run.model, free_run.opt, free_run.scaler, *src, nullptr, fo);
  CHECK(r.steps == 4);
  CHECK(free_run.scaler.skipped_steps() == 4);
}

TEST_CASE("non-finite: a batch whose loss is undefined by construction is left out and counted") {
  SUBCASE("every target of class weight 0 (fit's default loss)") {
    Run run;
    auto src = eight(-1, 0);  // every label 0
    const std::vector<float> before = run.params();
    train::FitOptions fo;
    fo.batch = 4;
    fo.class_weights = tensor_from(std::vector<float>{0.0f, 1.0f}, {2});
    const train::FitResult r = train::fit(*run.model, run.opt, run.scaler, *src, nullptr, fo);
    REQUIRE(r.epochs.size() == 1);
    CHECK(r.epochs[0].undefined_batches == 2);
    CHECK(r.epochs[0].steps == 2);
    CHECK(run.params() == before);
  }
  SUBCASE("every target ignore_index, one micro-batch of two") {
    Run run;
    Tensor x = randn({4, 1, 8, 8});
    Tensor y = tensor_from(std::vector<int64_t>{-100, -100, 1, 0}, {4});
    train::StepOptions so;
    so.accum = 2;
    so.loss_undefined = train::cross_entropy_undefined();
    const train::StepResult r = train::train_step(*run.model, run.opt, run.scaler, Batch{x, y}, so);
    CHECK(r.undefined_micro_batches == 1);
    CHECK(r.micro_batches == 1);
    CHECK(r.stepped);
    CHECK(std::isfinite(r.loss));
    // Without the predicate that micro-batch's 0/0 is a non-finite loss: an anomaly.
    so.loss_undefined = {};
    CHECK_THROWS_AS(train::train_step(*run.model, run.opt, run.scaler, Batch{x, y}, so), train::NonFiniteStep);
  }
}

TEST_CASE("non-finite: kiln train keeps the last training-state file and writes no NaN weights") {
  namespace fs = std::filesystem;
  const std::string dir = kiln_test::cli_temp_dir("nonfinite");
  fs::create_directories(dir + "/data");
  kiln_test::make_npy_folder(dir + "/data", 16, 1, 8, 2);
  const std::string common = "train --model small_cnn --data " + dir + "/data --batch 8 --epochs 1 --threads 1 --out " +
                             dir + "/out";
  const kiln_test::CliRun good = kiln_test::run_kiln(common + " --save " + dir + "/good.safetensors");
  REQUIRE_MESSAGE(good.status == 0, good.output);
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string state = bytes(dir + "/out/checkpoint.safetensors");
  REQUIRE(!state.empty());
  // The same weights with one NaN in fc1.weight, written around kiln's own (refusing) writer.
  NamedTensors w = load_safetensors(dir + "/good.safetensors");
  for (auto& [n, t] : w)
    if (n == "fc1.weight") t.data<float>()[3] = kNaN;
  save_safetensors(dir + "/nan.safetensors", w, {});
  const kiln_test::CliRun bad =
      kiln_test::run_kiln(common + " --init " + dir + "/nan.safetensors --save " + dir + "/bad.safetensors");
  CAPTURE(bad.output);
  CHECK(bad.status != 0);
  CHECK(contains(bad.output, "at step 1 (epoch 1, batch 1 of 2)"));
  CHECK(contains(bad.output, "in fc1: output 0"));
  CHECK(contains(bad.output, "(fc1.weight, (128, 256)) already held NaN"));
  CHECK(bytes(dir + "/out/checkpoint.safetensors") == state);
  CHECK_FALSE(fs::exists(dir + "/bad.safetensors"));
}

TEST_CASE("non-finite: training-state and weight files are never written with inf/NaN") {
  const std::string dir = kiln_test::cli_temp_dir("nonfinite_save");
  Run run;
  const std::string state = dir + "/checkpoint.safetensors", weights = dir + "/w.safetensors";
  save_checkpoint(state, *run.model, run.opt, CheckpointState{}, "small_cnn", 2, nlohmann::json::object());
  save_weights(weights, *run.model, "small_cnn", 2, 1, 8);
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string s0 = bytes(state), w0 = bytes(weights);
  for (auto& [n, t] : run.model->named_buffers())
    if (n == "bn1.running_var") fill_(t, std::numeric_limits<double>::infinity());
  CHECK_THROWS_WITH(save_checkpoint(state, *run.model, run.opt, CheckpointState{}, "small_cnn", 2, nlohmann::json::object()),
                    doctest::Contains("model.bn1.running_var (32,) holds inf (the file there, if any, is kept"));
  CHECK_THROWS_WITH(save_weights(weights, *run.model, "small_cnn", 2, 1, 8),
                    doctest::Contains("bn1.running_var (32,) holds inf"));
  CHECK(bytes(state) == s0);
  CHECK(bytes(weights) == w0);
}
