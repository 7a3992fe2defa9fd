// `kiln train --batch-memory` refusals, each one line before any training step, on a tiny generated
// folder of JPEGs at 64, 96 and 512 px: a fixed-size model (small_cnn, a model file: each takes the one
// size it is built for), a budget that one image of the largest bucket does not fit (naming the size and
// the budget), --batch beside it, a malformed budget, --accum, and IDX data. Training under the budget
// is the slow test tests/slow/test_batch_memory_cli.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "data/jpeg_encode.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;
namespace fs = std::filesystem;

namespace {

// A model file: its linear layer is sized for the one input size the file is built for.
const char* kFixedNet = R"({
  "format": "kiln-model-1",
  "layers": [
    {"name": "conv1", "type": "conv2d", "out_channels": 4, "kernel": 3, "stride": 4, "padding": 1},
    {"name": "flatten", "type": "flatten"},
    {"name": "fc", "type": "linear", "out_features": "num_classes"}
  ]
})";

}  // namespace

TEST_CASE("kiln train --batch-memory refuses fixed-size models, a budget one largest image does not fit, and "
          "flags it cannot honour, before training") {
  const std::string base = kiln_test::cli_temp_dir("batch_memory_refusals");
  const std::string data = base + "/data", fixed = base + "/fixed.json", out = base + "/out";
  for (int k = 0; k < 2; ++k) {
    const fs::path dir = fs::path(data) / ("class" + std::to_string(k));
    fs::create_directories(dir);
    int i = 0;
    for (int s : {64, 96, 512}) {
      kiln::Image im;
      im.w = im.h = s;
      im.c = 3;
      im.px.assign((size_t)s * s * 3, (uint8_t)(60 + 100 * k));
      kiln::write_jpeg((dir / (std::to_string(i++) + ".jpg")).string(), im, 90);
    }
  }
  std::ofstream(fixed) << kFixedNet;
  auto train = [&](const std::string& model, const std::string& extra) {
    return run_kiln("train --model " + model + " --data " + data + " --epochs 1 --threads 1 --device cpu --out " + out +
                    " " + extra);
  };
  for (const std::string& model : {std::string("small_cnn"), fixed}) {
    CAPTURE(model);
    const auto r = train(model, "--batch-memory 300M");
    CHECK(r.status == 1);
    CHECK(contains(r.output, "--batch-memory: model " + model + " does not take 96x96 px inputs (built for 64x64)"));
    CHECK(contains(r.output, "fully convolutional or end in adaptive pooling"));
    CHECK(!contains(r.output, "epoch 1/"));
  }
  // resnet18's one 512 px image predicts about 246 MiB (params, gradients and momentum alone 128 MiB).
  const auto tight = train("resnet18", "--batch-memory 100M --momentum 0.9");
  CHECK(tight.status == 1);
  CHECK(contains(tight.output, "--batch-memory 100M: one 512x512 px image (the largest size bucket) does not fit: its "
                               "predicted peak allocated is "));
  CHECK(contains(tight.output, "against the budget of 100.0 MiB (104857600 bytes)"));
  CHECK(!contains(tight.output, "epoch 1/"));
  // The refusal is recorded in the ledger like any refused run.
  CHECK(contains(kiln_test::last_ledger_line(out + "/runs.jsonl").dump(), "does not fit"));

  CHECK(contains(train("resnet18", "--batch-memory 300M --batch 8").output, "--batch excludes --batch-memory"));
  CHECK(contains(train("resnet18", "--batch-memory 12Q").output, "--batch-memory 12Q: parse_bytes: unknown unit"));
  CHECK(contains(train("resnet18", "--batch-memory 300M --accum 2").output, "--batch-memory: --accum 2 is refused"));
  const std::string npy = kiln_test::cli_temp_dir("batch_memory_refusals_npy");
  kiln_test::make_npy_folder(npy, 8, 1, 8, 2);
  const auto arrays = run_kiln("train --model resnet18 --data " + npy + " --batch-memory 300M --device cpu --out " + out);
  CHECK(arrays.status == 2);
  CHECK(contains(arrays.output, "batches sized by memory are for image folders and CSV lists of mixed sizes"));
}
