// `kiln train` / `kiln predict` end to end on a tiny npy data set (16 samples, 8x8, small_cnn):
// 2 epochs straight vs 1 epoch + --resume 1 epoch give identical weights (SGD momentum, step
// schedule and dropout make optimizer state, schedule and RNG matter); runs.jsonl lines carry the
// configuration and results; --batch N on N samples is one optimizer step; predict writes one CSV
// row per sample whose predicted class is the argmax of its logits.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;

namespace {

// One end record a run (start, curve and epoch records are left out).
std::vector<nlohmann::json> read_ledger(const std::string& path) { return kiln_test::ledger_end_records(path); }

const std::string& data_dir() {
  static const std::string d = [] {
    std::string p = kiln_test::cli_temp_dir("train_data");
    kiln_test::make_npy_folder(p, 16, 1, 8, 2);
    return p;
  }();
  return d;
}

std::string train_args(const std::string& out, int epochs) {
  return "train --model small_cnn --data " + data_dir() + " --epochs " + std::to_string(epochs) +
         " --batch 6 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule step:1:0.5 --seed 11 --threads 1 "
         "--device cpu --out " +
         out;
}

}  // namespace

TEST_CASE("cli train: resume ends with the same weights as an uninterrupted run") {
  const std::string a = kiln_test::cli_temp_dir("resume_a"), b = kiln_test::cli_temp_dir("resume_b");
  auto ra = run_kiln(train_args(a, 2) + " --save " + a + "/w.safetensors");
  REQUIRE_MESSAGE(ra.status == 0, ra.output);
  CHECK(contains(ra.output, "epoch 2/2"));
  auto rb1 = run_kiln(train_args(b, 1));
  REQUIRE_MESSAGE(rb1.status == 0, rb1.output);
  auto rb2 = run_kiln(train_args(b, 2) + " --resume " + b + "/checkpoint.safetensors --save " + b + "/w.safetensors");
  REQUIRE_MESSAGE(rb2.status == 0, rb2.output);
  CHECK(contains(rb2.output, "resume:"));
  CHECK(!contains(rb2.output, "epoch 1/2"));

  kiln::SafetensorsFile wa = kiln::read_safetensors(a + "/w.safetensors");
  kiln::SafetensorsFile wb = kiln::read_safetensors(b + "/w.safetensors");
  REQUIRE(wa.tensors.size() == wb.tensors.size());
  CHECK(wa.find("conv1.weight") != nullptr);
  CHECK(wa.find("bn1.running_mean") != nullptr);
  for (size_t i = 0; i < wa.tensors.size(); ++i) {
    CHECK(wa.tensors[i].name == wb.tensors[i].name);
    CHECK_MESSAGE(wa.tensors[i].array.bytes == wb.tensors[i].array.bytes, wa.tensors[i].name);
  }
  // ... and a run that does not restore everything would differ: 1 epoch from scratch != 2 epochs.
  kiln::SafetensorsFile ckb = kiln::read_safetensors(b + "/checkpoint.safetensors");
  CHECK(ckb.metadata.at("epoch") == "2");
  CHECK(ckb.metadata.at("format") == "kiln-checkpoint-1");
  CHECK(ckb.find("optim.step") != nullptr);
  CHECK(ckb.at("model.conv1.weight").bytes == wa.at("conv1.weight").bytes);

  auto la = read_ledger(a + "/runs.jsonl");
  auto lb = read_ledger(b + "/runs.jsonl");
  REQUIRE(la.size() == 1);
  REQUIRE(lb.size() == 2);
  CHECK(la[0]["config"]["model"] == "small_cnn");
  CHECK(la[0]["config"]["epochs"] == 2);
  CHECK(la[0]["config"]["batch"] == 6);
  CHECK(la[0]["config"]["lr"] == 0.05);
  CHECK(la[0]["config"]["num_classes"] == 2);
  CHECK(la[0]["steps"] == 6);  // ceil(16 / 6) = 3 steps per epoch
  CHECK(la[0]["epochs"].size() == 2);
  CHECK(la[0]["wall_s"].get<double>() > 0);
  CHECK(la[0]["images_per_s"].get<double>() > 0);
  CHECK(la[0]["final_train_acc"].is_number());
  CHECK(la[0]["final_val_acc"].is_null());
  CHECK(la[0].contains("peak_memory_bytes"));
  CHECK(lb[1]["start_epoch"] == 1);
  CHECK(lb[1]["epochs"].size() == 1);
  CHECK(lb[1]["final_train_loss"] == la[0]["final_train_loss"]);
}

TEST_CASE("cli train: --batch N on N samples is one step, --val and --accum, predict") {
  const std::string o = kiln_test::cli_temp_dir("one_step");
  auto r = run_kiln("train --model small_cnn --data " + data_dir() + " --val " + data_dir() +
                    " --epochs 1 --batch 16 --accum 3 --optimizer adamw --lr 0.001 --clip 1.0 --warmup 2 "
                    "--class-weights 1,2 --threads 1 --out " +
                    o + " --save " + o + "/w.safetensors");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  auto l = read_ledger(o + "/runs.jsonl");
  REQUIRE(l.size() == 1);
  CHECK(l[0]["steps"] == 1);
  CHECK(l[0]["final_val_acc"].is_number());
  CHECK(l[0]["config"]["accum"] == 3);
  CHECK(l[0]["config"]["optimizer"] == "adamw");
  CHECK(l[0]["config"]["weight_decay"] == 0.01);

  const std::string csv = o + "/preds.csv";
  auto p = run_kiln("predict --model small_cnn --weights " + o + "/w.safetensors --data " + data_dir() +
                    " --out " + csv + " --threads 1");
  REQUIRE_MESSAGE(p.status == 0, p.output);
  std::ifstream f(csv);
  std::string line;
  std::getline(f, line);
  CHECK(line == "index,label,predicted,label_name,predicted_name,logit_0,logit_1");
  int rows = 0;
  while (std::getline(f, line)) {
    std::stringstream ss(line);
    std::string cell;
    std::vector<std::string> cells;
    while (std::getline(ss, cell, ',')) cells.push_back(cell);
    REQUIRE(cells.size() == 7);
    CHECK(std::stoi(cells[0]) == rows);
    const double l0 = std::stod(cells[5]), l1 = std::stod(cells[6]);
    CHECK(std::stoi(cells[2]) == (l1 > l0 ? 1 : 0));
    CHECK(cells[3] == cells[1]);  // npy data: a class's name is its index
    CHECK(cells[4] == cells[2]);
    ++rows;
  }
  CHECK(rows == 16);
}
