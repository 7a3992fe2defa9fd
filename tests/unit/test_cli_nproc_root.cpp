// `kiln train --nproc 2` as root (issue 34, item 6): Open MPI's mpirun refuses root unless
// OMPI_ALLOW_RUN_AS_ROOT and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM are set, so the launch kiln starts itself sets
// both where unset and prints one line saying so; a value the user set is kept, and no line is printed.
// A stand-in mpirun first on PATH prints the environment and the arguments it got (no MPI job runs).
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/dist/process_group.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;

TEST_CASE("cli nproc: as root, the mpirun kiln starts gets OMPI_ALLOW_RUN_AS_ROOT and its confirmation, said in one line") {
  if (!kiln::dist::built_with_mpi()) {
    MESSAGE("skipped: this kiln is built without MPI (--nproc refuses)");
    return;
  }
  const std::string d = kiln_test::cli_temp_dir("nproc_root");
  std::ofstream(d + "/mpirun") << "#!/bin/sh\necho \"fake mpirun: $* allow=${OMPI_ALLOW_RUN_AS_ROOT:-unset} "
                                  "confirm=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-unset}\"\n";
  std::filesystem::permissions(d + "/mpirun", std::filesystem::perms::owner_all);
  const std::string env = "env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM -u OMPI_COMM_WORLD_SIZE "
                          "-u PMIX_RANK PATH=" + d + ":$PATH";
  const kiln_test::CliRun r = run_kiln("train --nproc 2 --model small_cnn --data " + d + " --out " + d + "/out", env);
  CAPTURE(r.output);
  CHECK(r.status == 0);
  CHECK(contains(r.output, "fake mpirun: -n 2 "));
  CHECK_FALSE(contains(r.output, "--nproc 2"));
  if (::geteuid() == 0) {
    CHECK(contains(r.output, "--nproc: running as root: set OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                             "for mpirun"));
    CHECK(contains(r.output, "allow=1 confirm=1"));
  } else {
    CHECK_FALSE(contains(r.output, "running as root"));
    CHECK(contains(r.output, "allow=unset confirm=unset"));
  }
  // The user's own choice is kept, and nothing is said.
  const kiln_test::CliRun own = run_kiln("train --nproc 2 --model small_cnn --data " + d + " --out " + d + "/out",
                                         env + " OMPI_ALLOW_RUN_AS_ROOT=0 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=0");
  CAPTURE(own.output);
  CHECK(contains(own.output, "allow=0 confirm=0"));
  CHECK_FALSE(contains(own.output, "running as root"));
}
