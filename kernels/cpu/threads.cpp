// OpenMP + OpenBLAS thread count (see threads.h).
#include "kernels/cpu/threads.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <cstdlib>

#include "engine/core/error.h"

namespace kiln::cpu {

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: thread count must be >= 1, got ", n);
  omp_set_num_threads(n);
  // kiln splits GEMMs over OpenMP threads itself (see gemm.cpp); OpenBLAS stays single-threaded
  // so that only one thread pool runs on the cores.
  openblas_set_num_threads(1);
}

int num_threads() { return omp_get_max_threads(); }

ThreadScope::ThreadScope(int n) : previous_(num_threads()), changed_(n > 0 && n != previous_) {
  if (changed_) set_num_threads(n);
}

ThreadScope::~ThreadScope() {
  if (changed_) set_num_threads(previous_);
}

void ensure_omp_wait_policy(char** argv, const char* policy, const char* spin) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || argv == nullptr || argv[0] == nullptr) return;
  if (setenv("OMP_WAIT_POLICY", policy, 1) != 0) return;
  if (spin != nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) setenv("GOMP_SPINCOUNT", spin, 1);
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) setenv("OPENBLAS_NUM_THREADS", "1", 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with libgomp's default policy (slower, still correct).
}

}  // namespace kiln::cpu
