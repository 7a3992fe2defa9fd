// How much memory does YOUR model need to train? kiln predicts one training step of a model it has
// never seen (a Module subclass defined here) on the meta device: shapes only, no arithmetic, the
// trainer's own train::train_step through a fresh caching allocator with the CPU's policy. It
// prints the peak allocated and reserved bytes, the per-tag peaks, the activations saved per layer
// and the largest batch for a budget; then runs two real steps on the CPU and states whether the
// measured peak allocated bytes equal the prediction.
//   predict_memory [BATCH] [BUDGET_MIB]
// Exit status 0 when both measured step peaks equal the predicted ones to the byte.
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>

using namespace kiln;

// conv(3->16) BN ReLU, conv(16->32, stride 2) BN ReLU, conv(32->32) ReLU, global average pool,
// linear(32->10).
class MyNet : public nn::Module {
 public:
  MyNet() : Module("MyNet") {
    stem = register_module("stem", std::make_shared<nn::Conv2d>(3, 16, 3, 1, 1));
    stem_bn = register_module("stem_bn", std::make_shared<nn::BatchNorm2d>(16));
    down = register_module("down", std::make_shared<nn::Conv2d>(16, 32, 3, 2, 1));
    down_bn = register_module("down_bn", std::make_shared<nn::BatchNorm2d>(32));
    mix = register_module("mix", std::make_shared<nn::Conv2d>(32, 32, 3, 1, 1));
    head = register_module("head", std::make_shared<nn::Linear>(32, 10));
  }
  Tensor forward(const Tensor& x) override {              // x: (N, 3, S, S)
    Tensor y = relu((*stem_bn)((*stem)(x)));             // (N, 16, S, S)
    y = relu((*down_bn)((*down)(y)));                    // (N, 32, S/2, S/2)
    y = relu((*mix)(y));                                 // (N, 32, S/2, S/2)
    return (*head)(mean(y, {2, 3}));                     // (N, 10)
  }
  std::shared_ptr<nn::Conv2d> stem, down, mix;
  std::shared_ptr<nn::BatchNorm2d> stem_bn, down_bn;
  std::shared_ptr<nn::Linear> head;
};

std::unique_ptr<optim::Optimizer> make_sgd(nn::Module& m) {
  optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;  // a momentum buffer per parameter, created in the first step
  return std::make_unique<optim::SGD>(m.named_parameters(), o);
}

double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 16;
  const int64_t budget = (argc > 2 ? std::atoll(argv[2]) : 64) << 20;
  const int64_t size = 32;

  train::PredictOptions po;
  po.batch = batch;
  po.input_shape = {3, size, size};
  po.target = Device::cpu();
  auto make_model = [] { return nn::ModulePtr(std::make_shared<MyNet>()); };
  const StepMemory p = train::predict_step_memory(make_model, make_sgd, po);
  std::printf("predicted, batch %lld of 3x%lldx%lld, SGD momentum, on %s:\n", (long long)batch, (long long)size,
              (long long)size, p.target.c_str());
  std::printf("  peak allocated %lld bytes (%.2f MiB), peak reserved %lld bytes (%.2f MiB)\n",
              (long long)p.peak_allocated, mib(p.peak_allocated), (long long)p.peak_reserved, mib(p.peak_reserved));
  std::printf("  first step %lld, steady step %lld bytes allocated at the peak\n", (long long)p.first.allocated,
              (long long)p.steady.allocated);
  std::printf("  parameters %lld, gradients %lld, optimizer state %lld, input batch %lld bytes\n",
              (long long)p.params, (long long)p.grads, (long long)p.optimizer, (long long)p.data);
  std::printf("  per tag (own peak in the steady step):");
  for (int t = 0; t < kNumMemoryTags; ++t)
    if (p.steady.tag_peak[t] > 0) std::printf(" %s %lld", tag_name((MemoryTag)t), (long long)p.steady.tag_peak[t]);
  std::printf("\n  activations saved for backward, per layer (end of forward, %lld bytes in all):\n",
              (long long)p.activations);
  for (const auto& [layer, bytes] : p.layer_activations)
    std::printf("    %-12s %10lld bytes\n", layer.c_str(), (long long)bytes);

  const train::MaxBatchResult mb = train::max_batch_for_budget(
      [&](int64_t b) {
        train::PredictOptions k = po;
        k.batch = b;
        return train::predict_step_memory(make_model, make_sgd, k).peak_reserved;
      },
      budget, 0.0);
  std::printf("largest batch for a budget of %.0f MiB: %lld (peak reserved %.2f MiB; %zu meta runs)\n", mib(budget),
              (long long)mb.batch, mib(mb.peak_reserved), mb.probes.size());

  // Two real steps on the CPU, measured by the CPU's caching allocator.
  CachingAllocator* cpu = caching_allocator_for(Device::cpu());
  if (!cpu) {
    std::printf("no caching allocator on the CPU in this build: nothing to measure\n");
    return 1;
  }
  manual_seed(0);
  nn::ModulePtr model = make_model();
  model->train();
  std::unique_ptr<optim::Optimizer> opt = make_sgd(*model);
  optim::LossScalerOptions off;
  off.enabled = false;
  optim::LossScaler scaler(off);
  bool exact = true;
  for (int s = 0; s < 2; ++s) {
    cpu->reset_peak();
    Tensor x, y;
    {
      // The batch as a loader delivers it: allocated under the data tag, filled in place.
      MemoryScope tag(MemoryTag::data);
      x = empty({batch, 3, size, size}, DType::f32, Device::cpu());
      y = empty({batch}, DType::i64, Device::cpu());
    }
    float* xp = x.data<float>();
    for (int64_t i = 0; i < x.numel(); ++i) xp[i] = (float)((i * 7919) % 101) / 50.0f - 1.0f;
    int64_t* yp = y.data<int64_t>();
    for (int64_t i = 0; i < batch; ++i) yp[i] = i % 10;
    train::StepOptions so = po.step;
    train::train_step(*model, *opt, scaler, Batch{x, y}, so);
    x = Tensor(), y = Tensor();
    const int64_t measured = cpu->stats().total.allocated.peak;
    const int64_t predicted = s == 0 ? p.first.allocated : p.steady.allocated;
    std::printf("real step %d: measured peak allocated %lld bytes, predicted %lld: %s\n", s + 1, (long long)measured,
                (long long)predicted,
                measured == predicted ? "exact"
                                      : ("differs by " + std::to_string(measured - predicted) + " bytes").c_str());
    exact = exact && measured == predicted;
  }
  std::printf("the prediction is %s (reserved bytes depend on what the process cached before; not compared)\n",
              exact ? "exact to the byte" : "NOT exact");
  return exact ? 0 : 1;
}
