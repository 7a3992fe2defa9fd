// `kiln train --batch-memory` end to end (tools/batch_memory.h) on a generated folder of JPEGs from
// 64 to 512 px (most of them small, some non-square) with resnet18 on the CPU:
// - trains under a tight --device-memory with no OOM; every step's measured peak allocated is within
//   the budget and within 2% of its meta-device prediction (the run ledger's batch_memory record);
//   bigger batches for smaller images; the samples per step are a distribution; a run killed
//   mid-epoch resumes to the uninterrupted run's weights, byte for byte;
// The refusals before training are unit tests (tests/unit/test_cli_batch_memory.cpp).
// Slow (about a minute on 2 cores): resnet18 steps on images up to 512 px.
#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "data/jpeg_encode.h"
#include "engine/io/safetensors.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;
namespace fs = std::filesystem;

namespace {

// root/class0, root/class1: JPEGs whose class is the brightness of the top half, from 64 to 512 px
// (most of them small, every third one a third wider than tall: the shorter side decides the bucket).
struct Folder {
  std::string root;
  int64_t images = 0;
};
const Folder& folder() {
  static const Folder f = [] {
    Folder x;
    const std::string base = kiln_test::cli_temp_dir("batch_memory");
    x.root = base + "/data";
    std::vector<int> sizes(80, 64);  // per class: 80 at 64 px, then fewer and fewer up to 512 px
    for (int v : {70, 80, 96, 96, 100, 110, 128, 128, 140, 160, 192, 200, 256, 300, 384, 448, 512}) sizes.push_back(v);
    uint32_t state = 99;
    for (int k = 0; k < 2; ++k) {
      const fs::path dir = fs::path(x.root) / ("class" + std::to_string(k));
      fs::create_directories(dir);
      int i = 0;
      for (int s : sizes) {
        kiln::Image im;
        im.w = s + (i % 3 == 1 ? s / 3 : 0);  // every third image wider than tall
        im.h = s;
        im.c = 3;
        im.px.resize((size_t)im.w * im.h * 3);
        for (int y = 0; y < im.h; ++y)
          for (int xx = 0; xx < im.w * 3; ++xx) {
            state = state * 1664525u + 1013904223u;
            im.px[(size_t)y * im.w * 3 + xx] = (uint8_t)((y < im.h / 2 ? 60 + 120 * k : 40) + (int)(state >> 27));
          }
        kiln::write_jpeg((dir / (std::to_string(i++) + ".jpg")).string(), im, 90);
        ++x.images;
      }
    }
    return x;
  }();
  return f;
}

std::string args(const std::string& out, const std::string& model, const std::string& budget,
                 const std::string& extra = "") {
  const Folder& f = folder();
  return "train --model " + model + " --data " + f.root + " --batch-memory " + budget +
         " --device-memory 400M --epochs 1 --optimizer sgd --lr 0.05 --momentum 0.9 --seed 3 --threads 1 "
         "--workers 2 --device cpu --out " + out + " " + extra;
}

}  // namespace

TEST_CASE("kiln train --batch-memory: 64-512 px images under a tight --device-memory, every step within the budget "
          "and within 2% of its prediction, resumed mid-epoch to the same bytes") {
  const Folder& f = folder();
  const std::string dir = kiln_test::cli_temp_dir("batch_memory_run");
  const int64_t budget = 300 << 20;
  const auto run = run_kiln(args(dir, "resnet18", "300M", "--checkpoint-every 4steps --save " + dir + "/w.safetensors"));
  REQUIRE_MESSAGE(run.status == 0, run.output);
  CHECK(!contains(run.output, "out of memory"));
  CHECK(contains(run.output, "batch-memory: budget 300.0 MiB"));
  CHECK(contains(run.output, "not scaled with the batch"));
  CHECK(contains(run.output, "x 512px"));  // the progress line names each step's batch and size
  const nlohmann::json j = kiln_test::last_ledger_line(dir + "/runs.jsonl");
  const nlohmann::json& bm = j["batch_memory"];
  INFO(bm.dump(1));
  CHECK(bm["budget_bytes"] == budget);
  // Buckets ascending by size; batches never grow with the size, and the smallest images' batch
  // is several times the largest's.
  const nlohmann::json& bk = bm["buckets"];
  REQUIRE(bk.size() >= 8);
  CHECK(bk.front()["size"] == 64);
  CHECK(bk.back()["size"] == 512);
  int64_t steps_per_epoch = 0, prev_batch = INT64_MAX, full_steps = 0;
  for (const auto& b : bk) {
    const int64_t images = b["images"], batch = b["batch"];
    CHECK(batch >= 1);
    steps_per_epoch += (images + batch - 1) / batch;
    // A batch below its bucket's image count is the largest that fits: its prediction is within
    // the budget (the next size up was not, by the search).
    CHECK(b["predicted_peak_allocated"].get<int64_t>() <= budget);
    CHECK(b["predicted_peak_allocated_first_step"].get<int64_t>() <= budget);
    if (batch < images) {
      CHECK(batch <= prev_batch);
      prev_batch = batch;
    }
    full_steps += b["full_steps_measured"].get<int64_t>();
    if (b["full_steps_measured"].get<int64_t>() > 0) CHECK(b["measured_peak_allocated_max"].get<int64_t>() <= budget);
  }
  CHECK(bk.back()["batch"].get<int64_t>() <= 4);
  CHECK(bk.front()["batch"].get<int64_t>() < bk.front()["images"].get<int64_t>());  // 64 px: the budget decides
  CHECK(bk.front()["batch"].get<int64_t>() >= 4 * bk.back()["batch"].get<int64_t>());
  CHECK(j["steps"] == steps_per_epoch);
  CHECK(bm["steps"] == steps_per_epoch);
  CHECK(bm["steps_compared"] == steps_per_epoch);  // every step, short batches too (no bad samples)
  CHECK(full_steps > 0);
  CHECK(bm["max_measured_minus_budget"].get<int64_t>() <= 0);
  CHECK(bm["measured_vs_predicted_max"].get<double>() <= 0.02);
  CHECK(bm["measured_vs_predicted_min"].get<double>() >= -0.02);
  int64_t samples = 0, steps = 0;
  for (const auto& [n, count] : bm["samples_per_step"].items()) {
    samples += std::stoll(n) * count.get<int64_t>();
    steps += count.get<int64_t>();
  }
  CHECK(samples == f.images);
  CHECK(steps == steps_per_epoch);
  CHECK(bm["samples_per_step"].size() >= 3);  // a distribution, not one batch size

  // Killed half-way through writing its second state file, then resumed from the first (saved
  // mid-epoch after step 4): the same later batches, so the uninterrupted run's weights, byte for byte.
  const std::string dir2 = kiln_test::cli_temp_dir("batch_memory_resume");
  const int64_t state_bytes = (int64_t)fs::file_size(dir + "/checkpoint.safetensors");
  const auto killed = run_kiln(args(dir2, "resnet18", "300M", "--checkpoint-every 4steps"),
                               "KILN_TEST_KILL_WRITE_AT=" + std::to_string(state_bytes + state_bytes / 2));
  CHECK((killed.status == -1 || killed.status == 128 + 9));
  REQUIRE(kiln::read_safetensors(dir2 + "/checkpoint.safetensors").metadata.at("step") == "4");
  const auto resumed = run_kiln(args(dir2, "resnet18", "300M", "--checkpoint-every 4steps --resume " + dir2 +
                                                             "/checkpoint.safetensors --save " + dir2 + "/w.safetensors"));
  REQUIRE_MESSAGE(resumed.status == 0, resumed.output);
  CHECK(contains(resumed.output, "+ 4/" + std::to_string(steps_per_epoch) + " steps, step 4"));
  const kiln::SafetensorsFile a = kiln::read_safetensors(dir + "/w.safetensors"),
                              b = kiln::read_safetensors(dir2 + "/w.safetensors");
  REQUIRE(a.tensors.size() == b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) CHECK_MESSAGE(a.tensors[i].array.bytes == b.tensors[i].array.bytes, a.tensors[i].name);
}
