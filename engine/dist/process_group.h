// A process group: the ranks of a data-parallel run and the few collectives kiln's trainer needs
// (broadcast, sum all-reduce, barrier), over host memory. Two implementations: MPI
// (process_group_mpi.cpp, built with KILN_MPI, used when the process was started by mpirun / srun)
// and one process alone (process_group_single.cpp: every collective is a no-op), so the same
// binary runs with and without a launcher and a run of one process behaves exactly as before; imitated
// ranks (process_group_single.cpp too: no peers, no-op collectives) serve the memory predictor only.
// It must not know models, optimizers or data: engine/train builds gradient buckets on top of it.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/tensor/tensor.h"

namespace kiln::dist {

// A collective that did not complete within the group's timeout (set_timeout): a peer rank died, hangs
// or is stopped. The message names the call, this rank and the timeout.
class Timeout : public Error {
 public:
  explicit Timeout(const std::string& msg) : Error(msg) {}
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "single" or "mpi"
  // Whether a thread other than the one that made the group may call the collectives (one thread at a
  // time): MPI initialized with MPI_THREAD_SERIALIZED or more. Data-parallel overlap needs it.
  virtual bool allows_other_threads() const { return true; }

  // Collectives over host memory; every rank calls them in the same order with the same counts.
  virtual void broadcast_bytes(void* data, int64_t bytes, int root) = 0;
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  virtual void all_reduce_sum(double* data, int64_t n) = 0;
  virtual void all_reduce_sum(int64_t* data, int64_t n) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the group now (after this rank printed why): a failing rank must not leave
  // the others waiting in a collective. One process alone: std::exit(code).
  [[noreturn]] virtual void abort(int code) = 0;

  // Every collective waits at most `seconds` (<= 0: for ever), then throws Timeout instead of blocking
  // for ever on a rank that hangs (MPI: non-blocking calls polled with MPI_Test). One process alone: unused.
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  double timeout() const { return timeout_s_; }
  // Whether a thread is waiting for the collectives in flight with nothing else to run (the training
  // thread after backward): they then poll without sleeping, so the transfer moves at the transport's
  // speed instead of one progress call per sleep. While backward runs (false) they poll with sleeps, so
  // that a communication thread does not take the core from backward. Any thread.
  void set_urgent(bool urgent) { urgent_.store(urgent, std::memory_order_relaxed); }
  bool urgent() const { return urgent_.load(std::memory_order_relaxed); }
  // What the ranks are doing ("step 12"), named by a Timeout's message; any thread.
  void set_context(const std::string& what) {
    std::lock_guard<std::mutex> lock(context_mu_);
    context_ = what;
  }
  std::string context() const {
    std::lock_guard<std::mutex> lock(context_mu_);
    return context_;
  }
  // The reason a Timeout gives: "rank 1 died or hangs" with two ranks, else "a peer rank died or hangs".
  std::string stall_reason() const;

  // In place on every rank: root's values of `t` (any dtype and device; a tensor that is not a
  // contiguous CPU tensor goes through a host copy).
  void broadcast(Tensor& t, int root);
  // In place: the sum over ranks of an f32 / f64 tensor (any device, through a host copy when needed).
  void all_reduce_sum(Tensor& t);
  // Sum over ranks of one number.
  int64_t sum(int64_t v);

 protected:
  double timeout_s_ = 0;
  std::atomic<bool> urgent_{false};
  mutable std::mutex context_mu_;
  std::string context_;
};

// True when this build has the MPI implementation (KILN_MPI found an MPI library).
bool built_with_mpi();
// True when a launcher started this process as one rank of several or one (mpirun, srun with PMI):
// OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE or PMI_RANK is set.
bool launched_by_mpi();

// The process-wide group, made on first use: MPI when built with it and launched_by_mpi(), else one
// process alone. MPI is initialized then, and finalized at exit.
ProcessGroup& world();
// True when world() was made and has more than one rank (a failure must then abort() the group).
bool world_is_distributed();

std::unique_ptr<ProcessGroup> make_single_process_group();
// Rank `rank` of `size` ranks that exist only in imitation: every collective leaves the data unchanged
// (process_group_single.cpp). For the memory predictor's meta run of one data-parallel rank, not for training.
std::unique_ptr<ProcessGroup> make_imitated_process_group(int rank, int size);

}  // namespace kiln::dist
