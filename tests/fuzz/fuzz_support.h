// Shared helpers of the libFuzzer targets (tests/fuzz/fuzz_*.cpp): the invariant check that turns
// a silent wrong answer into a crash libFuzzer reports, and an in-memory file for the parsers that
// only take a path. Must not catch anything but kiln::Error (every other exception is a finding).
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/io/host_array.h"

namespace kiln::fuzz {

// Aborts with a message (libFuzzer saves the input as a crash) when an invariant does not hold.
#define FUZZ_ASSERT(cond)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

// A parsed array is self-consistent: its byte count is numel * element size.
inline void check_array(const HostArray& a) {
  uint64_t n = 0;
  FUZZ_ASSERT(checked_nbytes(a.dtype, a.shape, &n));
  FUZZ_ASSERT(n == a.bytes.size());
}

// An anonymous in-memory file (memfd) reachable by path as /proc/self/fd/N; each set() replaces
// its whole content. One per process, never closed (the fuzzer process exits).
class MemFile {
 public:
  explicit MemFile(const char* name) {
    fd_ = memfd_create(name, 0);
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& set(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0 || (size && pwrite(fd_, data, size, 0) != (ssize_t)size)) {
      std::perror("memfd write");
      std::abort();
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace kiln::fuzz
