// data/array_dataset's load-time checks on tiny hand-made files: a NaN or inf in x.npy, labels that
// are negative or >= the number of classes, and empty sets each give one error that names the file
// and the first bad index (never a training run that "works" on NaN images).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <functional>

#include "data/array_dataset.h"
#include "engine/io/npy.h"
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

// x.npy (n, 1, 2, 2) f32 with values 0.1 * i, y.npy (n) i64 with labels i % 3.
std::string npy_folder(const std::string& name, int64_t n) {
  const std::string d = kiln_test::cli_temp_dir(name);
  std::vector<float> x((size_t)(n * 4));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * (float)i;
  std::vector<int64_t> y((size_t)n);
  for (int64_t i = 0; i < n; ++i) y[(size_t)i] = i % 3;
  write_npy(d + "/x.npy", host_array_from(DType::f32, {n, 1, 2, 2}, x));
  write_npy(d + "/y.npy", host_array_from(DType::i64, {n}, y));
  return d;
}

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

TEST_CASE("data checks: a NaN or inf in x.npy is an error naming the file, the sample and the element") {
  const std::string d = npy_folder("nonfinite", 5);
  CHECK(load_training_data(d).train.n == 5);  // the clean folder loads
  std::vector<float> x(20);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * (float)i;
  x[13] = NAN;  // sample 3, (c, h, w) = (0, 0, 1)
  x[17] = INFINITY;  // a later one: the first bad index is reported
  write_npy(d + "/x.npy", host_array_from(DType::f32, {5, 1, 2, 2}, x));
  const std::string e = error_of([&] { load_training_data(d); });
  CHECK(contains(e, d + "/x.npy"));
  CHECK(contains(e, "sample 3"));
  CHECK(contains(e, "non-finite"));
  CHECK(contains(e, "nan"));
  CHECK(contains(e, "(0, 0, 1)"));
  CHECK(contains(e, "flat index 13"));
  CHECK(contains(error_of([&] { load_inference_data(d); }), "sample 3"));
  x[13] = 1.f;  // now only the inf in sample 4
  write_npy(d + "/x.npy", host_array_from(DType::f32, {5, 1, 2, 2}, x));
  const std::string e2 = error_of([&] { load_training_data(d); });
  CHECK(contains(e2, "sample 4"));
  CHECK(contains(e2, "inf"));
  // A NaN in a --val folder names that folder's file.
  const std::string v = npy_folder("nonfinite_val", 2);
  write_npy(v + "/x.npy", host_array_from(DType::f32, {2, 1, 2, 2}, std::vector<float>{0, 0, 0, 0, 0, 0, 0, -INFINITY}));
  const std::string good = npy_folder("nonfinite_train", 4);
  const std::string e3 = error_of([&] { load_training_data(good, v); });
  CHECK(contains(e3, v + "/x.npy"));
  CHECK(contains(e3, "sample 1"));
}

TEST_CASE("data checks: labels negative or >= num_classes name y.npy and the first bad index") {
  const std::string d = npy_folder("labels", 6);
  write_npy(d + "/y.npy", host_array_from(DType::i64, {6}, std::vector<int64_t>{0, 1, 2, -4, 1, -1}));
  const std::string e = error_of([&] { load_training_data(d); });
  CHECK(contains(e, d + "/y.npy"));
  CHECK(contains(e, "label -4 at index 3"));
  CHECK(contains(e, "negative"));
  write_npy(d + "/y.npy", host_array_from(DType::i64, {6}, std::vector<int64_t>{0, 1, 2, 3, 7, 1}));
  CHECK(load_training_data(d).train.n == 6);  // class count unknown: any label >= 0 is fine
  CHECK(load_training_data(d, "", -1, 8).train.n == 6);
  const std::string e2 = error_of([&] { load_training_data(d, "", -1, 3); });
  CHECK(contains(e2, d + "/y.npy"));
  CHECK(contains(e2, "label 3 at index 3"));
  CHECK(contains(e2, "3 classes"));
  // --limit does not hide a bad label in the file
  CHECK(contains(error_of([&] { load_training_data(d, "", 2, 3); }), "index 3"));
  CHECK(contains(error_of([&] { load_inference_data(d, 4); }), "label 7 at index 4"));
  ArrayDataset a = load_inference_data(d);
  CHECK(contains(error_of([&] { check_labels(a, 5); }), "label 7 at index 4"));
  check_labels(a, 8);
  // i32 labels are checked the same way
  write_npy(d + "/y.npy", host_array_from(DType::i32, {6}, std::vector<int32_t>{0, 1, -2, 0, 0, 0}));
  CHECK(contains(error_of([&] { load_training_data(d); }), "label -2 at index 2"));
}

TEST_CASE("data checks: an IDX label beyond num_classes names the labels file") {
  const std::string d = kiln_test::cli_temp_dir("idx_labels");
  write_idx_u8(d + "/train-images-idx3-ubyte", {3, 2, 2}, std::vector<uint8_t>(12, 7));
  write_idx_u8(d + "/train-labels-idx1-ubyte", {3}, {0, 9, 1});
  CHECK(load_training_data(d).train.n == 3);
  const std::string e = error_of([&] { load_training_data(d, "", -1, 5); });
  CHECK(contains(e, d + "/train-labels-idx1-ubyte"));
  CHECK(contains(e, "label 9 at index 1"));
}

TEST_CASE("data checks: empty sets are one error naming the file") {
  const std::string d = kiln_test::cli_temp_dir("empty_npy");
  write_npy(d + "/x.npy", host_array_from(DType::f32, {0, 1, 2, 2}, std::vector<float>{}));
  write_npy(d + "/y.npy", host_array_from(DType::i64, {0}, std::vector<int64_t>{}));
  const std::string e = error_of([&] { load_training_data(d); });
  CHECK(contains(e, d + "/x.npy"));
  CHECK(contains(e, "no samples"));
  CHECK(contains(error_of([&] { load_inference_data(d); }), "no samples"));
  write_npy(d + "/x.npy", host_array_from(DType::u8, {0, 2, 2, 3}, std::vector<uint8_t>{}));
  CHECK(contains(error_of([&] { load_training_data(d); }), "no samples"));
  // samples of no elements
  write_npy(d + "/x.npy", host_array_from(DType::f32, {2, 0, 2, 2}, std::vector<float>{}));
  write_npy(d + "/y.npy", host_array_from(DType::i64, {2}, std::vector<int64_t>{0, 1}));
  CHECK(contains(error_of([&] { load_training_data(d); }), "no elements"));
  // an empty IDX split
  const std::string i = kiln_test::cli_temp_dir("empty_idx");
  write_idx_u8(i + "/train-images-idx3-ubyte", {0, 2, 2}, {});
  write_idx_u8(i + "/train-labels-idx1-ubyte", {0}, {});
  const std::string e2 = error_of([&] { load_training_data(i); });
  CHECK(contains(e2, i + "/train-images-idx3-ubyte"));
  CHECK(contains(e2, "no samples"));
  // --limit 0 says so
  const std::string ok = npy_folder("limit0", 3);
  CHECK(contains(error_of([&] { load_training_data(ok, "", 0); }), "--limit 0"));
}
