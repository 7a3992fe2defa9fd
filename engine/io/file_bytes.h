// Whole-file reads into memory for the small parsers of engine/io. Errors name the path and the
// OS reason. Must not interpret the bytes (each format's parser does that).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// Reads the whole file; throws kiln::Error "<path>: cannot open (...)" / "read failed".
std::vector<uint8_t> read_file_bytes(const std::string& path);

}  // namespace kiln
