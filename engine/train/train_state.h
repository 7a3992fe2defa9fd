// Training-state files ("checkpoints": what --resume reads) and weight files, both safetensors
// written atomically. Library code: `fit`'s callers (kiln train, a user's own trainer) save and load
// them; it must not know the command line (the configuration arrives as JSON).
// A checkpoint holds "model.<state_dict name>" and "optim.<optimizer state name>" tensors; its
// __metadata__ holds format "kiln-checkpoint-1", model, num_classes, epoch (completed), step
// (optimizer steps done), rng_seed / rng_offset (engine/core/generator.h) and the run's
// configuration as JSON (`config`, whatever the caller passes); under --amp also amp_scale,
// amp_growth_tracker and amp_skipped_steps (the LossScaler's state, restored by --resume). A weights
// file (--save) is the plain state_dict with torchvision names, plus metadata (model, num_classes,
// in_channels, image_size) that `kiln predict` uses to rebuild the model.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/generator.h"
#include "engine/nn/module.h"
#include "engine/optim/optimizer.h"

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
                     const CheckpointState& st, const std::string& model_name, int64_t num_classes,
                     const nlohmann::json& config);
// Loads model and optimizer state in place; checks that model name and class count match.
CheckpointState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt,
                                const std::string& model_name, int64_t num_classes, Device device);

void save_weights(const std::string& path, const nn::Module& model, const std::string& model_name,
                  int64_t num_classes, int64_t in_channels, int64_t image_size);

}  // namespace kiln
