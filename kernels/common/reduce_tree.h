// The combine rules and the warp/block tree of kiln's GPU row reductions (kernels/cuda/reduce.cu),
// as plain functions so that the CPU can run the very same tree (tests/unit/test_reduce_tree.cpp
// emulates a warp of 32 lanes and blocks of up to 1024 threads with them).
//
// A row of `cols` values is reduced by a group of G threads (G = 32: one warp; G = blockDim.x <= 1024:
// one block):
//   1. thread `lane` folds columns lane, lane + G, lane + 2G, ... in increasing order (thread_*);
//   2. each warp combines its 32 partials by an xor butterfly: at offsets 16, 8, 4, 2, 1 lane l takes
//      the partial of lane l ^ offset (butterfly_partner); afterwards every lane holds the warp's result;
//   3. (block only) warp w's lane 0 stores its result in slot w; warp lanes l < nwarps read slot l, the
//      others take the empty value (block_slot_read), and the butterfly runs again.
// Max/min with argmax: NaN beats every number and, among NaNs, the lowest column wins; otherwise the
// larger (max) / smaller (min) value wins and ties go to the lowest column (the CPU backend's "first
// extreme, first NaN"). The empty value (a lane with no column) has index -1: it never beats a real
// candidate and is never dereferenced. Because the rule is a total order on distinct columns, the
// combine is commutative and associative, so every tree shape gives the CPU's answer.
// Sums fold in f64 in the order above (not the CPU's sequential order: equal up to rounding).
// Must not hold launch code or device intrinsics (no shuffles, no shared memory): those stay in
// kernels/cuda.
#pragma once
#include <cstdint>

#include "engine/core/host_device.h"

namespace kiln::reduce_tree {

constexpr int kWarp = 32;
constexpr int kMaxBlock = 1024;  // threads; at most 32 warps, so one warp holds the second level

// A max/min candidate: value (as double) and its column; i < 0 means "no candidate" (empty lane).
struct ArgBest {
  double v;
  int64_t i;
};

KILN_HOST_DEVICE ArgBest arg_empty() { return ArgBest{0.0, -1}; }
KILN_HOST_DEVICE bool arg_is_empty(const ArgBest& a) { return a.i < 0; }

// Does candidate a beat candidate b? An empty candidate never wins; any real one beats an empty one.
KILN_HOST_DEVICE bool arg_beats(const ArgBest& a, const ArgBest& b, bool is_max) {
  if (a.i < 0) return false;
  if (b.i < 0) return true;
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) return an && (!bn || a.i < b.i);
  if (a.v != b.v) return is_max ? a.v > b.v : a.v < b.v;
  return a.i < b.i;
}

// The better of two candidates (the same answer whichever order they come in).
KILN_HOST_DEVICE ArgBest arg_combine(const ArgBest& a, const ArgBest& b, bool is_max) {
  return arg_beats(b, a, is_max) ? b : a;
}

// Step 1 for one column value: fold column c (value v) into a thread's running candidate.
KILN_HOST_DEVICE ArgBest arg_fold(const ArgBest& acc, double v, int64_t c, bool is_max) {
  return arg_combine(acc, ArgBest{v, c}, is_max);
}

// Step 1: thread `lane` of a group of G visits columns lane, lane + G, ... < cols. These give the loop.
KILN_HOST_DEVICE int64_t thread_first_col(int lane) { return lane; }
KILN_HOST_DEVICE int64_t thread_col_step(int group) { return group; }

// Step 1 as a whole, for any loader `load(c) -> double` (used by the CPU emulation; the kernel
// writes the same loop with its typed load).
template <typename Load>
KILN_HOST_DEVICE ArgBest thread_arg(const Load& load, int64_t cols, int lane, int group, bool is_max) {
  ArgBest b = arg_empty();
  for (int64_t c = thread_first_col(lane); c < cols; c += thread_col_step(group)) b = arg_fold(b, load(c), c, is_max);
  return b;
}
template <typename Load>
KILN_HOST_DEVICE double thread_sum(const Load& load, int64_t cols, int lane, int group) {
  double s = 0;
  for (int64_t c = thread_first_col(lane); c < cols; c += thread_col_step(group)) s += load(c);
  return s;
}

// Step 2: the butterfly offsets are 16, 8, 4, 2, 1 (first_offset, then next_offset until 0).
KILN_HOST_DEVICE int butterfly_first_offset() { return kWarp / 2; }
KILN_HOST_DEVICE int butterfly_next_offset(int o) { return o >> 1; }
KILN_HOST_DEVICE int butterfly_partner(int lane, int o) { return lane ^ o; }

// Sum combine of step 2/3 (a fixed order per lane: own partial + partner's).
KILN_HOST_DEVICE double sum_combine(double own, double partner) { return own + partner; }

// Step 3: the warp of thread t, its lane, the warp count of a block of `threads` (a multiple of 32),
// and whether lane l of the second level reads slot l (else it starts from the empty value: 0 for a
// sum, arg_empty() for max/min).
KILN_HOST_DEVICE int warp_of(int t) { return t / kWarp; }
KILN_HOST_DEVICE int lane_of(int t) { return t % kWarp; }
KILN_HOST_DEVICE int warps_in_block(int threads) { return threads / kWarp; }
KILN_HOST_DEVICE bool block_slot_read(int lane, int nwarps) { return lane < nwarps; }

// Which group reduces a row of `cols`: one warp per row up to this many columns, one block beyond.
constexpr int64_t kWarpRowMaxCols = 4096;
constexpr int kBlockRowThreads = 1024;
KILN_HOST_DEVICE bool use_block_rows(int64_t cols) { return cols > kWarpRowMaxCols; }

// The column the result value is read from, or -1 when the row had no column (nothing is read).
KILN_HOST_DEVICE int64_t result_col(const ArgBest& b, int64_t cols) { return (b.i >= 0 && b.i < cols) ? b.i : -1; }

}  // namespace kiln::reduce_tree
