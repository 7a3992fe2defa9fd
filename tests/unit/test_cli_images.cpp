// `kiln train` / `kiln predict` / `kiln data` / `kiln export-images` on image folders and CSV lists,
// end to end through the built binary: train/ + val/ splits are found, a bad JPEG is skipped and
// reported exactly once (with its path and reason) without killing the run, --normalize auto
// prints the measured statistics, augmentation + balanced sampling stay deterministic for a seed,
// progressive resizing changes the input size, predict writes one row per image with its path,
// and malformed option values are one-line errors.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"
#include "data/image_options.h"

using kiln_test::contains;
using kiln_test::count_of;
using kiln_test::run_kiln;

namespace {

struct Folder {
  std::string root, bad;
};

const Folder& gray_folder() {
  static const Folder f = [] {
    Folder r;
    r.root = kiln_test::cli_temp_dir("images_gray");
    r.bad = kiln_test::make_image_folder(r.root, 2, 12, 16, 1, true);
    return r;
  }();
  return f;
}

nlohmann::json last_ledger(const std::string& out) {
  std::ifstream f(out + "/runs.jsonl");
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  return last.empty() ? nlohmann::json() : nlohmann::json::parse(last);
}

std::string base_args(const std::string& out, int workers = 2, int seed = 3) {
  return "train --model small_cnn --data " + gray_folder().root +
         " --channels 1 --epochs 2 --batch 8 --optimizer sgd --lr 0.05 --momentum 0.9 --threads 1 --seed " +
         std::to_string(seed) + " "
         "--device cpu --workers " + std::to_string(workers) + " --out " + out;
}

}  // namespace

TEST_CASE("cli images: a split image folder trains, a bad JPEG is skipped and reported once") {
  const std::string out = kiln_test::cli_temp_dir("images_train");
  auto r = run_kiln(base_args(out) + " --normalize auto --save " + out + "/w.safetensors");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "splits: train/ + val/"));
  CHECK(contains(r.output, "normalize auto: --normalize "));
  CHECK(contains(r.output, "image size 16"));
  // Two epochs, yet the bad file is reported once, with its path and a reason.
  CHECK_MESSAGE(count_of(r.output, "skipped bad sample " + gray_folder().bad + ": ") == 1, r.output);
  CHECK(contains(r.output, "epoch 2/2"));
  nlohmann::json j = last_ledger(out);
  REQUIRE(!j.is_null());
  CHECK(j["data"]["format"] == "images");
  CHECK(j["data"]["train_samples"] == 25);  // 24 good + the bad one (listed, then skipped)
  CHECK(j["data"]["val_samples"] == 12);
  CHECK(j["data"]["bad_samples"] == 1);
  CHECK(j["data"]["classes"].size() == 2);
  CHECK(j["final_val_acc"].get<double>() >= 0.0);

  // predict on the same folder: its val/ split, one row per image with its path.
  const std::string csv = out + "/pred.csv";
  auto p = run_kiln("predict --model small_cnn --weights " + out + "/w.safetensors --data " + gray_folder().root +
                    " --normalize auto --threads 1 --device cpu --out " + csv);
  REQUIRE_MESSAGE(p.status == 0, p.output);
  std::ifstream f(csv);
  std::string header, line;
  std::getline(f, header);
  CHECK(header.rfind("index,path,label,predicted,label_name,predicted_name,logit_0,logit_1", 0) == 0);
  int rows = 0;
  while (std::getline(f, line)) {
    CHECK(contains(line, "/val/class"));
    ++rows;
  }
  CHECK(rows == 12);
}

TEST_CASE("cli images: augmentation and balanced sampling are deterministic for a seed") {
  const std::string a = kiln_test::cli_temp_dir("images_det_a"), b = kiln_test::cli_temp_dir("images_det_b");
  const std::string extra = " --augment rrc:0.5 --balance --normalize 0.5:0.25";
  auto ra = run_kiln(base_args(a) + extra);
  auto rb = run_kiln(base_args(b, 1) + extra);
  REQUIRE_MESSAGE(ra.status == 0, ra.output);
  REQUIRE_MESSAGE(rb.status == 0, rb.output);
  const nlohmann::json ja = last_ledger(a), jb = last_ledger(b);
  CHECK(ja["final_train_loss"].get<double>() == jb["final_train_loss"].get<double>());
  CHECK(ja["config"]["image"]["augment"] == "rrc:0.5");
  CHECK(ja["config"]["image"]["balance"] == true);
  // A different seed gives a different run.
  const std::string c = kiln_test::cli_temp_dir("images_det_c");
  auto rc = run_kiln(base_args(c, 2, 4) + extra);
  REQUIRE_MESSAGE(rc.status == 0, rc.output);
  CHECK(last_ledger(c)["final_train_loss"].get<double>() != ja["final_train_loss"].get<double>());
}

TEST_CASE("cli images: --augment alone means rrc, a CSV list trains") {
  const std::string out = kiln_test::cli_temp_dir("images_csv");
  const std::string csv = out + "/list.csv";
  {
    std::ofstream f(csv);
    f << "path,label\n";
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < 6; ++i)
        f << gray_folder().root << "/train/class" << k << "/" << i << ".jpg," << k << "\n";
  }
  auto r = run_kiln("train --model small_cnn --data " + csv +
                    " --channels 1 --image-size 12 --augment --epochs 1 --batch 4 --threads 1 --device cpu --out " +
                    out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const nlohmann::json j = last_ledger(out);
  CHECK(j["config"]["image"]["augment"] == "rrc");
  CHECK(j["data"]["train_samples"] == 12);
  CHECK(contains(r.output, "(1x12x12)"));
}

TEST_CASE("cli images: progressive resizing") {
  const std::string out = kiln_test::cli_temp_dir("images_prog");
  auto bad = run_kiln(base_args(out) + " --image-size 12:1,16");
  CHECK(bad.status != 0);
  CHECK(contains(bad.output, "kiln: error: --image-size 12:1,16: small_cnn takes one input size"));
  auto r = run_kiln("train --model resnet18_small --data " + gray_folder().root +
                    " --channels 1 --image-size 12:1,16 --epochs 2 --batch 8 --threads 1 --device cpu --out " + out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "progressive resizing: 12:1,16"));
  // The start line gives each epoch's input shape (it once said "(1x16x16)" only: issue 34, item 8).
  CHECK(contains(r.output, " samples (1x12x12 for epoch 1, 1x16x16 for epoch 2)"));
  CHECK(contains(r.output, "epoch 2/2"));
  CHECK(last_ledger(out)["data"]["image_size"] == "12:1,16");
}

TEST_CASE("cli images: malformed options are one-line errors") {
  const std::string out = kiln_test::cli_temp_dir("images_bad_opts");
  for (const char* opt : {"--normalize 0.1,0.2", "--normalize 1:0", "--image-size 0", "--image-size 12:1",
                          "--augment wobble", "--crop diagonal", "--normalize 0.1,0.2,0.3:0.1,0.2,0.3"}) {
    auto r = run_kiln(base_args(out) + " " + opt);
    CHECK_MESSAGE(r.status != 0, opt);
    CHECK_MESSAGE(contains(r.output, "kiln: error: "), opt << ": " << r.output);
  }
  auto missing = run_kiln("train --model small_cnn --data /nonexistent/folder --device cpu --out " + out);
  CHECK(missing.status != 0);
  CHECK(contains(missing.output, "kiln: error: --data /nonexistent/folder: no such file or folder"));
}

TEST_CASE("cli images: --pin-memory without CUDA says it is a no-op, --device auto says why") {
  const std::string out = kiln_test::cli_temp_dir("images_pin");
  auto r = run_kiln("train --model small_cnn --data " + gray_folder().root +
                    " --channels 1 --epochs 1 --batch 8 --threads 1 --device auto --pin-memory --out " + out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "device auto: using "));
  if (contains(r.output, "device auto: using cpu")) {
    CHECK(contains(r.output, "device auto: using cpu (no usable GPU: "));
    CHECK(contains(r.output, "note: --pin-memory does nothing"));
  }
}

TEST_CASE("cli data: report on an image folder, exit 1 when it cannot be read") {
  const std::string out = kiln_test::cli_temp_dir("data_report");
  auto r = run_kiln("data " + gray_folder().root + " --out " + out + "/sheets");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "class0"));
  CHECK(contains(r.output, gray_folder().bad));
  CHECK(std::filesystem::exists(out + "/sheets"));
  auto bad = run_kiln("data /nonexistent/kiln/folder");
  CHECK(bad.status == 1);
  CHECK(contains(bad.output, "/nonexistent/kiln/folder"));
}

TEST_CASE("cli export-images: an npy data set becomes a JPEG folder that trains") {
  const std::string src = kiln_test::cli_temp_dir("export_src"), out = kiln_test::cli_temp_dir("export_out");
  kiln_test::make_npy_folder(src, 12, 1, 8, 3);
  auto r = run_kiln("export-images --data " + src + " --out " + out + "/jpg");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "12 train + 0 test images, 3 classes"));
  int files = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(out + "/jpg/train"))
    if (e.path().extension() == ".jpg") ++files;
  CHECK(files == 12);
  CHECK(std::filesystem::exists(out + "/jpg/train/2/000002.jpg"));
  auto again = run_kiln("export-images --data " + src + " --out " + out + "/jpg");
  CHECK(again.status == 0);
  CHECK(contains(again.output, "already holds a complete export"));
  auto t = run_kiln("train --model small_cnn --data " + out + "/jpg/train --channels 1 --epochs 1 --batch 4 "
                    "--threads 1 --device cpu --out " + out + "/run");
  CHECK_MESSAGE(t.status == 0, t.output);
}

TEST_CASE("image options: schedule and normalization parsing") {
  kiln::ImageSizeSchedule s = kiln::ImageSizeSchedule::parse("128:10,160:5,224");
  CHECK(s.at_epoch(0) == 128);
  CHECK(s.at_epoch(9) == 128);
  CHECK(s.at_epoch(10) == 160);
  CHECK(s.at_epoch(14) == 160);
  CHECK(s.at_epoch(15) == 224);
  CHECK(s.at_epoch(1000) == 224);
  CHECK(s.final_size() == 224);
  CHECK(s.str() == "128:10,160:5,224");
  CHECK(kiln::ImageSizeSchedule::parse("64").at_epoch(3) == 64);
  CHECK_THROWS(kiln::ImageSizeSchedule::parse("128:10"));
  CHECK_THROWS(kiln::ImageSizeSchedule::parse("128,224"));
  CHECK_THROWS(kiln::ImageSizeSchedule::parse("128:0,224"));
  CHECK_THROWS(kiln::ImageSizeSchedule::parse("abc"));

  float m[3], sd[3];
  kiln::Normalization::parse("imagenet").values(3, m, sd);
  CHECK(m[0] == doctest::Approx(0.485));
  CHECK(sd[2] == doctest::Approx(0.225));
  kiln::Normalization::parse("0.2860:0.3530").values(1, m, sd);
  CHECK(m[0] == doctest::Approx(0.286));
  CHECK(sd[0] == doctest::Approx(0.353));
  CHECK_THROWS(kiln::Normalization::parse("0.1,0.2,0.3:0.1,0.2,0.3").values(1, m, sd));
  CHECK_THROWS(kiln::Normalization::parse("0.5:-1"));
  CHECK_THROWS(kiln::Normalization::parse("bogus"));
  CHECK(kiln::Normalization::parse("auto").kind == kiln::Normalization::Kind::automatic);
}
