// `kiln predict` of a segmentation model, flag-free from the weights' model card (task segment):
// one <stem>_mask.png (palette PNG, its indices the classes) and one <stem>_overlay.png (input |
// overlay, 2W x H) per image, of the model's input size, and summary.json; the mask's classes are
// the argmax of the model's output computed here in-process, and the metrics against the npy
// masks are those the training run's last validation reported. --task classify is refused.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "data/decode.h"
#include "data/mask_array_source.h"
#include "data/png_io.h"
#include "engine/autograd/grad_mode.h"
#include "engine/io/tensor_io.h"
#include "engine/ops/ops.h"
#include "engine/train/train_state.h"
#include "kernels/cpu/threads.h"
#include "models/registry.h"
#include "support/cli/run_kiln.h"
#include "support/cli/segment_data.h"

using kiln_test::contains;
using kiln_test::run_kiln;
namespace fs = std::filesystem;

TEST_CASE("cli segment predict: mask and overlay PNGs whose classes are the model's argmax, summary metrics") {
  const std::string dir = kiln_test::cli_temp_dir("segment_predict");
  const std::string train = dir + "/train", val = dir + "/val", out = dir + "/run", pred = dir + "/pred";
  fs::create_directories(train);
  fs::create_directories(val);
  kiln_test::make_segment_npy_folder(train, 48, 16, 7);
  kiln_test::make_segment_npy_folder(val, 16, 16, 99);
  const std::string model = kiln_test::write_segment_model_file(dir, 16), weights = dir + "/w.safetensors";
  auto tr = run_kiln("train --task segment --model " + model + " --data " + train + " --val " + val +
                     " --epochs 6 --batch 8 --optimizer adamw --lr 0.01 --seed 3 --threads 1 --device cpu --out " + out +
                     " --save " + weights);
  REQUIRE_MESSAGE(tr.status == 0, tr.output);
  const nlohmann::json ledger = kiln_test::last_ledger_line(out + "/runs.jsonl");

  auto p = run_kiln("predict --weights " + weights + " --data " + val + " --out " + pred + " --threads 1 --batch 8");
  REQUIRE_MESSAGE(p.status == 0, p.output);
  CHECK(contains(p.output, "predict: 16 images from"));
  CHECK(contains(p.output, "against the data's masks: pixel accuracy"));

  // The model's own argmax, in this process, from the same weights and the same arrays.
  kiln::MaskArrayDataset d = kiln::read_mask_npy_folder(val);
  kiln::nn::ModulePtr m = kiln::models::make_model(model, 3, 1, 16);
  kiln::WeightsFile wf = kiln::read_weights(weights);
  kiln::NamedTensors state;
  for (const kiln::NamedArray& a : wf.tensors) state.emplace_back(a.name, kiln::from_host_array(a.array, kiln::Device::cpu()));
  m->load_state_dict(state, true);
  m->eval();
  kiln::NoGradGuard no_grad;
  // Batches of 8 on one thread, as predict and the training run's validation computed them (the
  // same GEMMs: no rounding difference can move an argmax).
  const int threads = kiln::cpu::num_threads();
  kiln::cpu::set_num_threads(1);
  const kiln::Tensor x = kiln::tensor_from(d.images, {16, 1, 16, 16});
  const kiln::Tensor cls = kiln::cat({kiln::argmax((*m)(kiln::narrow(x, 0, 0, 8)), 1),
                                      kiln::argmax((*m)(kiln::narrow(x, 0, 8, 8)), 1)});
  kiln::cpu::set_num_threads(threads);
  const std::vector<int64_t> want = cls.to_vector<int64_t>();
  int64_t non_background = 0;
  for (int64_t i = 0; i < 16; ++i) {
    char stem[32];
    std::snprintf(stem, sizeof stem, "sample_%05lld", (long long)i);
    const kiln::Image mask = kiln::read_png_mask(pred + "/" + stem + "_mask.png");
    REQUIRE(mask.w == 16);
    REQUIRE(mask.h == 16);
    CHECK(mask.mode == "P");
    for (int64_t q = 0; q < 256; ++q) {
      CHECK(mask.px[(size_t)q] == want[(size_t)(i * 256 + q)]);
      non_background += mask.px[(size_t)q] != 0;
    }
    const kiln::Image ov = kiln::decode_image(pred + "/" + stem + "_overlay.png");
    CHECK(ov.w == 32);
    CHECK(ov.h == 16);
  }
  CHECK(non_background > 16 * 20);  // the trained model does predict the squares
  std::ifstream f(pred + "/summary.json");
  const nlohmann::json s = nlohmann::json::parse(f);
  REQUIRE(s["images"].size() == 16);
  CHECK(s["num_classes"] == 3);
  // The same model on the same validation arrays: the training run's last validation numbers.
  const nlohmann::json& last = ledger["epochs"].back();
  CHECK(s["metrics"]["mean_iou"] == last["val_miou"]);
  CHECK(s["metrics"]["pixel_accuracy"] == last["val_pixel_acc"]);
  CHECK(s["metrics"]["dice"] == last["val_dice"]);

  // The card says segment: --task classify contradicts it.
  auto cls_run = run_kiln("predict --task classify --weights " + weights + " --data " + val + " --out " + dir + "/p.csv");
  CHECK(cls_run.status == 1);
  CHECK_MESSAGE(contains(cls_run.output, "--task classify (the weights hold a segment model)"), cls_run.output);
  // A file where the folder goes.
  std::ofstream(dir + "/file") << "x";
  auto file_out = run_kiln("predict --weights " + weights + " --data " + val + " --out " + dir + "/file");
  CHECK(file_out.status == 1);
  CHECK(contains(file_out.output, "is a file; give a folder"));
}

TEST_CASE("cli segment: --loss dice and ce+dice train (mem predicts them exactly), unet_small trains, unet needs --task segment") {
  const std::string dir = kiln_test::cli_temp_dir("segment_losses");
  const std::string train = dir + "/train", val = dir + "/val";
  fs::create_directories(train);
  fs::create_directories(val);
  kiln_test::make_segment_npy_folder(train, 32, 16, 5);
  kiln_test::make_segment_npy_folder(val, 8, 16, 6);
  const std::string model = kiln_test::write_segment_model_file(dir, 16);
  for (const char* loss : {"dice", "ce+dice"}) {
    CAPTURE(loss);
    const std::string out = dir + "/" + std::string(loss == std::string("dice") ? "dice" : "cedice");
    auto r = run_kiln("train --task segment --loss " + std::string(loss) + " --model " + model + " --data " + train +
                      " --val " + val + " --epochs 2 --batch 8 --optimizer adamw --lr 0.01 --threads 1 --device cpu --out " +
                      out);
    REQUIRE_MESSAGE(r.status == 0, r.output);
    const nlohmann::json end = kiln_test::last_ledger_line(out + "/runs.jsonl");
    CHECK(end["config"]["loss"] == loss);
    CHECK(end["memory"]["predicted"]["peak_allocated"] == end["memory"]["measured_epochs"][0]["measured_peak_allocated"]);
    CHECK(end["epochs"][1]["val_miou"].is_number());
  }
  const std::string out = dir + "/unet";
  auto u = run_kiln("train --task segment --model unet_small --data " + train + " --val " + val +
                    " --epochs 1 --batch 8 --threads 1 --device cpu --out " + out + " --num-classes 3");
  REQUIRE_MESSAGE(u.status == 0, u.output);
  CHECK(contains(u.output, "(task segment)"));
  auto cls = run_kiln("train --model unet_small --data " + train + " --epochs 1 --out " + out);
  CHECK(cls.status == 2);
  CHECK_MESSAGE(contains(cls.output, "--model unet_small is a segmentation model (per-pixel outputs): pass --task segment"),
                cls.output);
}
