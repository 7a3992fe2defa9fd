// Atomic file replacement: the bytes go to "<path>.tmp.<pid>", are flushed to disk, and the
// temporary is renamed over `path`, so a reader (or a crash) sees the old file or the new one,
// never a half-written one. Used by safetensors/npy writers and checkpoints. Must not be used for
// appends (the run ledger appends lines; it needs no rename).
// Test hook: with KILN_TEST_KILL_WRITE_AT=K in the environment the process raises SIGKILL on
// itself once K bytes (counted over all atomic writes of the process) have gone into temporaries,
// so a test can stop a writer deterministically in the middle of a file.
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

// Removes the temporaries "<path>.tmp.<pid>" left by writers that no longer run (a process killed
// mid-write); those of running processes are kept. Returns the paths removed.
std::vector<std::string> remove_stale_temporaries(const std::string& path);

// Throws kiln::Error "WHAT DIR: ..." when a file cannot be created in folder `dir` (missing, not a
// folder, read-only, no permission): a probe file is created and removed.
void check_writable_dir(const std::string& dir, const std::string& what);

}  // namespace kiln
