// Model factory and optimizer adapter for the command layer (see train_components.h).
#include "engine/run/run_model.h"

#include "engine/core/usage_error.h"

#include <algorithm>
#include <filesystem>

#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/ops/ops.h"
#include "engine/optim/adamw.h"
#include "engine/train/segment_task.h"
#include "engine/optim/sgd.h"
#include "models/model_file.h"
#include "models/registry.h"
#include "models/unet.h"

namespace kiln {

void check_model_name(const std::string& name) {
  if (models::is_model_file_name(name)) {
    KILN_CHECK(std::filesystem::is_regular_file(name), "--model ", name, ": no such model file");
    return;
  }
  if (models::is_segmentation_model(name)) {  // unet[:opts], unet_small[:opts]: the options are checked here too
    try {
      (void)models::unet_options_from_name(name);
    } catch (const Error& e) {
      throw UsageError(str_cat("--model '", name, "': ", e.what()));
    }
    return;
  }
  const std::vector<std::string> names = models::model_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return;
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  throw UsageError(str_cat("--model '", name, "': unknown model (known: ", list, "; or a model file, NAME.json)"));
}

bool same_model(const std::string& stored, const std::string& wanted) {
  return stored == wanted || (models::is_model_file_name(stored) && models::is_model_file_name(wanted));
}

nn::ModulePtr build_model(const std::string& name, int64_t num_classes, int64_t in_channels, int64_t image_size) {
  return models::make_model(name, num_classes, in_channels, image_size);
}

void check_segment_model(const std::string& name, int64_t num_classes, int64_t in_channels, int64_t image_size) {
  const RngState rng = global_rng();  // the real model's initialization must not see this one
  Shape out_shape;
  {
    nn::ModulePtr m = build_model(name, num_classes, in_channels, image_size);
    m->to(Device::meta());
    m->eval();  // one sample: BatchNorm's running statistics, not a batch of 1
    NoGradGuard no_grad;
    out_shape = (*m)(empty({1, in_channels, image_size, image_size}, DType::f32, Device::meta())).sizes();
  }
  global_rng() = rng;
  const Shape want = {1, num_classes, image_size, image_size};
  if (out_shape == want) return;
  throw Error(str_cat("--task segment: --model ", name, " gives output ", shape_str(out_shape), " for input ",
                      shape_str({1, in_channels, image_size, image_size}), "; segmentation needs ", shape_str(want),
                      " (per-pixel scores of the ", num_classes,
                      " classes at the input's size: a fully convolutional model such as a UNet)"));
}

std::unique_ptr<optim::Optimizer> build_optimizer(const RunConfig& c, nn::Module& model) {
  // PyTorch semantics: weight decay on every parameter (no exclusion).
  std::vector<optim::ParamGroup> groups =
      optim::make_param_groups(model.named_parameters(), c.lr, c.effective_weight_decay());
  std::unique_ptr<optim::Optimizer> o;
  if (c.optimizer == "sgd") {
    optim::SGDOptions opts;
    opts.momentum = c.momentum;
    o = std::make_unique<optim::SGD>(std::move(groups), opts);
  } else if (c.optimizer == "adamw") {
    o = std::make_unique<optim::AdamW>(std::move(groups), optim::AdamWOptions{});
  } else {
    throw Error(str_cat("--optimizer '", c.optimizer, "': expected sgd or adamw"));
  }
  return o;
}

}  // namespace kiln
