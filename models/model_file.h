// Networks read from model files (docs/model-files.md): a JSON list of named layers becomes a
// GraphModel, a Module whose forward walks the layers in dependency order. Each layer's input is the
// previous layer unless named ("input": "conv1"); `add` and `concat` join named layers; `block`
// groups layers under a dotted prefix and `repeat` copies a block ("layer1.0", "layer1.1", ...).
// Shapes are inferred from the input size; parameters are named after the layers, so a state_dict
// reads like PyTorch's ("features.0.weight", "layer1.0.downsample.0.weight").
// Every mistake is one kiln::Error naming the file, the layer and the shapes. The layer types live
// in models/model_file_layers.h (one table entry per type); this file must not know them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/nn/module.h"

namespace kiln::models {

// What the model is built for: the number of classes ("out_features": "num_classes"), the input
// channels and the image size (H = W) that shapes are inferred from.
struct ModelInput {
  int64_t num_classes = 10;
  int64_t in_channels = 3;
  int64_t image_size = 32;
};

// One layer of a built GraphModel, in file order (what `kiln model show` prints).
struct GraphLayer {
  std::string name;                 // full dotted name: "layer1.0.conv1"
  std::string type;                 // "conv2d"
  std::vector<std::string> inputs;  // full names of the inputs ("input" = the model input)
  std::vector<int64_t> out_shape;   // one sample's output shape: (C, H, W) or (F)
  int64_t params = 0;               // parameter elements of this layer
  int64_t param_bytes = 0;          // parameters and buffers, bytes (f32)
};

// One step of a GraphModel's forward, in run order (inputs before the layers reading them; the last
// step is the output): the layer's full name and type, its inputs by full name ("input" = the model
// input) and its module, null for the joins add (sum of the inputs) and concat (channels, dim 1).
// A read-only view for readers above models/ (ONNX export); the module is the model's own child.
struct GraphStep {
  std::string name, type;
  std::vector<std::string> inputs;
  nn::Module* module = nullptr;
};

class GraphModel : public nn::Module {
 public:
  // x: (N, in_channels, image_size, image_size) -> the output layer's (N, ...) (logits for a classifier)
  Tensor forward(const Tensor& x) override;
  // Straight-line pieces of the graph (cut where one tensor carries everything later layers read):
  // recompute segments split there.
  std::vector<nn::Stage> stages() override;

  const std::vector<GraphLayer>& layers() const { return info_; }
  const std::string& source() const { return source_; }      // file name (or "<json>")
  const std::string& json_text() const { return text_; }     // the model file's text, as read
  const ModelInput& input() const { return input_; }
  std::vector<GraphStep> steps() const;

  struct Impl;  // the parsed graph (models/model_file.cpp)
  GraphModel();
  ~GraphModel() override;

 private:
  friend std::shared_ptr<GraphModel> build_graph_model(const std::string&, const std::string&, const ModelInput&);
  Tensor run_range(size_t begin, size_t end, const Tensor& x);
  std::unique_ptr<Impl> impl_;
  std::vector<GraphLayer> info_;
  std::string source_, text_;
  ModelInput input_;
};

// True for names that denote a model file rather than a built-in model (they end in ".json").
bool is_model_file_name(const std::string& name);

// Builds from the JSON text of a model file; `source` names it in errors (a path or "<json>").
std::shared_ptr<GraphModel> build_graph_model(const std::string& text, const std::string& source,
                                              const ModelInput& input);
// Reads `path` and builds it (errors name the path; a file that is not JSON: line and column).
std::shared_ptr<GraphModel> load_model_file(const std::string& path, const ModelInput& input);

}  // namespace kiln::models
