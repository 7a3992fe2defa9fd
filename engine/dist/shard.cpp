// The data rule of data-parallel training (see shard.h).
#include "engine/dist/shard.h"

#include <algorithm>

#include "engine/core/error.h"

namespace kiln::dist {

ShardRange shard_range(int64_t rows, int rank, int ranks) {
  KILN_CHECK(rows >= 0 && ranks >= 1 && rank >= 0 && rank < ranks, "dist::shard_range: rank ", rank, " of ", ranks,
             " ranks, ", rows, " rows (needs rows >= 0, ranks >= 1, 0 <= rank < ranks)");
  const int64_t base = rows / ranks, extra = rows % ranks;
  ShardRange r;
  r.offset = (int64_t)rank * base + std::min<int64_t>(rank, extra);
  r.rows = base + (rank < extra ? 1 : 0);
  return r;
}

int64_t global_batch(int64_t per_rank_batch, int ranks) {
  KILN_CHECK(per_rank_batch >= 1 && ranks >= 1, "dist::global_batch: batch ", per_rank_batch, " and ranks ", ranks,
             " must be >= 1");
  return per_rank_batch * ranks;
}

}  // namespace kiln::dist
