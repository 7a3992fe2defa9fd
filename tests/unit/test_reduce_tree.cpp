// CPU emulation of the GPU row reductions (kernels/cuda/reduce.cu): the same reduce_tree.h
// functions run a warp of 32 lanes and blocks of up to 1024 threads as loops (the butterfly as 32
// lanes reading their partner's previous partial, the block's second level through 32 slots), on
// adversarial rows: all-negative, all-positive, constant, NaN, +-inf, one column, rows longer than a
// block, column counts not a multiple of 32, ties inside a lane, across lanes and across warps.
// Results are compared with the CPU backend (kernels/cpu/reduce) and with the expected column.
// A harness check runs the pre-fix rule (empty lane = {0, INT64_MAX}, compared by value first) and
// requires the harness to catch it; that keeps the emulation able to fail.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/common/reduce_tree.h"
#include "kernels/cpu/reduce.h"

using namespace kiln;
namespace rt = kiln::reduce_tree;
using rt::ArgBest;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

using Combine = std::function<ArgBest(const ArgBest&, const ArgBest&, bool)>;

// A combine rule with its empty value: the fixed one, or the pre-fix one (kept here only to show
// that the harness catches it).
struct Rule {
  Combine combine;
  ArgBest empty;
};
Rule fixed_rule() { return {rt::arg_combine, rt::arg_empty()}; }
Rule old_rule() {
  auto better = [](const ArgBest& u, const ArgBest& b, bool is_max) {  // the pre-fix better()
    const bool vn = u.v != u.v, bn = b.v != b.v;
    if (vn || bn) return vn && (!bn || u.i < b.i);
    if (u.v != b.v) return is_max ? u.v > b.v : u.v < b.v;
    return u.i < b.i;
  };
  return {[better](const ArgBest& a, const ArgBest& b, bool m) { return better(b, a, m) ? b : a; },
          ArgBest{0.0, INT64_MAX}};
}

// Step 2 on 32 lanes: at each offset every lane combines its own partial with its partner's
// previous one (as __shfl_xor_sync reads before anyone writes). Returns all lanes' results.
template <typename V, typename F>
std::array<V, 32> butterfly(std::array<V, 32> lanes, F comb) {
  for (int o = rt::butterfly_first_offset(); o > 0; o = rt::butterfly_next_offset(o)) {
    const std::array<V, 32> prev = lanes;
    for (int l = 0; l < rt::kWarp; ++l) lanes[l] = comb(prev[l], prev[rt::butterfly_partner(l, o)]);
  }
  return lanes;
}

// Steps 1-3 for one row reduced by a group of G threads (G = 32 or a block of G <= 1024, multiple
// of 32). Every thread's final value is checked equal (the kernel lets lane 0 write, but a
// butterfly that leaves lanes disagreeing would be a different tree). Returns thread 0's value.
template <typename V, typename Partial, typename F>
V emulate_group(int G, Partial partial, F comb, V empty, bool block) {
  REQUIRE(G % rt::kWarp == 0);
  REQUIRE(G <= rt::kMaxBlock);
  const int nw = rt::warps_in_block(G);
  std::vector<std::array<V, 32>> warps(nw);
  for (int t = 0; t < G; ++t) warps[rt::warp_of(t)][rt::lane_of(t)] = partial(t);
  for (auto& w : warps) w = butterfly(w, comb);
  if (!block) {
    REQUIRE(G == rt::kWarp);
    return warps[0][0];
  }
  std::array<V, 32> slots{};
  for (int w = 0; w < nw; ++w) slots[w] = warps[w][0];  // lane 0 of warp w writes slot w
  std::vector<std::array<V, 32>> second(nw);
  for (int w = 0; w < nw; ++w) {
    for (int l = 0; l < rt::kWarp; ++l) second[w][l] = rt::block_slot_read(l, nw) ? slots[l] : empty;
    second[w] = butterfly(second[w], comb);
  }
  return second[0][0];
}

ArgBest emulate_arg(const std::vector<double>& row, int G, bool block, bool is_max, const Rule& rule) {
  const int64_t cols = (int64_t)row.size();
  auto partial = [&](int t) {
    ArgBest b = rule.empty;
    for (int64_t c = rt::thread_first_col(t); c < cols; c += rt::thread_col_step(G))
      b = rule.combine(b, ArgBest{row[c], c}, is_max);
    return b;
  };
  return emulate_group<ArgBest>(G, partial, [&](const ArgBest& a, const ArgBest& b) { return rule.combine(a, b, is_max); },
                                rule.empty, block);
}

double emulate_sum(const std::vector<double>& row, int G, bool block) {
  auto load = [&](int64_t c) { return row[c]; };
  auto partial = [&](int t) { return rt::thread_sum(load, (int64_t)row.size(), t, G); };
  return emulate_group<double>(G, partial, rt::sum_combine, 0.0, block);
}

// The kernel's geometry for a row of `cols`: a warp, or a block of kBlockRowThreads.
int group_for(int64_t cols) { return rt::use_block_rows(cols) ? rt::kBlockRowThreads : rt::kWarp; }

// CPU backend's argmax/argmin of a row (the reference), as f64.
int64_t cpu_arg(const std::vector<double>& row, bool is_max) {
  double out = 0;
  int64_t idx = -7;
  cpu::reduce_rows(is_max ? ReduceOp::max : ReduceOp::min, DType::f64, row.data(), 1, (int64_t)row.size(), &out,
                   &idx);
  return idx;
}

// Checks the fixed rule against the CPU for every group the kernel could use on this row: its own
// geometry, and (for coverage of the block tree) blocks of 32, 96, 256 and 1024 threads.
// Returns the number of mismatches for `rule` (0 expected for the fixed rule).
int arg_mismatches(const std::vector<double>& row, const Rule& rule) {
  int bad = 0;
  for (bool is_max : {true, false}) {
    const int64_t want = cpu_arg(row, is_max);
    const int G0 = group_for((int64_t)row.size());
    struct Geo {
      int G;
      bool block;
    };
    for (Geo g : {Geo{G0, G0 > rt::kWarp}, Geo{32, false}, Geo{32, true}, Geo{96, true}, Geo{256, true},
                  Geo{1024, true}}) {
      const ArgBest b = emulate_arg(row, g.G, g.block, is_max, rule);
      if (b.i != want || rt::result_col(b, (int64_t)row.size()) != want) ++bad;
    }
  }
  return bad;
}

std::vector<double> uniform_row(int64_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> r((size_t)n);
  for (auto& v : r) v = (double)(float)d(gen);  // f32 values, as the kernel's f32 loads see them
  return r;
}

const int64_t kLengths[] = {1, 2, 31, 32, 33, 100, 1000, 4096, 4097, 5000, 10007};

}  // namespace

TEST_CASE("reduce tree: every column is folded by exactly one thread, for warps and blocks") {
  for (int G : {32, 64, 96, 256, 1024})
    for (int64_t cols : kLengths) {
      std::vector<int> seen((size_t)cols, 0);
      for (int t = 0; t < G; ++t)
        for (int64_t c = rt::thread_first_col(t); c < cols; c += rt::thread_col_step(G)) ++seen[(size_t)c];
      for (int64_t c = 0; c < cols; ++c) REQUIRE(seen[(size_t)c] == 1);
    }
  // The butterfly pairs lanes symmetrically and each offset is used once: 16 8 4 2 1.
  int offsets = 0;
  for (int o = rt::butterfly_first_offset(); o > 0; o = rt::butterfly_next_offset(o), ++offsets)
    for (int l = 0; l < 32; ++l) {
      CHECK(rt::butterfly_partner(rt::butterfly_partner(l, o), o) == l);
      CHECK(rt::butterfly_partner(l, o) != l);
    }
  CHECK(offsets == 5);
  CHECK(rt::warps_in_block(1024) == 32);
  CHECK(!rt::use_block_rows(4096));
  CHECK(rt::use_block_rows(4097));
}

TEST_CASE("reduce tree: the combine rule (empty never wins, NaN first, ties to the lowest column)") {
  const ArgBest e = rt::arg_empty(), neg{-5.0, 3}, pos{5.0, 4};
  for (bool m : {true, false}) {
    CHECK(!rt::arg_beats(e, neg, m));
    CHECK(rt::arg_beats(neg, e, m));
    CHECK(rt::arg_combine(e, neg, m).i == 3);
    CHECK(rt::arg_combine(neg, e, m).i == 3);
    CHECK(rt::arg_is_empty(rt::arg_combine(e, e, m)));
    CHECK(rt::arg_combine(ArgBest{kNaN, 9}, pos, m).i == 9);
    CHECK(rt::arg_combine(ArgBest{kNaN, 9}, ArgBest{kNaN, 2}, m).i == 2);
    CHECK(rt::arg_combine(ArgBest{1.0, 9}, ArgBest{1.0, 2}, m).i == 2);
    CHECK(rt::arg_combine(ArgBest{kNaN, 9}, e, m).i == 9);
  }
  CHECK(rt::arg_combine(neg, pos, true).i == 4);
  CHECK(rt::arg_combine(neg, pos, false).i == 3);
  CHECK(rt::result_col(e, 10) == -1);
  CHECK(rt::result_col(ArgBest{1.0, 0}, 0) == -1);
}

TEST_CASE("reduce tree: max/min of all-negative, all-positive and constant rows match the CPU") {
  uint32_t seed = 1;
  for (int64_t cols : kLengths) {
    CAPTURE(cols);
    CHECK(arg_mismatches(uniform_row(cols, -9.0, -1.0, seed++), fixed_rule()) == 0);
    CHECK(arg_mismatches(uniform_row(cols, 1.0, 9.0, seed++), fixed_rule()) == 0);
    CHECK(arg_mismatches(std::vector<double>((size_t)cols, -3.0), fixed_rule()) == 0);  // ties: column 0
    CHECK(arg_mismatches(std::vector<double>((size_t)cols, 2.5), fixed_rule()) == 0);
    CHECK(arg_mismatches(std::vector<double>((size_t)cols, 0.0), fixed_rule()) == 0);
    CHECK(arg_mismatches(std::vector<double>((size_t)cols, -kInf), fixed_rule()) == 0);
    CHECK(arg_mismatches(std::vector<double>((size_t)cols, kInf), fixed_rule()) == 0);
    CHECK(arg_mismatches(uniform_row(cols, -1.0, 1.0, seed++), fixed_rule()) == 0);
  }
  // The expected columns spelled out: the max of an all-negative row and the min of an all-positive
  // row are real columns (the pre-fix kernel returned INT64_MAX here).
  std::vector<double> negs = uniform_row(5000, -9.0, -1.0, 99);
  negs[4321] = -0.5;
  CHECK(emulate_arg(negs, 1024, true, true, fixed_rule()).i == 4321);
  std::vector<double> poss = uniform_row(40, 1.0, 9.0, 98);
  poss[37] = 0.5;
  CHECK(emulate_arg(poss, 32, false, false, fixed_rule()).i == 37);
}

TEST_CASE("reduce tree: NaN and inf rows (first NaN wins, inf is an ordinary extreme)") {
  for (int64_t cols : kLengths) {
    CAPTURE(cols);
    std::vector<double> r = uniform_row(cols, -9.0, -1.0, 7);
    r[(size_t)(cols - 1)] = kNaN;
    CHECK(arg_mismatches(r, fixed_rule()) == 0);
    r[(size_t)(cols / 2)] = kNaN;  // an earlier NaN: it wins
    CHECK(arg_mismatches(r, fixed_rule()) == 0);
    CHECK(emulate_arg(r, group_for(cols), cols > 4096, true, fixed_rule()).i == cols / 2);
    std::vector<double> q = uniform_row(cols, 1.0, 9.0, 8);
    q[(size_t)(cols / 3)] = kInf;
    q[0] = -kInf;
    CHECK(arg_mismatches(q, fixed_rule()) == 0);
    CHECK(arg_mismatches(std::vector<double>((size_t)cols, kNaN), fixed_rule()) == 0);
  }
}

TEST_CASE("reduce tree: ties inside a lane, across lanes and across warps go to the lowest column") {
  struct Tie {
    int64_t cols, a, b;  // equal extremes at columns a < b
  };
  // Warp rows: same lane (5, 37), different lanes (3, 20), the later column on a lower lane (40, 65).
  // Block rows: neighbouring lanes (4099, 4100), the same thread (70, 1094; 0, 4096), the later
  // column in a lower warp (1000 in warp 31, 1030 in warp 0), the last thread (2047) against lane 808.
  for (Tie t : {Tie{100, 5, 37}, Tie{100, 3, 20}, Tie{100, 40, 65}, Tie{5000, 4099, 4100}, Tie{5000, 70, 1094},
                Tie{5000, 1000, 1030}, Tie{10007, 2047, 9000}, Tie{4097, 0, 4096}}) {
    CAPTURE(t.cols);
    CAPTURE(t.a);
    std::vector<double> r = uniform_row(t.cols, -9.0, -1.0, 3);
    r[(size_t)t.a] = r[(size_t)t.b] = 4.0;
    CHECK(arg_mismatches(r, fixed_rule()) == 0);
    CHECK(emulate_arg(r, group_for(t.cols), t.cols > 4096, true, fixed_rule()).i == t.a);
    r[(size_t)t.a] = r[(size_t)t.b] = -40.0;
    CHECK(emulate_arg(r, group_for(t.cols), t.cols > 4096, false, fixed_rule()).i == t.a);
  }
}

TEST_CASE("reduce tree: the harness catches the pre-fix rule (empty lane {0, INT64_MAX})") {
  // All-negative max (and all-positive min) with any lane left empty or with every real candidate
  // below the placeholder's 0: the old rule returns INT64_MAX. The same checks as above must fail.
  CHECK(arg_mismatches(uniform_row(100, -9.0, -1.0, 1), old_rule()) > 0);
  CHECK(arg_mismatches(uniform_row(5000, 1.0, 9.0, 2), old_rule()) > 0);
  CHECK(arg_mismatches(std::vector<double>(10, 1.0), old_rule()) > 0);  // isfinite_all's all-ones mask
  CHECK(emulate_arg(std::vector<double>(10, 1.0), 32, false, false, old_rule()).i == INT64_MAX);
  // and it agrees where the bug never shows (uniform(-1, 1) rows that fill every lane): why the
  // previous cuda tests passed.
  CHECK(arg_mismatches(uniform_row(64, -1.0, 1.0, 5), old_rule()) == 0);
}

TEST_CASE("reduce tree: sums in the tree's order match the CPU's f64 sum") {
  for (int64_t cols : kLengths) {
    CAPTURE(cols);
    for (auto row : {uniform_row(cols, -1.0, 1.0, 11), uniform_row(cols, -9.0, -1.0, 12),
                     std::vector<double>((size_t)cols, 0.1)}) {
      double want = 0;
      cpu::reduce_rows(ReduceOp::sum, DType::f64, row.data(), 1, cols, &want, nullptr);
      const int G = group_for(cols);
      const double got = emulate_sum(row, G, G > rt::kWarp);
      CHECK(std::fabs(got - want) <= 1e-12 * (1.0 + std::fabs(want)) * (double)cols);
      // integer-valued rows are exact in any order
      std::vector<double> ints((size_t)cols);
      for (int64_t c = 0; c < cols; ++c) ints[(size_t)c] = (double)((c * 7919) % 13) - 6.0;
      double wi = 0;
      cpu::reduce_rows(ReduceOp::sum, DType::f64, ints.data(), 1, cols, &wi, nullptr);
      CHECK(emulate_sum(ints, G, G > rt::kWarp) == wi);
      CHECK(emulate_sum(ints, 256, true) == wi);
    }
  }
  std::vector<double> r = uniform_row(5000, -1.0, 1.0, 4);
  r[4500] = kInf;
  CHECK(std::isinf(emulate_sum(r, 1024, true)));
  r[17] = -kInf;
  CHECK(std::isnan(emulate_sum(r, 1024, true)));
  r[17] = kNaN;
  CHECK(std::isnan(emulate_sum(r, 32, false)));
}
