// The tensor helpers of ProcessGroup and the process-wide group (see process_group.h). This file
// alone is compiled with KILN_WITH_MPI (CMakeLists.txt) to pick the MPI implementation.
#include "engine/dist/process_group.h"

#include <cstdlib>
#include <mutex>

#include "engine/autograd/grad_mode.h"
#include "engine/ops/ops.h"
#ifdef KILN_WITH_MPI
#include "engine/dist/process_group_mpi.h"
#endif

namespace kiln::dist {

namespace {

// A contiguous CPU tensor is used in place; anything else through a contiguous host copy.
bool in_place(const Tensor& t) { return t.device().is_cpu() && t.is_contiguous(); }

}  // namespace

void ProcessGroup::broadcast(Tensor& t, int root) {
  KILN_CHECK(t.defined(), "dist::broadcast: an undefined tensor");
  KILN_CHECK(root >= 0 && root < size(), "dist::broadcast: root rank ", root, " outside a group of ", size());
  if (size() == 1 || t.numel() == 0) return;
  NoGradGuard no_grad;  // parameters are leaves that require grad: this write is not part of any graph
  if (in_place(t)) {
    broadcast_bytes(t.data_ptr(), (int64_t)t.nbytes(), root);
    t.bump_version();
    return;
  }
  Tensor host = contiguous(to_device(t, Device::cpu()));
  if (host.is_same(t)) host = clone(host);
  broadcast_bytes(host.data_ptr(), (int64_t)host.nbytes(), root);
  copy_(t, host);
}

void ProcessGroup::all_reduce_sum(Tensor& t) {
  KILN_CHECK(t.defined() && (t.dtype() == DType::f32 || t.dtype() == DType::f64),
             "dist::all_reduce_sum: needs an f32 or f64 tensor, got ", t.defined() ? t.str() : "(undefined)");
  if (size() == 1 || t.numel() == 0) return;
  NoGradGuard no_grad;
  Tensor host = in_place(t) ? t : contiguous(to_device(t, Device::cpu()));
  if (!in_place(t) && host.is_same(t)) host = clone(host);
  if (t.dtype() == DType::f32) all_reduce_sum(host.data<float>(), host.numel());
  else all_reduce_sum(host.data<double>(), host.numel());
  if (host.is_same(t)) t.bump_version();
  else copy_(t, host);
}

std::string ProcessGroup::stall_reason() const {
  if (size() == 2) return str_cat("rank ", 1 - rank(), " died or hangs");
  return "a peer rank died or hangs";
}

int64_t ProcessGroup::sum(int64_t v) {
  all_reduce_sum(&v, 1);
  return v;
}

bool built_with_mpi() {
#ifdef KILN_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

namespace {
std::unique_ptr<ProcessGroup>& world_slot() {
  static std::unique_ptr<ProcessGroup> g;  // destroyed at exit: MPI_Finalize
  return g;
}
}  // namespace

ProcessGroup& world() {
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef KILN_WITH_MPI
    if (launched_by_mpi()) {
      world_slot() = make_mpi_process_group();
      return;
    }
#endif
    world_slot() = make_single_process_group();
  });
  return *world_slot();
}

bool world_is_distributed() { return world_slot() && world_slot()->size() > 1; }

}  // namespace kiln::dist
