// SyncBatchNorm's op (engine/ops/batch_norm_sync.h) and data-parallel keyed dropout
// (engine/core/rng_rows.h), in one process: with an identity reducer (one rank) batch_norm_sync gives
// batch_norm's bits; two or three "ranks" on threads of this process, with a reducer that sums their
// contributions, give the forward, running statistics and input gradients of one batch_norm over the
// concatenated batch (a rank with no row included), and their parameter gradients add up to its (or
// rank 0 holds it, BnParamGrads::global).
// Dropout keyed by global rows draws, on any split of the rows, the masks of one process holding them
// all, and advances the generator alike on every split.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/core/rng_rows.h"
#include "engine/ops/batch_norm_sync.h"
#include "engine/ops/ops.h"

using namespace kiln;

namespace {

// Sums the contributions of `ranks` threads: each call blocks until every rank made its call of the same
// index, then returns the sum (added in rank order, as every rank sees the same bits).
class ThreadSum {
 public:
  explicit ThreadSum(int ranks) : ranks_(ranks), parts_(ranks) {}
  ChannelSumReducer reducer(int rank) {
    return [this, rank](double* data, int64_t n) { reduce(rank, data, n); };
  }

 private:
  // The sum is overwritten only when every rank arrived at the next call, after each copied this one's.
  void reduce(int rank, double* data, int64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t round = round_;
    parts_[(size_t)rank].assign(data, data + n);
    if (++arrived_ == ranks_) {
      sum_.assign((size_t)n, 0.0);
      for (int r = 0; r < ranks_; ++r)
        for (int64_t i = 0; i < n; ++i) sum_[(size_t)i] += parts_[(size_t)r][(size_t)i];
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    std::copy(sum_.begin(), sum_.end(), data);
  }
  int ranks_;
  std::vector<std::vector<double>> parts_;
  std::vector<double> sum_;
  int arrived_ = 0;
  int64_t round_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};

std::vector<float> values(const Tensor& t) { return contiguous(t).to_vector<float>(); }

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (double)std::fabs(a[i] - b[i]));
  return d;
}

struct BnRun {
  Tensor y, dx, dw, db, rm, rv;
};

// One batch_norm (or batch_norm_sync with `reduce`) forward + backward of sum(y * w_out).
BnRun run_bn(const Tensor& x_in, const Tensor& w_out, const ChannelSumReducer& reduce,
             BnParamGrads grads = BnParamGrads::local) {
  const int64_t C = x_in.size(1);
  BnRun r;
  Tensor x = x_in.detach();
  x.set_requires_grad(true);
  Tensor w = add(mul(arange(C, DType::f32), 0.25), 0.5).detach(), b = mul(arange(C, DType::f32), -0.1).detach();
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  r.rm = mul(arange(C, DType::f32), 0.01);
  r.rv = add(mul(arange(C, DType::f32), 0.1), 1.0);
  r.y = reduce ? batch_norm_sync(x, w, b, r.rm, r.rv, 0.1, 1e-5, reduce, grads)
               : batch_norm(x, w, b, r.rm, r.rv, true, 0.1, 1e-5);
  sum(mul(r.y, w_out)).backward();
  r.dx = x.grad();
  r.dw = w.grad();
  r.db = b.grad();
  return r;
}

}  // namespace

TEST_CASE("batch_norm_sync with one rank's sums gives batch_norm's bits (forward, running stats, gradients)") {
  manual_seed(5);
  // A mean large against the std (the faults issue's precision case) and a channels-last input.
  for (bool cl : {false, true}) {
    Tensor x = add(mul(randn({6, 3, 5, 4}), 0.2), 1000.0);
    if (cl) x = contiguous(x, MemoryFormat::channels_last);
    Tensor w_out = randn({6, 3, 5, 4});
    const BnRun a = run_bn(x, w_out, nullptr);
    const BnRun b = run_bn(x, w_out, [](double*, int64_t) {});
    for (auto [p, q] : {std::pair<Tensor, Tensor>{a.y, b.y}, {a.dx, b.dx}, {a.dw, b.dw}, {a.db, b.db}, {a.rm, b.rm},
                        {a.rv, b.rv}})
      CHECK(values(p) == values(q));
  }
}

TEST_CASE("batch_norm_sync over 3 ranks (rows 5, 0, 3) is batch_norm over the 8 rows") {
  manual_seed(9);
  Tensor x = add(mul(randn({8, 4, 3, 3}), 1.5), 3.0), w_out = randn({8, 4, 3, 3});
  const BnRun full = run_bn(x, w_out, nullptr);
  const int64_t first[3] = {0, 5, 5}, rows[3] = {5, 0, 3};
  ThreadSum group(3);
  std::vector<BnRun> part(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      part[(size_t)r] = run_bn(narrow(x, 0, first[r], rows[r]), narrow(w_out, 0, first[r], rows[r]),
                               group.reducer(r));
    });
  for (std::thread& t : threads) t.join();
  // y and dx: each rank's rows of the full batch's
  for (int r = 0; r < 3; ++r) {
    CHECK(max_abs_diff(values(part[(size_t)r].y), values(narrow(full.y, 0, first[r], rows[r]))) < 1e-5);
    CHECK(max_abs_diff(values(part[(size_t)r].dx), values(narrow(full.dx, 0, first[r], rows[r]))) < 1e-5);
    // running statistics: the global mean and unbiased variance on every rank, the no-row rank too
    CHECK(max_abs_diff(values(part[(size_t)r].rm), values(full.rm)) < 1e-6);
    CHECK(max_abs_diff(values(part[(size_t)r].rv), values(full.rv)) < 1e-5);
  }
  // the parameter gradients are each rank's own: their sum is the full batch's
  Tensor dw = add(add(part[0].dw, part[1].dw), part[2].dw), db = add(add(part[0].db, part[1].db), part[2].db);
  CHECK(max_abs_diff(values(dw), values(full.dw)) < 1e-4);
  CHECK(max_abs_diff(values(db), values(full.db)) < 1e-4);
  CHECK(max_abs_diff(values(part[1].dw), std::vector<float>(4, 0.0f)) == 0.0);  // no row: zeros
  // BnParamGrads::global on rank 0, zero on the others: rank 0 holds the full batch's parameter gradients
  {
    ThreadSum g2(3);
    std::vector<BnRun> q(3);
    std::vector<std::thread> ts;
    for (int r = 0; r < 3; ++r)
      ts.emplace_back([&, r] {
        q[(size_t)r] = run_bn(narrow(x, 0, first[r], rows[r]), narrow(w_out, 0, first[r], rows[r]), g2.reducer(r),
                              r == 0 ? BnParamGrads::global : BnParamGrads::zero);
      });
    for (std::thread& t : ts) t.join();
    CHECK(max_abs_diff(values(q[0].dw), values(full.dw)) < 1e-5);
    CHECK(max_abs_diff(values(q[0].db), values(full.db)) < 1e-5);
    for (int r = 1; r < 3; ++r) {
      CHECK(max_abs_diff(values(q[(size_t)r].dw), std::vector<float>(4, 0.0f)) == 0.0);
      CHECK(max_abs_diff(values(q[(size_t)r].db), std::vector<float>(4, 0.0f)) == 0.0);
      CHECK(values(q[(size_t)r].dx) == values(part[(size_t)r].dx));  // the input gradient is unchanged
    }
  }
  // the check can fail: one rank's own statistics differ from the global batch's
  const BnRun alone = run_bn(narrow(x, 0, 0, 5), narrow(w_out, 0, 0, 5), nullptr);
  CHECK(max_abs_diff(values(alone.rm), values(full.rm)) > 1e-3);
}

TEST_CASE("batch_norm_sync: one value per channel over all ranks is an error on every rank") {
  ThreadSum group(2);
  Tensor x = randn({1, 2, 1, 1});
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        batch_norm_sync(r == 0 ? x : narrow(x, 0, 0, 0), Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5,
                        group.reducer(r));
      } catch (const Error& e) {
        errors[(size_t)r] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) CHECK(e.find("expected more than 1 value per channel over the ranks") != std::string::npos);
}

TEST_CASE("dropout keyed by global rows: any split of the rows draws one process's masks") {
  NoGradGuard ng;
  for (int64_t F : {8, 6}) {  // a multiple of 4 (one call per rank) and not (a counter window per row)
    Tensor x = ones({7, F});
    manual_seed(21);
    const uint64_t start = global_rng().offset;
    Tensor whole;
    {
      RngRowsGuard keyed(RngRows{0, 7, 7});
      whole = dropout(x, 0.5, true);
    }
    const uint64_t advance = global_rng().offset - start;
    CHECK(advance == (uint64_t)(7 * ((F + 3) / 4)));
    if (F % 4 == 0) {  // the unkeyed stream of one process holding the 7 rows
      manual_seed(21);
      CHECK(values(dropout(x, 0.5, true)) == values(whole));
    }
    // rows [0, 3) and [3, 7) on two "ranks", each from the same generator state
    std::vector<float> joined;
    for (auto [first, count] : {std::pair<int64_t, int64_t>{0, 3}, {3, 4}, {7, 0}}) {
      manual_seed(21);
      RngRowsGuard keyed(RngRows{first, count, 7});
      const std::vector<float> part = values(dropout(narrow(x, 0, first, count), 0.5, true));
      joined.insert(joined.end(), part.begin(), part.end());
      CHECK(global_rng().offset - start == advance);  // every rank reserves all 7 rows' windows
    }
    CHECK(joined == values(whole));
    // the check can fail: the rows' place in the rank's batch would give other masks
    manual_seed(21);
    RngRowsGuard keyed(RngRows{0, 4, 7});
    CHECK(values(dropout(narrow(x, 0, 3, 4), 0.5, true)) != values(narrow(whole, 0, 3, 4)));
  }
  CHECK(rng_rows().total < 0);  // guards restored
}
