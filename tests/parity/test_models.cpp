// Model parity with PyTorch: torchvision ResNet18 (and its small-stem variant) and the small CNN
// are exported by tests/support/oracle/export_resnet.py / small_cnn.py (weights, a batch and
// reference results) into a temporary folder; kiln loads the same weights and must reproduce
// logits and loss in eval and train mode, every gradient, the BN buffers after a train-mode
// forward, and every parameter and buffer after one SGD-momentum step and after one AdamW step.
// Tolerance: normwise relative error max|kiln - torch| / max|torch| <= 1e-4 per tensor, with two
// cases where f32 roundoff decides and the comparison is made against the right scale instead:
// - a gradient that is zero up to roundoff (the bias of a conv followed by train-mode BN; its
//   reference max is < 1e-5 of the model's largest gradient) is compared against that largest one;
// - AdamW's first step is lr * g / (|g| + eps), i.e. +-lr for any |g| >> eps, so an element whose
//   gradient is within the gradient tolerance of zero (|g| <= 1e-4 max|g| of its tensor) has an
//   undetermined sign; such elements may differ by up to 2 lr (their count is reported and
//   bounded), every other element must be within 1e-4.
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
#include "engine/optim/adamw.h"
#include "engine/optim/sgd.h"
#include "models/resnet.h"
#include "models/small_cnn.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

const char* kPython = "/usr/bin/python3";
constexpr double kTol = 1e-4;

// The oracle scripts' folder; KILN_ORACLE_DIR overrides it (e.g. to try scripts from another checkout).
std::string oracle_dir() {
  const char* env = std::getenv("KILN_ORACLE_DIR");
  return env ? std::string(env) : std::string(KILN_SOURCE_DIR) + "/tests/support/oracle";
}

fs::path root_dir() { return fs::temp_directory_path() / ("kiln_parity_models_" + std::to_string(::getpid())); }

// The exports are reused by every subcase; the folder goes when the test program exits.
std::string fresh_dir(const std::string& name) {
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(root_dir(), ec);
    });
  }
  fs::path p = root_dir() / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// Runs an export script; returns its config.json.
nlohmann::json run_export(const std::string& script, const std::string& args, const std::string& out) {
  std::string path = oracle_dir() + "/" + script;
  REQUIRE_MESSAGE(fs::exists(kPython), kPython, " is missing (the parity tests need Debian's python3-torch)");
  REQUIRE_MESSAGE(fs::exists(path), "oracle script missing: ", path);
  std::string cmd = std::string(kPython) + " " + path + " --out '" + out + "' " + args + " > '" + out + "/log.txt' 2>&1";
  int rc = std::system(cmd.c_str());
  REQUIRE_MESSAGE(rc == 0, "oracle failed: ", cmd, " (see ", out, "/log.txt)");
  std::ifstream f(out + "/config.json");
  return nlohmann::json::parse(f);
}

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

std::vector<double> as_f64(const Tensor& t) { return to_dtype(t, DType::f64).to_vector<double>(); }

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : to_dtype(t, DType::f64).to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

void check_tensor(const std::string& what, const Tensor& got, const Tensor& want, double tol = kTol) {
  CAPTURE(what);
  REQUIRE_MESSAGE(got.sizes() == want.sizes(), what, ": kiln ", got.str(), " vs torch ", want.str());
  if (!is_floating(want.dtype())) {
    CHECK(to_dtype(got, DType::f64).to_vector<double>() == to_dtype(want, DType::f64).to_vector<double>());
    return;
  }
  double e = rel_err(got, want);
  CAPTURE(e);
  CHECK(e <= tol);
}

// Every entry of `want` against the module's state dict (names must match one to one).
void check_state(const std::string& stage, const nn::Module& m, const NamedTensors& want, double tol = kTol) {
  auto sd = m.state_dict();
  REQUIRE(sd.size() == want.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    CHECK(sd[i].first == want[i].first);
    check_tensor(stage + " " + want[i].first, sd[i].second, want[i].second, tol);
  }
}

// An f64 export (--dtype float64: input.npy is f64) runs the kiln model in f64 too.
// tol bounds every comparison; adamw_tol (default: tol) the AdamW step's and its exemption
// threshold (its lr * g / (|g| + eps) turns the gradient's absolute error into a relative one in
// small elements).
template <typename MakeModel>
void check_model_parity(const std::string& dir, const nlohmann::json& cfg, MakeModel make, double tol = kTol,
                        double adamw_tol = 0) {
  Tensor x = load_npy(dir + "/input.npy"), y = load_npy(dir + "/labels.npy");
  NamedTensors init = load_safetensors(dir + "/model.safetensors");
  NamedTensors fwd = load_safetensors(dir + "/forward.safetensors");
  auto fresh = [&] {
    std::shared_ptr<nn::Module> m = make();
    if (x.dtype() == DType::f64) m->to(DType::f64);
    m->load_state_dict(init);  // strict: every torch name must exist in kiln and vice versa
    return m;
  };

  SUBCASE("eval forward") {
    auto m = fresh();
    m->eval();
    NoGradGuard ng;
    Tensor logits = (*m)(x);
    check_tensor("eval.logits", logits, *find_named(fwd, "eval.logits"), tol);
    check_tensor("eval.loss", cross_entropy(logits, y), *find_named(fwd, "eval.loss"), tol);
    check_state("eval (unchanged)", *m, init, tol);
  }
  // --backward-bn eval exports: the gradients and both steps with BN in eval mode; the train-mode
  // logits, loss and BN buffers are then not compared (the ResNet50 case says why).
  const bool bn_eval = cfg.value("backward_bn", std::string("train")) == "eval";
  auto backward_mode = [&](nn::Module& m) {
    m.train();
    if (bn_eval) m.eval();
  };
  SUBCASE("train forward, backward and BN buffers") {
    auto m = fresh();
    backward_mode(*m);
    Tensor logits = (*m)(x);
    Tensor loss = cross_entropy(logits, y);
    if (!bn_eval) {  // with eval BN the train-mode forward is not part of the comparison
      check_tensor("train.logits", logits, *find_named(fwd, "train.logits"), tol);
      check_tensor("train.loss", loss, *find_named(fwd, "train.loss"), tol);
      NamedTensors bufs = load_safetensors(dir + "/train_buffers.safetensors");
      auto mine = m->named_buffers();
      REQUIRE(mine.size() == bufs.size());
      for (size_t i = 0; i < bufs.size(); ++i)
        check_tensor("buffer " + bufs[i].first, mine[i].second, bufs[i].second, tol);
    }
    loss.backward();
    NamedTensors grads = load_safetensors(dir + "/grads.safetensors");
    auto params = m->named_parameters();
    REQUIRE(params.size() == grads.size());
    double global = 0;
    for (auto& [n, g] : grads) global = std::max(global, max_abs(g));
    double worst = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      CHECK(params[i].first == grads[i].first);
      REQUIRE_MESSAGE(params[i].second.grad().defined(), params[i].first, " got no gradient");
      const Tensor& want = grads[i].second;
      if (max_abs(want) >= 1e-5 * global) {
        check_tensor("grad " + grads[i].first, params[i].second.grad(), want, tol);
        worst = std::max(worst, rel_err(params[i].second.grad(), want));
      } else {  // zero up to roundoff: compare on the model's gradient scale
        CAPTURE(grads[i].first);
        double diff = max_abs(sub(params[i].second.grad(), want));
        MESSAGE("gradient of ", grads[i].first, " is zero up to roundoff (torch max ", max_abs(want), ", kiln - torch ",
                diff, ", model max ", global, ")");
        CHECK(diff <= tol * 1e-2 * global);
      }
    }
    MESSAGE(dir, ": worst gradient error ", worst, " (normwise per tensor, bound ", tol, ")");
  }
  SUBCASE("one SGD-momentum step") {
    auto m = fresh();
    backward_mode(*m);
    optim::SGDOptions o;
    o.lr = cfg.at("lr").get<double>();
    o.momentum = cfg.at("momentum").get<double>();
    o.weight_decay = cfg.at("weight_decay").get<double>();
    optim::SGD opt(m->named_parameters(), o);
    opt.zero_grad();
    cross_entropy((*m)(x), y).backward();
    opt.step();
    check_state("after SGD", *m, load_safetensors(dir + "/after_sgd.safetensors"), tol);
  }
  SUBCASE("one AdamW step") {
    const double atol = adamw_tol > 0 ? adamw_tol : tol;
    auto m = fresh();
    backward_mode(*m);
    optim::AdamWOptions o;
    o.lr = cfg.at("adamw_lr").get<double>();
    o.weight_decay = cfg.at("weight_decay").get<double>();
    optim::AdamW opt(m->named_parameters(), o);
    opt.zero_grad();
    cross_entropy((*m)(x), y).backward();
    opt.step();
    NamedTensors want = load_safetensors(dir + "/after_adamw.safetensors");
    NamedTensors grads = load_safetensors(dir + "/grads.safetensors");
    auto sd = m->state_dict();
    REQUIRE(sd.size() == want.size());
    int64_t undetermined = 0, total = 0;
    double global = 0;
    for (auto& [n, gt] : grads) global = std::max(global, max_abs(gt));
    for (size_t i = 0; i < sd.size(); ++i) {
      CHECK(sd[i].first == want[i].first);
      const Tensor* g = find_named(grads, want[i].first);
      if (!g) {  // a buffer
        check_tensor("after AdamW " + want[i].first, sd[i].second, want[i].second, atol);
        continue;
      }
      CAPTURE(want[i].first);
      auto a = as_f64(sd[i].second), b = as_f64(want[i].second), gv = as_f64(*g);
      // A gradient that is zero up to roundoff as a whole (see the grads check) is all noise.
      const double gmax = max_abs(*g);
      const bool all_noise = gmax < 1e-5 * global;
      const double scale = max_abs(want[i].second), gnoise = atol * gmax;
      double worst = 0;
      for (size_t k = 0; k < a.size(); ++k) {
        double d = std::abs(a[k] - b[k]);
        ++total;
        if (all_noise || (gv[k] != 0 && std::abs(gv[k]) <= gnoise)) {
          ++undetermined;
          CHECK(d <= 2 * o.lr * (1 + atol) + atol * scale);
        } else {
          worst = std::max(worst, d / scale);
        }
      }
      CAPTURE(worst);
      CHECK(worst <= atol);
    }
    MESSAGE("AdamW: ", undetermined, " of ", total, " parameter elements have a gradient within roundoff of 0");
    CHECK(undetermined <= total / 100 + 64);  // the exemption stays rare
  }
}

}  // namespace

TEST_CASE("parity: torchvision resnet18 (2x3x64x64): logits, loss, grads, BN buffers, SGD and AdamW steps") {
  static std::string dir;
  static nlohmann::json cfg;
  if (dir.empty()) {  // export once; doctest re-enters the test case for each subcase
    dir = fresh_dir("resnet18");
    cfg = run_export("export_resnet.py", "--arch resnet18 --num-classes 10 --batch 2 --size 64 --seed 0", dir);
  }
  check_model_parity(dir, cfg, [&] { return models::resnet18(cfg.at("num_classes").get<int64_t>(), 3, false); });
}

TEST_CASE("parity: resnet18 small stem (2x3x32x32)") {
  static std::string dir;
  static nlohmann::json cfg;
  if (dir.empty()) {
    dir = fresh_dir("resnet18_small");
    cfg = run_export("export_resnet.py", "--arch resnet18 --small-stem --num-classes 7 --batch 2 --size 32 --seed 3",
                     dir);
  }
  check_model_parity(dir, cfg, [&] { return models::resnet18(cfg.at("num_classes").get<int64_t>(), 3, true); });
}

TEST_CASE("parity: small_cnn (4x1x28x28), dropout off in the train-mode references") {
  static std::string dir;
  static nlohmann::json cfg;
  if (dir.empty()) {
    dir = fresh_dir("small_cnn");
    cfg = run_export("small_cnn.py", "--num-classes 10 --batch 4 --seed 1", dir);
  }
  check_model_parity(dir, cfg, [&] {
    auto m = models::small_cnn(cfg.at("num_classes").get<int64_t>(), 1, 28);
    m->dropout->set_p(0.0);  // the references run with p = 0 (kiln's Philox mask differs from torch's)
    return std::static_pointer_cast<nn::Module>(m);
  });
}

// ResNet50 in f32: its train-mode f32 gradient is not determined to 1e-4 by the weights and the
// batch, in torch itself (torch f32 against torch f64, normwise, worst tensor):
// - train mode: 17-62% off (2x64 px, 8x64, 16x32, 32x32, 4x128; seeds 0, 5, 6), so a larger image
//   or batch does not help. The train-mode f32 forward is off by ~1e-5 absolute (batch statistics
//   of few values; at 2x64 px the train logits by 7e-5 relative, at 4x32 px kiln's by 1.5e-3), and
//   among the ~10^6 ReLU inputs some lie closer than that to 0 (2x64 px, seed 0: 5 sign flips, one
//   of layer3.5.bn2's 8192 outputs is 7e-6), so f32 switches their gradients on or off: the error of
//   dL/d(block output) jumps from 3e-4 to 1e-2 across layer3.5. More elements mean more flips.
//   Bottlenecks make it worse than ResNet18: 3x more ReLUs, and 1x1 conv + BN paths whose
//   gradients cancel to zero channel sums, leaving small true gradients.
// - eval mode (BN running statistics) is well conditioned where the logits stay moderate: at
//   4x3x32x32, seed 1 (eval loss 2.9) torch's f32 gradient is 2.2e-6 from its f64 one and kiln's
//   3.0e-6 from torch's. (At 2x64, seed 0 the eval logits reach |18|, softmax is near saturation,
//   and kiln's f32 gradients differ from torch's by 3-6e-4 although both are exact in f64.)
// So the train-mode formulas (BN with batch statistics, 8 values per channel in layer4; the 1x1
// stride-1 downsample of layer1) are compared in f64, at 1e-10 (measured: gradients 1.2e-12),
// except AdamW's step: lr * g / (|g| + eps) turns a gradient element's absolute error e into a
// relative one, e / |g|, so an element just above the exemption threshold t gmax (t = the bound)
// is off by up to ~1.2e-12 / t relative; t = 1e-5 keeps that 100x inside the bound (measured 3e-9
// with 1 thread, 4.7e-7 with 2 threads against 1e-8 once). The f32 case compares eval logits,
// loss, gradients and both steps with BN in eval mode at 1e-4, after requiring that the oracle's
// own f32 results are within 1e-5 of its f64 ones.
TEST_CASE("parity: torchvision resnet50 in f64 (2x3x64x64): logits, loss, grads, BN buffers, SGD and AdamW steps") {
  static std::string dir;
  static nlohmann::json cfg;
  if (dir.empty()) {
    dir = fresh_dir("resnet50_f64");
    cfg = run_export("export_resnet.py",
                     "--arch resnet50 --num-classes 10 --batch 2 --size 64 --seed 5 --dtype float64", dir);
  }
  check_model_parity(
      dir, cfg, [&] { return models::resnet50(cfg.at("num_classes").get<int64_t>(), 3, false); }, 1e-10, 1e-5);
}

TEST_CASE("parity: torchvision resnet50 in f32 (4x3x32x32), eval BN: logits, loss, grads, SGD and AdamW steps") {
  static std::string dir;
  static nlohmann::json cfg;
  if (dir.empty()) {
    dir = fresh_dir("resnet50");
    cfg = run_export("export_resnet.py",
                     "--arch resnet50 --num-classes 10 --batch 4 --size 32 --seed 1 --backward-bn eval", dir);
  }
  const double grad_cond = cfg.at("f32_grad_err").get<double>();
  const double logit_cond = cfg.at("f32_eval_logits_err").get<double>();
  MESSAGE("torch f32 vs f64 with eval BN: gradients ", grad_cond, ", logits ", logit_cond);
  REQUIRE(grad_cond <= kTol / 10);
  REQUIRE(logit_cond <= kTol / 10);
  check_model_parity(dir, cfg, [&] { return models::resnet50(cfg.at("num_classes").get<int64_t>(), 3, false); });
}

// resnet101 (and resnet50, both stems): torchvision's state_dict layout (names in order, shapes,
// dtypes), parameter count, and initialisation. The random draws differ (kiln's Philox is not
// torch's generator), so the initial values are compared by their statistics per tensor: constant
// tensors (BN weight 1, bias 0, running stats) exactly; random ones by mean and standard deviation,
// which for n draws agree within a few sampling errors (std: 1/sqrt(2n) relative for a normal; the
// smallest random tensor, layer1.0.conv1 with 4096 draws, has ~1.1%; the bound 10% is > 6 of them;
// mean: within 6 standard errors of the difference, 6 sqrt(2/n) std). A small tensor (fc with few
// classes) says little through its statistics, so fc is also checked against its law: Linear's
// default init draws weight and bias from U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
static void check_layout_and_init(const std::string& arch, bool small_stem, int64_t classes) {
  const std::string name = arch + (small_stem ? "_small" : "");
  CAPTURE(name);
  const std::string dir = fresh_dir(name + "_layout");
  const nlohmann::json cfg =
      run_export("export_resnet.py",
                 "--arch " + arch + (small_stem ? " --small-stem" : "") + " --num-classes " + std::to_string(classes) +
                     " --layout-only",
                 dir);
  std::shared_ptr<models::ResNet> m = arch == "resnet50" ? models::resnet50(classes, 3, small_stem)
                                                         : models::resnet101(classes, 3, small_stem);
  auto sd = m->state_dict();
  const auto& want = cfg.at("state");
  REQUIRE(sd.size() == want.size());
  int64_t count = 0;
  for (const auto& [n, p] : m->named_parameters()) count += p.numel();
  CHECK(count == cfg.at("parameter_count").get<int64_t>());
  for (size_t i = 0; i < sd.size(); ++i) {
    const auto& w = want[i];
    const std::string wname = w.at("name");
    CAPTURE(wname);
    CHECK(sd[i].first == wname);
    CHECK(sd[i].second.sizes() == w.at("shape").get<std::vector<int64_t>>());
    CHECK(std::string(dtype_name(sd[i].second.dtype())) == (w.at("dtype") == "float32" ? "f32" : "i64"));
    if (!w.contains("mean")) continue;
    const auto v = as_f64(sd[i].second);
    double mean = 0, var = 0;
    for (double e : v) mean += e;
    mean /= (double)v.size();
    for (double e : v) var += (e - mean) * (e - mean);
    const double sd_k = std::sqrt(var / (double)v.size());
    const double mean_t = w.at("mean"), sd_t = w.at("std");
    CAPTURE(mean);
    CAPTURE(sd_k);
    CAPTURE(mean_t);
    CAPTURE(sd_t);
    const double n = (double)v.size();
    if (sd_t == 0) {  // a constant: exactly torchvision's value everywhere
      CHECK(sd_k == 0);
      CHECK(mean == mean_t);
    } else {
      CHECK(std::abs(sd_k - sd_t) <= std::max(0.1, 6 / std::sqrt(n)) * sd_t);
      CHECK(std::abs(mean - mean_t) <= 6 * sd_t * std::sqrt(2.0 / n));
    }
    if (wname.rfind("fc.", 0) == 0) {
      const double bound = 1 / std::sqrt((double)(arch == "resnet18" || arch == "resnet34" ? 512 : 2048));
      CHECK(max_abs(sd[i].second) <= bound);
      if (n >= 100) CHECK(max_abs(sd[i].second) > 0.5 * bound);  // all 100 inside half: p = 2^-100
    }
  }
}

TEST_CASE("parity: resnet101 and resnet50 (both stems): torchvision's names, shapes, parameter count, init stats") {
  SUBCASE("resnet101, 1000 classes") { check_layout_and_init("resnet101", false, 1000); }
  SUBCASE("resnet101 small stem, 10 classes") { check_layout_and_init("resnet101", true, 10); }
  SUBCASE("resnet50, 1000 classes") { check_layout_and_init("resnet50", false, 1000); }
  SUBCASE("resnet50 small stem, 7 classes") { check_layout_and_init("resnet50", true, 7); }
}

