// safetensors (https://github.com/huggingface/safetensors format) read and write over HostArray.
// Layout: u64 little-endian header length N, N bytes of JSON
//   {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...}
// then the data block; offsets are relative to the start of the data block.
// Reading validates the header strictly and reports one kiln::Error naming the file and the
// tensor. This file must not know about Tensor or modules (the caller maps names to parameters).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/io/host_array.h"

namespace kiln {

struct NamedArray {
  std::string name;
  HostArray array;
};

struct SafetensorsFile {
  // Ordered by data offset, i.e. the order the writer laid the tensors out (kiln's writer keeps
  // the caller's order, so a kiln write followed by a read gives the same order back).
  std::vector<NamedArray> tensors;
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" object

  const HostArray* find(const std::string& name) const;  // nullptr if absent
  const HostArray& at(const std::string& name) const;    // throws naming the missing tensor
};

// Reads and validates a file. Accepted dtypes: F32 F64 F16 BF16 I32 I64 U8; BOOL, I8, I16, U16,
// U32, U64 and F8 types are reported as known but unsupported.
SafetensorsFile read_safetensors(const std::string& path);
// Same over bytes in memory; `source` names the origin in errors (usually a path).
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& source);

// Serializes tensors in the given order (data laid out back to back in that order, header keys
// in that order after "__metadata__"), header padded with spaces to a multiple of 8 bytes as the
// reference implementation does. Names must be unique and non-empty; "__metadata__" is reserved.
std::vector<uint8_t> serialize_safetensors(const std::vector<NamedArray>& tensors,
                                           const std::map<std::string, std::string>& metadata = {});
// serialize_safetensors + atomic_write_file.
void write_safetensors(const std::string& path, const std::vector<NamedArray>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The safetensors dtype spelling of a kiln dtype ("F32", "BF16", "U8", ...).
const char* safetensors_dtype_name(DType t);

}  // namespace kiln
