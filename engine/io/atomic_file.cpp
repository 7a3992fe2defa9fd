// Write-to-temporary, fsync, rename, fsync(directory).
#include "engine/io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
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
  const char* hint = err == ENOSPC || err == EFBIG || err == EDQUOT ? ": the disk is full or a file size limit is set"
                     : err == EROFS                                 ? ": the folder is read-only"
                                                                    : "";
  throw Error(str_cat(path, ": atomic write failed: ", what, " ", tmp, " (", std::strerror(err), hint,
                      "); the previous file is unchanged"));
}

// KILN_TEST_KILL_WRITE_AT (see atomic_file.h): bytes left before the process kills itself, -1: off.
std::atomic<int64_t>& kill_budget() {
  static std::atomic<int64_t> left{[] {
    const char* v = std::getenv("KILN_TEST_KILL_WRITE_AT");
    return v && *v ? (int64_t)std::strtoll(v, nullptr, 10) : (int64_t)-1;
  }()};
  return left;
}

// How many of `want` bytes the next write may take before the test hook fires.
size_t write_limit(size_t want) {
  const int64_t left = kill_budget().load();
  if (left < 0) return want;
  if (left == 0) ::raise(SIGKILL);
  return std::min<size_t>(want, (size_t)left);
}

void count_written(size_t n) {
  if (kill_budget().load() < 0) return;
  if (kill_budget().fetch_sub((int64_t)n) - (int64_t)n <= 0) ::raise(SIGKILL);
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
    ssize_t w = ::write(fd, p + done, write_limit(size - done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      ::close(fd);
      fail(path, tmp, "write to", e);
    }
    done += (size_t)w;
    count_written((size_t)w);
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

std::vector<std::string> remove_stale_temporaries(const std::string& path) {
  std::vector<std::string> removed;
  const std::string dir = parent_dir(path);
  const size_t slash = path.find_last_of('/');
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return removed;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid_text = name.substr(prefix.size());
    if (pid_text.find_first_not_of("0123456789") != std::string::npos || pid_text.size() > 9) continue;
    const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
    if (pid <= 0 || pid == (long)::getpid()) continue;
    if (::kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;  // that writer still runs (or is not ours)
    const std::string full = (slash == std::string::npos ? "" : path.substr(0, slash + 1)) + name;
    if (::unlink(full.c_str()) == 0) removed.push_back(full);
  }
  ::closedir(d);
  return removed;
}

void check_writable_dir(const std::string& dir, const std::string& what) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    int e = errno;
    throw Error(str_cat(what, " ", dir, ": ", e == ENOENT ? "folder does not exist" : std::strerror(e)));
  }
  KILN_CHECK(S_ISDIR(st.st_mode), what, " ", dir, ": not a folder");
  const std::string probe = str_cat(dir, "/.kiln-write-probe.", (long)::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    if (e != EEXIST) throw Error(str_cat(what, " ", dir, ": cannot write there (", std::strerror(e), ")"));
  } else {
    ::close(fd);
  }
  ::unlink(probe.c_str());
}

}  // namespace kiln
