// The data rule of data-parallel training, as pure functions (no MPI, no tensors): a global batch
// of `rows` samples, cut from the epoch's permutation (the same on every rank), is split among
// `ranks` ranks as evenly as possible, in rank order: the first rows % ranks ranks get one row more.
// Each rank's loss is weighted by its rows / the global rows, so the sum over ranks of the gradients
// is one process's gradient over the global batch. A rank may get no row (a short last batch); it
// still takes part in every collective. With gradient accumulation (accum > 1) the global batch is
// first cut into one process's micro-batches (micro_batch_ranges) and each of them is split among the
// ranks (shard_pieces), so a rank's micro-batch k is its share of one process's micro-batch k: the
// batch-norm statistics summed over the ranks (--sync-bn) are then those one process computes.
// Must not know devices or data sets.
#pragma once
#include <cstdint>
#include <vector>

namespace kiln::dist {

struct ShardRange {
  int64_t offset = 0;  // first row of the global batch that this rank takes
  int64_t rows = 0;    // rows it takes (may be 0)
};

// Rank `rank`'s rows of a global batch of `rows` rows split among `ranks` ranks; throws on rows < 0,
// ranks < 1 or a rank outside [0, ranks).
ShardRange shard_range(int64_t rows, int rank, int ranks);

// One process's micro-batches of a batch of `rows` rows: consecutive, ceil(rows / accum) rows each, the
// last one shorter (so there may be fewer than accum); none for rows == 0. Throws on rows < 0, accum < 1.
std::vector<ShardRange> micro_batch_ranges(int64_t rows, int64_t accum);

// Rank `rank`'s share of each of micro_batch_ranges(rows, accum), offsets in the global batch (a share
// may have no row). accum == 1, rows > 0: { shard_range(rows, rank, ranks) }. Concatenated over the micro-batches,
// the shares are the rows the rank's data source delivers.
std::vector<ShardRange> shard_pieces(int64_t rows, int rank, int ranks, int64_t accum);

// One rank's part of every global batch, as a data source keeps it (DataSource::shard). ranks == 1: the
// whole batch.
struct RankShard {
  int rank = 0, ranks = 1;
  int64_t accum = 1;
  // The rows (places in a global batch of `rows`) this rank takes, in delivery order: its shares of the
  // micro-batches one after another. micro_rows (if not null) gets each share's row count when accum > 1
  // and ranks > 1 (Batch::micro_rows), else is cleared.
  std::vector<int64_t> places(int64_t rows, std::vector<int64_t>* micro_rows = nullptr) const;
};

// The global batch of a data-parallel step: `per_rank_batch` (the --batch flag) times the ranks.
int64_t global_batch(int64_t per_rank_batch, int ranks);

}  // namespace kiln::dist
