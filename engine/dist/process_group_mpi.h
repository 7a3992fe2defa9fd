// The MPI process group (process_group_mpi.cpp, compiled only with KILN_MPI): MPI_COMM_WORLD,
// initialized with MPI_THREAD_MULTIPLE requested (a communication thread may run collectives later)
// and finalized when the group is destroyed. Must not be included by code built without MPI.
#pragma once
#include <memory>

#include "engine/dist/process_group.h"

namespace kiln::dist {

std::unique_ptr<ProcessGroup> make_mpi_process_group();

}  // namespace kiln::dist
