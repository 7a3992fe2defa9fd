// What ReLU(inplace=True) saves in kiln, predicted on the meta device with the trainer's own step
// (train::predict_step_memory, as `kiln mem`), for docs/memory-rules-of-thumb.md. Two small
// networks at batch 32, 3x112x112, SGD, each with nn::ReLU(false) and nn::ReLU(true):
//   conv-bn-relu: 4 x [Conv2d(->64, 3x3, pad 1), BatchNorm2d, ReLU], avg pool, Linear(64, 10)
//   conv-relu:    4 x [Conv2d(->64, 3x3, pad 1), ReLU], avg pool, Linear(64, 10)
// Prints the activations saved at the end of forward, the peak allocated and reserved bytes, and
// the saved bytes per layer (the module that allocated them). kiln's relu saves its output (the
// backward mask is out > 0); conv2d saves its input, batch_norm its input and per-channel stats.
//   rules_relu_inplace
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/optim/sgd.h"
#include "engine/train/memory_predict.h"

#include "bench/bench_cli.h"

using namespace kiln;

namespace {

double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

nn::ModulePtr make_net(bool bn, bool inplace) {
  auto s = std::make_shared<nn::Sequential>();
  int64_t in = 3;
  for (int i = 0; i < 4; ++i) {
    s->push_back(std::make_shared<nn::Conv2d>(in, 64, 3, 1, 1, !bn));
    if (bn) s->push_back(std::make_shared<nn::BatchNorm2d>(64));
    s->push_back(std::make_shared<nn::ReLU>(inplace));
    in = 64;
  }
  s->push_back(std::make_shared<nn::AdaptiveAvgPool2d>(1, 1));
  s->push_back(std::make_shared<nn::Flatten>());
  s->push_back(std::make_shared<nn::Linear>(64, 10));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rules_relu_inplace: the activation bytes an in-place ReLU saves, with and without batch norm (meta-device steps)"};
  app.name("rules_relu_inplace");
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  try {
    for (bool bn : {true, false}) {
      for (bool inplace : {false, true}) {
        train::PredictOptions o;
        o.batch = 32;
        o.input_shape = {3, 112, 112};
        const StepMemory m = train::predict_step_memory(
            [&] { return make_net(bn, inplace); },
            [](nn::Module& model) {
              return std::make_unique<optim::SGD>(model.named_parameters(), optim::SGDOptions{});
            },
            o);
        std::printf("%s, ReLU(inplace=%s): activations %.2f MiB, peak allocated %.2f MiB, peak reserved %.2f MiB\n",
                    bn ? "conv-bn-relu" : "conv-relu", inplace ? "true" : "false", mib(m.activations),
                    mib(m.peak_allocated), mib(m.peak_reserved));
        // Rows named "index (type)": the Sequential's children.
        std::map<std::string, std::string> types;
        nn::ModulePtr names = make_net(bn, inplace);
        for (const auto& [path, mod] : names->named_modules()) types[path] = mod->type_name();
        std::printf("  saved per layer (the module that allocated them):");
        for (const auto& [path, bytes] : m.layer_activations) {
          if (bytes == 0) continue;
          const auto t = types.find(path);
          const std::string label = t == types.end() ? path : path + " " + t->second;
          if (bytes >= (1 << 20)) std::printf(" %s %.2f MiB,", label.c_str(), mib(bytes));
          else std::printf(" %s %.1f KiB,", label.c_str(), (double)bytes / 1024.0);
        }
        std::printf("\n");
      }
    }
    std::printf("one (32, 64, 112, 112) f32 tensor: %.2f MiB\n", mib(32LL * 64 * 112 * 112 * 4));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rules_relu_inplace: error: %s\n", e.what());
    return 1;
  }
  return 0;
  });
}
