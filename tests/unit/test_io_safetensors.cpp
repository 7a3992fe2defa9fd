// safetensors: round trips for every dtype, the exact on-disk layout, and a corpus of malformed
// files (each must be one kiln::Error naming the file, and the tensor where one is involved).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "engine/io/safetensors.h"

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

// A file made by hand: u64 header length, header text, data bytes.
std::vector<uint8_t> raw_st(const std::string& header, size_t data_bytes, uint64_t len_override = 0) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  uint64_t n = len_override ? len_override : header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) b[8 + header.size() + i] = (uint8_t)i;
  return b;
}

// An array of each dtype with distinct, non-trivial bytes.
HostArray patterned(DType t, Shape s, uint8_t seed) {
  HostArray a = make_host_array(t, std::move(s));
  for (size_t i = 0; i < a.bytes.size(); ++i) a.bytes[i] = (uint8_t)(seed + 31 * i + (i >> 3));
  return a;
}

}  // namespace

TEST_CASE("safetensors round trip: every dtype, scalar and empty shapes, metadata, order kept") {
  const std::string dir = temp_dir("st_roundtrip");
  const std::string path = dir + "/w.safetensors";
  std::vector<NamedArray> ts = {
      {"z.last_name_first", patterned(DType::f32, {2, 3}, 1)},
      {"b.f64", patterned(DType::f64, {5}, 2)},
      {"c.f16", patterned(DType::f16, {3, 1, 2}, 3)},
      {"d.bf16", patterned(DType::bf16, {7}, 4)},
      {"e.i32", patterned(DType::i32, {2, 2}, 5)},
      {"bn.num_batches_tracked", patterned(DType::i64, {}, 6)},
      {"g.u8", patterned(DType::u8, {9}, 7)},
      {"h.empty", patterned(DType::f32, {0, 4}, 8)},
      {"a.after_empty", patterned(DType::u8, {3}, 9)},
  };
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"kiln", "test"}};
  write_safetensors(path, ts, meta);
  SafetensorsFile f = read_safetensors(path);
  REQUIRE(f.tensors.size() == ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    CAPTURE(ts[i].name);
    CHECK(f.tensors[i].name == ts[i].name);
    CHECK(f.tensors[i].array.dtype == ts[i].array.dtype);
    CHECK(f.tensors[i].array.shape == ts[i].array.shape);
    CHECK(f.tensors[i].array.bytes == ts[i].array.bytes);
  }
  CHECK(f.metadata == meta);
  CHECK(f.at("e.i32").shape == Shape{2, 2});
  CHECK(f.find("nope") == nullptr);
  CHECK(has(error_of([&] { f.at("nope"); }), "'nope'"));
  // No temporary left behind by the atomic write.
  int files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += (int)e.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("safetensors layout: u64 length, header padded to 8 with spaces, data back to back in order") {
  std::vector<NamedArray> ts = {{"w", patterned(DType::f32, {3}, 1)}, {"n", patterned(DType::i64, {}, 2)}};
  std::vector<uint8_t> b = serialize_safetensors(ts);
  uint64_t n;
  std::memcpy(&n, b.data(), 8);
  CHECK(n % 8 == 0);
  REQUIRE(8 + n + 12 + 8 == b.size());
  std::string text(reinterpret_cast<const char*>(b.data() + 8), n);
  CHECK(text.find("__metadata__") == std::string::npos);  // omitted when empty, like the reference
  CHECK(text.find_last_not_of(' ') + 1 <= text.size());
  auto j = nlohmann::json::parse(text);
  CHECK(j["w"]["dtype"] == "F32");
  CHECK(j["w"]["data_offsets"] == nlohmann::json({0, 12}));
  CHECK(j["n"]["dtype"] == "I64");
  CHECK(j["n"]["shape"] == nlohmann::json::array());
  CHECK(j["n"]["data_offsets"] == nlohmann::json({12, 20}));
  CHECK(text.find("\"w\"") < text.find("\"n\""));  // header keys in the given order
  CHECK(std::memcmp(b.data() + 8 + n, ts[0].array.bytes.data(), 12) == 0);
  CHECK(std::memcmp(b.data() + 8 + n + 12, ts[1].array.bytes.data(), 8) == 0);
}

TEST_CASE("safetensors write rejects bad input with the tensor name") {
  const std::string dir = temp_dir("st_write_bad");
  HostArray ok = patterned(DType::f32, {2}, 0);
  HostArray wrong = ok;
  wrong.bytes.pop_back();
  CHECK(has(error_of([&] { serialize_safetensors({{"w", wrong}}); }), "'w'"));
  CHECK(has(error_of([&] { serialize_safetensors({{"w", ok}, {"w", ok}}); }), "duplicate tensor name 'w'"));
  CHECK(has(error_of([&] { serialize_safetensors({{"", ok}}); }), "empty tensor name"));
  CHECK(has(error_of([&] { serialize_safetensors({{"__metadata__", ok}}); }), "reserved"));
  CHECK(has(error_of([&] { write_safetensors(dir + "/no/such/dir/x.safetensors", {{"w", ok}}); }),
            dir + "/no/such/dir/x.safetensors"));
}

TEST_CASE("safetensors malformed corpus: each is one kiln::Error naming the file (and tensor)") {
  const std::string dir = temp_dir("st_bad");
  const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    std::vector<std::string> expect;  // substrings besides the path
  };
  std::vector<uint8_t> truncated_data = raw_st(good, 8);
  truncated_data.resize(truncated_data.size() - 3);
  std::vector<Case> cases = {
      {"empty", {}, {"too short"}},
      {"short_length", {1, 2, 3}, {"too short"}},
      {"huge_header", raw_st(good, 8, (uint64_t)1 << 40), {"100 MiB"}},
      {"header_past_end", raw_st(good, 8, 4096), {"exceeds"}},
      {"json_garbage", raw_st("{\"w\": {dtype: F32", 0), {"not valid JSON"}},
      {"json_array", raw_st("[1, 2, 3]", 0), {"must be a JSON object"}},
      {"entry_not_object", raw_st(R"({"w": 5})", 0), {"'w'", "JSON object"}},
      {"out_of_bounds", raw_st(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
       {"'w'", "out of bounds"}},
      {"overlap",
       raw_st(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
              12),
       {"'b'", "overlap", "'a'"}},
      {"size_mismatch", raw_st(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       {"'w'", "size mismatch", "needs 12"}},
      {"unknown_dtype", raw_st(R"({"w":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}})", 8),
       {"'w'", "unknown dtype 'F128'"}},
      {"bool_dtype", raw_st(R"({"m":{"dtype":"BOOL","shape":[8],"data_offsets":[0,8]}})", 8),
       {"'m'", "BOOL is not supported"}},
      {"i16_dtype", raw_st(R"({"m":{"dtype":"I16","shape":[4],"data_offsets":[0,8]}})", 8),
       {"'m'", "I16 is not supported"}},
      {"negative_shape", raw_st(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       {"'w'", "negative shape dim -2"}},
      {"float_shape", raw_st(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8),
       {"'w'", "non-negative integers"}},
      {"offsets_reversed", raw_st(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
       {"'w'", "end before begin"}},
      {"offsets_one", raw_st(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
       {"'w'", "data_offsets"}},
      {"missing_dtype", raw_st(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8), {"'w'", "dtype"}},
      {"extra_field", raw_st(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8),
       {"'w'", "unknown field 'x'"}},
      {"duplicate_name",
       raw_st(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
              2),
       {"'w'", "twice"}},
      {"metadata_not_string", raw_st(R"({"__metadata__":{"epoch":3}})", 0), {"__metadata__", "'epoch'"}},
      {"overflow_shape",
       raw_st(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
       {"'w'", "overflow"}},
      {"truncated_data", truncated_data, {"'w'", "out of bounds"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string path = dir + "/" + c.name + ".safetensors";
    write_raw(path, c.bytes);
    std::string msg = error_of([&] { read_safetensors(path); });
    CAPTURE(msg);
    CHECK(has(msg, path));
    for (const std::string& e : c.expect) CHECK(has(msg, e));
  }
  // The well-formed variant of the same header does parse (so the corpus is testing the faults).
  write_raw(dir + "/good.safetensors", raw_st(good, 8));
  CHECK(read_safetensors(dir + "/good.safetensors").at("w").shape == Shape{2});
  CHECK(has(error_of([&] { read_safetensors(dir + "/missing.safetensors"); }), dir + "/missing.safetensors"));
}

TEST_CASE("safetensors: every truncation and random header corruption is an error or a valid parse") {
  std::vector<NamedArray> ts = {{"conv.weight", patterned(DType::f32, {2, 3}, 1)},
                                {"bn.num_batches_tracked", patterned(DType::i64, {}, 2)},
                                {"fc.bias", patterned(DType::f16, {4}, 3)}};
  std::vector<uint8_t> b = serialize_safetensors(ts, {{"k", "v"}});
  for (size_t len = 0; len < b.size(); ++len) {
    CAPTURE(len);
    std::string msg = error_of([&] { parse_safetensors(b.data(), len, "cut.safetensors"); });
    CHECK(has(msg, "cut.safetensors"));
  }
  std::mt19937 rng(123);
  uint64_t n;
  std::memcpy(&n, b.data(), 8);
  int errors = 0, parsed = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> c = b;
    int flips = 1 + (int)(rng() % 3);
    for (int k = 0; k < flips; ++k) c[rng() % (8 + n)] ^= (uint8_t)(1u << (rng() % 8));
    try {
      SafetensorsFile f = parse_safetensors(c.data(), c.size(), "fuzz.safetensors");
      ++parsed;
      for (const auto& t : f.tensors) {
        uint64_t need = 0;
        REQUIRE(checked_nbytes(t.array.dtype, t.array.shape, &need));
        CHECK(need == t.array.bytes.size());
      }
    } catch (const kiln::Error& e) {
      ++errors;
      CHECK(has(e.what(), "fuzz.safetensors"));
    }
  }
  CHECK(errors > 0);
  MESSAGE("fuzz: ", errors, " rejected, ", parsed, " still valid");
}
