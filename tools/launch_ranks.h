// `kiln train --nproc N`: the command starts N ranks of itself through the MPI launcher, as if the user
// had typed `mpirun -n N kiln train <the other flags>` (data-parallel training, engine/dist/). Replaces
// the process (exec); returns only with an error. Must not train or parse training flags.
#pragma once

namespace kiln_cli {

// argv: the command line as main got it; --nproc N / --nproc=N is left out of what the ranks get.
// As root, OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set for mpirun where unset
// (Open MPI refuses root without them), with one line saying so.
// Throws kiln::UsageError when this kiln has no MPI, when it already runs under a launcher, or when
// mpirun cannot be started.
[[noreturn]] void launch_ranks(int nproc, int argc, char** argv);

}  // namespace kiln_cli
