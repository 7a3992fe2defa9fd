// Model files (models/model_file.h): names from layers, blocks and repeats; shapes inferred; the
// built-in models round-trip (model_file_builtin.h: same parameter names and the same logits from the
// same weights); recompute stages of a graph give the plain forward's gradients; and every mistake is
// one error naming the file, the layer and the shapes.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "engine/autograd/grad_mode.h"
#include "engine/io/safetensors.h"
#include "engine/nn/layers.h"
#include "engine/ops/ops.h"
#include "engine/train/train_state.h"
#include "models/model_file.h"
#include "models/model_file_builtin.h"
#include "models/registry.h"

using namespace kiln;
using models::build_graph_model;
using models::ModelInput;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The error text of building `text` (empty when it builds).
std::string build_error(const std::string& text, ModelInput in = {5, 3, 8}) {
  try {
    build_graph_model(text, "t.json", in);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> r;
  for (const auto& [n, t] : m.state_dict()) r.push_back(n);
  return r;
}

double rel_diff(const Tensor& a, const Tensor& b) {
  auto x = to_dtype(a, DType::f64).to_vector<double>(), y = to_dtype(b, DType::f64).to_vector<double>();
  REQUIRE(x.size() == y.size());
  double d = 0, r = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    d = std::max(d, std::abs(x[i] - y[i]));
    r = std::max(r, std::abs(y[i]));
  }
  return r > 0 ? d / r : d;
}

std::string docs_model(const std::string& name) {
  return std::string(KILN_SOURCE_DIR) + "/docs/models/" + name + ".json";
}

}  // namespace

TEST_CASE("model file: layer names become PyTorch-style parameter names, shapes are inferred") {
  const std::string text = R"({"layers": [
    {"name": "features", "type": "block", "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
      {"type": "batch_norm"},
      {"type": "relu"},
      {"type": "max_pool", "kernel": 2}]},
    {"name": "blocks", "type": "repeat", "count": 2, "layers": [
      {"name": "conv", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1, "bias": false},
      {"name": "add", "type": "add", "inputs": ["conv", "input"]}]},
    {"type": "flatten"},
    {"name": "fc", "type": "linear", "out_features": "num_classes"}]})";
  auto m = build_graph_model(text, "t.json", {7, 3, 8});
  CHECK(names(*m) == std::vector<std::string>{"features.0.weight", "features.0.bias", "features.1.weight",
                                                "features.1.bias", "features.1.running_mean",
                                                "features.1.running_var", "features.1.num_batches_tracked",
                                                "blocks.0.conv.weight", "blocks.1.conv.weight", "fc.weight",
                                                "fc.bias"});
  const auto& L = m->layers();
  REQUIRE(L.size() == 10);
  CHECK(L[3].name == "features.3");
  CHECK(L[3].out_shape == std::vector<int64_t>{4, 4, 4});
  CHECK(L[5].name == "blocks.0.add");
  CHECK(L[5].inputs == std::vector<std::string>{"blocks.0.conv", "features.3"});
  CHECK(L[7].inputs == std::vector<std::string>{"blocks.1.conv", "blocks.0.add"});
  CHECK(L[8].out_shape == std::vector<int64_t>{64});
  CHECK(L[9].params == 64 * 7 + 7);
  CHECK(L[0].param_bytes == (4 * 3 * 9 + 4) * 4);
  Tensor y = (*m)(randn({2, 3, 8, 8}));
  CHECK(y.sizes() == Shape{2, 7});
  // The same names through the registry (a path ending in .json).
  const std::string path = (std::filesystem::temp_directory_path() / ("kiln_mf_" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(path) << text;
  auto r = models::make_model(path, 7, 3, 8);
  CHECK(names(*r) == names(*m));
  std::filesystem::remove(path);
}

namespace {

struct RoundTrip {
  const char* name;
  int64_t channels, size;
  bool run;  // also compare logits (else names and shapes only)
};

// The built-in model and its model-file form: the same names and shapes, and from the same weights the
// same logits in eval and train mode (dropout off: its mask is not the point here).
void check_round_trip(const RoundTrip& c) {
  CAPTURE(c.name);
  nn::ModulePtr builtin = models::make_model(c.name, 6, c.channels, c.size);
  const std::string text = models::builtin_model_json(c.name).dump(1);
  auto file = build_graph_model(text, c.name, {6, c.channels, c.size});
  REQUIRE(names(*file) == names(*builtin));
  for (size_t i = 0; i < builtin->state_dict().size(); ++i)
    CHECK(file->state_dict()[i].second.sizes() == builtin->state_dict()[i].second.sizes());
  if (!c.run) return;
  file->load_state_dict(builtin->state_dict());
  auto no_dropout = [](const std::string&, nn::Module& m) {
    if (auto* d = dynamic_cast<nn::Dropout*>(&m)) d->set_p(0);
  };
  builtin->apply(no_dropout);
  file->apply(no_dropout);
  Tensor x = randn({3, c.channels, c.size, c.size});
  for (bool train : {false, true}) {
    CAPTURE(train);
    builtin->train(train);
    file->train(train);
    NoGradGuard ng;
    Tensor a = (*builtin)(x), b = (*file)(x);
    CHECK(rel_diff(b, a) <= 1e-6);
  }
}

}  // namespace

TEST_CASE("model file: small_cnn round-trips (same names, same logits from the same weights)") {
  check_round_trip({"small_cnn", 1, 12, true});
  CHECK_THROWS_WITH_AS(models::builtin_model_json("vgg"), doctest::Contains("no model file form for 'vgg'"), Error);
  // The printed form (kiln model show --json) parses back to the same document, one layer a line.
  for (const char* n : {"small_cnn", "resnet18", "resnet34", "resnet18_small", "resnet34_small", "resnet50",
                        "resnet101_small"}) {
    CAPTURE(n);
    const nlohmann::json j = models::builtin_model_json(n);
    const std::string text = models::format_model_json(j);
    CHECK(nlohmann::json::parse(text) == j);
    CHECK(contains(text, "\n    {\"name\": \"conv1\", \"type\": \"conv2d\", "));
  }
}

TEST_CASE("model file: unet round-trips (milesial's names, the same logits from the same weights)") {
  for (const RoundTrip& c : {RoundTrip{"unet_small:depth=2,base=4", 3, 16, true},
                             RoundTrip{"unet_small:depth=3,base=4,bilinear", 2, 24, true},
                             RoundTrip{"unet_small:depth=2,base=4,bilinear,stride2", 3, 16, true},
                             RoundTrip{"unet", 3, 16, false}})
    check_round_trip(c);
  const nlohmann::json j = models::builtin_model_json("unet");
  CHECK(nlohmann::json::parse(models::format_model_json(j)) == j);
  CHECK_THROWS_WITH_AS(models::builtin_model_json("unet:colour"), doctest::Contains("unknown option 'colour'"), Error);
}

// ~20 s of weight initialization: kept out of the sanitizer run (scripts/test.sh asan_skip).
TEST_CASE("model file: the ResNets round-trip (same names, same logits from the same weights)") {
  for (const RoundTrip& c : {RoundTrip{"resnet18_small", 3, 16, true}, RoundTrip{"resnet18", 3, 32, true},
                             RoundTrip{"resnet34_small", 3, 8, false}, RoundTrip{"resnet34", 3, 32, false},
                             RoundTrip{"resnet50_small", 3, 8, true}, RoundTrip{"resnet101", 3, 32, false}})
    check_round_trip(c);
}

TEST_CASE("model file: the documented examples build, and recompute stages give the plain gradients") {
  for (const char* f : {"plain_cnn", "residual_cnn", "concat_cnn", "updown_cnn"}) {
    CAPTURE(f);
    auto m = models::load_model_file(docs_model(f), {5, 3, 16});
    CHECK(m->layers().back().out_shape == std::vector<int64_t>{5});
    CHECK(m->json_text().find("kiln-model-1") != std::string::npos);
  }
  // residual_cnn: the stem, each residual block and the head are straight-line pieces.
  auto a = models::load_model_file(docs_model("residual_cnn"), {4, 3, 8});
  auto b = models::load_model_file(docs_model("residual_cnn"), {4, 3, 8});
  b->load_state_dict(a->state_dict());
  const auto st = a->stages();
  REQUIRE(st.size() >= 4);
  CHECK(st[0].name == "stem.conv");
  b->set_recompute_segments(3);
  Tensor x = randn({2, 3, 8, 8}), y = tensor_from(std::vector<int64_t>{1, 3}, {2});
  cross_entropy((*a)(x), y).backward();
  cross_entropy((*b)(x), y).backward();
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(pa[i].first);
    CHECK(rel_diff(pb[i].second.grad(), pa[i].second.grad()) <= 1e-6);
  }
}

TEST_CASE("model file: the weights and training-state files carry the model file's text") {
  const std::string text = R"({"layers": [{"type": "flatten"}, {"name": "fc", "type": "linear", "out_features": 2}]})";
  auto m = build_graph_model(text, "t.json", {2, 1, 2});
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kiln_mf_w_" + std::to_string(::getpid()) + ".safetensors")).string();
  save_weights(path, *m, "t.json", 2, 1, 2);
  SafetensorsFile f = read_safetensors(path);
  REQUIRE(f.metadata.count("model_json"));
  CHECK(f.metadata["model_json"] == text);
  CHECK(f.metadata["model"] == "t.json");
  std::filesystem::remove(path);
  // A built-in model has no model_json.
  auto cnn = models::make_model("small_cnn", 2, 1, 8);
  save_weights(path, *cnn, "small_cnn", 2, 1, 8);
  CHECK(read_safetensors(path).metadata.count("model_json") == 0);
  std::filesystem::remove(path);
}

TEST_CASE("model file: each mistake is one error naming the file, the layer and the shapes") {
  auto err = [](const std::string& layers, ModelInput in = {5, 3, 8}) {
    return build_error(R"({"layers": [)" + layers + "]}", in);
  };
  SUBCASE("unknown layer type and unknown field") {
    std::string e = err(R"({"name": "c", "type": "conv3d", "out_channels": 4})");
    CHECK(contains(e, "model file t.json: layer 'c' (conv3d): unknown layer type 'conv3d' (known: conv2d,"));
    e = err(R"({"name": "c", "type": "conv2d", "out_channels": 4, "kernal": 3})");
    CHECK(contains(e, "layer 'c' (conv2d): unknown field 'kernal' (known: out_channels, kernel,"));
    e = err(R"({"name": "c", "type": "conv2d", "out_channels": 4})");
    CHECK(contains(e, "layer 'c' (conv2d): missing field 'kernel'"));
    e = err(R"({"name": "c", "type": "conv2d", "out_channels": "four", "kernel": 3})");
    CHECK(contains(e, "field 'out_channels' must be an integer, got \"four\""));
    e = build_error(R"({"layers": [{"type": "relu"}], "optimizer": "sgd"})");
    CHECK(contains(e, "model file t.json: unknown field 'optimizer'"));
  }
  SUBCASE("upsample and conv_transpose2d: bad fields name the layer") {
    CHECK(contains(err(R"({"name": "up", "type": "upsample"})"),
                   "layer 'up' (upsample): give exactly one of 'size' and 'scale_factor'"));
    CHECK(contains(err(R"({"name": "up", "type": "upsample", "size": 8, "scale_factor": 2})"),
                   "give exactly one of 'size' and 'scale_factor'"));
    CHECK(contains(err(R"({"name": "up", "type": "upsample", "scale_factor": -2})"),
                   "layer 'up' (upsample): field 'scale_factor' must be a positive number"));
    CHECK(contains(err(R"({"name": "up", "type": "upsample", "scale_factor": 2, "mode": "bicubic"})"),
                   "layer 'up' (upsample): field 'mode'"));
    CHECK(contains(err(R"({"name": "up", "type": "upsample", "scale_factor": 2, "align_corners": true})"),
                   "align_corners is for mode bilinear only"));
    CHECK(contains(err(R"({"name": "t", "type": "conv_transpose2d", "out_channels": 2, "kernel": 2, "stride": 2,
                          "output_padding": 2})"),
                   "layer 't' (conv_transpose2d): ConvTranspose2d: output_padding"));
    CHECK(contains(err(R"({"name": "t", "type": "conv_transpose2d", "out_channels": 2, "kernel": 9, "padding": 8})"),
                   "layer 't' (conv_transpose2d): input (3, 8, 8) from 'input'"));
    CHECK(contains(err(R"({"name": "t", "type": "conv_transpose2d", "kernel": 2})"),
                   "layer 't' (conv_transpose2d): missing field 'out_channels'"));
  }
  SUBCASE("a reference to a missing layer") {
    const std::string e = err(R"({"name": "b", "type": "block", "layers": [
        {"name": "c", "type": "conv2d", "out_channels": 4, "kernel": 1},
        {"name": "s", "type": "add", "inputs": ["c", "bn9"]}]})");
    CHECK(contains(e, "layer 'b.s' (add): input 'bn9' is not a layer of this model (looked for b.bn9, bn9)"));
  }
  SUBCASE("channel and shape mismatches") {
    CHECK(contains(err(R"({"name": "c", "type": "conv2d", "in_channels": 4, "out_channels": 4, "kernel": 1})"),
                   "layer 'c' (conv2d): in_channels is 4 but its input 'input' has shape (3, 8, 8) (3)"));
    CHECK(contains(err(R"({"name": "a", "type": "conv2d", "out_channels": 8, "kernel": 1},
                          {"name": "b", "type": "conv2d", "out_channels": 4, "kernel": 1},
                          {"name": "s", "type": "add", "inputs": ["a", "b"]})"),
                   "layer 's' (add): input shapes differ: (8, 8, 8) from 'a' vs (4, 8, 8) from 'b'"));
    CHECK(contains(err(R"({"name": "a", "type": "conv2d", "out_channels": 8, "kernel": 1},
                          {"name": "p", "type": "max_pool", "kernel": 2},
                          {"name": "s", "type": "concat", "inputs": ["a", "p"]})"),
                   "layer 's' (concat): inputs must match in every dim but the channels: (8, 8, 8) from 'a' vs "
                   "(8, 4, 4) from 'p'"));
    CHECK(contains(err(R"({"name": "fc", "type": "linear", "out_features": 3})"),
                   "layer 'fc' (linear): needs a flat input (features), got (3, 8, 8) from 'input'"));
    CHECK(contains(err(R"({"type": "flatten"}, {"name": "fc", "type": "linear", "in_features": 100, "out_features": 3})"),
                   "layer 'fc' (linear): in_features is 100 but its input '0' has shape (192) (192)"));
    CHECK(contains(err(R"({"name": "c", "type": "conv2d", "out_channels": 6, "kernel": 3, "groups": 4})"),
                   "layer 'c' (conv2d): groups 4 must divide the input channels 3"));
    CHECK(contains(err(R"({"name": "c", "type": "conv2d", "out_channels": 4, "kernel": 9})"),
                   "layer 'c' (conv2d): input (3, 8, 8) from 'input' is too small for kernel 9"));
    CHECK(contains(err(R"({"type": "flatten"}, {"name": "bn", "type": "batch_norm"})"),
                   "layer 'bn' (batch_norm): needs an image input (C, H, W), got (192) from '0'"));
    CHECK(contains(build_error(R"({"input": {"channels": 1, "size": 28}, "layers": [{"type": "relu"}]})"),
                   "model file t.json: the file is for input channels 1 but the data has 3"));
  }
  SUBCASE("a cycle, an unused layer, a name used twice") {
    CHECK(contains(err(R"({"name": "a", "type": "relu", "input": "b"}, {"name": "b", "type": "relu", "input": "a"})"),
                   "model file t.json: a cycle: b -> a -> b"));
    CHECK(contains(err(R"({"name": "a", "type": "relu"}, {"name": "b", "type": "sigmoid", "input": "input"})"),
                   "layer 'a' (relu) is not used: the output 'b' does not depend on it"));
    CHECK(contains(err(R"({"name": "a", "type": "relu"}, {"name": "a", "type": "relu"})"),
                   "the name 'a' is used twice"));
    CHECK(contains(err(R"({"name": "a", "type": "conv2d", "out_channels": 3, "kernel": 1},
                          {"name": "a.b", "type": "conv2d", "out_channels": 3, "kernel": 1})"),
                   "layer 'a.b' is inside 'a', which is a layer, not a group"));
  }
  SUBCASE("an empty model, a file that is not JSON") {
    CHECK(contains(build_error(R"({"layers": []})"), "model file t.json: no layers (an empty model or block)"));
    CHECK(contains(build_error(R"({})"), "model file t.json: no \"layers\" (an empty model)"));
    CHECK(contains(build_error(R"([1, 2])"), "model file t.json: expected a JSON object"));
    CHECK(contains(err(R"({"name": "b", "type": "block", "layers": []})"), "layer 'b' (block): no layers"));
    const std::string path =
        (std::filesystem::temp_directory_path() / ("kiln_mf_bad_" + std::to_string(::getpid()) + ".json")).string();
    std::ofstream(path) << "{\n  \"layers\": [\n    {\"type\": \"relu\",}\n  ]\n}\n";
    std::string e;
    try {
      models::load_model_file(path, {5, 3, 8});
    } catch (const Error& x) {
      e = x.what();
    }
    CHECK(contains(e, "model file " + path + ": not JSON: line 3, column 21: "));
    std::filesystem::remove(path);
    CHECK_THROWS_WITH_AS(models::load_model_file("/nonexistent/net.json", {5, 3, 8}),
                         doctest::Contains("model file /nonexistent/net.json: cannot open it"), Error);
  }
  SUBCASE("the input at run time") {
    auto m = build_graph_model(R"({"layers": [{"type": "relu"}]})", "t.json", {5, 3, 8});
    CHECK_THROWS_WITH_AS((*m)(randn({1, 3, 9, 9})), doctest::Contains("t.json: expected input (N, 3, 8, 8), got"),
                         Error);
  }
}
