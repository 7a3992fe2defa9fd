// The tests' fault switches (see test_faults.h).
#include "tools/test_faults.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

namespace kiln_cli {

namespace {
void read(const char* name, int* rank, int64_t* step) {
  long long s = -1;
  if (const char* v = std::getenv(name))
    if (std::sscanf(v, "%d:%lld", rank, &s) == 2) {
      *step = s;
      return;
    }
  *rank = -1;
}
}  // namespace

TestFaults::TestFaults() {
  read("KILN_TEST_FAIL_RANK", &fail_rank_, &fail_step_);
  read("KILN_TEST_HANG_RANK", &signal_rank_[0], &signal_step_[0]);
  read("KILN_TEST_KILL_RANK", &signal_rank_[1], &signal_step_[1]);
  if (const char* v = std::getenv("KILN_TEST_SHRINK_DEVICE"))
    if (std::sscanf(v, "%lld:%lld", &shrink_bytes_, &shrink_step_) != 2) shrink_bytes_ = -1;
}

void TestFaults::before_step(int rank, int64_t global_step) const {
  if (shrink_bytes_ >= 0 && global_step + 1 == shrink_step_)
    kiln::set_device_memory_limit(kiln::Device::cpu(), (size_t)shrink_bytes_);
  const int signal_of[2] = {SIGSTOP, SIGKILL};
  for (int k = 0; k < 2; ++k)
    if (signal_rank_[k] == rank && global_step + 1 == signal_step_[k]) std::raise(signal_of[k]);
  if (fail_rank_ == rank && global_step + 1 == fail_step_)
    throw kiln::Error(kiln::str_cat("KILN_TEST_FAIL_RANK: rank ", fail_rank_, " fails before step ", fail_step_,
                                    " (a test of the fault path)"));
}

}  // namespace kiln_cli
