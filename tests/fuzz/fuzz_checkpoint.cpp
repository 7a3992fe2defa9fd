// libFuzzer target: training-state files (--resume) through load_checkpoint (engine/train/train_state.h),
// which reads the safetensors file, checks its metadata and loads the model's and the AdamW
// optimizer's state. The model is a tiny conv + batch norm (its file is ~1 KiB, so the fuzzer's
// mutations reach the header and the metadata); the bytes go to an in-memory file since the loader
// takes a path. kiln::Error is the expected outcome for bad input; any other exception or a
// sanitizer report is a finding.
// KILN_FUZZ_WRITE_SEED=<path>: write a valid training-state file of that model there and exit
// (how tests/fuzz/corpus/checkpoint/ was made, see scripts/fuzz_seeds.py).
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "engine/core/generator.h"
#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/sequential.h"
#include "engine/ops/ops.h"
#include "fuzz/fuzz_support.h"
#include "engine/train/train_state.h"
#include "engine/run/run_model.h"

using namespace kiln;

namespace {

const char* kModelName = "fuzz_tiny";
constexpr int64_t kClasses = 2;

struct Run {
  RunConfig config;
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> opt;
  Run() {
    config.model = kModelName;
    config.optimizer = "adamw";
    config.lr = 0.001;
    manual_seed(3);
    model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Conv2d>(1, 2, 1), std::make_shared<nn::BatchNorm2d>(2)});
    model->train();
    opt = build_optimizer(config, *model);
  }
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* seed = std::getenv("KILN_FUZZ_WRITE_SEED");
  if (!seed) return 0;
  Run r;
  Tensor loss = sum((*r.model)(normal({2, 1, 2, 2}, 0.0, 1.0)));
  loss.backward();
  r.opt->step();
  CheckpointState st;
  st.epoch = 1;
  st.step = 1;
  st.rng = {3, 8};
  st.has_amp = true;
  st.amp_scale = 65536;
  save_checkpoint(seed, *r.model, *r.opt, st, kModelName, kClasses, r.config.to_json());
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("fuzz.ckpt");
  static Run run;  // loads go into the same model and optimizer, as a failed load leaves them
  const std::string& path = file.set(data, size);
  try {
    load_checkpoint(path, *run.model, *run.opt, kModelName, kClasses, Device::cpu());
  } catch (const Error&) {
  }
  return 0;
}
