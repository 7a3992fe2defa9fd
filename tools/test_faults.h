// The fault-injection switches of kiln's tests, read from the environment by the `kiln` command and
// nothing else (they are not part of the library): before optimizer step S (1-based) rank R
//   KILN_TEST_FAIL_RANK=R:S   throws an Error (the data-parallel fault path),
//   KILN_TEST_HANG_RANK=R:S   stops itself with SIGSTOP (it hangs: --dist-timeout),
//   KILN_TEST_KILL_RANK=R:S   kills itself with SIGKILL (it dies);
// and before step S of any rank
//   KILN_TEST_SHRINK_DEVICE=B:S   lowers the --device-memory limit of the CPU to B bytes (memory "taken by another
//                                 process": the out-of-memory report's case).
// (KILN_TEST_KILL_WRITE_AT, the kill inside a file write, lives in engine/io/atomic_file.cpp.)
#pragma once
#include <cstdint>

namespace kiln_cli {

class TestFaults {
 public:
  TestFaults();  // reads the environment; a malformed value is ignored
  // Call before each optimizer step: `global_step` steps are done, this process is rank `rank`.
  void before_step(int rank, int64_t global_step) const;

 private:
  int fail_rank_ = -1, signal_rank_[2] = {-1, -1};
  int64_t fail_step_ = -1, signal_step_[2] = {-1, -1};
  long long shrink_bytes_ = -1, shrink_step_ = -1;
};

}  // namespace kiln_cli
