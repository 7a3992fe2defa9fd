// atomic_write_file: replaces contents, leaves no temporary, and on failure leaves the old file
// and no temporary behind, with an error naming the path.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/file_bytes.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {
std::string temp_dir(const char* name) {
  fs::path p = fs::temp_directory_path() / ("kiln_test_io_" + std::to_string(::getpid())) / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}
// The io tests share /tmp/kiln_test_io_<pid>; remove it when the test program exits.
struct RemoveIoTempAtExit {
  ~RemoveIoTempAtExit() {
    std::error_code ec;
    fs::remove_all(fs::temp_directory_path() / ("kiln_test_io_" + std::to_string(::getpid())), ec);
  }
} remove_io_temp_at_exit;
int count_entries(const std::string& dir) {
  int n = 0;
  for (auto& e : fs::directory_iterator(dir)) n += (int)!e.path().empty();
  return n;
}
}  // namespace

TEST_CASE("atomic_write_file writes, overwrites and leaves only the target") {
  const std::string dir = temp_dir("atomic_ok");
  const std::string path = dir + "/ckpt.bin";
  atomic_write_file(path, std::vector<uint8_t>{1, 2, 3});
  CHECK(read_file_bytes(path) == std::vector<uint8_t>{1, 2, 3});
  atomic_write_file(path, std::vector<uint8_t>{9});
  CHECK(read_file_bytes(path) == std::vector<uint8_t>{9});
  atomic_write_file(path, std::vector<uint8_t>{});
  CHECK(read_file_bytes(path).empty());
  CHECK(count_entries(dir) == 1);
}

TEST_CASE("atomic_write_file failure keeps the old state and removes the temporary") {
  const std::string dir = temp_dir("atomic_fail");
  // The target is a non-empty directory: the rename must fail after the temporary was written.
  const std::string target = dir + "/occupied";
  fs::create_directories(target + "/inside");
  std::string msg;
  try {
    atomic_write_file(target, std::vector<uint8_t>{1, 2});
  } catch (const kiln::Error& e) {
    msg = e.what();
  }
  CAPTURE(msg);
  CHECK(msg.find(target) != std::string::npos);
  CHECK(msg.find("rename") != std::string::npos);
  CHECK(fs::is_directory(target + "/inside"));
  CHECK(count_entries(dir) == 1);  // no "<path>.tmp.<pid>" left behind

  std::string msg2;
  try {
    atomic_write_file(dir + "/missing/sub/file", std::vector<uint8_t>{1});
  } catch (const kiln::Error& e) {
    msg2 = e.what();
  }
  CHECK(msg2.find(dir + "/missing/sub/file") != std::string::npos);
  CHECK(msg2.find("cannot create") != std::string::npos);
}

TEST_CASE("read_file_bytes names the path when it cannot read") {
  const std::string dir = temp_dir("read_fail");
  std::string msg;
  try {
    read_file_bytes(dir + "/absent");
  } catch (const kiln::Error& e) {
    msg = e.what();
  }
  CHECK(msg.find(dir + "/absent") != std::string::npos);
  msg.clear();
  try {
    read_file_bytes(dir);  // a directory
  } catch (const kiln::Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("not a regular file") != std::string::npos);
}
