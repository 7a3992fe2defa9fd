// --batch-memory against a fixed batch, same data, same budget, same run: a generated folder of
// JPEGs from 64 to 512 px (mostly small, as photo collections are: 100 at 64 px down to 2 at
// 512 px), bucketed by size (data/batch_plan.h). Each bucket's batch is the largest whose
// predicted peak allocated bytes (the training step on the meta device) fit the budget; the peer
// gives every bucket the batch chosen for the largest images (what fits a 512 px batch), which is
// what a fixed --batch must be for such data not to run out of memory. Both train one epoch of the
// same model from the same initial weights, alternately, --runs times; prints the median images/s
// of each, their ratio, and the measured peak allocated of each beside the budget.
//   bench_batch_memory [--model resnet18] [--budget 300M] [--runs 3] [--threads T] [--workers W]
// CPU only (the device memory is the capacity-limited CPU provider: --budget + 25%).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <string>
#include <vector>

#include "data/bucketed_image_source.h"
#include "data/jpeg_encode.h"
#include "engine/core/generator.h"
#include "engine/memory/alloc_config.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/init.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/sgd.h"
#include "engine/train/fit.h"
#include "engine/train/memory_peak.h"
#include "engine/train/memory_predict.h"
#include "kernels/cpu/threads.h"
#include "models/registry.h"

#include "bench/bench_cli.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// (count per class, size): 2 classes, the class in the top half's brightness.
void make_folder(const std::string& root) {
  const int plan[][2] = {{50, 64}, {10, 96}, {6, 128}, {3, 192}, {2, 256}, {1, 384}, {1, 512}};
  uint32_t state = 7;
  for (int k = 0; k < 2; ++k) {
    const fs::path dir = fs::path(root) / ("class" + std::to_string(k));
    fs::create_directories(dir);
    int i = 0;
    for (const auto& p : plan)
      for (int n = 0; n < p[0]; ++n) {
        Image im;
        im.w = p[1] + (i % 3 == 1 ? p[1] / 4 : 0);
        im.h = p[1];
        im.c = 3;
        im.px.resize((size_t)im.w * im.h * 3);
        for (int y = 0; y < im.h; ++y)
          for (int x = 0; x < im.w * 3; ++x) {
            state = state * 1664525u + 1013904223u;
            im.px[(size_t)y * im.w * 3 + x] = (uint8_t)((y < im.h / 2 ? 60 + 120 * k : 40) + (int)(state >> 27));
          }
        write_jpeg((dir / (std::to_string(i++) + ".jpg")).string(), im, 90);
      }
  }
}

struct Run {
  double images_per_s = 0;
  int64_t peak = 0;
};

Run train_epoch(const std::string& model_name, BucketedImageSource& src, const std::vector<int64_t>& batches) {
  src.set_batches(batches);
  manual_seed(1);
  nn::ModulePtr model = models::make_model(model_name, 2, 3, src.image_size(0));
  model->train();
  optim::SGDOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  optim::SGD opt(model->named_parameters(), so);
  optim::LossScaler scaler(optim::LossScalerOptions{}, Device::cpu());
  train::FitOptions fo;
  fo.epochs = 1;
  fo.batch = 1;  // unused: the source plans its batches
  fo.watch_memory = false;
  reset_peak_memory(Device::cpu());
  const train::FitResult r = train::fit(*model, opt, scaler, src, nullptr, fo);
  return {r.epochs.back().images_per_s, peak_memory_bytes(Device::cpu())};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_batch_memory: --batch-memory (a batch per size bucket sized by predicted memory) against a "
               "fixed batch (the one the largest images need), same data, same budget, same run"};
  app.name("bench_batch_memory");
  std::string model = "resnet18", budget_text = "300M";
  int runs = 3, threads = 0, workers = 2;
  app.add_option("--model", model, "model name")->capture_default_str();
  app.add_option("--budget", budget_text, "memory budget (bytes, e.g. 300M)")->capture_default_str();
  app.add_option("--runs", runs, "alternating runs of each (median kept)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (default: all cores)")->check(CLI::PositiveNumber);
  app.add_option("--workers", workers, "loader threads")->check(CLI::PositiveNumber)->capture_default_str();
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  try {
    if (threads > 0) cpu::set_num_threads(threads);
    const int64_t budget = (int64_t)parse_bytes(budget_text);
    const std::string root = (fs::temp_directory_path() / ("kiln_bench_batch_memory_" + std::to_string(getpid()))).string();
    make_folder(root + "/data");
    ImageDataOptions o;
    o.data = root + "/data";
    o.image.workers = workers;
    o.seed = 3;
    TrainData data = open_bucketed_image_train_data(o, Device::cpu());
    auto& src = static_cast<BucketedImageSource&>(*data.train);
    // The largest batch per bucket whose predicted peak allocated fits (meta-device steps).
    std::vector<int64_t> by_memory;
    for (const SizeBucket& b : src.buckets()) {
      auto peak_of = [&](int64_t batch) -> int64_t {
        if (batch > (int64_t)b.members.size()) return INT64_MAX;  // no batch beyond the bucket's images
        train::PredictOptions p;
        p.batch = batch;
        p.input_shape = {3, b.size, b.size};
        return train::predict_step_memory(
                   [&] {
                     nn::init::SkipRandomInitGuard structure_only;
                     return models::make_model(model, 2, 3, b.size);
                   },
                   [&](nn::Module& m) {
                     optim::SGDOptions so;
                     so.lr = 0.01;
                     so.momentum = 0.9;
                     return std::make_unique<optim::SGD>(m.named_parameters(), so);
                   },
                   p)
            .peak_allocated;
      };
      const int64_t batch = train::max_batch_for_budget(peak_of, budget, 0.0).batch;
      if (batch < 1) {
        std::fprintf(stderr, "bench_batch_memory: one %d px image does not fit %s\n", b.size, budget_text.c_str());
        return 1;
      }
      by_memory.push_back(batch);
    }
    const std::vector<int64_t> fixed(by_memory.size(), by_memory.back());  // the largest images' batch
    set_device_memory_limit(Device::cpu(), (size_t)(budget + budget / 4));
    std::string plan;
    for (size_t k = 0; k < by_memory.size(); ++k)
      plan += str_cat(k ? " " : "", src.buckets()[k].size, "px:", by_memory[k], "/", src.buckets()[k].members.size());
    std::printf("data: %lld images; buckets size:batch/images: %s\n", (long long)src.size(), plan.c_str());
    std::vector<double> a, b;
    int64_t peak_a = 0, peak_b = 0;
    train_epoch(model, src, by_memory);  // warm-up (decoder, allocator cache)
    for (int r = 0; r < runs; ++r) {
      const Run ra = train_epoch(model, src, by_memory), rb = train_epoch(model, src, fixed);
      a.push_back(ra.images_per_s);
      b.push_back(rb.images_per_s);
      peak_a = std::max(peak_a, ra.peak);
      peak_b = std::max(peak_b, rb.peak);
      std::printf("run %d: batch-memory %.1f img/s, fixed batch %lld %.1f img/s\n", r + 1, ra.images_per_s,
                  (long long)fixed[0], rb.images_per_s);
    }
    char pa[32], pb[32], bb[32];
    std::printf("bench_batch_memory %s cpu %d threads, budget %s: --batch-memory %.1f img/s (peak %s), fixed batch "
                "%lld %.1f img/s (peak %s); ratio %.2fx (medians of %d runs)\n",
                model.c_str(), cpu::num_threads(), format_bytes(budget, bb, sizeof bb), median(a),
                format_bytes(peak_a, pa, sizeof pa), (long long)fixed[0], median(b), format_bytes(peak_b, pb, sizeof pb),
                median(a) / std::max(median(b), 1e-9), runs);
    fs::remove_all(root);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_batch_memory: error: %s\n", e.what());
    return 1;
  }
  return 0;
  });
}
