// train::fit's loader habits and the renamed flags: drop_last drops the short last batch (10
// samples at batch 4: 2 steps of 4, not 3 with a last batch of 2), a resumed fit continues the
// step count, and `--recompute N` is `--checkpoint N` (the old spelling) for `kiln mem`.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "data/array_source.h"
#include "engine/optim/sgd.h"
#include "engine/train/fit.h"
#include "models/registry.h"
#include "support/cli/run_kiln.h"

using namespace kiln;

namespace {

std::unique_ptr<DataSource> ten_samples() {
  ArrayDataset d;
  d.n = 10;
  d.channels = 1;
  d.height = d.width = 8;
  for (int64_t i = 0; i < 10 * 64; ++i) d.images.push_back((float)((i * 13) % 7) / 3.0f - 1.0f);
  for (int64_t i = 0; i < 10; ++i) d.labels.push_back(i % 2);
  d.source = "ten";
  return make_array_source(std::move(d), 0, Device::cpu());
}

}  // namespace

TEST_CASE("fit: drop_last drops the short last batch, without it every sample is used") {
  CHECK(train::steps_per_epoch(10, 4, false) == 3);
  CHECK(train::steps_per_epoch(10, 4, true) == 2);
  CHECK(train::steps_per_epoch(8, 4, true) == 2);
  for (bool drop : {false, true}) {
    CAPTURE(drop);
    auto src = ten_samples();
    nn::ModulePtr model = models::make_model("small_cnn", 2, 1, 8);
    optim::SGD opt(model->named_parameters(), optim::SGDOptions{0.01, 0.0});
    optim::LossScalerOptions off;
    off.enabled = false;
    optim::LossScaler scaler(off);
    std::vector<int64_t> rows;
    int64_t seen = 0;
    train::FitOptions fo;
    fo.epochs = 2;
    fo.batch = 4;
    fo.drop_last = drop;
    fo.step.accum = 3;  // the short batch of 2 rows gets 2 micro-batches, not 3
    fo.step.hooks.after_backward = [&](const train::MicroBatch& b) { rows.push_back(b.size); };
    fo.callbacks.on_step_end = [&](const train::FitStep& s) { seen = s.seen; };
    const train::FitResult r = train::fit(*model, opt, scaler, *src, nullptr, fo);
    REQUIRE(r.epochs.size() == 2);
    CHECK(r.steps == (drop ? 4 : 6));
    CHECK(r.epochs[0].steps == (drop ? 2 : 3));
    CHECK(seen == (drop ? 8 : 10));
    const std::vector<int64_t> per_epoch = drop ? std::vector<int64_t>{2, 2, 2, 2}  // 4 rows as 2+2 (micro 2)
                                                : std::vector<int64_t>{2, 2, 2, 2, 1, 1};
    CHECK(std::vector<int64_t>(rows.begin(), rows.begin() + (long)per_epoch.size()) == per_epoch);
    // A resumed fit (epoch 1 done, its steps counted) runs the second epoch only.
    fo.start_epoch = 1;
    fo.start_step = r.epochs[0].steps;
    const train::FitResult resumed = train::fit(*model, opt, scaler, *src, nullptr, fo);
    CHECK(resumed.epochs.size() == 1);
    CHECK(resumed.epochs[0].epoch == 2);
    CHECK(resumed.steps == r.steps);
  }
}

TEST_CASE("kiln mem: --recompute N is the old --checkpoint N") {
  auto a = kiln_test::run_kiln("mem --model small_cnn --batch 8 --image-size 16 --recompute 2 --json");
  auto b = kiln_test::run_kiln("mem --model small_cnn --batch 8 --image-size 16 --checkpoint 2 --json");
  auto c = kiln_test::run_kiln("mem --model small_cnn --batch 8 --image-size 16 --json");
  REQUIRE_MESSAGE(a.status == 0, a.output);
  REQUIRE_MESSAGE(b.status == 0, b.output);
  REQUIRE_MESSAGE(c.status == 0, c.output);
  const auto ja = nlohmann::json::parse(a.output), jb = nlohmann::json::parse(b.output),
             jc = nlohmann::json::parse(c.output);
  CHECK(ja["checkpoint"] == 2);
  CHECK(ja["peak_allocated"] == jb["peak_allocated"]);
  CHECK(ja["activations"].get<int64_t>() < jc["activations"].get<int64_t>());  // recompute keeps fewer
}
