// IDX (the MNIST file format) reading, plain or gzip-compressed (detected by the 1f 8b magic bytes,
// not by the file name), and discovery of the four MNIST files in a folder. Header: two zero bytes,
// a type byte (0x08 u8, 0x0C i32, 0x0D f32, 0x0E f64), the number of dims, then one big-endian u32
// per dim, then big-endian data. Must not know about datasets or batches (data/ does that).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/host_array.h"

namespace kiln {

// u8 data keeps dtype u8; i32/f32/f64 are converted to little-endian. A truncated or corrupt file
// (bad magic, unsupported type, short data, broken gzip stream) is a kiln::Error naming the file.
HostArray read_idx(const std::string& path);
// Same over bytes in memory (gzip allowed); `source` names the origin in errors.
HostArray parse_idx(const uint8_t* data, size_t size, const std::string& source);

// gzip detection and inflation (all members of a multi-member stream), capped at `max_out` bytes.
bool is_gzip(const uint8_t* data, size_t size);
std::vector<uint8_t> gunzip(const uint8_t* data, size_t size, const std::string& source,
                            uint64_t max_out = (uint64_t)1 << 34);

// The MNIST / Fashion-MNIST files of a folder: "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
// "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", each optionally ".gz" and also accepted with
// '.' before "idx" (train-images.idx3-ubyte). Paths are empty for files not found; when both a plain
// and a .gz copy exist the plain one is chosen (faster to read).
struct MnistFiles {
  std::string train_images, train_labels, test_images, test_labels;
  bool has_train() const { return !train_images.empty() && !train_labels.empty(); }
  bool has_test() const { return !test_images.empty() && !test_labels.empty(); }
};
// Throws if `folder` is not a readable directory.
MnistFiles find_mnist_files(const std::string& folder);

}  // namespace kiln
