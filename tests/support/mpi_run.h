// What the mpirun tests (tests/mpi/) share: the environment every launch runs under, and whether this build
// and machine can launch at all (else the test case returns after one message). Test support only.
#pragma once
#include <doctest/doctest.h>

#include <cstdlib>

#include "engine/dist/process_group.h"

namespace kiln_test {

// As root (CI), more ranks than cores allowed, and shared-memory copies without CMA (process_vm_readv,
// which containers without CAP_SYS_PTRACE refuse: OpenMPI's vader then fails on large messages).
inline constexpr const char* kMpiEnv =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
    "OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_WAIT_POLICY=passive";

// True when this kiln was built with MPI and mpirun is on PATH; otherwise says why (MESSAGE) and is false.
inline bool mpi_can_run() {
  if (!kiln::dist::built_with_mpi()) {
    MESSAGE("skipped: this kiln was built without MPI (KILN_MPI=OFF or no libopenmpi-dev at configure time)");
    return false;
  }
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {
    MESSAGE("skipped: no mpirun on PATH (apt-get install openmpi-bin)");
    return false;
  }
  return true;
}

}  // namespace kiln_test
