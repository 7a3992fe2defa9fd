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

std::vector<ShardRange> micro_batch_ranges(int64_t rows, int64_t accum) {
  KILN_CHECK(rows >= 0 && accum >= 1, "dist::micro_batch_ranges: ", rows, " rows in ", accum,
             " micro-batches (needs rows >= 0, accum >= 1)");
  std::vector<ShardRange> out;
  const int64_t micro = (rows + accum - 1) / accum;
  for (int64_t first = 0; first < rows; first += micro) out.push_back({first, std::min(rows, first + micro) - first});
  return out;
}

std::vector<ShardRange> shard_pieces(int64_t rows, int rank, int ranks, int64_t accum) {
  std::vector<ShardRange> out;
  for (const ShardRange& m : micro_batch_ranges(rows, accum)) {
    ShardRange r = shard_range(m.rows, rank, ranks);
    r.offset += m.offset;
    out.push_back(r);
  }
  return out;
}

std::vector<int64_t> RankShard::places(int64_t rows, std::vector<int64_t>* micro_rows) const {
  if (micro_rows) micro_rows->clear();
  std::vector<int64_t> out;
  if (ranks <= 1) {
    for (int64_t k = 0; k < rows; ++k) out.push_back(k);
    return out;
  }
  for (const ShardRange& r : shard_pieces(rows, rank, ranks, accum)) {
    for (int64_t k = r.offset; k < r.offset + r.rows; ++k) out.push_back(k);
    if (micro_rows && accum > 1) micro_rows->push_back(r.rows);
  }
  return out;
}

int64_t global_batch(int64_t per_rank_batch, int ranks) {
  KILN_CHECK(per_rank_batch >= 1 && ranks >= 1, "dist::global_batch: batch ", per_rank_batch, " and ranks ", ranks,
             " must be >= 1");
  return per_rank_batch * ranks;
}

}  // namespace kiln::dist
