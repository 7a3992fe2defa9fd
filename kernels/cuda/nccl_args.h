// The plain arithmetic of kernels/cuda/nccl_comm.cpp's NCCL calls: the version code ncclGetVersion
// returns, decoded; the count, data type and operation of the gradient all-reduce; the rank check
// before ncclCommInitRank. nccl_comm.cpp calls these and only translates the enums to NCCL's;
// tests/unit/test_cuda_nccl_args.cpp checks them on the CPU. Includes no CUDA or NCCL header and
// must not: it is compiled into every build.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/core/error.h"

namespace kiln::cuda {

// "NCCL 2.21.5" from ncclGetVersion's code: NCCL_VERSION(X, Y, Z) is X*1000 + Y*100 + Z up to 2.8
// and X*10000 + Y*100 + Z from 2.9 on (nccl.h), so a code below 10000 is the old encoding.
inline std::string nccl_version_string(int code) {
  if (code < 10000) return str_cat("NCCL ", code / 1000, ".", (code % 1000) / 100, ".", code % 100);
  return str_cat("NCCL ", code / 10000, ".", (code % 10000) / 100, ".", code % 100);
}

enum class NcclType { f32 };
enum class NcclOp { sum };

// ncclAllReduce's arguments for kiln's in-place sum of n f32 elements (sendbuff == recvbuff);
// count is in elements, not bytes. n = 0 makes no call.
struct NcclAllReduceArgs {
  size_t count = 0;
  NcclType type = NcclType::f32;
  NcclOp op = NcclOp::sum;
  bool in_place = true;
};

inline NcclAllReduceArgs nccl_all_reduce_args(int64_t n, const std::string& what) {
  KILN_CHECK(n >= 0, what, ": NCCL all-reduce of a negative count ", n);
  NcclAllReduceArgs a;
  a.count = (size_t)n;
  return a;
}

// ncclCommInitRank's rank check: 0 <= rank < nranks, nranks >= 1.
inline bool nccl_rank_valid(int nranks, int rank) { return nranks >= 1 && rank >= 0 && rank < nranks; }

}  // namespace kiln::cuda
