// OpenMP + OpenBLAS thread count (see threads.h).
#include "kernels/cpu/threads.h"

#include <cblas.h>
#include <omp.h>

#include "engine/core/error.h"

namespace kiln::cpu {

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads: thread count must be >= 1, got ", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace kiln::cpu
