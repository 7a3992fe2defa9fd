// Module tree, torchvision names, state dicts (round trip through safetensors, errors),
// modes, initialization statistics and the model factory.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <unistd.h>

#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/io/tensor_io.h"
#include "engine/autograd/node.h"
#include "engine/memory/tag.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/ops/ops.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "models/small_cnn.h"

using namespace kiln;

namespace {
double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = to_dtype(a, DType::f64).to_vector<double>(), y = to_dtype(b, DType::f64).to_vector<double>();
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}
std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("kiln_test_nn_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("resnet18 has torchvision's parameter names, order and count") {
  auto m = models::resnet18(1000);
  auto sd = m->state_dict();
  // torchvision resnet18: 62 parameters + 3 buffers per BN (20 BNs) = 122 entries, 11,689,512 parameters.
  CHECK(m->named_parameters().size() == 62);
  CHECK(m->named_buffers().size() == 60);
  CHECK(sd.size() == 122);
  CHECK(m->num_parameters() == 11689512);
  CHECK(sd[0].first == "conv1.weight");
  CHECK(sd[1].first == "bn1.weight");
  CHECK(sd[2].first == "bn1.bias");
  CHECK(sd[3].first == "bn1.running_mean");
  CHECK(sd[4].first == "bn1.running_var");
  CHECK(sd[5].first == "bn1.num_batches_tracked");
  CHECK(sd[6].first == "layer1.0.conv1.weight");
  CHECK(sd.back().first == "fc.bias");
  CHECK(find_named(sd, "layer2.0.downsample.0.weight") != nullptr);
  CHECK(find_named(sd, "layer2.0.downsample.1.running_var") != nullptr);
  CHECK(find_named(sd, "layer1.0.downsample.0.weight") == nullptr);  // no downsample in layer1
  CHECK(find_named(sd, "layer4.1.bn2.num_batches_tracked")->dtype() == DType::i64);
  CHECK(find_named(sd, "conv1.weight")->sizes() == Shape{64, 3, 7, 7});
  CHECK(find_named(sd, "fc.weight")->sizes() == Shape{1000, 512});
  for (auto& [n, p] : m->named_parameters()) CHECK(p.requires_grad());
  for (auto& [n, b] : m->named_buffers()) CHECK(!b.requires_grad());
}

TEST_CASE("resnet variants: 34 counts, small stem, channels and classes") {
  auto r34 = models::resnet34(1000);
  CHECK(r34->num_parameters() == 21797672);  // torchvision resnet34
  auto small = models::resnet18(10, 1, true);
  auto sd = small->state_dict();
  CHECK(find_named(sd, "conv1.weight")->sizes() == Shape{64, 1, 3, 3});
  CHECK(find_named(sd, "fc.weight")->sizes() == Shape{10, 512});
  auto names = models::model_names();
  CHECK(std::set<std::string>(names.begin(), names.end()).count("resnet18_small") == 1);
}

TEST_CASE("resnet50 and resnet101: torchvision's bottleneck names, order, shapes and counts") {
  auto m = models::resnet50(1000);
  auto sd = m->state_dict();
  // torchvision resnet50: 161 parameters, 159 buffers (53 BNs), 25,557,032 parameters;
  // resnet101: 314, 312, 44,549,160.
  CHECK(m->named_parameters().size() == 161);
  CHECK(m->named_buffers().size() == 159);
  CHECK(sd.size() == 320);
  CHECK(m->num_parameters() == 25557032);
  CHECK(sd[6].first == "layer1.0.conv1.weight");
  CHECK(sd.back().first == "fc.bias");
  // layer1.0: 1x1 64->64, 3x3 64->64, 1x1 64->256, and a stride-1 downsample to 256 channels.
  CHECK(find_named(sd, "layer1.0.conv1.weight")->sizes() == Shape{64, 64, 1, 1});
  CHECK(find_named(sd, "layer1.0.conv2.weight")->sizes() == Shape{64, 64, 3, 3});
  CHECK(find_named(sd, "layer1.0.conv3.weight")->sizes() == Shape{256, 64, 1, 1});
  CHECK(find_named(sd, "layer1.0.bn3.running_var")->sizes() == Shape{256});
  CHECK(find_named(sd, "layer1.0.downsample.0.weight")->sizes() == Shape{256, 64, 1, 1});
  CHECK(find_named(sd, "layer1.0.downsample.1.weight")->sizes() == Shape{256});
  CHECK(find_named(sd, "layer1.1.downsample.0.weight") == nullptr);
  CHECK(find_named(sd, "layer2.0.conv2.weight")->sizes() == Shape{128, 128, 3, 3});
  CHECK(find_named(sd, "layer2.0.downsample.0.weight")->sizes() == Shape{512, 256, 1, 1});
  CHECK(find_named(sd, "layer4.2.conv3.weight")->sizes() == Shape{2048, 512, 1, 1});
  CHECK(find_named(sd, "layer4.3.conv1.weight") == nullptr);  // {3, 4, 6, 3} blocks
  CHECK(find_named(sd, "layer3.5.conv1.weight") != nullptr);
  CHECK(find_named(sd, "fc.weight")->sizes() == Shape{1000, 2048});
  // The stride sits on the 3x3 conv (torchvision's "v1.5"), the downsample conv has it too.
  int seen = 0;
  for (auto& [n, mod] : m->named_modules()) {
    if (n != "layer2.0") continue;
    auto* blk = dynamic_cast<models::Bottleneck*>(mod.get());
    REQUIRE(blk != nullptr);
    CHECK(blk->conv1->options().stride == 1);
    CHECK(blk->conv2->options().stride == 2);
    CHECK(blk->conv3->options().stride == 1);
    ++seen;
  }
  CHECK(seen == 1);

  auto r101 = models::resnet101(1000);
  CHECK(r101->named_parameters().size() == 314);
  CHECK(r101->named_buffers().size() == 312);
  CHECK(r101->num_parameters() == 44549160);
  CHECK(find_named(r101->state_dict(), "layer3.22.bn3.weight")->sizes() == Shape{1024});
  CHECK(find_named(r101->state_dict(), "layer3.23.bn3.weight") == nullptr);

  auto small = models::make_model("resnet50_small", 7, 1, 32);
  auto ssd = small->state_dict();
  CHECK(ssd.size() == 320);
  CHECK(find_named(ssd, "conv1.weight")->sizes() == Shape{64, 1, 3, 3});
  CHECK(find_named(ssd, "fc.weight")->sizes() == Shape{7, 2048});
  auto names = models::model_names();
  for (const char* n : {"resnet50", "resnet101", "resnet50_small", "resnet101_small"})
    CHECK(std::set<std::string>(names.begin(), names.end()).count(n) == 1);
}

TEST_CASE("resnet50_small: (N, C, H, W) -> (N, classes) and the stages chain to forward exactly") {
  manual_seed(4);
  auto m = models::resnet50(5, 3, true);
  Tensor x = normal({2, 3, 8, 8}, 0.0, 1.0);
  m->eval();
  NoGradGuard ng;
  Tensor y = (*m)(x);
  CHECK(y.sizes() == Shape{2, 5});
  Tensor z = x;
  auto st = m->stages();
  CHECK(st.size() == 18);  // stem, 16 bottlenecks, head
  for (auto& s : st) z = s.fn(z);
  CHECK(max_abs_diff(y, z) == 0);
}

TEST_CASE("small_cnn layout matches small_cnn.py and adapts to channels and size") {
  auto m = models::small_cnn(10, 1, 28);
  std::vector<std::string> expect = {"conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "bn1.running_mean",
                                     "bn1.running_var", "bn1.num_batches_tracked", "conv2.weight", "conv2.bias",
                                     "bn2.weight", "bn2.bias", "bn2.running_mean", "bn2.running_var",
                                     "bn2.num_batches_tracked", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  auto sd = m->state_dict();
  REQUIRE(sd.size() == expect.size());
  for (size_t i = 0; i < sd.size(); ++i) CHECK(sd[i].first == expect[i]);
  CHECK(find_named(sd, "fc1.weight")->sizes() == Shape{128, 3136});
  auto rgb = models::small_cnn(5, 3, 32);
  CHECK(find_named(rgb->state_dict(), "fc1.weight")->sizes() == Shape{128, 64 * 8 * 8});
  CHECK(find_named(rgb->state_dict(), "conv1.weight")->sizes() == Shape{32, 3, 3, 3});
}

TEST_CASE("make_model builds by name and lists known names for an unknown one") {
  CHECK(models::make_model("small_cnn", 7, 1, 28)->state_dict().back().second.sizes() == Shape{7});
  try {
    models::make_model("resnet152", 10, 3, 224);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "resnet152"));
    CHECK(contains(e.what(), "resnet50"));
    CHECK(contains(e.what(), "resnet18"));
    CHECK(contains(e.what(), "small_cnn"));
  }
}

TEST_CASE("train/eval propagates to every module") {
  auto m = models::resnet18(10);
  CHECK(m->is_training());
  m->eval();
  for (auto& [n, c] : m->named_modules()) CHECK(!c->is_training());
  m->train();
  for (auto& [n, c] : m->named_modules()) CHECK(c->is_training());
}

TEST_CASE("state_dict round trip through safetensors restores every value") {
  manual_seed(1);
  auto a = models::resnet18(10, 3, true);
  manual_seed(2);
  auto b = models::resnet18(10, 3, true);
  CHECK(max_abs_diff(*find_named(a->state_dict(), "fc.weight"), *find_named(b->state_dict(), "fc.weight")) > 0);
  std::string dir = temp_dir("roundtrip");
  save_safetensors(dir + "/w.safetensors", a->state_dict());
  auto loaded = load_safetensors(dir + "/w.safetensors");
  REQUIRE(loaded.size() == a->state_dict().size());
  for (size_t i = 0; i < loaded.size(); ++i) CHECK(loaded[i].first == a->state_dict()[i].first);
  b->load_state_dict(loaded);
  auto sa = a->state_dict(), sb = b->state_dict();
  for (size_t i = 0; i < sa.size(); ++i) {
    CHECK(sb[i].second.dtype() == sa[i].second.dtype());
    CHECK(max_abs_diff(sa[i].second, sb[i].second) == 0.0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("load_state_dict names missing, unexpected and mismatched keys") {
  auto m = models::small_cnn(10, 1, 28);
  auto sd = m->state_dict();
  NamedTensors bad;
  for (auto& [n, t] : sd)
    if (n != "bn2.running_var") bad.emplace_back(n, clone(t));
  bad.emplace_back("fc3.weight", zeros({2, 2}));
  try {
    m->load_state_dict(bad);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "missing keys: bn2.running_var"));
    CHECK(contains(e.what(), "unexpected keys: fc3.weight"));
  }
  auto r = m->load_state_dict(bad, /*strict=*/false);
  CHECK(r.missing_keys == std::vector<std::string>{"bn2.running_var"});
  CHECK(r.unexpected_keys == std::vector<std::string>{"fc3.weight"});

  NamedTensors wrong = sd;
  for (auto& [n, t] : wrong)
    if (n == "fc2.weight") t = zeros({5, 128});
  try {
    m->load_state_dict(wrong, false);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "fc2.weight"));
    CHECK(contains(e.what(), "(5, 128)"));
    CHECK(contains(e.what(), "(10, 128)"));
  }
}

TEST_CASE("load_state_dict copies in place: parameter handles stay the same tensors") {
  auto m = models::small_cnn(10, 1, 28);
  Tensor w = m->fc2->weight;
  auto sd = m->state_dict();
  NamedTensors zeroed;
  for (auto& [n, t] : sd) zeroed.emplace_back(n, zeros_like(t));
  m->load_state_dict(zeroed);
  CHECK(m->fc2->weight.is_same(w));
  CHECK(max_abs_diff(w, zeros_like(w)) == 0.0);
  CHECK(w.requires_grad());
}

TEST_CASE("default init: Linear and Conv2d U(+-1/sqrt(fan_in)), resnet convs N(0, 2/fan_out), BN 1/0") {
  manual_seed(3);
  nn::Linear lin(400, 300);
  double bound = 1.0 / std::sqrt(400.0);
  auto w = lin.weight.to_vector<float>();
  double mx = 0, ss = 0;
  for (float v : w) mx = std::max(mx, (double)std::abs(v)), ss += (double)v * v;
  CHECK(mx <= bound);
  CHECK(mx > 0.99 * bound);
  CHECK(std::sqrt(ss / w.size()) == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.02));
  for (float v : lin.bias.to_vector<float>()) CHECK(std::abs(v) <= bound);

  auto r = models::resnet18(10);
  auto c = r->state_dict();
  auto cw = find_named(c, "layer3.0.conv2.weight")->to_vector<float>();  // (256, 256, 3, 3), fan_out 2304
  double s2 = 0, mean = 0;
  for (float v : cw) s2 += (double)v * v, mean += v;
  CHECK(std::sqrt(s2 / cw.size()) == doctest::Approx(std::sqrt(2.0 / 2304)).epsilon(0.02));
  CHECK(std::abs(mean / cw.size()) < 1e-4);
  for (float v : find_named(c, "layer3.0.bn2.weight")->to_vector<float>()) CHECK(v == 1.0f);
  for (float v : find_named(c, "layer3.0.bn2.bias")->to_vector<float>()) CHECK(v == 0.0f);
  double fb = 1.0 / std::sqrt(512.0);
  for (float v : find_named(c, "fc.weight")->to_vector<float>()) CHECK(std::abs(v) <= fb);
}

TEST_CASE("parameters are allocated under the param memory tag") {
  auto m = models::small_cnn(10, 1, 28);
  for (auto& [n, p] : m->named_parameters()) CHECK(p.storage()->tag == MemoryTag::param);
  for (auto& [n, b] : m->named_buffers()) CHECK(b.storage()->tag == MemoryTag::param);
}

TEST_CASE("Sequential names children by index and a module cannot have two parents") {
  auto l = std::make_shared<nn::Linear>(3, 2);
  nn::Sequential s{l, std::make_shared<nn::Linear>(2, 1)};
  auto names = s.named_parameters();
  REQUIRE(names.size() == 4);
  CHECK(names[0].first == "0.weight");
  CHECK(names[3].first == "1.bias");
  nn::Sequential other;
  CHECK_THROWS_AS(other.push_back(l), Error);
}

TEST_CASE("forward pushes the module path: recorded ops name the module that ran them") {
  auto m = models::small_cnn(10, 1, 28);
  Tensor x = randn({2, 1, 28, 28});
  Tensor y = (*m)(x);
  CHECK(y.sizes() == Shape{2, 10});
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->module == "fc2");
  CHECK(memory_context().module.empty());  // restored after the forward
  auto r = models::resnet18(3, 1, true);
  Tensor z = (*r)(randn({1, 1, 28, 28}));  // any input size; 1 channel
  CHECK(z.sizes() == Shape{1, 3});
  CHECK(z.grad_fn()->module == "fc");
}

TEST_CASE("BatchNorm2d counts batches in train mode only, Dropout is identity in eval") {
  auto m = models::small_cnn(10, 1, 28);
  Tensor x = randn({2, 1, 28, 28});
  (*m)(x);
  (*m)(x);
  CHECK(m->bn1->num_batches_tracked.item() == 2);
  m->eval();
  Tensor a = (*m)(x), b = (*m)(x);
  CHECK(a.to_vector<float>() == b.to_vector<float>());
  CHECK(m->bn1->num_batches_tracked.item() == 2);
}

TEST_CASE("tensor_io: npy round trip of a non-contiguous tensor and to(DType) keeps i64 buffers") {
  std::string dir = temp_dir("npy");
  Tensor t = transpose(reshape(arange(12, DType::f32), {3, 4}), 0, 1);  // (4, 3) strided
  save_npy(dir + "/t.npy", t);
  Tensor u = load_npy(dir + "/t.npy");
  CHECK(u.sizes() == Shape{4, 3});
  CHECK(u.to_vector<float>() == t.to_vector<float>());
  CHECK_THROWS_AS(load_npy(dir + "/missing.npy"), Error);
  std::filesystem::remove_all(dir);
  auto m = models::small_cnn(10, 1, 28);
  m->to(DType::f64);
  CHECK(m->conv1->weight.dtype() == DType::f64);
  CHECK(m->bn1->num_batches_tracked.dtype() == DType::i64);
}
