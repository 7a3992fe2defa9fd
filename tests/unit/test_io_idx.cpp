// IDX (MNIST format): plain and gzip files made by the test, big-endian element conversion, gzip
// detected by content, malformed files (each one kiln::Error naming the file), MNIST file
// discovery, and the real Fashion-MNIST files when Debian's dataset-fashion-mnist is installed.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/io/idx.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const char* name) {
  fs::path p = fs::temp_directory_path() / ("kiln_test_io_" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
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

// IDX bytes: 0, 0, type, ndim, big-endian dims, then `data` as given (already big-endian).
std::vector<uint8_t> raw_idx(uint8_t type, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, type, (uint8_t)dims.size()};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back((uint8_t)(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// gzip with zlib's deflate (windowBits 16+15 writes the gzip wrapper).
std::vector<uint8_t> gzip(const std::vector<uint8_t>& in) {
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<uint8_t> out(deflateBound(&zs, (uLong)in.size()) + 32);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = (uInt)in.size();
  zs.next_out = out.data();
  zs.avail_out = (uInt)out.size();
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::vector<uint8_t> image_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (uint8_t)(i * 37 + (i >> 5));
  return v;
}

}  // namespace

TEST_CASE("idx: u8 images, plain and gzip (detected by content, whatever the name)") {
  const std::string dir = temp_dir("idx_ok");
  std::vector<uint8_t> pixels = image_bytes(3 * 4 * 5);
  std::vector<uint8_t> file = raw_idx(0x08, {3, 4, 5}, pixels);
  write_raw(dir + "/images-idx3-ubyte", file);
  write_raw(dir + "/images.bin", gzip(file));  // gzip with no .gz extension
  for (const char* name : {"/images-idx3-ubyte", "/images.bin"}) {
    CAPTURE(name);
    HostArray a = read_idx(dir + name);
    CHECK(a.dtype == DType::u8);
    CHECK(a.shape == Shape{3, 4, 5});
    CHECK(a.bytes == pixels);
  }
  // Larger than zlib's 64 KiB output chunks, so the inflate loop runs many times.
  std::vector<uint8_t> big_pixels = image_bytes(50 * 80 * 80);
  std::vector<uint8_t> big = gzip(raw_idx(0x08, {50, 80, 80}, big_pixels));
  HostArray b = parse_idx(big.data(), big.size(), "big.gz");
  CHECK(b.shape == Shape{50, 80, 80});
  CHECK(b.bytes == big_pixels);
  // Two concatenated gzip members inflate to their concatenation.
  std::vector<uint8_t> half1(file.begin(), file.begin() + 20), half2(file.begin() + 20, file.end());
  std::vector<uint8_t> two = gzip(half1), g2 = gzip(half2);
  two.insert(two.end(), g2.begin(), g2.end());
  CHECK(parse_idx(two.data(), two.size(), "two.gz").bytes == pixels);
}

TEST_CASE("idx: labels (1-d) and big-endian i32 / f32 / f64 converted to little-endian") {
  std::vector<uint8_t> lab = raw_idx(0x08, {4}, {9, 0, 3, 7});
  HostArray l = parse_idx(lab.data(), lab.size(), "labels");
  CHECK(l.shape == Shape{4});
  CHECK(l.data<uint8_t>()[3] == 7);

  std::vector<uint8_t> i32 = raw_idx(0x0C, {2}, {0x00, 0x00, 0x01, 0x02, 0xff, 0xff, 0xff, 0xfe});
  HostArray a = parse_idx(i32.data(), i32.size(), "i32");
  CHECK(a.dtype == DType::i32);
  CHECK(a.data<int32_t>()[0] == 0x0102);
  CHECK(a.data<int32_t>()[1] == -2);

  std::vector<uint8_t> f32 = raw_idx(0x0D, {1}, {0x3f, 0xc0, 0x00, 0x00});  // 1.5f big-endian
  CHECK(parse_idx(f32.data(), f32.size(), "f32").data<float>()[0] == 1.5f);
  std::vector<uint8_t> f64 = raw_idx(0x0E, {1}, {0xc0, 0x04, 0, 0, 0, 0, 0, 0});  // -2.5 big-endian
  CHECK(parse_idx(f64.data(), f64.size(), "f64").data<double>()[0] == -2.5);
}

TEST_CASE("idx malformed corpus: each is one kiln::Error naming the file") {
  const std::string dir = temp_dir("idx_bad");
  std::vector<uint8_t> good = raw_idx(0x08, {10, 28, 28}, image_bytes(10 * 28 * 28));
  std::vector<uint8_t> gz = gzip(good);
  std::vector<uint8_t> gz_cut(gz.begin(), gz.begin() + (long)gz.size() / 2);
  std::vector<uint8_t> gz_corrupt = gz;
  for (size_t i = 20; i < 60 && i < gz_corrupt.size(); ++i) gz_corrupt[i] ^= 0x5a;
  std::vector<uint8_t> gz_no_trailer(gz.begin(), gz.end() - 4);  // CRC ok, size field missing
  std::vector<uint8_t> cut(good.begin(), good.end() - 100);
  std::vector<uint8_t> wrong_magic = good;
  wrong_magic[0] = 0x12;
  std::vector<uint8_t> trailing = good;
  trailing.push_back(1);
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    std::vector<std::string> expect;
  };
  std::vector<Case> cases = {
      {"empty", {}, {"too short"}},
      {"wrong_magic", wrong_magic, {"bad magic"}},
      {"unknown_type", raw_idx(0x07, {2}, {1, 2}), {"unknown element type"}},
      {"i16_type", raw_idx(0x0B, {2}, {1, 2, 3, 4}), {"not supported"}},
      {"zero_dims", raw_idx(0x08, {}, {}), {"zero dimensions"}},
      {"truncated_dims", std::vector<uint8_t>(good.begin(), good.begin() + 9), {"truncated"}},
      {"truncated_data", cut, {"truncated", "needs 7840"}},
      {"trailing", trailing, {"trailing"}},
      {"gzip_truncated", gz_cut, {"gzip", "truncated"}},
      {"gzip_no_trailer", gz_no_trailer, {"gzip", "truncated"}},
      {"gzip_corrupt", gz_corrupt, {"gzip", "corrupt"}},
      {"gzip_of_garbage", gzip({1, 2, 3, 4, 5, 6}), {"bad magic"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string path = dir + "/" + c.name + ".gz";
    write_raw(path, c.bytes);
    std::string msg = error_of([&] { read_idx(path); });
    CAPTURE(msg);
    CHECK(has(msg, path));
    for (const std::string& e : c.expect) CHECK(has(msg, e));
  }
  CHECK(parse_idx(gz.data(), gz.size(), "ok").shape == Shape{10, 28, 28});
  // Every truncation of the gzip stream fails cleanly.
  for (size_t len = 0; len < gz.size(); len += 7) {
    CAPTURE(len);
    CHECK(has(error_of([&] { parse_idx(gz.data(), len, "gzcut"); }), "gzcut"));
  }
}

TEST_CASE("find_mnist_files: canonical names, gzip, '.' spelling, plain preferred, missing files") {
  const std::string dir = temp_dir("mnist_find");
  for (const char* n : {"train-images-idx3-ubyte.gz", "train-images-idx3-ubyte", "train-labels.idx1-ubyte",
                        "t10k-images-idx3-ubyte.gz", "README"})
    write_raw(dir + "/" + n, {0});
  MnistFiles f = find_mnist_files(dir);
  CHECK(f.train_images == dir + "/train-images-idx3-ubyte");
  CHECK(f.train_labels == dir + "/train-labels.idx1-ubyte");
  CHECK(f.test_images == dir + "/t10k-images-idx3-ubyte.gz");
  CHECK(f.test_labels.empty());
  CHECK(f.has_train());
  CHECK_FALSE(f.has_test());
  CHECK(has(error_of([&] { find_mnist_files(dir + "/nope"); }), dir + "/nope"));
}

TEST_CASE("idx: Debian's Fashion-MNIST files read with the expected shapes and label range") {
  const std::string folder = "/usr/share/datasets/fashion-mnist";
  if (!fs::is_directory(folder)) {
    MESSAGE("skipped: ", folder, " not installed (apt-get install dataset-fashion-mnist)");
    return;
  }
  MnistFiles f = find_mnist_files(folder);
  REQUIRE(f.has_train());
  REQUIRE(f.has_test());
  HostArray ti = read_idx(f.test_images), tl = read_idx(f.test_labels);
  CHECK(ti.shape == Shape{10000, 28, 28});
  CHECK(tl.shape == Shape{10000});
  int counts[10] = {0};
  for (int64_t i = 0; i < tl.numel(); ++i) {
    REQUIRE(tl.bytes[(size_t)i] < 10);
    ++counts[tl.bytes[(size_t)i]];
  }
  for (int c : counts) CHECK(c == 1000);  // the test split is balanced
  HostArray tr = read_idx(f.train_labels);
  CHECK(tr.shape == Shape{60000});
}
