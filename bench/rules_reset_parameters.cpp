// The "defragment by calling empty_cache() and reset_parameters() every N steps" advice, run for
// real, for docs/memory-rules-of-thumb.md: small_cnn on Fashion-MNIST (IDX folder), AdamW 1e-3,
// batch 32, the same seed and batch order twice, once plain and once with
// model.reset_all_parameters() + empty_cache() every N steps (the optimizer kept, as a user's
// loop would). Prints, per run, the validation accuracy at each evaluation point, and at each
// reset the CPU allocator's allocated / reserved bytes before and after empty_cache(); writes
// every step's loss (and each evaluation) to a CSV for scripts/plot_reset_curve.py.
//   rules_reset_parameters [--data DIR] [--steps N] [--reset-every N] [--batch B] [--eval-every N]
//                          [--val-limit N] [--threads T] [--csv FILE]
// Times are not the point (a loaded 2-core machine); the numbers are losses and accuracies.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "data/array_dataset.h"
#include "engine/core/generator.h"
#include "engine/memory/caching_allocator.h"
#include "engine/optim/adamw.h"
#include "engine/train/evaluate.h"
#include "engine/train/train_step.h"
#include "kernels/cpu/threads.h"
#include "models/registry.h"

#include "bench/bench_cli.h"

using namespace kiln;

namespace {

double mib(int64_t b) { return (double)b / (1024.0 * 1024.0); }

struct Args {
  std::string data = "/usr/share/datasets/fashion-mnist", csv;
  int64_t steps = 1875, reset_every = 1000, batch = 32, eval_every = 250, val_limit = 10000;
  int threads = 2;
};

struct Memory {
  int64_t allocated, reserved;
};
Memory memory_now() {
  const MemoryStats s = caching_allocator_for(Device::cpu())->stats();
  return {s.total.allocated.current, s.total.reserved.current};
}

// One run; reset_every 0: never. Appends "run,step,loss,val_accuracy" rows to csv.
void run(const Args& a, const DataSplits& data, const ArrayDataset& val, int64_t reset_every, FILE* csv) {
  const std::string name = reset_every > 0 ? "reset every " + std::to_string(reset_every) : "plain";
  manual_seed(0);
  nn::ModulePtr model = models::make_model("small_cnn", 10, 1, 28);
  model->train();
  optim::AdamWOptions ao;
  ao.lr = 1e-3;
  ao.weight_decay = 5e-4;
  optim::AdamW opt(model->named_parameters(), ao);
  optim::LossScalerOptions no_scaling;
  no_scaling.enabled = false;
  optim::LossScaler scaler(no_scaling);
  train::StepOptions so;
  const int64_t n = data.train.n;
  std::vector<int64_t> perm;
  int64_t epoch = -1;
  std::printf("%s:\n", name.c_str());
  double window = 0;  // summed losses since the last evaluation
  int64_t window_steps = 0;
  for (int64_t s = 0; s < a.steps; ++s) {
    const int64_t first = (s * a.batch) % n;
    if (s * a.batch / n != epoch) {
      epoch = s * a.batch / n;
      perm = epoch_permutation(n, 1, epoch);
    }
    const int64_t end = std::min(first + a.batch, n);
    Batch b = gather_batch(data.train, perm, first, end);
    model->train();
    const train::StepResult r = train::train_step(*model, opt, scaler, b, so);
    window += r.loss;
    ++window_steps;
    std::fprintf(csv, "%s,%lld,%.6f,\n", name.c_str(), (long long)(s + 1), r.loss);
    if ((s + 1) % a.eval_every == 0 || s + 1 == a.steps) {
      const EvalResult e = evaluate(*model, val, 500, Device::cpu());
      std::fprintf(csv, "%s,%lld,,%.6f\n", name.c_str(), (long long)(s + 1), e.accuracy);
      std::printf("  step %5lld: mean train loss of the last %lld steps %.4f, val accuracy %.2f%% (%lld images)\n",
                  (long long)(s + 1), (long long)window_steps, window / (double)window_steps, 100.0 * e.accuracy,
                  (long long)e.n);
      window = 0;
      window_steps = 0;
    }
    if (reset_every > 0 && (s + 1) % reset_every == 0 && s + 1 < a.steps) {
      b = Batch{};
      const Memory before = memory_now();
      model->reset_all_parameters();
      caching_allocator_for(Device::cpu())->empty_cache();
      const Memory after = memory_now();
      const EvalResult e = evaluate(*model, val, 500, Device::cpu());
      std::printf("  step %5lld: reset_all_parameters() + empty_cache(): allocated %.2f -> %.2f MiB, reserved "
                  "%.2f -> %.2f MiB; val accuracy right after the reset %.2f%%\n",
                  (long long)(s + 1), mib(before.allocated), mib(after.allocated), mib(before.reserved),
                  mib(after.reserved), 100.0 * e.accuracy);
      std::fprintf(csv, "%s,%lld,,%.6f\n", name.c_str(), (long long)(s + 1), e.accuracy);
    }
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  cpu::ensure_omp_wait_policy(argv);
  CLI::App app{"rules_reset_parameters: the \"empty_cache() + reset_parameters() every N steps\" advice run for real: "
               "small_cnn on Fashion-MNIST, plain against reset every N steps, validation accuracy and allocator bytes"};
  app.name("rules_reset_parameters");
  Args a;
  app.add_option("--data", a.data, "IDX data folder")->capture_default_str();
  app.add_option("--steps", a.steps, "optimizer steps")->capture_default_str();
  app.add_option("--reset-every", a.reset_every, "reset the parameters every N steps")->capture_default_str();
  app.add_option("--batch", a.batch, "batch")->capture_default_str();
  app.add_option("--eval-every", a.eval_every, "evaluate every N steps")->capture_default_str();
  app.add_option("--val-limit", a.val_limit, "validation samples")->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads")->capture_default_str();
  app.add_option("--csv", a.csv, "also write the curve as CSV here");
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  if (a.steps < 1 || a.reset_every < 1 || a.batch < 1 || a.eval_every < 1 || a.val_limit < 1 || a.threads < 1) {
    std::fprintf(stderr, "rules_reset_parameters: every number must be >= 1\n");
    return 2;
  }
  try {
    cpu::set_num_threads(a.threads);
    DataSplits data = load_training_data(a.data, "", -1, 10);
    if (!data.val) throw Error("rules_reset_parameters: " + a.data + " has no t10k (validation) files");
    ArrayDataset val = *data.val;
    val.truncate(a.val_limit);
    FILE* csv = std::fopen(a.csv.empty() ? "/dev/null" : a.csv.c_str(), "w");
    if (!csv) throw Error("rules_reset_parameters: cannot write " + a.csv);
    std::fprintf(csv, "run,step,loss,val_accuracy\n");
    std::printf("small_cnn on %s (%lld training images), AdamW lr 1e-3 wd 5e-4, batch %lld, %lld steps, %d thread(s)\n",
                a.data.c_str(), (long long)data.train.n, (long long)a.batch, (long long)a.steps, a.threads);
    run(a, data, val, 0, csv);
    run(a, data, val, a.reset_every, csv);
    std::fclose(csv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rules_reset_parameters: error: %s\n", e.what());
    return 1;
  }
  return 0;
  });
}
