// Training checkpoints and weight files of `kiln train`, both safetensors written atomically.
// A checkpoint holds "model.<state_dict name>" and "optim.<optimizer state name>" tensors; its
// __metadata__ holds format "kiln-checkpoint-1", model, num_classes, epoch (completed), step
// (optimizer steps done), rng_seed / rng_offset (engine/core/generator.h) and the configuration
// as JSON; under --amp also amp_scale, amp_growth_tracker and amp_skipped_steps (the LossScaler's
// state, restored by --resume). A weights file (--save) is the plain state_dict with torchvision names, plus metadata
// (model, num_classes, in_channels, image_size) that `kiln predict` uses to rebuild the model.
#pragma once
#include <cstdint>
#include <string>

#include "engine/core/generator.h"
#include "engine/nn/module.h"
#include "tools/train_components.h"
#include "tools/train_config.h"

namespace kiln {

struct CheckpointState {
  int64_t epoch = 0;
  int64_t step = 0;
  RngState rng;
  // The --amp loss scaler's state (has_amp: the run that saved it used --amp).
  bool has_amp = false;
  double amp_scale = 0;
  int64_t amp_growth_tracker = 0, amp_skipped_steps = 0;
};

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt,
                     const CheckpointState& st, const TrainConfig& c, int64_t num_classes);
// Loads model and optimizer state in place; checks that model name and class count match.
CheckpointState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt,
                                const std::string& model_name, int64_t num_classes, Device device);

void save_weights(const std::string& path, const nn::Module& model, const std::string& model_name,
                  int64_t num_classes, int64_t in_channels, int64_t image_size);

}  // namespace kiln
