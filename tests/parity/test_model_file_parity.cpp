// Model files against PyTorch: tests/support/oracle/model_file.py builds a torch module from the same
// JSON (the format's rules written a second time, in Python) for the three documented examples
// (docs/models: a plain CNN, one with residual adds and a repeat, one with a channel concat of two conv
// branches and a pooling branch), exports its initial weights, a batch and the references; kiln builds
// the same file, loads the weights (strict: every name must match) and must give the same logits and
// loss (eval and train mode), every parameter gradient and the BN buffers after a train-mode forward.
// f32, normwise relative error max|kiln - torch| / max|torch| <= 1e-5 per tensor; a gradient that is
// zero up to roundoff (a conv bias followed by train-mode BN) is compared on the model's gradient scale
// (1e-6 of its largest gradient, the bar of test_models.cpp).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/autograd/grad_mode.h"
#include "engine/io/tensor_io.h"
#include "engine/nn/layers.h"
#include "engine/ops/ops.h"
#include "models/model_file.h"
#include "tests/support/process_temp_dir.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

constexpr double kTol = 1e-5;

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : to_dtype(t, DType::f64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

double rel_err(const Tensor& got, const Tensor& want) {
  REQUIRE_MESSAGE(got.sizes() == want.sizes(), "kiln ", got.str(), " vs torch ", want.str());
  auto a = to_dtype(got, DType::f64).to_vector<double>(), b = to_dtype(want, DType::f64).to_vector<double>();
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    ref = std::max(ref, std::abs(b[i]));
  }
  return ref > 0 ? diff / ref : diff;
}

void check_file(const std::string& name) {
  const std::string file = std::string(KILN_SOURCE_DIR) + "/docs/models/" + name + ".json";
  const fs::path dir = kiln_test::process_temp_root("kiln_parity_mf_") / name;  // removed at exit
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string script = std::string(KILN_SOURCE_DIR) + "/tests/support/oracle/model_file.py";
  const std::string cmd = "/usr/bin/python3 " + script + " --file '" + file + "' --out '" + dir.string() +
                          "' --channels 3 --size 16 --batch 4 --num-classes 5 > '" + dir.string() + "/log.txt' 2>&1";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "oracle failed: ", cmd);
  const std::string d = dir.string();
  Tensor x = load_npy(d + "/input.npy"), y = load_npy(d + "/labels.npy");
  NamedTensors init = load_safetensors(d + "/model.safetensors");
  NamedTensors fwd = load_safetensors(d + "/forward.safetensors");
  auto fresh = [&] {
    auto m = models::load_model_file(file, {5, 3, 16});
    m->load_state_dict(init);  // strict
    // Train-mode references have every dropout off (torch's mask cannot match kiln's Philox stream).
    m->apply([](const std::string&, nn::Module& mod) {
      if (auto* dr = dynamic_cast<nn::Dropout*>(&mod)) dr->set_p(0);
    });
    return m;
  };
  {
    auto m = fresh();
    m->eval();
    NoGradGuard ng;
    Tensor logits = (*m)(x);
    const double e = rel_err(logits, *find_named(fwd, "eval.logits"));
    MESSAGE(name, " eval logits: relative error ", e);
    CHECK(e <= kTol);
    CHECK(rel_err(cross_entropy(logits, y), *find_named(fwd, "eval.loss")) <= kTol);
  }
  auto m = fresh();
  m->train();
  Tensor logits = (*m)(x);
  Tensor loss = cross_entropy(logits, y);
  const double e = rel_err(logits, *find_named(fwd, "train.logits"));
  MESSAGE(name, " train logits: relative error ", e);
  CHECK(e <= kTol);
  CHECK(rel_err(loss, *find_named(fwd, "train.loss")) <= kTol);
  loss.backward();
  NamedTensors grads = load_safetensors(d + "/grads.safetensors");
  auto params = m->named_parameters();
  REQUIRE(params.size() == grads.size());
  double global = 0, worst = 0;
  for (auto& [n, g] : grads) global = std::max(global, max_abs(g));
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(grads[i].first);
    CHECK(params[i].first == grads[i].first);
    REQUIRE_MESSAGE(params[i].second.grad().defined(), params[i].first, " got no gradient");
    const Tensor& want = grads[i].second;
    if (max_abs(want) >= 1e-5 * global) {
      const double ge = rel_err(params[i].second.grad(), want);
      worst = std::max(worst, ge);
      CHECK(ge <= kTol);
    } else {  // zero up to roundoff (no relative error exists): 1e-6 of the model's largest gradient, as in
              // test_models.cpp; measured differences are ~2e-7 of it (sums of ~1000 f32 terms)
      const double diff = max_abs(sub(params[i].second.grad(), want));
      MESSAGE(name, ": ", grads[i].first, " is zero up to roundoff: |kiln - torch| = ", diff / global, " of the largest");
      CHECK(diff <= 1e-6 * global);
    }
  }
  MESSAGE(name, ": worst gradient relative error ", worst, " over ", params.size(), " parameters");
  NamedTensors bufs = load_safetensors(d + "/train_buffers.safetensors");
  auto mine = m->named_buffers();
  REQUIRE(mine.size() == bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    CAPTURE(bufs[i].first);
    CHECK(mine[i].first == bufs[i].first);
    CHECK(rel_err(mine[i].second, bufs[i].second) <= kTol);
  }
  fs::remove_all(dir);
}

}  // namespace

TEST_CASE("model file parity: a plain CNN (features.N / classifier.N, dilation, groups, pools, activations)") {
  check_file("plain_cnn");
}
TEST_CASE("model file parity: residual adds, a repeated block and a 1x1 shortcut") { check_file("residual_cnn"); }
TEST_CASE("model file parity: a channel concat of two conv branches and a pooling branch") {
  check_file("concat_cnn");
}
TEST_CASE("model file parity: an encoder-decoder with conv_transpose2d, bilinear and nearest upsampling, concat skips") {
  check_file("updown_cnn");
}
