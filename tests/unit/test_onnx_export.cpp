// ONNX export without an ONNX runtime (engine/export/, `kiln export`): the nodes small_cnn and ResNet's
// blocks become (counted by op type, no Dropout), an opset outside 13..17 and a module type with no exporter
// each give one clear error (the latter naming the module's path and type), export leaves the module's
// training flag and buffers alone, and the command reads size, channels and classes from the weights
// file. Model files: the graph's joins become Add / Concat and its op layers their ONNX ops, a pool whose
// ceil_mode leaves a partial window is refused naming the layer, and `kiln export` without --model
// rebuilds a model file from the weights' model_json. The numbers (onnxruntime against kiln) are the parity test tests/parity/test_onnx_export.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>

#include "engine/io/safetensors.h"
#include "engine/io/tensor_io.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/sequential.h"
#include "engine/train/train_state.h"
#include "models/model_file.h"
#include "models/registry.h"
#include "models/resnet.h"
#include "support/cli/run_kiln.h"
#include "tools/cmd_export.h"

#ifdef KILN_WITH_ONNX
#include "engine/export/onnx_export.h"

using namespace kiln;
using kiln_test::contains;
namespace fs = std::filesystem;
using onnx_export::export_onnx;
using onnx_export::OnnxExportOptions;

namespace {

OnnxExportOptions opts(int64_t c, int64_t s, int64_t opset = 17) {
  OnnxExportOptions o;
  o.channels = c;
  o.height = o.width = s;
  o.opset = opset;
  return o;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// A module type with no ONNX exporter.
class Swish : public nn::Module {
 public:
  Swish() : Module("Swish") {}
  Tensor forward(const Tensor& x) override { return x; }
};

// conv, BasicBlock(64 -> 64), BasicBlock(64 -> 128, stride 2: downsample), pool, flatten, dropout, fc.
std::shared_ptr<nn::Sequential> tiny_resnet() {
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(3, 64, 3, 1, 1, false))
      .push_back(std::make_shared<models::BasicBlock>(64, 64, 1))
      .push_back(std::make_shared<models::BasicBlock>(64, 128, 2))
      .push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1))
      .push_back(std::make_shared<nn::Flatten>())
      .push_back(std::make_shared<nn::Dropout>(0.5))
      .push_back(std::make_shared<nn::Linear>(128, 5));
  return m;
}

}  // namespace

TEST_CASE("onnx export: small_cnn and ResNet blocks become the expected nodes, no Dropout, (N, K) output") {
  const std::string dir = kiln_test::cli_temp_dir("onnx_nodes");
  {
    nn::ModulePtr m = models::make_model("small_cnn", 10, 1, 28);
    auto r = export_onnx(*m, opts(1, 28), dir + "/small.onnx");
    const std::map<std::string, int64_t> want = {{"BatchNormalization", 2}, {"Conv", 2}, {"Flatten", 1},
                                                 {"Gemm", 2},  {"MaxPool", 2}, {"Relu", 3}};
    CHECK(r.op_counts == want);
    CHECK(r.nodes == 12);
    CHECK(r.output_shape == Shape{1, 10});
    CHECK(r.initializer_bytes == 4 * (m->num_parameters() + 2 * (32 + 64)));  // + running mean/var
    CHECK(fs::file_size(dir + "/small.onnx") == (uintmax_t)r.file_bytes);
    CHECK(r.file_bytes > r.initializer_bytes);
  }
  {
    // ResNet's blocks (with and without downsample) in a small net; the resnets themselves are counted
    // in the parity test (their 11M-parameter initialization is too slow for this label).
    auto m = tiny_resnet();
    auto r = export_onnx(*m, opts(3, 8, 13), dir + "/tiny.onnx");
    const std::map<std::string, int64_t> want = {{"Add", 2},     {"BatchNormalization", 5}, {"Conv", 6},
                                                 {"Flatten", 1}, {"GlobalAveragePool", 1},  {"Gemm", 1},
                                                 {"Relu", 4}};
    CHECK(r.op_counts == want);
    CHECK(r.nodes == 20);
    CHECK(r.output_shape == Shape{1, 5});
  }
}

TEST_CASE("onnx export: an opset outside 13..17 is one clear error, and no file is written") {
  const std::string dir = kiln_test::cli_temp_dir("onnx_opset");
  nn::ModulePtr m = models::make_model("small_cnn", 10, 1, 28);
  for (int64_t opset : {12, 18, 0}) {
    CAPTURE(opset);
    const std::string e = error_of([&] { export_onnx(*m, opts(1, 28, opset), dir + "/m.onnx"); });
    CHECK(contains(e, "opset " + std::to_string(opset) + " is not supported"));
    CHECK(contains(e, "13 to 17"));
    CHECK_FALSE(fs::exists(dir + "/m.onnx"));
  }
  for (int64_t opset : {13, 14, 15, 16, 17}) {
    CAPTURE(opset);
    CHECK(export_onnx(*m, opts(1, 28, opset), dir + "/ok.onnx").nodes == 12);
  }
}

TEST_CASE("onnx export: a module type with no exporter is named with its path") {
  const std::string dir = kiln_test::cli_temp_dir("onnx_unknown");
  auto inner = std::make_shared<nn::Sequential>();
  inner->push_back(std::make_shared<nn::ReLU>()).push_back(std::make_shared<Swish>());
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Conv2d>(3, 4, 3, 1, 1)).push_back(inner).push_back(std::make_shared<nn::Flatten>());
  const std::string e = error_of([&] { export_onnx(*m, opts(3, 8), dir + "/m.onnx"); });
  CHECK(contains(e, "module '1.1' of type Swish has no ONNX exporter"));
  CHECK(contains(e, "Conv2d"));  // lists the types that have one
  CHECK_FALSE(fs::exists(dir + "/m.onnx"));
  // A fully convolutional model: (N, K, H, W) logits, as a segmenter (unet) gives, are exported too.
  auto conv_only = std::make_shared<nn::Sequential>();
  conv_only->push_back(std::make_shared<nn::Conv2d>(3, 4, 3, 1, 1));
  const std::string ce = error_of([&] { export_onnx(*conv_only, opts(3, 8), dir + "/c.onnx"); });
  CHECK_MESSAGE(ce == "(no error)", ce);
  CHECK(fs::exists(dir + "/c.onnx"));
}

TEST_CASE("onnx export: the module keeps its training flag and buffers") {
  const std::string dir = kiln_test::cli_temp_dir("onnx_mode");
  nn::ModulePtr m = tiny_resnet();
  m->train(true);
  auto buffer = [&](const std::string& name) {
    for (const auto& [n, t] : m->state_dict())
      if (n == name) return t.to_vector<float>();
    FAIL("no " << name);
    return std::vector<float>();
  };
  const std::vector<float> mean = buffer("1.bn1.running_mean"), var = buffer("2.downsample.1.running_var");
  export_onnx(*m, opts(3, 16), dir + "/m.onnx");
  CHECK(m->is_training());
  for (const auto& [name, sub] : m->named_modules()) CHECK(sub->is_training());
  CHECK(buffer("1.bn1.running_mean") == mean);
  CHECK(buffer("2.downsample.1.running_var") == var);
  m->eval();
  export_onnx(*m, opts(3, 16), dir + "/m.onnx");
  CHECK_FALSE(m->is_training());
}

TEST_CASE("kiln export: size, channels and classes come from the weights file, mistakes are one error") {
  const std::string dir = kiln_test::cli_temp_dir("onnx_cli");
  nn::ModulePtr m = models::make_model("small_cnn", 3, 1, 12);
  save_weights(dir + "/w.safetensors", *m, "small_cnn", 3, 1, 12);
  kiln_cli::ExportOnnxOptions o;
  o.model = "small_cnn";
  o.weights = dir + "/w.safetensors";
  o.onnx = dir + "/m.onnx";
  std::ostringstream out;
  kiln_cli::run_export_command(o, out);
  CHECK(contains(out.str(), "input 'input' f32 (N, 1, 12, 12), output 'logits' f32 (N, 3)"));
  CHECK(contains(out.str(), "12 nodes"));
  CHECK(fs::exists(o.onnx));

  kiln_cli::ExportOnnxOptions bad = o;
  bad.opset = 18;
  CHECK(contains(error_of([&] { kiln_cli::run_export_command(bad, out); }), "--opset 18 is not supported"));
  bad = o;
  bad.model = "resnet18";
  CHECK(contains(error_of([&] { kiln_cli::run_export_command(bad, out); }), "holds a small_cnn, not a resnet18"));
  bad = o;
  bad.image_size = 16;  // another size than the weights': refused as kiln predict refuses it
  CHECK(contains(error_of([&] { kiln_cli::run_export_command(bad, out); }), "--image-size 16 (trained at 12)"));
  bad.force = true;  // small_cnn's fc1 depends on the size: the weights do not fit
  CHECK(contains(error_of([&] { kiln_cli::run_export_command(bad, out); }), "fc1.weight"));

  // A weights file without kiln's metadata needs the flags.
  save_safetensors(dir + "/bare.safetensors", m->state_dict(), {});
  bad = o;
  bad.weights = dir + "/bare.safetensors";
  // (the classes and channels come from fc2.weight and conv1.weight: only the size is asked for)
  CHECK(contains(error_of([&] { kiln_cli::run_export_command(bad, out); }),
                 "has no image_size metadata and no tensor's shape gives the input size (num_classes 3 from fc2.weight "
                 "(3, 128), in_channels 1 from conv1.weight (32, 1, 3, 3)); pass --image-size"));
  bad.image_size = 12;
  kiln_cli::run_export_command(bad, out);

  // The command line: one error line, non-zero status.
  kiln_test::CliRun r = kiln_test::run_kiln("export --model small_cnn --weights " + o.weights + " --onnx " + dir +
                                            "/x.onnx --opset 12");
  CHECK(r.status != 0);
  CHECK(contains(r.output, "kiln: error: export: --opset 12 is not supported (kiln writes opsets 13 to 17)"));
}

TEST_CASE("kiln export: torchvision weights without metadata give num_classes and channels by their shapes, only the size is asked for") {
  const std::string dir = kiln_test::cli_temp_dir("onnx_torchvision");
  // kiln's resnet18 has torchvision's parameter names; saved as PyTorch saves a state_dict: no metadata.
  nn::ModulePtr m = models::make_model("resnet18", 7, 1, 32);
  save_safetensors(dir + "/tv.safetensors", m->state_dict(), {{"format", "pt"}});
  const std::string base = "export --model resnet18 --weights " + dir + "/tv.safetensors --onnx " + dir + "/m.onnx";
  const kiln_test::CliRun r = kiln_test::run_kiln(base);
  CAPTURE(r.output);
  CHECK(r.status == 1);
  CHECK_FALSE(contains(r.output, "--num-classes"));
  CHECK_FALSE(contains(r.output, "--channels"));
  CHECK(contains(r.output, "num_classes 7 from fc.weight (7, 512), in_channels 1 from conv1.weight (64, 1, 7, 7)"));
  CHECK(contains(r.output, "pass --image-size (torchvision's ImageNet weights: 224)"));
  const kiln_test::CliRun ok = kiln_test::run_kiln(base + " --image-size 32");
  CAPTURE(ok.output);
  CHECK(ok.status == 0);
  CHECK(contains(ok.output, "has no kiln metadata: num_classes 7 from fc.weight (7, 512), in_channels 1 from conv1.weight"));
  CHECK(contains(ok.output, "input 'input' f32 (N, 1, 32, 32), output 'logits' f32 (N, 7)"));
  // A flag still wins over the shapes where it agrees with the tensors.
  CHECK(kiln_test::run_kiln(base + " --image-size 32 --num-classes 7 --channels 1").status == 0);
}

TEST_CASE("onnx export: a model file's joins and op layers become their nodes, and what ONNX cannot express is named") {
  const std::string dir = kiln_test::cli_temp_dir("onnx_graph");
  const char* net = R"({"format": "kiln-model-1", "layers": [
    {"name": "c1", "type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
    {"name": "a", "type": "gelu"},
    {"name": "b", "type": "tanh", "input": "c1"},
    {"name": "sum", "type": "add", "inputs": ["a", "b", "c1"]},
    {"name": "cat", "type": "concat", "inputs": ["sum", "input"]},
    {"name": "blk", "type": "block", "layers": [
      {"type": "leaky_relu", "negative_slope": 0.2},
      {"type": "max_pool", "kernel": 3, "stride": 2, "padding": 1, "dilation": 1},
      {"type": "avg_pool", "kernel": 2, "ceil_mode": true}
    ]},
    {"name": "s", "type": "sigmoid"},
    {"name": "flatten", "type": "flatten"},
    {"name": "fc", "type": "linear", "out_features": "num_classes"}
  ]})";
  auto m = models::build_graph_model(net, "<json>", {3, 3, 8});
  const auto r = export_onnx(*m, opts(3, 8), dir + "/g.onnx");
  // gelu: Mul, Erf, Add, Mul, Mul; 3-input add: two Adds; concat of 4 + 3 channels
  CHECK(r.op_counts.at("Erf") == 1);
  CHECK(r.op_counts.at("Add") == 3);
  CHECK(r.op_counts.at("Mul") == 3);
  CHECK(r.op_counts.at("Concat") == 1);
  CHECK(r.op_counts.at("LeakyRelu") == 1);
  CHECK(r.op_counts.at("MaxPool") == 1);
  CHECK(r.op_counts.at("AveragePool") == 1);  // 4 px, kernel 2: ceil_mode changes nothing
  CHECK(r.op_counts.at("Sigmoid") == 1);
  CHECK(r.op_counts.at("Tanh") == 1);
  CHECK(r.output_shape == Shape{1, 3});

  // At 10 px the avg_pool's ceil_mode leaves a partial last window (5 px, kernel 2): refused, by name.
  auto m10 = models::build_graph_model(net, "<json>", {3, 3, 10});
  const std::string e = error_of([&] { export_onnx(*m10, opts(3, 10), dir + "/g10.onnx"); });
  CHECK(contains(e, "AvgPool2d 'blk.2'"));
  CHECK(contains(e, "partial last window"));
  CHECK_FALSE(fs::exists(dir + "/g10.onnx"));

  // kiln export without --model: the weights name a model file that is gone; its text rebuilds it.
  m->eval();
  std::map<std::string, std::string> meta = {{"model", dir + "/gone.json"}, {"model_json", net},
                                             {"num_classes", "3"}, {"in_channels", "3"}, {"image_size", "8"}};
  save_safetensors(dir + "/w.safetensors", m->state_dict(), meta);
  kiln_cli::ExportOnnxOptions o;
  o.weights = dir + "/w.safetensors";
  o.onnx = dir + "/cli.onnx";
  std::ostringstream out;
  kiln_cli::run_export_command(o, out);
  CHECK(contains(out.str(), "export: " + dir + "/gone.json -> "));
  CHECK(contains(out.str(), "Concat 1"));
  // --model naming the gone file: the same.
  o.model = dir + "/gone.json";
  kiln_cli::run_export_command(o, out);
  // Neither --model nor model metadata: one error saying to pass it.
  meta.erase("model");
  save_safetensors(dir + "/nomodel.safetensors", m->state_dict(), meta);
  o.model = "";
  o.weights = dir + "/nomodel.safetensors";
  CHECK(contains(error_of([&] { kiln_cli::run_export_command(o, out); }), "no model metadata); pass --model"));
}

#else

TEST_CASE("onnx export: built without KILN_ONNX, kiln export says so") {
  kiln_cli::ExportOnnxOptions o;
  std::ostringstream out;
  try {
    kiln_cli::run_export_command(o, out);
    FAIL("expected an error");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).find("without ONNX export") != std::string::npos);
  }
}

#endif
