// NumPy .npy read (format versions 1.0, 2.0, 3.0) and write (1.0; 2.0 only if the header would
// not fit 1.0's 16-bit length) over HostArray. Supported element types, little-endian only:
// '<f4' '<f8' '<f2' '<i8' '<i4' '|u1' (and '<u1'); C order only. Must not guess: a fortran-order,
// big-endian, structured or otherwise unsupported file is a kiln::Error naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/host_array.h"

namespace kiln {

HostArray read_npy(const std::string& path);
// Same over bytes in memory; `source` names the origin in errors.
HostArray parse_npy(const uint8_t* data, size_t size, const std::string& source);

// bf16 has no numpy dtype and is rejected.
std::vector<uint8_t> serialize_npy(const HostArray& a);
void write_npy(const std::string& path, const HostArray& a);  // atomic (temporary + rename)

}  // namespace kiln
