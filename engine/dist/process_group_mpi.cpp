// ProcessGroup over MPI_COMM_WORLD (see process_group_mpi.h). Counts above INT_MAX go in chunks
// (MPI counts are int). Every MPI error is a kiln::Error naming the call and the rank.
#include "engine/dist/process_group_mpi.h"

// The C API only: OpenMPI's and MPICH's mpi.h would pull in their deprecated C++ bindings (another library).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <string>

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
      check_mpi(MPI_Bcast(p + at, n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast", rank_);
    }
  }
  void all_reduce_sum(float* data, int64_t n) override { reduce(data, n, MPI_FLOAT); }
  void all_reduce_sum(double* data, int64_t n) override { reduce(data, n, MPI_DOUBLE); }
  void all_reduce_sum(int64_t* data, int64_t n) override { reduce(data, n, MPI_INT64_T); }
  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", rank_); }
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
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + at, count, type, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce", rank_);
    }
  }

  int rank_ = 0, size_ = 1;
  bool owns_init_ = false;
  bool threads_ok_ = false;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_mpi_process_group() { return std::make_unique<MpiProcessGroup>(); }

}  // namespace kiln::dist
