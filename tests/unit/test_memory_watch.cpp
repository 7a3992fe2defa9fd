// MemoryWatch, the leak watch: a loop that keeps every step's loss tensor in a list is reported
// within 10 steps, naming the tag, the module path and the bytes per step; the same loop without
// the list never is; the warm-up and a batch-shape change restart the watch; and train::fit's
// watch reports a leak made by a callback.
#include <doctest/doctest.h>

#include <optional>
#include <vector>

#include "data/array_source.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/ops.h"
#include "engine/optim/sgd.h"
#include "engine/train/fit.h"
#include "engine/train/memory_watch.h"
#include "models/registry.h"

using namespace kiln;

namespace {

struct Loop {
  nn::ModulePtr model = models::make_model("small_cnn", 3, 1, 8);
  optim::SGD opt{model->named_parameters(), optim::SGDOptions{0.01, 0.9}};
  optim::LossScaler scaler{[] {
    optim::LossScalerOptions o;
    o.enabled = false;
    return o;
  }()};
  Tensor x = randn({6, 1, 8, 8}), y = tensor_from(std::vector<int64_t>{0, 1, 2, 0, 1, 2}, {6});

  std::vector<Tensor> kept;  // the leak: every step's loss (kept across run() calls)

  // Runs `steps` steps (batch `rows`); keep_losses: the classic leak.
  std::optional<train::MemoryGrowth> run(train::MemoryWatch& w, int steps, bool keep_losses, int64_t rows = 6,
                                         int* fired_at = nullptr) {
    std::optional<train::MemoryGrowth> found;
    train::StepOptions so;
    so.hooks.after_backward = [&](const train::MicroBatch& b) {
      if (keep_losses) kept.push_back(b.loss);
    };
    for (int s = 0; s < steps; ++s) {
      train::train_step(*model, opt, scaler, Batch{narrow(x, 0, 0, rows), narrow(y, 0, 0, rows)}, so);
      if (auto g = w.observe(rows)) {
        if (!found && fired_at) *fired_at = s + 1;
        found = g;
      }
    }
    return found;
  }
};

}  // namespace

TEST_CASE("memory watch: a loop that keeps every loss is reported within 10 steps, a clean one never") {
  if (!caching_allocator_for(Device::cpu())) return;  // nothing to watch in this build
  Loop loop;
  SUBCASE("leaking") {
    train::MemoryWatch w(Device::cpu());
    int at = 0;
    auto g = loop.run(w, 10, true, 6, &at);
    REQUIRE(g.has_value());
    MESSAGE(g->message());
    CHECK(at <= 10);
    CHECK(at == 2 + 4 + 1);  // 2 warm-up steps, then 4 growing steps after a first judged one
    CHECK(g->tag == "temporary");  // the loss is computed under the step's temporary scope
    CHECK(g->module == "(top level)");
    CHECK(g->bytes_per_step == 512);  // one small block (a 1-element f32 loss) per step
    CHECK(g->total_per_step == 512);
    CHECK(g->message().find("512 bytes per step") != std::string::npos);
  }
  SUBCASE("clean") {
    train::MemoryWatch w(Device::cpu());
    CHECK_FALSE(loop.run(w, 20, false).has_value());
  }
  SUBCASE("warm-up: growth only in the first steps is not judged") {
    train::MemoryWatchOptions o;
    o.warmup_steps = 12;
    train::MemoryWatch w(Device::cpu(), o);
    CHECK_FALSE(loop.run(w, 12, true).has_value());
  }
  SUBCASE("a batch change restarts the watch") {
    train::MemoryWatch w(Device::cpu());
    // Leak for 5 steps at batch 6, then at batch 4: neither run reaches 2 + 5 observations.
    CHECK_FALSE(loop.run(w, 5, true, 6).has_value());
    CHECK_FALSE(loop.run(w, 6, true, 4).has_value());
    CHECK(loop.run(w, 2, true, 4).has_value());  // the same shape long enough: reported
  }
}

TEST_CASE("memory watch: train::fit reports a leak made in a callback") {
  if (!caching_allocator_for(Device::cpu())) return;
  ArrayDataset d;
  d.n = 48;
  d.channels = 1;
  d.height = d.width = 8;
  for (int64_t i = 0; i < 48 * 64; ++i) d.images.push_back((float)((i * 37) % 17) / 8.0f - 1.0f);
  for (int64_t i = 0; i < 48; ++i) d.labels.push_back(i % 3);
  d.source = "test";
  auto src = make_array_source(std::move(d), 0, Device::cpu());
  Loop loop;
  std::vector<Tensor> kept;
  std::vector<train::MemoryGrowth> growth;
  train::FitOptions fo;
  fo.epochs = 1;
  fo.batch = 4;  // 12 steps
  fo.step.hooks.after_backward = [&](const train::MicroBatch& b) { kept.push_back(b.output); };
  fo.callbacks.on_memory_growth = [&](const train::MemoryGrowth& g) { growth.push_back(g); };
  train::fit(*loop.model, loop.opt, loop.scaler, *src, nullptr, fo);
  REQUIRE(growth.size() == 1);
  MESSAGE(growth[0].message());
  CHECK(!growth[0].tag.empty());
  CHECK(growth[0].module == "fc2");  // the kept logits are fc2's output
  CHECK(growth[0].bytes_per_step == 512);
  kept.clear();
  growth.clear();
  fo.step.hooks.after_backward = nullptr;
  train::fit(*loop.model, loop.opt, loop.scaler, *src, nullptr, fo);
  CHECK(growth.empty());
}
