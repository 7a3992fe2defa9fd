// `kiln train` as a new user meets it (issue 14, "Found by trying it as a new user"): data sets
// that would train on the wrong thing are errors (a folder of split names without train/, one
// class, a CSV list none of whose files exists, --limit 0), range errors are short (no ~300-digit
// limits of double), and flags that would do nothing warn (adamw --momentum, a --warmup longer than
// the run), predict needs no targets in range, --init names a wrong architecture in one line, and kiln mem
// says when the image is too small for the model. Tiny data (16 npy images of 1x8x8, a few junk files).
#include <doctest/doctest.h>

#include "support/cli/run_kiln.h"

using namespace kiln_test;

namespace {

void write(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("cli new user: --lr 0, --epochs 0, --threads 0 say the range in a few words") {
  const std::string dir = cli_temp_dir("new_user_range");
  make_npy_folder(dir, 16, 1, 8, 2);
  for (const std::string flag : {"--lr 0", "--epochs 0", "--threads 0"}) {
    CAPTURE(flag);
    const CliRun r = run_kiln("train --model small_cnn --data " + dir + " --out " + dir + "/out " + flag);
    CAPTURE(r.output);
    CHECK(r.status != 0);
    CHECK(contains(r.output, "must be > 0, got "));
    CHECK_FALSE(contains(r.output, "e+308"));
    CHECK(r.output.size() < 300);
  }
}

TEST_CASE("cli new user: adamw --momentum and a --warmup longer than the run warn") {
  const std::string dir = cli_temp_dir("new_user_warn");
  make_npy_folder(dir, 16, 1, 8, 2);
  const CliRun r = run_kiln("train --model small_cnn --data " + dir + " --out " + dir +
                            "/out --batch 8 --epochs 1 --threads 1 --optimizer adamw --momentum 0.9 --warmup 5");
  CAPTURE(r.output);
  CHECK(r.status == 0);
  CHECK(contains(r.output, "warning: --momentum 0.9 is ignored by adamw"));
  CHECK(contains(r.output, "warning: --warmup 5 is longer than the run (2 steps)"));
  const CliRun quiet = run_kiln("train --model small_cnn --data " + dir + " --out " + dir +
                                "/out --batch 8 --epochs 1 --threads 1 --optimizer sgd --momentum 0.9 --warmup 2");
  CHECK(quiet.status == 0);
  CHECK_FALSE(contains(quiet.output, "warning:"));
}

TEST_CASE("cli new user: data that would train on the wrong thing is an error") {
  const std::string dir = cli_temp_dir("new_user_data");
  SUBCASE("--limit 0") {
    std::filesystem::create_directories(dir + "/npy");
    make_npy_folder(dir + "/npy", 16, 1, 8, 2);
    const CliRun r = run_kiln("train --model small_cnn --data " + dir + "/npy --out " + dir + "/out --limit 0");
    CAPTURE(r.output);
    CHECK(r.status != 0);
    CHECK(contains(r.output, "--limit 0: no samples to train on"));
  }
  SUBCASE("a folder holding only test/") {
    write(dir + "/only_test/test/a/1.jpg", "not a jpeg");
    write(dir + "/only_test/test/b/2.jpg", "not a jpeg");
    write(dir + "/only_test/test/3.jpg", "not a jpeg");
    const CliRun r = run_kiln("train --model small_cnn --data " + dir + "/only_test --out " + dir + "/out");
    CAPTURE(r.output);
    CHECK(r.status != 0);
    CHECK(contains(r.output, "holds only split folders (test/) and no train/"));
  }
  SUBCASE("one class") {
    write(dir + "/one/cat/1.jpg", "not a jpeg");
    write(dir + "/one/cat/2.jpg", "not a jpeg");
    const CliRun r = run_kiln("train --model small_cnn --data " + dir + "/one --out " + dir + "/out");
    CAPTURE(r.output);
    CHECK(r.status != 0);
    CHECK(contains(r.output, "one class (cat), a classifier needs at least 2 class folders"));
  }
  SUBCASE("a CSV list none of whose files exists") {
    write(dir + "/lists/list.csv", "path,label\nimgs/a.jpg,0\nimgs/b.jpg,1\n");
    write(dir + "/imgs/a.jpg", "not a jpeg");  // beside the CSV's folder, not in it: still missing
    const CliRun r = run_kiln("train --model small_cnn --data " + dir + "/lists/list.csv --image-size 8 --out " +
                              dir + "/out");
    CAPTURE(r.output);
    CHECK(r.status != 0);
    CHECK(contains(r.output, "no readable sample: none of its 2 files exists"));
    CHECK(contains(r.output, "CSV paths are relative to the CSV's folder"));
  }
}

TEST_CASE("cli new user: predict with a 3-class model on data with a 4th label predicts it and leaves it unscored") {
  const std::string dir = cli_temp_dir("new_user_predict");
  std::filesystem::create_directories(dir + "/three");
  std::filesystem::create_directories(dir + "/four");
  make_npy_folder(dir + "/three", 12, 1, 8, 3);
  make_npy_folder(dir + "/four", 16, 1, 8, 4);
  const CliRun t = run_kiln("train --model small_cnn --data " + dir + "/three --batch 6 --epochs 1 --threads 1 --out " +
                            dir + "/out --save " + dir + "/w.safetensors");
  REQUIRE_MESSAGE(t.status == 0, t.output);
  const CliRun p = run_kiln("predict --model small_cnn --weights " + dir + "/w.safetensors --data " + dir +
                            "/four --threads 1 --out " + dir + "/pred.csv");
  CAPTURE(p.output);
  CHECK(p.status == 0);
  CHECK_FALSE(contains(p.output, "out of range"));
  CHECK(contains(p.output, "predict: 16 samples"));
  CHECK(contains(p.output, "over the 12 whose label is one of the model's 3 classes (4 have another label"));
  std::ifstream f(dir + "/pred.csv");
  int64_t rows = 0;
  for (std::string line; std::getline(f, line);) rows += !line.empty();
  CHECK(rows == 17);  // header + every sample, the 4 of label 3 included
}

TEST_CASE("cli new user: --init of another architecture is one line naming both") {
  const std::string dir = cli_temp_dir("new_user_init");
  make_npy_folder(dir, 16, 1, 8, 2);
  const CliRun t = run_kiln("train --model small_cnn --data " + dir + " --batch 8 --epochs 1 --threads 1 --out " + dir +
                            "/out --save " + dir + "/w.safetensors");
  REQUIRE_MESSAGE(t.status == 0, t.output);
  const CliRun r = run_kiln("train --model resnet18_small --data " + dir + " --batch 8 --epochs 1 --threads 1 --out " +
                            dir + "/out2 --init " + dir + "/w.safetensors");
  CAPTURE(r.output);
  CHECK(r.status != 0);
  CHECK(contains(r.output, "--init: " + dir + "/w.safetensors holds a small_cnn, not a resnet18_small"));
  CHECK_FALSE(contains(r.output, "conv1.weight"));
}

TEST_CASE("cli new user: kiln mem at an image too small for the model says so") {
  // resnet18 at 7x7: layer2 downsamples to 1x1, one value per channel at batch 1 (~3 s: the model's init).
  const CliRun r = run_kiln("mem --batch 1 --model resnet18 --image-size 7");
  CAPTURE(r.output);
  CHECK(r.status != 0);
  CHECK(contains(r.output, "batch_norm in layer2.0.bn1: expected more than 1 value per channel"));
  CHECK(contains(r.output, "the image is too small for the model at this batch size"));
}
