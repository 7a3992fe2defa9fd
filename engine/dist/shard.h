// The data rule of data-parallel training, as pure functions (no MPI, no tensors): a global batch
// of `rows` samples, cut from the epoch's permutation (the same on every rank), is split among
// `ranks` ranks as evenly as possible, in rank order: the first rows % ranks ranks get one row more.
// Each rank's loss is weighted by its rows / the global rows, so the sum over ranks of the gradients
// is one process's gradient over the global batch. A rank may get no row (a short last batch); it
// still takes part in every collective. Must not know devices or data sets.
#pragma once
#include <cstdint>

namespace kiln::dist {

struct ShardRange {
  int64_t offset = 0;  // first row of the global batch that this rank takes
  int64_t rows = 0;    // rows it takes (may be 0)
};

// Rank `rank`'s rows of a global batch of `rows` rows split among `ranks` ranks; throws on rows < 0,
// ranks < 1 or a rank outside [0, ranks).
ShardRange shard_range(int64_t rows, int rank, int ranks);

// The global batch of a data-parallel step: `per_rank_batch` (the --batch flag) times the ranks.
int64_t global_batch(int64_t per_rank_batch, int ranks);

}  // namespace kiln::dist
