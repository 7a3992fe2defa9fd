// `kiln train --nproc N` through mpirun (see launch_ranks.h).
#include "tools/launch_ranks.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/usage_error.h"
#include "engine/dist/process_group.h"

namespace kiln_cli {

void launch_ranks(int nproc, int argc, char** argv) {
  using kiln::UsageError;
  if (!kiln::dist::built_with_mpi())
    throw UsageError("--nproc: this kiln was built without MPI (KILN_MPI=OFF or no libopenmpi-dev at build time)");
  if (kiln::dist::launched_by_mpi())
    throw UsageError("--nproc: already one rank of an MPI launch (give either mpirun -n N or --nproc N)");
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  std::vector<std::string> args = {"mpirun", "-n", std::to_string(nproc), ec ? std::string(argv[0]) : self};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--nproc") {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--nproc=", 0) == 0) continue;
    args.push_back(a);
  }
  // Open MPI's mpirun refuses to run as root unless told to (and stops with its own warning, exit 1):
  // a launch kiln starts itself says so for the user, once, when they have not decided already.
  if (::geteuid() == 0) {
    std::string set;
    for (const char* var : {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"})
      if (!std::getenv(var)) {
        ::setenv(var, "1", 0);
        set += std::string(set.empty() ? "" : " ") + var + "=1";
      }
    if (!set.empty())
      std::printf("--nproc: running as root: set %s for mpirun (Open MPI refuses root without them; set them "
                  "yourself to choose otherwise)\n", set.c_str());
  }
  std::fflush(stdout);  // exec discards what is buffered
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execvp("mpirun", cargs.data());
  throw UsageError(std::string("--nproc: cannot start mpirun (") + std::strerror(errno) +
                   "; install openmpi-bin, or start the ranks yourself: mpirun -n N kiln train ...)");
}

}  // namespace kiln_cli
