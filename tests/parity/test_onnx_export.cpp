// ONNX export against onnxruntime: kiln makes random weights for small_cnn, resnet18 and resnet18_small
// (batch-norm statistics and affine randomized too, so eval-mode BN is not the identity), saves them with
// extra string metadata (preprocessing and class names, as a trained model's weights file may hold),
// exports them with `kiln export` (in-process) at opsets 13 and 17, and writes a random batch and kiln's
// eval-mode logits as .npy files. tests/support/oracle/onnx_check.py, run in the pinned onnx/onnxruntime
// virtual environment (scripts/setup.sh --test), checks each file with onnx.checker (full_check), its
// input/output names, dynamic batch and metadata_props, and compares onnxruntime's logits with kiln's:
// |ort - kiln| <= tol (1 + |kiln|) with tol 1e-5 with graph optimizations off, 1e-4 with them on, at
// batch 3 and at batch 1. Without the virtual environment the test fails, naming how to create it.
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
#include "engine/ops/ops.h"
#include "models/registry.h"
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

}  // namespace

TEST_CASE("onnx export: onnxruntime gives kiln's eval-mode logits (small_cnn, resnet18, resnet18_small)") {
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
    m->eval();
    Tensor x = normal({3, c.channels, c.size, c.size}, 0.0, 1.0);
    Tensor logits;
    {
      NoGradGuard ng;
      logits = (*m)(x);
    }
    save_npy((dir / (c.name + "_x.npy")).string(), x);
    save_npy((dir / (c.name + "_logits.npy")).string(), logits);
    spec["cases"].push_back({{"name", c.name},
                             {"onnx", c.name + ".onnx"},
                             {"x", c.name + "_x.npy"},
                             {"logits", c.name + "_logits.npy"},
                             {"opset", c.opset},
                             {"metadata", meta}});
  }
  std::ofstream(dir / "spec.json") << spec.dump(1);
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
  CHECK(lines == (int)cases.size());
  if (rc == 0) fs::remove_all(dir);
}
