// ONNX export against onnxruntime: kiln makes random weights for small_cnn, resnet18, resnet18_small and resnet50
// (batch-norm statistics and affine randomized too, so eval-mode BN is not the identity), saves them with
// extra string metadata (preprocessing and class names, as a trained model's weights file may hold),
// exports them with `kiln export` (in-process) at opsets 13 and 17, and writes a random batch and kiln's
// eval-mode logits as .npy files. tests/support/oracle/onnx_check.py, run in the pinned onnx/onnxruntime
// virtual environment (scripts/setup.sh --test), checks each file with onnx.checker (full_check), its
// input/output names, dynamic batch and metadata_props, and compares onnxruntime's logits with kiln's:
// |ort - kiln| <= tol (1 + |kiln|) with tol 1e-5 with graph optimizations off, 1e-4 with them on, at
// batch 3 and at batch 1. Without the virtual environment the test fails, naming how to create it.
// A second case does the same for the four model files of docs/models (op layers, add and concat joins,
// transposed conv and upsampling; two exported flag-free from the model_json their weights carry, the file
// gone) and for ConvTranspose2d / Upsample modules in every mode kiln has (torch's index rules: a scale
// factor that does not divide the output, align_corners, sizes).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/io/tensor_io.h"
#include "engine/nn/batch_norm2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/nn/upsampling.h"
#include "engine/ops/ops.h"
#include "models/model_file.h"
#include "models/registry.h"
#include "engine/export/onnx_export.h"
#include "tools/cmd_export.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// The interpreter of the pinned venv: KILN_ONNX_PYTHON, else scripts/setup.sh --test's default place.
std::string onnx_python() {
  if (const char* p = std::getenv("KILN_ONNX_PYTHON")) return p;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/kiln-onnx-venv/bin/python";
}

// Every BatchNorm2d gets weight U(0.5, 1.5), bias U(-0.2, 0.2), running_mean U(-0.3, 0.3) and
// running_var U(0.5, 2): the eval-mode formula then matters in every channel.
void randomize_batch_norms(nn::Module& m) {
  for (const auto& [name, sub] : m.named_modules()) {
    auto* bn = dynamic_cast<nn::BatchNorm2d*>(sub.get());
    if (!bn) continue;
    const int64_t c = bn->num_features();
    sub->load_state_dict({{"weight", uniform({c}, 0.5, 1.5)},
                          {"bias", uniform({c}, -0.2, 0.2)},
                          {"running_mean", uniform({c}, -0.3, 0.3)},
                          {"running_var", uniform({c}, 0.5, 2.0)},
                          {"num_batches_tracked", bn->num_batches_tracked}},
                         true);
  }
}

struct Case {
  std::string name, model;
  int64_t channels, size, classes, opset;
  std::string nodes;  // the op counts kiln export reports
};

const char* kSmallCnnNodes = "12 nodes (BatchNormalization 2, Conv 2, Flatten 1, Gemm 2, MaxPool 2, Relu 3)";
// 20 convs (17 + 3 downsample), each with its BN, 1 + 2 per block ReLUs, 8 residual adds.
const char* kResnet18Nodes =
    "69 nodes (Add 8, BatchNormalization 20, Conv 20, Flatten 1, Gemm 1, GlobalAveragePool 1, MaxPool 1, Relu 17)";
const char* kResnet18SmallNodes =  // no max-pool in the small stem
    "68 nodes (Add 8, BatchNormalization 20, Conv 20, Flatten 1, Gemm 1, GlobalAveragePool 1, Relu 17)";
// 16 Bottleneck blocks of 3 convs + the stem + 4 downsamples = 53 convs, each with its BN; 1 + 3 per block
// ReLUs; 16 residual adds.
const char* kResnet50Nodes =
    "175 nodes (Add 16, BatchNormalization 53, Conv 53, Flatten 1, Gemm 1, GlobalAveragePool 1, MaxPool 1, Relu 49)";

// Runs onnx_check.py on dir/spec.json and checks that it passed with one line per case.
void run_onnx_check(const std::string& py, const fs::path& dir, size_t num_cases) {
  const std::string out = (dir / "ort.txt").string();
  const std::string cmd = "'" + py + "' " + KILN_SOURCE_DIR + "/tests/support/oracle/onnx_check.py '" +
                          (dir / "spec.json").string() + "' > '" + out + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream f(out);
  std::stringstream text;
  text << f.rdbuf();
  MESSAGE("onnxruntime against kiln:\n", text.str());
  CHECK_MESSAGE(rc == 0, "onnx_check.py failed (exit ", rc, "):\n", text.str());
  // Every case printed its numbers (the script ran to the end, the venv has onnx and onnxruntime).
  int lines = 0;
  for (std::string line; std::getline(text, line);)
    if (line.rfind("{\"name\"", 0) == 0) ++lines;
  CHECK(lines == (int)num_cases);
  if (rc == 0) fs::remove_all(dir);
}

// Saves a random batch of 3 and m's eval-mode logits of it next to the ONNX file; adds the case to spec.
void add_case(nlohmann::json& spec, const fs::path& dir, nn::Module& m, const std::string& name, int64_t channels,
              int64_t size, int64_t opset, const std::map<std::string, std::string>& meta) {
  m.eval();
  Tensor x = normal({3, channels, size, size}, 0.0, 1.0);
  Tensor logits;
  {
    NoGradGuard ng;
    logits = m(x);
  }
  save_npy((dir / (name + "_x.npy")).string(), x);
  save_npy((dir / (name + "_logits.npy")).string(), logits);
  spec["cases"].push_back({{"name", name},
                           {"onnx", name + ".onnx"},
                           {"x", name + "_x.npy"},
                           {"logits", name + "_logits.npy"},
                           {"opset", opset},
                           {"metadata", meta}});
}

}  // namespace

TEST_CASE("onnx export: onnxruntime gives kiln's eval-mode logits (small_cnn, resnet18, resnet18_small, resnet50)") {
  const std::string py = onnx_python();
  REQUIRE_MESSAGE(fs::exists(py), "no onnx/onnxruntime virtual environment at ", py,
                  ": run scripts/setup.sh --test (it creates it with pinned pip versions) or set KILN_ONNX_PYTHON");
  const fs::path dir = fs::temp_directory_path() / ("kiln_parity_onnx_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);

  const std::vector<Case> cases = {
      {"small_cnn_opset17", "small_cnn", 1, 28, 10, 17, kSmallCnnNodes},
      {"small_cnn_opset13", "small_cnn", 3, 16, 4, 13, kSmallCnnNodes},
      {"resnet18_opset17", "resnet18", 3, 96, 12, 17, kResnet18Nodes},
      {"resnet18_small_opset13", "resnet18_small", 3, 32, 5, 13, kResnet18SmallNodes},
      {"resnet18_small_opset17", "resnet18_small", 1, 24, 3, 17, kResnet18SmallNodes},
      {"resnet50_opset17", "resnet50", 3, 32, 7, 17, kResnet50Nodes},
  };
  nlohmann::json spec;
  spec["cases"] = nlohmann::json::array();
  uint64_t seed = 11;
  for (const Case& c : cases) {
    CAPTURE(c.name);
    manual_seed(seed++);
    nn::ModulePtr m = models::make_model(c.model, c.classes, c.channels, c.size);
    randomize_batch_norms(*m);
    // Kiln's weights metadata plus strings another version may add: all of it goes into metadata_props.
    std::map<std::string, std::string> meta = {{"format", "kiln-weights-1"},
                                               {"model", c.model},
                                               {"num_classes", std::to_string(c.classes)},
                                               {"in_channels", std::to_string(c.channels)},
                                               {"image_size", std::to_string(c.size)},
                                               {"normalize_mean", "0.485,0.456,0.406"},
                                               {"normalize_std", "0.229,0.224,0.225"},
                                               {"class_names", "[\"cat\", \"dog, big\", \"caf\xc3\xa9\"]"}};
    const std::string weights = (dir / (c.name + ".safetensors")).string();
    save_safetensors(weights, m->state_dict(), meta);

    kiln_cli::ExportOnnxOptions o;
    o.model = c.model;
    o.weights = weights;
    o.onnx = (dir / (c.name + ".onnx")).string();
    o.opset = c.opset;
    std::ostringstream log;
    kiln_cli::run_export_command(o, log);
    MESSAGE(log.str());
    CHECK(log.str().find(c.nodes) != std::string::npos);

    // kiln's eval-mode logits of a random batch of 3 (the module is the one export saw, same weights).
    add_case(spec, dir, *m, c.name, c.channels, c.size, c.opset, meta);
  }
  std::ofstream(dir / "spec.json") << spec.dump(1);
  run_onnx_check(py, dir, cases.size());
}

TEST_CASE("onnx export: onnxruntime gives kiln's eval-mode logits (model files, transposed conv, upsampling)") {
  const std::string py = onnx_python();
  REQUIRE_MESSAGE(fs::exists(py), "no onnx/onnxruntime virtual environment at ", py,
                  ": run scripts/setup.sh --test (it creates it with pinned pip versions) or set KILN_ONNX_PYTHON");
  const fs::path dir = fs::temp_directory_path() / ("kiln_parity_onnx_files_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json spec;
  spec["cases"] = nlohmann::json::array();

  // The four model files (16 px, 3 channels as they declare), weights saved as kiln train does: the model
  // name and the file's text. `gone`: the model is named by a path that does not exist and --model is not
  // given, so export rebuilds it from model_json.
  struct FileCase {
    std::string file;
    int64_t opset;
    bool gone;
    std::string nodes;
  };
  const std::vector<FileCase> files = {
      {"plain_cnn", 17, false, "Erf 1"},
      {"residual_cnn", 13, true, "Add 3"},
      {"concat_cnn", 17, true, "Concat"},
      {"updown_cnn", 17, false, "ConvTranspose 1"},
  };
  uint64_t seed = 41;
  for (const FileCase& c : files) {
    CAPTURE(c.file);
    manual_seed(seed++);
    const std::string path = std::string(KILN_SOURCE_DIR) + "/docs/models/" + c.file + ".json";
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const int64_t classes = 5, channels = 3, size = 16;
    std::shared_ptr<models::GraphModel> m = models::build_graph_model(text.str(), path, {classes, channels, size});
    randomize_batch_norms(*m);
    const std::string model_name = c.gone ? (dir / (c.file + "_moved.json")).string() : path;
    std::map<std::string, std::string> meta = {{"format", "kiln-weights-1"},
                                               {"model", model_name},
                                               {"model_json", text.str()},
                                               {"num_classes", std::to_string(classes)},
                                               {"in_channels", std::to_string(channels)},
                                               {"image_size", std::to_string(size)}};
    const std::string weights = (dir / (c.file + ".safetensors")).string();
    save_safetensors(weights, m->state_dict(), meta);
    kiln_cli::ExportOnnxOptions o;
    o.model = c.gone ? "" : path;
    o.weights = weights;
    o.onnx = (dir / (c.file + ".onnx")).string();
    o.opset = c.opset;
    std::ostringstream log;
    kiln_cli::run_export_command(o, log);
    MESSAGE(log.str());
    CHECK(log.str().find(c.nodes) != std::string::npos);
    add_case(spec, dir, *m, c.file, channels, size, c.opset, meta);
  }

  // ConvTranspose2d with output_padding, groups, dilation, no bias; Upsample by a scale factor that does
  // not divide the output (5 * 1.5 -> 7: torch maps with the user's 1.5, not 7/5), by sizes, nearest and
  // bilinear, align_corners; the map flattened into a Linear so every pixel reaches the logits.
  auto up = [](std::vector<int64_t> size, std::vector<double> scale, InterpMode mode, bool align) {
    nn::UpsampleOptions o;
    o.size = std::move(size);
    o.scale_factor = std::move(scale);
    o.mode = mode;
    o.align_corners = align;
    return std::make_shared<nn::Upsample>(o);
  };
  auto convt = [](int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t op, int64_t d, int64_t g, bool b) {
    nn::ConvTranspose2dOptions o;
    o.in_channels = in, o.out_channels = out, o.kernel = k, o.stride = s, o.padding = p, o.output_padding = op;
    o.dilation = d, o.groups = g, o.bias = b;
    return std::make_shared<nn::ConvTranspose2d>(o);
  };
  struct ModCase {
    std::string name;
    nn::ModulePtr m;
    int64_t channels, size, opset;
  };
  std::vector<ModCase> mods;
  {
    manual_seed(51);
    auto a = std::make_shared<nn::Sequential>();
    // (3, 5, 5) -> convT s2 p1 op1 g3 -> (6, 10, 10) -> bilinear x1.5 -> (6, 15, 15) -> convT k2 d2 -> (4, 17, 17)
    //  -> nearest x2 -> (4, 34, 34) -> flatten -> linear 5
    a->push_back(convt(3, 6, 3, 2, 1, 1, 1, 3, true))
        .push_back(up({}, {1.5}, InterpMode::bilinear, false))
        .push_back(convt(6, 4, 2, 1, 0, 0, 2, 1, false))
        .push_back(up({}, {2.0}, InterpMode::nearest, false))
        .push_back(std::make_shared<nn::Flatten>())
        .push_back(std::make_shared<nn::Linear>(4 * 34 * 34, 5));
    mods.push_back({"convt_upsample_scales", a, 3, 5, 17});
    manual_seed(52);
    auto b = std::make_shared<nn::Sequential>();
    // (2, 5, 5) -> bilinear x1.5 -> (2, 7, 7) -> bilinear align_corners size (9, 11) -> nearest size (18, 22)
    //  -> convT k1 -> (3, 18, 22) -> flatten -> linear 4
    b->push_back(up({}, {1.5, 1.5}, InterpMode::bilinear, false))
        .push_back(up({9, 11}, {}, InterpMode::bilinear, true))
        .push_back(up({18, 22}, {}, InterpMode::nearest, false))
        .push_back(convt(2, 3, 1, 1, 0, 0, 1, 1, true))
        .push_back(std::make_shared<nn::Flatten>())
        .push_back(std::make_shared<nn::Linear>(3 * 18 * 22, 4));
    mods.push_back({"upsample_sizes_align", b, 2, 5, 13});
    manual_seed(53);
    auto c = std::make_shared<nn::Sequential>();
    // (2, 6, 6) -> bilinear size 10 (torch maps with 6/10) -> nearest x3 -> (2, 30, 30) -> flatten -> linear 3
    c->push_back(up({10}, {}, InterpMode::bilinear, false))
        .push_back(up({}, {3.0}, InterpMode::nearest, false))
        .push_back(std::make_shared<nn::Flatten>())
        .push_back(std::make_shared<nn::Linear>(2 * 30 * 30, 3));
    mods.push_back({"upsample_size_half_pixel", c, 2, 6, 17});
  }
  for (const ModCase& c : mods) {
    CAPTURE(c.name);
    onnx_export::OnnxExportOptions eo;
    eo.opset = c.opset;
    eo.channels = c.channels;
    eo.height = eo.width = c.size;
    const std::map<std::string, std::string> meta = {{"case", c.name}};
    eo.metadata = meta;
    onnx_export::export_onnx(*c.m, eo, (dir / (c.name + ".onnx")).string());
    add_case(spec, dir, *c.m, c.name, c.channels, c.size, c.opset, meta);
  }
  std::ofstream(dir / "spec.json") << spec.dump(1);
  run_onnx_check(py, dir, files.size() + mods.size());
}

// UNet (models/unet.h): transposed-conv and bilinear Ups, the Pad of an odd size (18 px: 9 -> 4 -> 8 < 9)
// and the stride-2 first conv's final Resize; output (N, K, H, W).
TEST_CASE("onnx export: onnxruntime gives kiln's eval-mode logits (unet_small, Pad and Resize)") {
  const std::string py = onnx_python();
  REQUIRE_MESSAGE(fs::exists(py), "no onnx/onnxruntime virtual environment at ", py,
                  ": run scripts/setup.sh --test (it creates it with pinned pip versions) or set KILN_ONNX_PYTHON");
  const fs::path dir = fs::temp_directory_path() / ("kiln_parity_onnx_unet_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::vector<Case> cases = {
      {"unet_convt_opset17", "unet_small:depth=2,base=4", 3, 18, 3,  17,
       "38 nodes (BatchNormalization 10, Concat 2, Conv 11, ConvTranspose 2, MaxPool 2, Pad 1, Relu 10)"},
      {"unet_bilinear_stride2_opset13", "unet_small:depth=2,base=4,bilinear,stride2", 1, 20, 2, 13,
       "42 nodes (BatchNormalization 10, Concat 3, Conv 11, MaxPool 2, Pad 1, Relu 10, Resize 3, Shape 1, Slice 1)"},
  };
  nlohmann::json spec;
  spec["cases"] = nlohmann::json::array();
  uint64_t seed = 31;
  for (const Case& c : cases) {
    CAPTURE(c.name);
    manual_seed(seed++);
    nn::ModulePtr m = models::make_model(c.model, c.classes, c.channels, c.size);
    randomize_batch_norms(*m);
    std::map<std::string, std::string> meta = {{"format", "kiln-weights-1"},
                                               {"model", c.model},
                                               {"num_classes", std::to_string(c.classes)},
                                               {"in_channels", std::to_string(c.channels)},
                                               {"image_size", std::to_string(c.size)}};
    const std::string weights = (dir / (c.name + ".safetensors")).string();
    save_safetensors(weights, m->state_dict(), meta);
    kiln_cli::ExportOnnxOptions o;
    o.model = c.model;
    o.weights = weights;
    o.onnx = (dir / (c.name + ".onnx")).string();
    o.opset = c.opset;
    std::ostringstream log;
    kiln_cli::run_export_command(o, log);
    MESSAGE(log.str());
    CHECK(log.str().find(c.nodes) != std::string::npos);
    CHECK(log.str().find("output 'logits' f32 (N, " + std::to_string(c.classes) + ", " + std::to_string(c.size) + ", " +
                         std::to_string(c.size) + ")") != std::string::npos);
    add_case(spec, dir, *m, c.name, c.channels, c.size, c.opset, meta);
  }
  std::ofstream(dir / "spec.json") << spec.dump(1);
  run_onnx_check(py, dir, cases.size());
}
