// I/O parity with Python: numpy-written .npy files (versions 1.0/2.0/3.0) and a safetensors file
// laid out like the reference implementation are read by kiln; files kiln writes are read back
// and checked by numpy (tests/support/oracle/io_fixtures.py). Values follow a formula both sides
// compute, documented in io_fixtures.py.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

#include "engine/core/half.h"
#include "engine/io/npy.h"
#include "engine/io/safetensors.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

const char* kPython = "/usr/bin/python3";
const std::string kScript = std::string(KILN_SOURCE_DIR) + "/tests/support/oracle/io_fixtures.py";
const Shape kShape = {3, 5, 7};

std::string fresh_dir(const char* name) {
  fs::path p = fs::temp_directory_path() / ("kiln_parity_io_" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

int run_fixtures(const char* mode, const std::string& dir) {
  REQUIRE_MESSAGE(fs::exists(kPython), kPython, " is missing (the parity tests need Debian's python3-torch)");
  std::string cmd = std::string(kPython) + " " + kScript + " " + mode + " '" + dir + "'";
  return std::system(cmd.c_str());
}

// The shared formula (see io_fixtures.py).
double float_value(int64_t i) { return (double)((i * 37) % 101 - 50) / 8.0; }
int64_t int_value(int64_t i) { return (i * 37) % 101 - 50; }
uint8_t u8_value(int64_t i) { return (uint8_t)((i * 37) % 256); }

// Element i of `a` as double, whatever its dtype.
double element(const HostArray& a, int64_t i) {
  switch (a.dtype) {
    case DType::f32: return a.data<float>()[i];
    case DType::f64: return a.data<double>()[i];
    case DType::f16: return half_bits_to_float(a.data<uint16_t>()[i]);
    case DType::bf16: return bf16_bits_to_float(a.data<uint16_t>()[i]);
    case DType::i32: return a.data<int32_t>()[i];
    case DType::i64: return (double)a.data<int64_t>()[i];
    case DType::u8: return a.data<uint8_t>()[i];
  }
  return 0;
}

void check_formula(const HostArray& a, DType want, const std::string& what) {
  CAPTURE(what);
  REQUIRE(a.dtype == want);
  REQUIRE(a.shape == kShape);
  for (int64_t i = 0; i < a.numel(); ++i) {
    double expect = is_floating(want) ? float_value(i) : want == DType::u8 ? u8_value(i) : (double)int_value(i);
    if (element(a, i) != expect) {
      CAPTURE(i);
      CHECK(element(a, i) == expect);
      return;
    }
  }
}

// kiln array built from the formula.
HostArray formula_array(DType t) {
  HostArray a = make_host_array(t, kShape);
  for (int64_t i = 0; i < a.numel(); ++i) {
    switch (t) {
      case DType::f32: a.data<float>()[i] = (float)float_value(i); break;
      case DType::f64: a.data<double>()[i] = float_value(i); break;
      case DType::f16: a.data<uint16_t>()[i] = float_to_half_bits((float)float_value(i)); break;
      case DType::bf16: a.data<uint16_t>()[i] = float_to_bf16_bits((float)float_value(i)); break;
      case DType::i32: a.data<int32_t>()[i] = (int32_t)int_value(i); break;
      case DType::i64: a.data<int64_t>()[i] = int_value(i); break;
      case DType::u8: a.data<uint8_t>()[i] = u8_value(i); break;
    }
  }
  return a;
}

const std::pair<const char*, DType> kTypes[] = {{"f32", DType::f32}, {"f64", DType::f64}, {"f16", DType::f16},
                                                {"i32", DType::i32}, {"i64", DType::i64}, {"u8", DType::u8}};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("kiln reads .npy and safetensors files written by Python") {
  const std::string dir = fresh_dir("from_python");
  REQUIRE(run_fixtures("write", dir) == 0);

  for (auto [name, dt] : kTypes) check_formula(read_npy(dir + "/py_" + name + ".npy"), dt, name);
  check_formula(read_npy(dir + "/py_v2.npy"), DType::f32, "version 2.0");
  check_formula(read_npy(dir + "/py_v3.npy"), DType::f32, "version 3.0");
  HostArray s = read_npy(dir + "/py_scalar.npy");
  CHECK(s.shape.empty());
  CHECK(s.data<float>()[0] == 2.5f);
  HostArray e = read_npy(dir + "/py_empty.npy");
  CHECK(e.shape == Shape{0, 4});
  CHECK(e.dtype == DType::f64);
  for (const char* bad : {"fortran", "bigendian", "bool"}) {
    std::string path = dir + "/py_" + bad + ".npy";
    std::string msg = error_of([&] { read_npy(path); });
    CAPTURE(msg);
    CHECK(msg.find(path) != std::string::npos);
  }

  SafetensorsFile f = read_safetensors(dir + "/py.safetensors");
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.tensors.size() == 9);
  for (auto [name, dt] : kTypes) check_formula(f.at(std::string("t.") + name), dt, name);
  check_formula(f.at("t.bf16"), DType::bf16, "bf16");
  const HostArray& nbt = f.at("bn.num_batches_tracked");
  CHECK(nbt.dtype == DType::i64);
  CHECK(nbt.shape.empty());
  CHECK(nbt.data<int64_t>()[0] == 7);
  CHECK(f.at("empty").shape == Shape{0, 3});
  // Reference layout: data sorted by dtype size, largest first; kiln returns file data order.
  CHECK(f.tensors.front().array.dtype == DType::i64);
  CHECK(f.tensors.back().name == "t.u8");
  fs::remove_all(fs::path(dir).parent_path());
}

TEST_CASE("numpy reads .npy and safetensors files written by kiln") {
  const std::string dir = fresh_dir("from_kiln");
  std::vector<NamedArray> ts;
  for (auto [name, dt] : kTypes) {
    write_npy(dir + "/kiln_" + name + ".npy", formula_array(dt));
    ts.push_back({std::string("t.") + name, formula_array(dt)});
  }
  ts.push_back({"t.bf16", formula_array(DType::bf16)});
  write_safetensors(dir + "/kiln.safetensors", ts, {{"writer", "kiln"}});
  CHECK(run_fixtures("check", dir) == 0);

  // The checker can fail: a kiln file with one wrong value is rejected.
  HostArray wrong = formula_array(DType::f32);
  wrong.data<float>()[17] += 1.0f;
  write_npy(dir + "/kiln_f32.npy", wrong);
  CHECK(run_fixtures("check", dir) != 0);
  fs::remove_all(fs::path(dir).parent_path());
}
