// IDX parsing, gzip inflation through zlib, MNIST file discovery.
#include "engine/io/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "engine/io/file_bytes.h"

namespace kiln {

namespace {

uint32_t be32(const uint8_t* p) { return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]; }

}  // namespace

bool is_gzip(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

std::vector<uint8_t> gunzip(const uint8_t* data, size_t size, const std::string& source, uint64_t max_out) {
  std::vector<uint8_t> out;
  out.reserve(std::min<uint64_t>(max_out, (uint64_t)size * 4 + 1024));
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  KILN_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK, source, ": gzip: zlib init failed");
  zs.next_in = const_cast<Bytef*>(data);
  zs.avail_in = 0;
  size_t consumed = 0;
  uint8_t buf[1 << 16];
  for (;;) {
    if (zs.avail_in == 0 && consumed < size) {
      // zlib counts input in uInt; feed at most 1 GiB at a time.
      size_t chunk = std::min<size_t>(size - consumed, (size_t)1 << 30);
      zs.next_in = const_cast<Bytef*>(data + consumed);
      zs.avail_in = (uInt)chunk;
      consumed += chunk;
    }
    zs.next_out = buf;
    zs.avail_out = sizeof(buf);
    int rc = inflate(&zs, Z_NO_FLUSH);
    size_t produced = sizeof(buf) - zs.avail_out;
    if (out.size() + produced > max_out) {
      inflateEnd(&zs);
      throw Error(str_cat(source, ": gzip: inflated data exceeds ", max_out, " bytes"));
    }
    out.insert(out.end(), buf, buf + produced);
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow (concatenated files); anything else ends the stream.
      size_t left = zs.avail_in + (size - consumed);
      const uint8_t* next = zs.next_in;
      if (left >= 2 && is_gzip(next, left)) {
        inflateReset(&zs);
        continue;
      }
      break;
    }
    if (rc == Z_OK) continue;
    // Z_BUF_ERROR means no progress was possible: with a fresh output buffer every call, that is
    // the input running out (more to feed, or the file ends mid-stream).
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      if (consumed < size) continue;
      inflateEnd(&zs);
      throw Error(str_cat(source, ": gzip: stream truncated after ", size, " compressed bytes (", out.size(),
                          " bytes inflated)"));
    }
    std::string msg = zs.msg ? zs.msg : "error";
    inflateEnd(&zs);
    throw Error(str_cat(source, ": gzip: corrupt stream (zlib: ", msg, ")"));
  }
  inflateEnd(&zs);
  return out;
}

HostArray parse_idx(const uint8_t* data, size_t size, const std::string& source) {
  std::vector<uint8_t> inflated;
  if (is_gzip(data, size)) {
    inflated = gunzip(data, size, source);
    data = inflated.data();
    size = inflated.size();
  }
  const std::string pre = str_cat(source, ": idx: ");
  KILN_CHECK(size >= 4, pre, "file is ", size, " bytes, too short for the 4-byte magic");
  KILN_CHECK(data[0] == 0 && data[1] == 0, pre, "bad magic ", (int)data[0], " ", (int)data[1],
             " (an IDX file starts with two zero bytes)");
  const uint8_t type = data[2];
  const int ndim = data[3];
  HostArray a;
  switch (type) {
    case 0x08: a.dtype = DType::u8; break;
    case 0x0C: a.dtype = DType::i32; break;
    case 0x0D: a.dtype = DType::f32; break;
    case 0x0E: a.dtype = DType::f64; break;
    case 0x09: case 0x0B:
      throw Error(str_cat(pre, "element type 0x", std::hex, (int)type, " (i8/i16) is not supported"));
    default:
      throw Error(str_cat(pre, "unknown element type byte 0x", std::hex, (int)type));
  }
  KILN_CHECK(ndim >= 1, pre, "zero dimensions");
  KILN_CHECK(size >= 4 + 4 * (size_t)ndim, pre, "truncated: ", ndim, " dims need ", 4 + 4 * ndim,
             " header bytes, file has ", size);
  for (int i = 0; i < ndim; ++i) a.shape.push_back((int64_t)be32(data + 4 + 4 * i));
  uint64_t need = 0;
  KILN_CHECK(checked_nbytes(a.dtype, a.shape, &need), pre, "shape ", shape_str(a.shape), " overflows");
  const size_t off = 4 + 4 * (size_t)ndim;
  const uint64_t have = size - off;
  KILN_CHECK(have >= need, pre, "truncated: shape ", shape_str(a.shape), " needs ", need, " data bytes, file has ",
             have);
  KILN_CHECK(have == need, pre, have - need, " unexpected trailing bytes after the data");
  a.bytes.assign(data + off, data + off + need);
  const size_t es = dtype_size(a.dtype);
  if (es > 1) {  // big-endian on disk -> little-endian in memory
    for (size_t i = 0; i < a.bytes.size(); i += es)
      for (size_t j = 0; j < es / 2; ++j) std::swap(a.bytes[i + j], a.bytes[i + es - 1 - j]);
  }
  return a;
}

HostArray read_idx(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_idx(bytes.data(), bytes.size(), path);
}

MnistFiles find_mnist_files(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  KILN_CHECK(fs::is_directory(folder, ec), folder, ": not a directory (looking for MNIST-format IDX files)");
  MnistFiles out;
  auto pick = [&](const char* stem, const char* kind, std::string* slot) {
    // Preference order: plain before gzip, canonical '-' spelling before '.'.
    const std::string names[] = {str_cat(stem, "-", kind), str_cat(stem, ".", kind),
                                 str_cat(stem, "-", kind, ".gz"), str_cat(stem, ".", kind, ".gz")};
    for (const std::string& n : names) {
      fs::path p = fs::path(folder) / n;
      if (fs::is_regular_file(p, ec)) {
        *slot = p.string();
        return;
      }
    }
  };
  pick("train-images", "idx3-ubyte", &out.train_images);
  pick("train-labels", "idx1-ubyte", &out.train_labels);
  pick("t10k-images", "idx3-ubyte", &out.test_images);
  pick("t10k-labels", "idx1-ubyte", &out.test_labels);
  return out;
}

}  // namespace kiln
