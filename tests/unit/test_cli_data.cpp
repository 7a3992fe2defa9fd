// data/array_dataset: format detection (IDX folder, npy folder, neither, missing), npy layouts
// (f32 NCHW, u8 NHWC scaled), bad arrays (clear errors naming the file), --limit, batching and
// the (seed, epoch) permutation; IDX normalization on a tiny hand-made IDX folder.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <set>

#include "data/array_dataset.h"
#include "engine/train/batch.h"
#include "support/cli/run_kiln.h"

using namespace kiln;
using kiln_test::contains;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "<no error>";
}

// A big-endian IDX file: u8 data with the given dims.
void write_idx_u8(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary);
  const uint8_t head[4] = {0, 0, 0x08, (uint8_t)dims.size()};
  f.write((const char*)head, 4);
  for (uint32_t d : dims) {
    const uint8_t be[4] = {(uint8_t)(d >> 24), (uint8_t)(d >> 16), (uint8_t)(d >> 8), (uint8_t)d};
    f.write((const char*)be, 4);
  }
  f.write((const char*)data.data(), (std::streamsize)data.size());
}
}  // namespace

TEST_CASE("cli data: npy folder, f32 NCHW") {
  const std::string d = kiln_test::cli_temp_dir("npy_f32");
  kiln_test::make_npy_folder(d, 10, 2, 4, 3);
  CHECK(detect_data_format(d) == "npy");
  DataSplits s = load_training_data(d);
  CHECK(s.train.n == 10);
  CHECK(s.train.channels == 2);
  CHECK(s.train.height == 4);
  CHECK(!s.val);
  CHECK(s.train.max_label() == 2);
  DataSplits lim = load_training_data(d, "", 4);
  CHECK(lim.train.n == 4);
  CHECK(lim.train.images.size() == 4 * 2 * 4 * 4);
}

TEST_CASE("cli data: npy u8 NHWC is scaled to [0,1] and transposed to NCHW") {
  const std::string d = kiln_test::cli_temp_dir("npy_u8");
  // 1 sample, 2x2 pixels, 3 channels: value = 10*channel + pixel
  std::vector<uint8_t> x(12);
  for (int p = 0; p < 4; ++p)
    for (int ch = 0; ch < 3; ++ch) x[(size_t)(p * 3 + ch)] = (uint8_t)(10 * ch + p);
  write_npy(d + "/x.npy", host_array_from(DType::u8, {1, 2, 2, 3}, x));
  write_npy(d + "/y.npy", host_array_from(DType::i64, {1}, std::vector<int64_t>{0}));
  DataSplits s = load_training_data(d);
  REQUIRE(s.train.channels == 3);
  CHECK(s.train.images[(size_t)(2 * 4 + 3)] == doctest::Approx((20 + 3) / 255.0));
  CHECK(s.train.images[1] == doctest::Approx(1 / 255.0));
}

TEST_CASE("cli data: bad folders say what is wrong") {
  const std::string d = kiln_test::cli_temp_dir("bad");
  CHECK(contains(error_of([&] { detect_data_format(d + "/nope"); }), "no such file"));
  CHECK(contains(error_of([&] { detect_data_format(d); }), "not a recognized data folder"));
  std::ofstream(d + "/afile") << "x";
  CHECK(contains(error_of([&] { detect_data_format(d + "/afile"); }), "expected a folder"));
  write_npy(d + "/x.npy", host_array_from(DType::f32, {2, 1, 2, 2}, std::vector<float>(8, 0.f)));
  CHECK(contains(error_of([&] { detect_data_format(d); }), "but not y.npy"));
  write_npy(d + "/y.npy", host_array_from(DType::i64, {3}, std::vector<int64_t>{0, 1, 2}));
  const std::string e = error_of([&] { load_training_data(d); });
  CHECK(contains(e, "2 samples"));
  CHECK(contains(e, "3 labels"));
  write_npy(d + "/y.npy", host_array_from(DType::i64, {2}, std::vector<int64_t>{0, -1}));
  CHECK(contains(error_of([&] { load_training_data(d); }), "negative"));
  write_npy(d + "/x.npy", host_array_from(DType::f32, {2, 4}, std::vector<float>(8, 0.f)));
  CHECK(contains(error_of([&] { load_training_data(d); }), "expected 4 dims"));
}

TEST_CASE("cli data: IDX folder with t10k as validation, normalized with the training statistics") {
  const std::string d = kiln_test::cli_temp_dir("idx");
  write_idx_u8(d + "/train-images-idx3-ubyte", {2, 2, 2}, {0, 0, 0, 0, 255, 255, 255, 255});
  write_idx_u8(d + "/train-labels-idx1-ubyte", {2}, {0, 1});
  write_idx_u8(d + "/t10k-images-idx3-ubyte", {1, 2, 2}, {255, 0, 255, 0});
  write_idx_u8(d + "/t10k-labels-idx1-ubyte", {1}, {1});
  CHECK(detect_data_format(d) == "idx");
  DataSplits s = load_training_data(d);
  CHECK(s.format == "idx");
  CHECK(s.mean == doctest::Approx(0.5));
  CHECK(s.std == doctest::Approx(0.5));
  CHECK(s.train.images[0] == doctest::Approx(-1.0));
  CHECK(s.train.images[4] == doctest::Approx(1.0));
  REQUIRE(s.val);
  CHECK(s.val->n == 1);
  CHECK(s.val->images[1] == doctest::Approx(-1.0));
  ArrayDataset inf = load_inference_data(d);
  CHECK(inf.n == 1);  // the t10k split
}

TEST_CASE("cli data: with --limit, IDX mean/std (normalization, start line, ledger) are those of the samples used") {
  // 4 training images of 8x8: one black, three white. All: mean 0.75; the first 2: mean 0.5, std 0.5.
  const std::string d = kiln_test::cli_temp_dir("idx_limit");
  std::vector<uint8_t> px(4 * 64, 255);
  std::fill(px.begin(), px.begin() + 64, 0);
  write_idx_u8(d + "/train-images-idx3-ubyte", {4, 8, 8}, px);
  write_idx_u8(d + "/train-labels-idx1-ubyte", {4}, {0, 1, 0, 1});
  write_idx_u8(d + "/t10k-images-idx3-ubyte", {2, 8, 8}, std::vector<uint8_t>(128, 255));
  write_idx_u8(d + "/t10k-labels-idx1-ubyte", {2}, {0, 1});
  DataSplits all = load_training_data(d);
  CHECK(all.mean == doctest::Approx(0.75));
  DataSplits two = load_training_data(d, "", 2);
  CHECK(two.train.n == 2);
  CHECK(two.mean == doctest::Approx(0.5));
  CHECK(two.std == doctest::Approx(0.5));
  CHECK(two.train.images[0] == doctest::Approx(-1.0));  // black: (0 - 0.5) / 0.5
  REQUIRE(two.val);
  CHECK(two.val->images[0] == doctest::Approx(1.0));  // t10k normalized with the same numbers
  const std::string out = kiln_test::cli_temp_dir("idx_limit_out");
  auto r = kiln_test::run_kiln("train --model small_cnn --data " + d + " --limit 2 --batch 2 --epochs 1 --threads 1 "
                               "--device cpu --out " + out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK_MESSAGE(contains(r.output, "normalized (x/255 - 0.5) / 0.5"), r.output);
  const nlohmann::json j = kiln_test::last_ledger_line(out + "/runs.jsonl");
  CHECK(j["data"]["train_samples"] == 2);
  CHECK(j["data"]["mean"].get<double>() == doctest::Approx(0.5));
  CHECK(j["data"]["std"].get<double>() == doctest::Approx(0.5));
}

TEST_CASE("cli data: batches and epoch permutations") {
  const std::string d = kiln_test::cli_temp_dir("batch");
  kiln_test::make_npy_folder(d, 9, 1, 3, 3);
  DataSplits s = load_training_data(d);
  std::vector<int64_t> p0 = epoch_permutation(9, 7, 0), p0b = epoch_permutation(9, 7, 0);
  std::vector<int64_t> p1 = epoch_permutation(9, 7, 1), q0 = epoch_permutation(9, 8, 0);
  CHECK(p0 == p0b);
  CHECK(p0 != p1);
  CHECK(p0 != q0);
  CHECK(std::set<int64_t>(p1.begin(), p1.end()).size() == 9);
  Batch b = gather_batch(s.train, p0, 2, 5);
  CHECK(b.x.sizes() == Shape{3, 1, 3, 3});
  CHECK(b.y.to_vector<int64_t>()[1] == s.train.labels[(size_t)p0[3]]);
  CHECK(b.x.to_vector<float>()[9] == s.train.images[(size_t)(p0[3] * 9)]);
}
