// Atomic file replacement: the bytes go to "<path>.tmp.<pid>", are flushed to disk, and the
// temporary is renamed over `path`, so a reader (or a crash) sees the old file or the new one,
// never a half-written one. Used by safetensors/npy writers and checkpoints. Must not be used for
// appends (the run ledger appends lines; it needs no rename).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// Throws kiln::Error naming the path and the OS reason; on failure the temporary is removed and
// an existing file at `path` is left untouched.
void atomic_write_file(const std::string& path, const void* data, size_t size);
void atomic_write_file(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace kiln
