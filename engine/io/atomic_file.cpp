// Write-to-temporary, fsync, rename, fsync(directory).
#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace kiln {

namespace {

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

[[noreturn]] void fail(const std::string& path, const std::string& tmp, const char* what, int err) {
  ::unlink(tmp.c_str());
  throw Error(str_cat(path, ": atomic write failed: ", what, " ", tmp, " (", std::strerror(err), ")"));
}

}  // namespace

void atomic_write_file(const std::string& path, const void* data, size_t size) {
  KILN_CHECK(!path.empty(), "atomic_write_file: empty path");
  const std::string tmp = str_cat(path, ".tmp.", (long)::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    throw Error(str_cat(path, ": atomic write failed: cannot create ", tmp, " (", std::strerror(e), ")"));
  }
  const uint8_t* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t w = ::write(fd, p + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      ::close(fd);
      fail(path, tmp, "write to", e);
    }
    done += (size_t)w;
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, tmp, "fsync of", e);
  }
  if (::close(fd) != 0) fail(path, tmp, "close of", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(path, tmp, "rename of", errno);
  // Make the rename itself durable; a failure here cannot undo it, so it is not an error.
  int dfd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void atomic_write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  atomic_write_file(path, bytes.data(), bytes.size());
}

}  // namespace kiln
