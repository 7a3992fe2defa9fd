// ProcessGroup over MPI_COMM_WORLD (see process_group_mpi.h). Counts above INT_MAX go in chunks
// (MPI counts are int). Every MPI error is a kiln::Error naming the call and the rank. Each collective is
// the non-blocking call (MPI_Ibcast, MPI_Iallreduce, MPI_Ibarrier) polled with MPI_Test (which also drives
// OpenMPI's progress), sleeping between polls (10 us doubling to 200 us), until it completes or the
// timeout (set_timeout; <= 0: none) passes: then dist::Timeout (the request is left; the caller aborts the
// job). Sleeping matters on a machine with as many ranks as cores: the blocking calls spin, and a spinning
// communication thread takes the core from backward (measured on 2 loaded cores, small_cnn at batch 64
// per rank: 250 img/s with blocking MPI_Allreduce, 410 polled). But each poll moves only a few of the
// transport's fragments, so a sleeping poll throttles a large transfer (ResNet18's 45 MB took ~290 ms a
// step): while a thread waits with nothing else to run (set_urgent), the polls do not sleep.
#include "engine/dist/process_group_mpi.h"

// The C API only: OpenMPI's and MPICH's mpi.h would pull in their deprecated C++ bindings (another library).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <string>
#include <thread>

namespace kiln::dist {

namespace {

void check_mpi(int rc, const char* call, int rank) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(str_cat("dist: ", call, " failed on rank ", rank, ": ", std::string(text, (size_t)len)));
}

class MpiProcessGroup : public ProcessGroup {
 public:
  MpiProcessGroup() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread", -1);
      owns_init_ = true;
    }
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    threads_ok_ = level >= MPI_THREAD_SERIALIZED;
    // Errors come back as codes (then kiln::Error), not MPI's default abort without a message.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiProcessGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_init_ && !finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  bool allows_other_threads() const override { return threads_ok_; }

  void broadcast_bytes(void* data, int64_t bytes, int root) override {
    KILN_CHECK(root >= 0 && root < size_, "dist::broadcast: root rank ", root, " outside a group of ", size_);
    char* p = static_cast<char*>(data);
    for (int64_t at = 0; at < bytes; at += kChunk) {
      const int n = (int)std::min<int64_t>(kChunk, bytes - at);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Ibcast(p + at, n, MPI_BYTE, root, MPI_COMM_WORLD, &request), "MPI_Ibcast", rank_);
      wait(request, "MPI_Ibcast", n, "bytes");
    }
  }
  void all_reduce_sum(float* data, int64_t n) override { reduce(data, n, MPI_FLOAT); }
  void all_reduce_sum(double* data, int64_t n) override { reduce(data, n, MPI_DOUBLE); }
  void all_reduce_sum(int64_t* data, int64_t n) override { reduce(data, n, MPI_INT64_T); }
  void barrier() override {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier", rank_);
    wait(request, "MPI_Ibarrier", 0, "");
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; in case an implementation does
  }

 private:
  static constexpr int64_t kChunk = INT_MAX / 16 * 8;  // elements or bytes per call, well under INT_MAX

  template <typename T>
  void reduce(T* data, int64_t n, MPI_Datatype type) {
    for (int64_t at = 0; at < n; at += kChunk) {
      const int count = (int)std::min<int64_t>(kChunk, n - at);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data + at, count, type, MPI_SUM, MPI_COMM_WORLD, &request),
                "MPI_Iallreduce", rank_);
      wait(request, "MPI_Iallreduce", count, "elements");
    }
  }

  // Polls `request` until it completes or the timeout passes (then Timeout naming the call).
  void wait(MPI_Request& request, const char* call, int64_t count, const char* unit) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    int64_t sleep_us = 10;
    for (;;) {
      int done = 0;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test", rank_);
      if (done) return;
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (timeout_s_ > 0 && waited > timeout_s_)
      {
        const std::string what = context();
        throw Timeout(str_cat("dist: ", call, count > 0 ? str_cat(" of ", count, " ", unit) : std::string(),
                              what.empty() ? std::string() : " (" + what + ")", " did not complete within ",
                              timeout_s_, " s: ", stall_reason(), " (--dist-timeout ", timeout_s_, ")"));
      }
      if (urgent()) {
        std::this_thread::yield();
        sleep_us = 10;
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min<int64_t>(sleep_us * 2, 200);
    }
  }

  int rank_ = 0, size_ = 1;
  bool owns_init_ = false;
  bool threads_ok_ = false;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_mpi_process_group() { return std::make_unique<MpiProcessGroup>(); }

}  // namespace kiln::dist
