// Data-parallel keyed random rows: while an RngRowsGuard is alive, a per-row random op (dropout) on
// this rank's `count` rows draws for rows [first, first + count) of a global batch of `total` rows.
// Global row r uses a counter window of its own from the global generator (engine/core/generator.h),
// so its draws depend on (seed, offset, r) only, never on the rank or the row's place in the rank's
// batch, and every rank reserves all `total` rows' windows (the generator advances alike on every
// rank). train_step sets it around each data-parallel forward; a checkpoint recompute replays it.
// Process-wide, like the generator; must not know ranks or tensors.
#pragma once
#include <cstdint>

namespace kiln {

struct RngRows {
  int64_t first = 0, count = 0, total = -1;  // total < 0: no keyed rows (each op draws for its own elements)
};

RngRows& rng_rows();

// Sets rng_rows() for its lifetime and restores the previous value.
class RngRowsGuard {
 public:
  explicit RngRowsGuard(RngRows rows) : saved_(rng_rows()) { rng_rows() = rows; }
  ~RngRowsGuard() { rng_rows() = saved_; }
  RngRowsGuard(const RngRowsGuard&) = delete;
  RngRowsGuard& operator=(const RngRowsGuard&) = delete;

 private:
  RngRows saved_;
};

}  // namespace kiln
