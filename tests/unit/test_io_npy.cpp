// .npy: round trips for every supported dtype, the exact 1.0 header numpy writes, reading the 2.0
// and 3.0 layouts, and a corpus of malformed files (each one kiln::Error naming the file).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "engine/io/npy.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const char* name) {
  fs::path p = fs::temp_directory_path() / ("kiln_test_io_" + std::to_string(::getpid())) / name;
  fs::create_directories(p);
  return p.string();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "<no error>";
}

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

void write_raw(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), (std::streamsize)b.size());
}

// A hand-made npy file: magic, version, little-endian header length (2 or 4 bytes), dict, data.
std::vector<uint8_t> raw_npy(int major, const std::string& dict, size_t data_bytes, int minor = 0) {
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', (uint8_t)major, (uint8_t)minor};
  size_t len_bytes = major == 1 ? 2 : 4;
  for (size_t i = 0; i < len_bytes; ++i) b.push_back((uint8_t)(dict.size() >> (8 * i)));
  b.insert(b.end(), dict.begin(), dict.end());
  for (size_t i = 0; i < data_bytes; ++i) b.push_back((uint8_t)(i * 7 + 1));
  return b;
}

HostArray patterned(DType t, Shape s, uint8_t seed) {
  HostArray a = make_host_array(t, std::move(s));
  for (size_t i = 0; i < a.bytes.size(); ++i) a.bytes[i] = (uint8_t)(seed + 29 * i + (i >> 2));
  return a;
}

}  // namespace

TEST_CASE("npy round trip: every supported dtype and several ranks") {
  const std::string dir = temp_dir("npy_roundtrip");
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::i64, DType::i32, DType::u8};
  const Shape shapes[] = {{}, {5}, {2, 3}, {2, 0, 4}, {1, 2, 3, 4}};
  int k = 0;
  for (DType t : dtypes)
    for (const Shape& s : shapes) {
      CAPTURE(dtype_name(t));
      CAPTURE(shape_str(s));
      const std::string path = dir + "/a" + std::to_string(k) + ".npy";
      HostArray a = patterned(t, s, (uint8_t)k++);
      write_npy(path, a);
      HostArray b = read_npy(path);
      CHECK(b.dtype == t);
      CHECK(b.shape == s);
      CHECK(b.bytes == a.bytes);
    }
  CHECK(has(error_of([&] { serialize_npy(make_host_array(DType::bf16, {2})); }), "bf16"));
}

TEST_CASE("npy write: the 1.0 header numpy itself writes, data aligned to 64 bytes") {
  HostArray a = host_array_from<float>(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6});
  std::vector<uint8_t> b = serialize_npy(a);
  REQUIRE(b.size() == 128 + 24);
  CHECK(std::memcmp(b.data(), "\x93NUMPY\x01\x00", 8) == 0);
  CHECK((b[8] | (b[9] << 8)) == 118);
  std::string header(reinterpret_cast<const char*>(b.data() + 10), 118);
  CHECK(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0) == 0);
  CHECK(header.back() == '\n');
  float first;
  std::memcpy(&first, b.data() + 128, 4);
  CHECK(first == 1.0f);
  std::string h1(reinterpret_cast<const char*>(serialize_npy(make_host_array(DType::u8, {7})).data() + 10), 70);
  CHECK(h1.rfind("{'descr': '|u1', 'fortran_order': False, 'shape': (7,), }", 0) == 0);
  std::string h0(reinterpret_cast<const char*>(serialize_npy(make_host_array(DType::i64, {})).data() + 10), 70);
  CHECK(h0.rfind("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", 0) == 0);
}

TEST_CASE("npy read: versions 2.0 and 3.0, key order, double quotes, Python 2 long suffix") {
  const std::string d = "{'shape': (2, 2), 'fortran_order': False, 'descr': '<i4'}";
  for (int major : {1, 2, 3}) {
    CAPTURE(major);
    std::vector<uint8_t> b = raw_npy(major, d + "\n", 16);
    HostArray a = parse_npy(b.data(), b.size(), "v.npy");
    CHECK(a.dtype == DType::i32);
    CHECK(a.shape == Shape{2, 2});
    CHECK(a.bytes.size() == 16);
    CHECK(a.bytes[1] == 8);
  }
  std::vector<uint8_t> b = raw_npy(1, "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": (3L,)}", 24);
  HostArray a = parse_npy(b.data(), b.size(), "py2.npy");
  CHECK(a.dtype == DType::f64);
  CHECK(a.shape == Shape{3});
}

TEST_CASE("npy malformed corpus: each is one kiln::Error naming the file") {
  const std::string dir = temp_dir("npy_bad");
  auto dict = [](const std::string& descr, const std::string& order, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }\n";
  };
  std::vector<uint8_t> bad_magic = raw_npy(1, dict("<f4", "False", "(2,)"), 8);
  bad_magic[1] = 'X';
  std::vector<uint8_t> long_header = raw_npy(1, dict("<f4", "False", "(2,)"), 8);
  long_header[8] = 0xff;
  long_header[9] = 0x7f;
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    std::vector<std::string> expect;
  };
  std::vector<Case> cases = {
      {"empty", {}, {"too short"}},
      {"bad_magic", bad_magic, {"bad magic"}},
      {"version_4", raw_npy(4, dict("<f4", "False", "(2,)"), 8), {"version 4.0"}},
      {"version_1_1", raw_npy(1, dict("<f4", "False", "(2,)"), 8, 1), {"version 1.1"}},
      {"fortran", raw_npy(1, dict("<f4", "True", "(2, 2)"), 16), {"fortran_order"}},
      {"complex", raw_npy(1, dict("<c8", "False", "(2,)"), 16), {"unsupported dtype '<c8'"}},
      {"bool", raw_npy(1, dict("|b1", "False", "(2,)"), 2), {"unsupported dtype '|b1'"}},
      {"big_endian", raw_npy(1, dict(">f4", "False", "(2,)"), 8), {"big-endian"}},
      {"structured", raw_npy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8),
       {"structured"}},
      {"truncated_data", raw_npy(1, dict("<f8", "False", "(3, 2)"), 40), {"truncated", "needs 48"}},
      {"trailing", raw_npy(1, dict("<f4", "False", "(2,)"), 12), {"trailing"}},
      {"header_past_end", long_header, {"exceeds the file"}},
      {"garbage_header", raw_npy(1, "this is not a dict", 0), {"malformed header"}},
      {"missing_shape", raw_npy(1, "{'descr': '<f4', 'fortran_order': False}", 4), {"'shape'"}},
      {"negative_shape", raw_npy(1, dict("<f4", "False", "(-2,)"), 8), {"non-negative"}},
      {"unknown_key", raw_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4),
       {"unexpected key 'x'"}},
      {"unterminated", raw_npy(1, "{'descr': '<f4", 4), {"unterminated"}},
      {"overflow", raw_npy(1, dict("<f8", "False", "(4294967296, 4294967296)"), 0), {"overflow"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string path = dir + "/" + c.name + ".npy";
    write_raw(path, c.bytes);
    std::string msg = error_of([&] { read_npy(path); });
    CAPTURE(msg);
    CHECK(has(msg, path));
    for (const std::string& e : c.expect) CHECK(has(msg, e));
  }
  // The same builder makes a valid file when nothing is wrong.
  std::vector<uint8_t> ok = raw_npy(1, dict("<f4", "False", "(2,)"), 8);
  CHECK(parse_npy(ok.data(), ok.size(), "ok.npy").shape == Shape{2});
}

TEST_CASE("npy: every truncation and random corruption is an error or a valid parse") {
  std::vector<uint8_t> b = serialize_npy(patterned(DType::f32, {3, 2}, 5));
  for (size_t len = 0; len < b.size(); ++len) {
    CAPTURE(len);
    CHECK(has(error_of([&] { parse_npy(b.data(), len, "cut.npy"); }), "cut.npy"));
  }
  std::mt19937 rng(7);
  int errors = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> c = b;
    c[rng() % 128] ^= (uint8_t)(1u << (rng() % 8));
    try {
      HostArray a = parse_npy(c.data(), c.size(), "fuzz.npy");
      CHECK(a.bytes.size() == (size_t)a.numel() * dtype_size(a.dtype));
    } catch (const kiln::Error& e) {
      ++errors;
      CHECK(has(e.what(), "fuzz.npy"));
    }
  }
  CHECK(errors > 0);
}
