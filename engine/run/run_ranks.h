// A run's data-parallel ranks (`mpirun -n N kiln train`, engine/dist/): the start-up
// checks every rank makes (a launcher without MPI in this build, flags that differ from rank 0's) and what
// a rank other than 0 trains with (no output files, nothing printed). Must not train or touch tensors.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include "engine/dist/process_group.h"
#include "engine/run/run_config.h"

namespace kiln {

// Ranks a launcher asked for (mpirun, srun), read from its environment; 1 when none is named.
int64_t launcher_ranks();

// Throws (on every rank of `group` together) when this process is one of several ranks but the build has
// no MPI (each rank would train alone on the same files), or when the training flags differ from rank 0's
// (output paths, --threads and --device may differ; the error names the flags).
void check_rank_launch(const RunConfig& c, dist::ProcessGroup& group);

// The device a rank trains on: one GPU per process, so `--device cuda` (or auto, finding GPUs) without an
// index becomes cuda:(the rank's local rank on its node, modulo the GPUs visible) when the group has more
// than one rank (local rank: OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID or SLURM_LOCALID, else the rank);
// an explicit cuda:N, cpu, or one process: `spec` unchanged.
std::string rank_device(const std::string& spec, dist::ProcessGroup& group);

// `c` for a rank other than 0: no ledger, state files, --save, reports, memory snapshots or traces.
RunConfig silent_rank_config(const RunConfig& c);

// A stream that drops everything (what ranks other than 0 print to).
std::ostream& null_stream();

}  // namespace kiln
