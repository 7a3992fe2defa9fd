// UNet parity with PyTorch: tests/support/oracle/unet.py builds the same UNet in torch (same module
// names: inc, downI.maxpool_conv.1.double_conv.K, upJ.up / upJ.conv, outc.conv), exports its
// weights, a batch with ignored pixels (255) and references; kiln loads the weights (strict: every
// name on both sides) and must reproduce the eval-mode logits (f32), the train-mode logits, the
// loss cross_entropy(ignore 255) + dice_loss, every parameter gradient and the BN buffers (f64, so
// formula errors are not hidden by f32 roundoff). Odd sizes exercise the pad before the concat.
// Tolerance: normwise relative error max|kiln - torch| / max|torch| per tensor: 1e-4 in f32,
// 1e-10 in f64 (measured: f64 gradients 3e-15 to 1e-14, f32 ones 3.2e-6).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/autograd/grad_mode.h"
#include "engine/io/tensor_io.h"
#include "engine/ops/ops.h"
#include "engine/ops/segmentation.h"
#include "models/unet.h"
#include "tests/support/process_temp_dir.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

double rel_err(const Tensor& got, const Tensor& want) {
  auto a = to_dtype(got, DType::f64).to_vector<double>(), b = to_dtype(want, DType::f64).to_vector<double>();
  REQUIRE(a.size() == b.size());
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    ref = std::max(ref, std::abs(b[i]));
  }
  return ref > 0 ? diff / ref : diff;
}

void check_tensor(const std::string& what, const Tensor& got, const Tensor& want, double tol) {
  CAPTURE(what);
  REQUIRE_MESSAGE(got.sizes() == want.sizes(), what, ": kiln ", got.str(), " vs torch ", want.str());
  if (!is_floating(want.dtype())) {
    CHECK(to_dtype(got, DType::f64).to_vector<double>() == to_dtype(want, DType::f64).to_vector<double>());
    return;
  }
  const double e = rel_err(got, want);
  CAPTURE(e);
  CHECK(e <= tol);
}

struct Export {
  std::string dir;
  nlohmann::json cfg;
};

Export run_export(const std::string& name, const std::string& args) {
  const fs::path dir = kiln_test::process_temp_root("kiln_parity_unet_") / name;  // removed at exit
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string script = std::string(KILN_SOURCE_DIR) + "/tests/support/oracle/unet.py";
  const std::string cmd = "/usr/bin/python3 " + script + " --out '" + dir.string() + "' " + args + " > '" +
                          dir.string() + "/log.txt' 2>&1";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "oracle failed: ", cmd, " (see ", dir.string(), "/log.txt)");
  std::ifstream f(dir / "config.json");
  return {dir.string(), nlohmann::json::parse(f)};
}

models::UNetOptions options_of(const nlohmann::json& c) {
  models::UNetOptions o;
  o.in_channels = c.at("channels");
  o.num_classes = c.at("classes");
  o.depth = c.at("depth");
  o.base_width = c.at("base");
  o.bilinear = c.at("bilinear");
  o.first_stride = c.at("stride2").get<bool>() ? 2 : 1;
  return o;
}

// f64 export: train-mode logits, loss, gradients, buffers at 1e-10 (and eval logits).
// f32 export: eval logits at 1e-4, train-mode logits and loss at 1e-4.
void check_unet(const std::string& name, const std::string& args) {
  const Export ex = run_export(name, args);
  CAPTURE(name);
  const bool f64 = ex.cfg.at("dtype") == "float64";
  const double tol = f64 ? 1e-10 : 1e-4;
  Tensor x = load_npy(ex.dir + "/input.npy"), y = load_npy(ex.dir + "/labels.npy");
  NamedTensors init = load_safetensors(ex.dir + "/model.safetensors");
  NamedTensors fwd = load_safetensors(ex.dir + "/forward.safetensors");
  auto fresh = [&] {
    auto m = models::unet(options_of(ex.cfg));
    m->name_tensors();
    if (f64) m->to(DType::f64);
    m->load_state_dict(init);  // strict: the torch names are kiln's names
    return m;
  };
  {
    auto m = fresh();
    CHECK(m->num_parameters() == ex.cfg.at("parameters").get<int64_t>());
    m->eval();
    NoGradGuard ng;
    check_tensor("eval.logits", (*m)(x), *find_named(fwd, "eval.logits"), tol);
  }
  auto m = fresh();
  m->train();
  Tensor logits = (*m)(x);
  check_tensor("train.logits", logits, *find_named(fwd, "train.logits"), tol);
  Tensor loss = add(cross_entropy(logits, y, Tensor(), Reduction::mean, 255), dice_loss(logits, y));
  check_tensor("train.loss", loss, *find_named(fwd, "train.loss"), tol);
  loss.backward();
  NamedTensors grads = load_safetensors(ex.dir + "/grads.safetensors");
  auto params = m->named_parameters();
  REQUIRE(params.size() == grads.size());
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    CHECK(params[i].first == grads[i].first);
    REQUIRE_MESSAGE(params[i].second.grad().defined(), params[i].first, " got no gradient");
    // f32 at 2x32x32, depth 3: measured worst 3.2e-6, 30x inside the bound.
    check_tensor("grad " + grads[i].first, params[i].second.grad(), grads[i].second, tol);
    worst = std::max(worst, rel_err(params[i].second.grad(), grads[i].second));
  }
  NamedTensors bufs = load_safetensors(ex.dir + "/train_buffers.safetensors");
  auto mine = m->named_buffers();
  REQUIRE(mine.size() == bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    CHECK(mine[i].first == bufs[i].first);
    check_tensor("buffer " + bufs[i].first, mine[i].second, bufs[i].second, tol);
  }
  MESSAGE(name, ": ", params.size(), " parameter tensors, worst gradient error ", worst);
}

}  // namespace

TEST_CASE("parity: UNet, transposed-conv upsampling, depth 2, odd size 18x23 (f64 train, grads)") {
  check_unet("convt_f64", "--depth 2 --base 4 --height 18 --width 23 --dtype float64 --seed 1");
}

TEST_CASE("parity: UNet, bilinear upsampling, depth 3, 24x20 (f64 train, grads)") {
  check_unet("bilinear_f64", "--depth 3 --base 4 --bilinear --height 24 --width 20 --classes 4 --dtype float64 --seed 2");
}

TEST_CASE("parity: UNet, stride-2 first conv, bilinear, 17x22 (f64 train, grads)") {
  check_unet("stride2_f64", "--depth 2 --base 4 --bilinear --stride2 --height 17 --width 22 --dtype float64 --seed 3");
}

TEST_CASE("parity: UNet in f32, depth 3, base 8, 32x32 (eval and train logits, loss, grads)") {
  check_unet("convt_f32", "--depth 3 --base 8 --height 32 --width 32 --seed 4");
}
