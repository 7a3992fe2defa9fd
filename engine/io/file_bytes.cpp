// Whole-file read with POSIX calls so errors carry errno text.
#include "engine/io/file_bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace kiln {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK(fd >= 0, path, ": cannot open (", std::strerror(errno), ")");
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int e = errno;
    ::close(fd);
    KILN_CHECK(false, path, ": not a regular file", e ? str_cat(" (", std::strerror(e), ")") : "");
  }
  std::vector<uint8_t> out((size_t)st.st_size);
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = errno;
      ::close(fd);
      KILN_CHECK(false, path, ": read failed after ", got, " of ", out.size(), " bytes",
                 r < 0 ? str_cat(" (", std::strerror(e), ")") : std::string(" (file shrank)"));
    }
    got += (size_t)r;
  }
  ::close(fd);
  return out;
}

}  // namespace kiln
