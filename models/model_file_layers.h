// The layer types of model files (docs/model-files.md): one table entry per type, with the fields it
// accepts, how many inputs it takes, and a builder that checks the input shapes, infers the output
// shape and makes the module. Adding a layer type is one entry in model_file_layers.cpp. A type named
// in the format whose op this build lacks is listed with `unavailable` set, so a file using it gets
// "layer type 'upsample' is not available in this build yet". Knows nothing of the graph (names,
// references, blocks): models/model_file.cpp does that.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/nn/module.h"
#include "models/model_file.h"

namespace kiln::models {

using SampleShape = std::vector<int64_t>;  // one sample's shape, no batch dim: (C, H, W) or (F)

std::string sample_shape_str(const SampleShape& s);  // "(64, 8, 8)"

// What a builder is given: the layer's JSON object, the shapes of its inputs (in order), the model's
// input (num_classes), and `where` ("model file net.json: layer 'conv1' (conv2d)") to start errors with.
struct LayerArgs {
  const nlohmann::json& spec;
  std::vector<SampleShape> in;
  std::vector<std::string> in_names;  // the inputs' layer names, for messages
  const ModelInput& input;
  std::string where;

  // Field readers: each checks the JSON type and range and throws naming the layer and field.
  int64_t get_int(const char* field, int64_t def, int64_t min) const;
  int64_t need_int(const char* field, int64_t min) const;
  double get_double(const char* field, double def, double lo, double hi) const;
  bool get_bool(const char* field, bool def) const;
  bool has(const char* field) const { return spec.contains(field); }
};

// A built layer: a module taking one input, or (module null) a function of all inputs (add, concat).
struct BuiltLayer {
  nn::ModulePtr module;
  std::function<Tensor(const std::vector<Tensor>&)> join;
  SampleShape out;
};

struct LayerType {
  std::string type;
  std::vector<std::string> fields;  // accepted besides name, type, input / inputs
  int min_inputs = 1, max_inputs = 1;  // > 1: the layer takes "inputs": [names]
  std::string unavailable;             // non-empty: why this build cannot make it
  std::function<BuiltLayer(const LayerArgs&)> build;
};

// A parameter-free layer over one op (GELU, AvgPool2d, ...), a Module so it has a place in the tree.
// attrs(): the layer's settings with every default filled in ({"kernel": 3, "stride": 2, ...};
// {} for gelu / sigmoid / tanh), so a reader above models/ (ONNX export) can rebuild the op.
class OpLayer : public nn::Module {
 public:
  OpLayer(std::string type_name, nlohmann::json attrs, std::function<Tensor(const Tensor&)> fn)
      : Module(std::move(type_name)), attrs_(std::move(attrs)), fn_(std::move(fn)) {}
  Tensor forward(const Tensor& x) override { return fn_(x); }
  const nlohmann::json& attrs() const { return attrs_; }

 private:
  nlohmann::json attrs_;
  std::function<Tensor(const Tensor&)> fn_;
};

// nullptr for an unknown type.
const LayerType* find_layer_type(const std::string& type);
std::vector<std::string> layer_type_names();  // every entry, available or not

}  // namespace kiln::models
