// Your own training loop around kiln's one training step, train::train_step: dynamic loss
// scaling as `kiln train --amp` does it (f16 autocast + LossScaler), gradient accumulation over
// micro-batches, a hook that watches every micro-batch, and the caching allocator's per-tag
// memory account printed after each step.
//   own_loop [STEPS]
// Exit status 0 when the loss went down over the run and no step was skipped.
#include <kiln/kiln.h>

#include <cstdio>
#include <cstdlib>

using namespace kiln;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
  manual_seed(0);
  // A model from kiln's registry; any nn::Module works the same way.
  nn::ModulePtr model = models::make_model("small_cnn", 4, 1, 12);
  optim::SGDOptions sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  optim::SGD optimizer(model->named_parameters(), sgd);
  optim::LossScalerOptions amp;
  amp.init_scale = 1024;  // small, so no f16 gradient overflows on this toy problem
  optim::LossScaler scaler(amp);

  // One fixed batch of 16 samples whose label is visible in their mean: (16, 1, 12, 12), (16).
  Tensor x, y;
  {
    MemoryScope tag(MemoryTag::data);
    x = randn({16, 1, 12, 12});
    std::vector<int64_t> labels(16);
    for (int i = 0; i < 16; ++i) labels[(size_t)i] = i % 4;
    y = tensor_from(labels, {16});
    x = add(x, mul(reshape(to_dtype(y, DType::f32), {16, 1, 1, 1}), 1.5));
  }

  train::StepOptions step;
  step.accum = 4;       // 4 micro-batches of 4 samples; the gradients are those of the full batch
  step.autocast = true; // forward + loss in f16 where PyTorch's autocast would
  step.clip = 5.0;      // unscaled before clipping
  int micro_batches = 0;
  step.hooks.after_backward = [&](const train::MicroBatch&) { ++micro_batches; };

  CachingAllocator* cpu = caching_allocator_for(Device::cpu());
  double first_loss = 0, last_loss = 0;
  for (int s = 0; s < steps; ++s) {
    if (cpu) cpu->reset_peak();
    const train::StepResult r = train::train_step(*model, optimizer, scaler, Batch{x, y}, step);
    if (s == 0) first_loss = r.loss;
    last_loss = r.loss;
    std::printf("step %d: loss %.4f  grad norm %.3f  scale %g  %s\n", s + 1, r.loss, r.grad_norm, r.loss_scale,
                r.stepped ? "stepped" : "SKIPPED (inf/NaN gradient)");
    if (cpu) {
      const MemoryStats st = cpu->stats();
      std::printf("  memory (current / peak this step):");
      for (int t = 0; t < kNumMemoryTags; ++t)
        if (st.tag_allocated[t].peak > 0)
          std::printf("  %s %lld / %lld", tag_name((MemoryTag)t), (long long)st.tag_allocated[t].current,
                      (long long)st.tag_allocated[t].peak);
      std::printf("\n");
    }
  }
  std::printf("%d micro-batches in %d steps; loss %.4f -> %.4f; %lld steps skipped\n", micro_batches, steps,
              first_loss, last_loss, (long long)scaler.skipped_steps());
  return last_loss < first_loss && scaler.skipped_steps() == 0 && micro_batches == 4 * steps ? 0 : 1;
}
