// Start-up checks and the silent configuration of data-parallel ranks (see train_ranks.h).
#include "engine/run/run_ranks.h"

#include <algorithm>
#include <cstdlib>
#include <streambuf>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/devices.h"
#include "engine/core/error.h"

namespace kiln {

namespace {
// Data-parallel: every rank must train with rank 0's flags (a launcher started with another command line
// per rank, mpirun's `A : B`, or a wrapper script, could give them others). Output paths, --threads and
// --device may differ. Every rank learns the outcome (one small all-reduce), so all stop together; the
// error names the rank and the flags that differ.
void check_same_flags(const RunConfig& c, dist::ProcessGroup& group) {
  nlohmann::json mine = c.to_json();
  for (const char* key : {"out", "save", "report", "memory_report", "alloc", "threads", "device"}) mine.erase(key);
  std::string text = mine.dump();
  int64_t length = (int64_t)text.size();
  group.broadcast_bytes(&length, sizeof length, 0);
  std::string root_text = text;
  root_text.resize((size_t)length);
  group.broadcast_bytes(root_text.data(), length, 0);
  const bool differs = root_text != text;
  const int64_t ranks_differing = group.sum(differs ? 1 : 0);
  if (ranks_differing == 0) return;
  if (!differs)
    throw Error(str_cat("data-parallel: ", ranks_differing, " rank(s) were started with other flags than rank 0 ",
                        "(their own errors name them)"));
  const nlohmann::json root = nlohmann::json::parse(root_text);
  std::string keys;
  for (auto it = mine.begin(); it != mine.end(); ++it)
    if (!root.contains(it.key()) || root[it.key()] != it.value())
      keys += str_cat(keys.empty() ? "" : "; ", it.key(), ": rank 0 has ",
                      root.contains(it.key()) ? root[it.key()].dump() : "(none)", ", this rank ", it.value().dump());
  for (auto it = root.begin(); it != root.end(); ++it)
    if (!mine.contains(it.key())) keys += str_cat(keys.empty() ? "" : "; ", it.key(), ": rank 0 has ", it.value().dump(),
                                                  ", this rank (none)");
  throw Error(str_cat("data-parallel: this rank was started with other flags than rank 0: ", keys,
                      " (every rank must get the same training flags)"));
}

// A stream that drops everything: what ranks other than 0 print to.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return traits_type::not_eof(c); }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

}  // namespace

int64_t launcher_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* v = std::getenv(var)) return std::max<int64_t>(1, std::atoll(v));
  return 1;
}

void check_rank_launch(const RunConfig& c, dist::ProcessGroup& group) {
  if (group.size() == 1 && launcher_ranks() > 1)
    throw Error(str_cat("train: started as one of ", launcher_ranks(), " ranks, but this kiln was built without MPI ",
                        "(KILN_MPI=OFF or no MPI library at build time): each rank would train alone and write the ",
                        "same files; rebuild with libopenmpi-dev installed, or run without mpirun"));
  if (group.size() > 1) check_same_flags(c, group);
}

std::string rank_device(const std::string& spec, dist::ProcessGroup& group) {
  if (group.size() == 1 || (spec != "cuda" && spec != "auto")) return spec;
  const DeviceReport r = query_devices();
  if (r.gpus.empty()) return spec;  // auto: the CPU; cuda: resolve_device names why there is no GPU
  int64_t local = group.rank();
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) {
      local = std::atoll(v);
      break;
    }
  return str_cat("cuda:", local % (int64_t)r.gpus.size());
}

RunConfig silent_rank_config(const RunConfig& c) {
  RunConfig quiet = c;
  quiet.out.clear();
  quiet.save.clear();
  quiet.report.clear();
  quiet.memory_report.clear();
  quiet.alloc.memory_snapshot.clear();
  quiet.alloc.trace.clear();
  quiet.alloc.alloc_trace.clear();
  return quiet;
}

std::ostream& null_stream() {
  static NullBuffer nothing;
  static std::ostream stream(&nothing);
  return stream;
}

}  // namespace kiln
