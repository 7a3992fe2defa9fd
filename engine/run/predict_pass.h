// `kiln predict`'s work on its device, as one description shared by the real prediction (tools/predict.cpp,
// tools/predict_segment.cpp) and its memory plan (engine/run/plan_predict.h), so the two cannot drift: the
// model built from the weights in the host scratch and copied to the device (as a run's set-up is), then
// each batch's forward in eval mode under NoGradGuard inside a temporary scope, with the outputs the
// caller reads (classify: the logits; segment: the scores, each pixel's class and, with masks, the set's
// confusion matrix on the device). What the caller does with the outputs must not allocate on the device
// (on the CPU, to_device(t, cpu) of a CPU tensor is t). Must not read files or print.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/data_source.h"
#include "engine/io/safetensors.h"
#include "engine/io/tensor_io.h"
#include "engine/nn/module.h"

namespace kiln {

// The model predict builds: a registered name or a model file, or a model file's text carried by the weights.
struct PredictModelSpec {
  std::string name;        // --model or the weights' model
  std::string model_json;  // non-empty: build from this text (the file named `name` is not there)
  std::string json_source; // for messages: "w.safetensors (model_json)"
  int64_t num_classes = 0, channels = 0, image_size = 0;
};

// Builds the model in the host scratch (no random initialization), loads `tensors` into it strictly when
// given (null: shapes only, the plan's), and copies its parameters and buffers to `device` in registration
// order (nn::Module::rehome); eval mode. The device's allocator sees only that copy.
nn::ModulePtr build_predict_model(const PredictModelSpec& spec, const std::vector<NamedArray>* tensors, Device device);

// One batch's outputs on the device.
struct PredictBatchOutput {
  Tensor out;  // classify: the logits (N, K), contiguous; segment: the scores (N, K, H, W)
  Tensor cls;  // segment: each pixel's class (N, H, W), i64 (argmax, the first of equal maxima)
};

struct PredictPassOptions {
  int64_t batch = 256;
  bool segment = false;
  int64_t num_classes = 0;      // segment: the classes the weights hold (checked against the output)
  std::string who;              // segment: for messages ("predict: --model unet_small")
};

// The pass over `data` (epoch 0, batches of o.batch in order, the last one short), the model in eval mode
// under NoGradGuard; per batch inside MemoryScope(temporary): the forward and the outputs, then `use(batch,
// outputs)`. segment: a batch with masks (y of (N, H, W)) adds to *counts, the (K, K) i64 confusion matrix
// made on the device at the first such batch (kept across batches). Empty batches are skipped.
void predict_pass(nn::Module& model, DataSource& data, const PredictPassOptions& o, Tensor* counts,
                  const std::function<void(const SourceBatch&, const PredictBatchOutput&)>& use);

}  // namespace kiln
