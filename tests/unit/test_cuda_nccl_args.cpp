// The plain arithmetic of kernels/cuda/nccl_comm.cpp (kernels/cuda/nccl_args.h) on the CPU: the
// version code of both NCCL encodings, the all-reduce's count in elements, the rank check. No NCCL
// call runs here.
#include <doctest/doctest.h>

#include "kernels/cuda/nccl_args.h"

using namespace kiln::cuda;

TEST_CASE("NCCL arguments: version codes of both encodings, all-reduce count in elements, rank check") {
  CHECK(nccl_version_string(2804) == "NCCL 2.8.4");      // NCCL_VERSION(2, 8, 4) = 2*1000 + 8*100 + 4
  CHECK(nccl_version_string(20906) == "NCCL 2.9.6");     // from 2.9 on: 2*10000 + 9*100 + 6
  CHECK(nccl_version_string(22105) == "NCCL 2.21.5");
  CHECK(nccl_version_string(22809) == "NCCL 2.28.9");
  const NcclAllReduceArgs a = nccl_all_reduce_args(1000003, "bucket 0");
  CHECK(a.count == 1000003u);  // elements, not bytes
  CHECK(a.type == NcclType::f32);
  CHECK(a.op == NcclOp::sum);
  CHECK(a.in_place);
  CHECK(nccl_all_reduce_args(0, "bucket 1").count == 0u);
  CHECK_THROWS_WITH(nccl_all_reduce_args(-1, "bucket 2"), doctest::Contains("bucket 2: NCCL all-reduce of a negative count -1"));
  CHECK(nccl_rank_valid(1, 0));
  CHECK(nccl_rank_valid(2, 1));
  CHECK_FALSE(nccl_rank_valid(2, 2));
  CHECK_FALSE(nccl_rank_valid(0, 0));
  CHECK_FALSE(nccl_rank_valid(2, -1));
}
