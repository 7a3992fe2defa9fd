// Data-parallel training without MPI (the mpirun runs are tests/mpi/): the data rule that splits a
// global batch among ranks (engine/dist/shard.h), the gradient bucket plan (engine/train/data_parallel.h),
// and the one-process group that every run without a launcher uses (collectives leave the data alone).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <numeric>
#include <thread>
#include <vector>

#include "engine/autograd/grad_hook.h"
#include "engine/dist/process_group.h"
#include "engine/dist/shard.h"
#include "engine/nn/linear.h"
#include "engine/nn/recompute.h"
#include "engine/ops/ops.h"
#include "engine/optim/sgd.h"
#include "engine/train/data_parallel.h"
#include "engine/train/memory_predict.h"

namespace {

// a (6 -> 5), b (5 -> 3): four parameters, registered a.weight, a.bias, b.weight, b.bias.
struct TwoLinear : kiln::nn::Module {
  TwoLinear() : Module("TwoLinear") {
    a = register_module("a", std::make_shared<kiln::nn::Linear>(6, 5));
    b = register_module("b", std::make_shared<kiln::nn::Linear>(5, 3));
  }
  kiln::Tensor forward(const kiln::Tensor& x) override { return (*b)((*a)(x)); }
  std::shared_ptr<kiln::nn::Linear> a, b;
};

// Rank 0 of a pretend pair: a float all-reduce sleeps `delay_ms` and doubles the data (the peer had the same
// gradients), or throws dist::Timeout (a peer that never answered). Counts its float all-reduces.
struct PretendPair : kiln::dist::ProcessGroup {
  int delay_ms = 0;
  bool time_out = false;
  int float_calls = 0;
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string backend() const override { return "pretend"; }
  void broadcast_bytes(void*, int64_t, int) override {}
  void all_reduce_sum(float* data, int64_t n) override {
    ++float_calls;
    if (time_out) throw kiln::dist::Timeout("pretend: no answer");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    for (int64_t i = 0; i < n; ++i) data[i] *= 2;
  }
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_sum(int64_t*, int64_t) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

// One training step's backward with the data-parallel hook, then the all-reduce.
void step(kiln::train::DataParallel& dp, TwoLinear& m) {
  dp.begin_step();
  kiln::Tensor x = kiln::tensor_from(std::vector<float>(12, 0.5f), {2, 6});
  {
    kiln::GradAccumulatedHookGuard guard(dp.backward_hook());
    kiln::sum(m.forward(x)).backward();
  }
  dp.all_reduce_gradients();
}

// One weight shared three ways: two recompute segments run the same Linear `a` (each lists a's parameters),
// and the plain part runs it once more before the head.
struct SharedSegments : kiln::nn::Module {
  explicit SharedSegments(bool segments) : Module("SharedSegments"), segments(segments) {
    a = register_module("a", std::make_shared<kiln::nn::Linear>(4, 4));
    head = register_module("head", std::make_shared<kiln::nn::Linear>(4, 2));
  }
  kiln::Tensor forward(const kiln::Tensor& x) override {
    auto seg = [this](const kiln::Tensor& t) { return kiln::relu((*a)(t)); };
    kiln::Tensor h = x;
    for (const char* label : {"seg1", "seg2"})
      h = segments ? kiln::nn::recompute(seg, h, {a->weight, a->bias}, label) : seg(h);
    return (*head)((*a)(h));
  }
  bool segments;
  std::shared_ptr<kiln::nn::Linear> a, head;
};

kiln::Tensor shared_input() {
  std::vector<float> v(3 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * (float)((i * 7) % 11) - 1.0f;
  return kiln::tensor_from(v, {3, 4});
}

}  // namespace

using kiln::dist::shard_range;
using kiln::dist::ShardRange;

TEST_CASE("data-parallel: shard_range splits a global batch into disjoint, covering, balanced shards") {
  for (int ranks = 1; ranks <= 5; ++ranks)
    for (int64_t rows = 0; rows <= 23; ++rows) {
      int64_t next = 0, least = rows, most = 0;
      for (int r = 0; r < ranks; ++r) {
        const ShardRange s = shard_range(rows, r, ranks);
        CHECK(s.offset == next);  // in rank order, no gap, no overlap
        next += s.rows;
        least = std::min(least, s.rows);
        most = std::max(most, s.rows);
      }
      CHECK(next == rows);       // every row once
      CHECK(most - least <= 1);  // as even as possible
    }
  // The first rows % ranks ranks take the extra row; a rank may get none.
  CHECK(shard_range(7, 0, 3).rows == 3);
  CHECK(shard_range(7, 1, 3).offset == 3);
  CHECK(shard_range(7, 2, 3).offset == 5);
  CHECK(shard_range(7, 2, 3).rows == 2);
  CHECK(shard_range(1, 1, 2).rows == 0);
  CHECK(shard_range(1, 1, 2).offset == 1);
  CHECK(kiln::dist::global_batch(8, 3) == 24);
  CHECK_THROWS_AS(shard_range(4, 2, 2), kiln::Error);
  CHECK_THROWS_AS(shard_range(-1, 0, 2), kiln::Error);
  CHECK_THROWS_AS(shard_range(4, 0, 0), kiln::Error);
}

TEST_CASE("data-parallel: with accumulation a rank's pieces are its shares of one process's micro-batches") {
  using kiln::dist::micro_batch_ranges;
  using kiln::dist::shard_pieces;
  // one process's micro-batches: ceil(rows / accum) rows each, the last shorter, fewer than accum when
  // they run out (9 rows in 4: 3, 3, 3)
  auto rows_of = [](const std::vector<ShardRange>& v) {
    std::vector<int64_t> out;
    for (const ShardRange& r : v) out.push_back(r.rows);
    return out;
  };
  CHECK(rows_of(micro_batch_ranges(10, 4)) == std::vector<int64_t>{3, 3, 3, 1});
  CHECK(rows_of(micro_batch_ranges(9, 4)) == std::vector<int64_t>{3, 3, 3});
  CHECK(rows_of(micro_batch_ranges(2, 4)) == std::vector<int64_t>{1, 1});
  CHECK(micro_batch_ranges(0, 3).empty());
  CHECK_THROWS_AS(micro_batch_ranges(4, 0), kiln::Error);
  // 16 rows, 2 ranks, accum 2: rank 0 takes rows 0-3 and 8-11, rank 1 rows 4-7 and 12-15
  CHECK(shard_pieces(16, 0, 2, 2)[1].offset == 8);
  CHECK(shard_pieces(16, 1, 2, 2)[0].offset == 4);
  for (int ranks = 1; ranks <= 4; ++ranks)
    for (int64_t accum = 1; accum <= 5; ++accum)
      for (int64_t rows = 0; rows <= 19; ++rows) {
        const std::vector<ShardRange> micro = micro_batch_ranges(rows, accum);
        std::vector<int> seen((size_t)rows, 0);
        for (int r = 0; r < ranks; ++r) {
          const std::vector<ShardRange> pieces = shard_pieces(rows, r, ranks, accum);
          REQUIRE(pieces.size() == micro.size());  // every rank has every micro-batch, maybe empty
          for (size_t k = 0; k < pieces.size(); ++k) {
            CHECK(pieces[k].offset >= micro[k].offset);  // inside micro-batch k
            CHECK(pieces[k].offset + pieces[k].rows <= micro[k].offset + micro[k].rows);
            CHECK(pieces[k].rows == shard_range(micro[k].rows, r, ranks).rows);
            for (int64_t i = pieces[k].offset; i < pieces[k].offset + pieces[k].rows; ++i) ++seen[(size_t)i];
          }
          // accum 1: the one shard of shard_range
          if (accum == 1 && rows > 0) CHECK(pieces[0].offset == shard_range(rows, r, ranks).offset);
        }
        for (int64_t i = 0; i < rows; ++i) CHECK(seen[(size_t)i] == 1);  // every row once, on one rank
      }
}

TEST_CASE("data-parallel: the loss weights of the shards add up to one process's mean over the global batch") {
  // Per-sample losses l_i of a global batch; rank r's loss is the mean of its rows weighted rows_r / rows,
  // so the sum over ranks is the global mean (what train_step does with m / global used rows).
  std::vector<double> l(13);
  for (size_t i = 0; i < l.size(); ++i) l[i] = 0.1 * (double)(i * i % 7) + 0.01 * (double)i;
  const double global = std::accumulate(l.begin(), l.end(), 0.0) / (double)l.size();
  for (int ranks : {1, 2, 3, 4, 13, 16}) {
    double total = 0;
    for (int r = 0; r < ranks; ++r) {
      const ShardRange s = shard_range((int64_t)l.size(), r, ranks);
      if (s.rows == 0) continue;  // contributes zero gradient
      double mean = 0;
      for (int64_t i = s.offset; i < s.offset + s.rows; ++i) mean += l[(size_t)i];
      mean /= (double)s.rows;
      total += mean * (double)s.rows / (double)l.size();
    }
    CHECK(total == doctest::Approx(global).epsilon(1e-12));
  }
}

TEST_CASE("data-parallel: gradient buckets: a small first bucket, then runs up to the cap, big ones alone") {
  using kiln::train::plan_buckets;
  using V = std::vector<std::vector<size_t>>;
  // bytes in bucket order (reverse registration order)
  CHECK(plan_buckets({}, 100, 10) == V{});
  CHECK(plan_buckets({4, 4, 4, 40, 40, 30, 200, 5}, 100, 10) == V{{0, 1}, {2, 3, 4}, {5}, {6}, {7}});
  CHECK(plan_buckets({50, 50, 50}, 100, 100) == V{{0, 1}, {2}});
  CHECK(plan_buckets({1, 1, 1}, 1 << 20, 1 << 20) == V{{0, 1, 2}});
  CHECK_THROWS_AS(plan_buckets({1}, 0, 1), kiln::Error);
}

TEST_CASE("data-parallel: buckets of a model hold every trainable parameter once, last registered first") {
  TwoLinear m;
  kiln::dist::ProcessGroup& g = kiln::dist::world();
  kiln::train::DataParallelOptions o;
  o.first_bucket_bytes = 3 * 4;  // b.bias alone
  o.bucket_bytes = 30 * 4;       // then a: weight (30) alone, ...
  kiln::train::DataParallel dp(g, m, o);
  const std::vector<kiln::Tensor> params = m.parameters();  // a.weight, a.bias, b.weight, b.bias
  REQUIRE(params.size() == 4);
  std::vector<size_t> seen;
  for (const auto& bucket : dp.buckets()) seen.insert(seen.end(), bucket.params.begin(), bucket.params.end());
  CHECK(seen == std::vector<size_t>{3, 2, 1, 0});
  REQUIRE(dp.buckets().size() >= 2);
  CHECK(dp.buckets()[0].params == std::vector<size_t>{3});
  // One process alone makes no buckets; with two ranks they hold every element and one flag per parameter.
  CHECK(dp.bucket_bytes_total() == 0);
  CHECK(kiln::train::gradient_bucket_bytes(params, kiln::train::gradient_buckets(params, o)) == (30 + 5 + 15 + 3 + 4) * 4);
  PretendPair pair;
  kiln::train::DataParallel two(pair, m, o);
  CHECK(two.bucket_bytes_total() == (30 + 5 + 15 + 3 + 4) * 4);
  REQUIRE(two.bucket_tensors().size() == two.buckets().size());
  // Each parameter's grad slot is its run of its bucket: backward writes the gradient there.
  for (size_t bi = 0; bi < two.buckets().size(); ++bi) {
    int64_t at = 0;
    for (size_t i : two.buckets()[bi].params) {
      const kiln::Tensor slot = params[i].grad_slot();
      REQUIRE(slot.defined());
      CHECK(slot.storage() == two.bucket_tensors()[bi].storage());
      CHECK(slot.offset() == at);
      CHECK(slot.sizes() == params[i].sizes());
      at += params[i].numel();
    }
  }
}

TEST_CASE("data-parallel: one process alone: rank 0 of 1, collectives change nothing") {
  if (kiln::dist::launched_by_mpi()) {
    MESSAGE("skipped: this test process runs under an MPI launcher");
    return;
  }
  kiln::dist::ProcessGroup& g = kiln::dist::world();
  CHECK(g.rank() == 0);
  CHECK(g.size() == 1);
  CHECK(g.backend() == "single");
  CHECK_FALSE(kiln::dist::world_is_distributed());
  kiln::Tensor t = kiln::tensor_from(std::vector<float>{1.5f, -2.0f, 3.25f}, {3});
  g.all_reduce_sum(t);
  g.broadcast(t, 0);
  CHECK(t.to_vector<float>() == std::vector<float>{1.5f, -2.0f, 3.25f});
  CHECK(g.sum(7) == 7);
  CHECK_THROWS_AS(g.broadcast(t, 1), kiln::Error);
  g.barrier();
}

TEST_CASE("data-parallel: the gradient-accumulated hook sees each leaf once per backward, its gradient complete") {
  // w is used twice (two paths into the loss): its AccumulateGrad runs once, after both contributions.
  kiln::Tensor w = kiln::tensor_from(std::vector<float>{1, 2, 3}, {3});
  w.set_requires_grad(true);
  kiln::Tensor b = kiln::tensor_from(std::vector<float>{0.5f}, {1});
  b.set_requires_grad(true);
  std::vector<std::pair<const kiln::TensorImpl*, std::vector<float>>> seen;
  {
    kiln::GradAccumulatedHookGuard guard([&](const kiln::TensorImpl* leaf) {
      const kiln::Tensor& t = leaf == w.impl() ? w : b;
      seen.emplace_back(leaf, t.grad().to_vector<float>());
    });
    kiln::Tensor y = kiln::sum(kiln::add(kiln::mul(w, w), kiln::mul(w, b)));  // d/dw = 2w + b, d/db = sum(w)
    y.backward();
  }
  REQUIRE(seen.size() == 2);
  for (const auto& [leaf, g] : seen) {
    if (leaf == w.impl()) CHECK(g == std::vector<float>{2.5f, 4.5f, 6.5f});
    else CHECK(g == std::vector<float>{6.0f});
  }
  // Without the guard, no hook: a second backward is not seen.
  kiln::sum(kiln::mul(w, w)).backward();
  CHECK(seen.size() == 2);
}

// `kiln mem --nproc N`: one rank's prediction runs the trainer's DataParallel on meta tensors over imitated
// ranks, so it allocates what a real rank allocates: the buckets (tagged grad), which hold the gradients
// themselves. Checked against a real rank (rank 0 of the pretend pair, overlap on) to the byte, both steps,
// on the CPU; and on a CUDA target (no GPU needed: the meta run imitates its allocator) the gradients are
// the buckets, each one allocation rounded up to the allocator's 512-byte blocks.
TEST_CASE("data-parallel: the memory prediction of one rank equals the measured CPU peak, buckets and all") {
  auto make_opt = [](kiln::nn::Module& m) {
    kiln::optim::SGDOptions so;
    so.lr = 0.01;
    so.momentum = 0.9;
    return std::unique_ptr<kiln::optim::Optimizer>(new kiln::optim::SGD(m.named_parameters(), so));
  };
  kiln::train::DataParallelOptions dpo;
  dpo.first_bucket_bytes = 3 * 4;
  dpo.bucket_bytes = 30 * 4;
  auto predict = [&](const char* device, int ranks) {
    kiln::train::PredictOptions o;
    o.batch = 4;
    o.input_shape = {6};
    o.target = kiln::Device::parse(device);
    o.ranks = ranks;
    o.data_parallel = dpo;
    return kiln::train::predict_step_memory([] { return std::make_shared<TwoLinear>(); }, make_opt, o);
  };
  const int64_t plan_bytes = (30 + 5 + 15 + 3 + 4) * 4;  // every gradient and one flag per parameter
  const kiln::StepMemory cpu1 = predict("cpu", 1), cpu2 = predict("cpu", 2);
  CHECK(cpu1.buckets == 0);
  CHECK(cpu2.ranks == 2);
  CHECK(cpu2.buckets == plan_bytes);

  kiln::CachingAllocator* cpu = kiln::caching_allocator_for(kiln::Device::cpu());
  REQUIRE(cpu != nullptr);
  cpu->empty_cache();
  kiln::manual_seed(0);
  {
    TwoLinear m;
    m.train();
    std::unique_ptr<kiln::optim::Optimizer> opt = make_opt(m);
    PretendPair g;
    kiln::train::DataParallel dp(g, m, dpo);
    REQUIRE(dp.overlaps());
    CHECK(dp.bucket_bytes_total() == plan_bytes);
    kiln::optim::LossScalerOptions off;
    off.enabled = false;
    kiln::optim::LossScaler scaler(off);
    kiln::train::StepOptions st;
    st.data_parallel = &dp;
    for (int s = 0; s < 2; ++s) {
      cpu->reset_peak();
      kiln::Tensor x, y;
      {
        kiln::MemoryScope tag(kiln::MemoryTag::data);
        x = kiln::uniform({4, 6}, -1, 1);
        y = kiln::empty({4}, kiln::DType::i64);
      }
      for (int64_t i = 0; i < 4; ++i) y.data<int64_t>()[i] = i % 3;
      kiln::train::train_step(m, *opt, scaler, kiln::Batch{x, y}, st);
      x = kiln::Tensor(), y = kiln::Tensor();
      const kiln::MemoryStats ms = cpu->stats();
      const kiln::StepPeak& predicted = s == 0 ? cpu2.first : cpu2.steady;
      MESSAGE("step ", s + 1, ": measured peak ", ms.total.allocated.peak, " B, predicted ", predicted.allocated,
              " B; gradients ", ms.tag_allocated[(int)kiln::MemoryTag::grad].current, " B, predicted ", cpu2.grads);
      CHECK(ms.total.allocated.peak == predicted.allocated);
      CHECK(ms.tag_allocated[(int)kiln::MemoryTag::grad].current == cpu2.grads);
    }
    // Every gradient is a view into its bucket: no allocation of its own.
    for (const kiln::train::DataParallel::Bucket& b : dp.buckets())
      for (size_t i : b.params) {
        const kiln::Tensor p = m.parameters()[i];
        REQUIRE(p.grad().defined());
        CHECK(p.grad().storage() == dp.bucket_tensors()[&b - dp.buckets().data()].storage());
      }
  }
  // The gradients are the buckets: the grad-tagged bytes are the buckets' (not the buckets on top of the
  // gradients, as when they were copies).
  CHECK(cpu2.grads >= plan_bytes);
  CHECK(cpu2.grads < plan_bytes + cpu1.grads);

  const kiln::StepMemory gpu2 = predict("cuda:0", 2);
  int64_t rounded = 0;  // each bucket one allocation in 512-byte blocks
  TwoLinear m;
  PretendPair g;
  kiln::train::DataParallel dp(g, m, dpo);
  for (const kiln::Tensor& b : dp.bucket_tensors()) rounded += (b.numel() * 4 + 511) / 512 * 512;
  CHECK(gpu2.buckets == plan_bytes);
  CHECK(gpu2.grads == rounded);
}

TEST_CASE("data-parallel: comm_times: the wait after backward and the all-reduce time of each step") {
  TwoLinear m;
  PretendPair g;
  g.delay_ms = 30;
  kiln::train::DataParallelOptions o;
  o.first_bucket_bytes = 3 * 4;  // b.bias alone, then the rest: 2 buckets
  o.bucket_bytes = 1 << 20;
  kiln::train::DataParallel dp(g, m, o);
  REQUIRE(dp.overlaps());
  REQUIRE(dp.buckets().size() == 2);
  step(dp, m);
  const std::vector<float> once = m.b->bias.grad().to_vector<float>();
  for (auto& p : m.parameters()) p.set_grad(kiln::Tensor());
  step(dp, m);
  CHECK(m.b->bias.grad().to_vector<float>() == once);  // the same doubled gradient each step
  const kiln::train::DataParallel::CommTimes t = dp.comm_times();
  CHECK(t.steps == 2);
  CHECK(g.float_calls == 4);
  // Each all-reduce sleeps 30 ms: 60 ms a step in all; the last bucket (a's parameters, finished last by
  // backward) starts when backward ends, so the training thread waits at least its 30 ms.
  CHECK(t.last_all_reduce_s >= 0.055);
  CHECK(t.all_reduce_s >= 0.11);
  CHECK(t.last_wait_s >= 0.025);
  CHECK(t.last_wait_s <= t.wait_s);
  CHECK(t.mean_wait_s() == doctest::Approx(t.wait_s / 2));
  dp.reset_comm_times();
  CHECK(dp.comm_times().steps == 0);
}

TEST_CASE("data-parallel: an all-reduce past the group's timeout is an error naming the bucket, the step and the peer") {
  TwoLinear m;
  PretendPair g;
  g.set_timeout(4);
  kiln::train::DataParallelOptions o;
  o.first_bucket_bytes = 3 * 4;
  o.bucket_bytes = 1 << 20;
  kiln::train::DataParallel dp(g, m, o);
  dp.set_steps_done(11);
  g.time_out = true;
  CHECK_THROWS_WITH(step(dp, m), "data-parallel: the all-reduce of bucket 1 of 2 (step 12) did not complete within 4 "
                                 "s: rank 1 died or hangs (--dist-timeout 4)");
  CHECK(g.float_calls == 1);  // the second bucket is not started after the first failed
  CHECK(g.context() == "step 12");
}

TEST_CASE("data-parallel: a weight shared by recompute segments and the plain part is seen once, complete") {
  // Issue 33, defect 9: each segment's own backward accumulated into the shared weight and called the hook,
  // so its bucket could start its all-reduce while later segments still added to the gradient.
  SharedSegments plain(false), seg(true);
  seg.load_state_dict(plain.state_dict());
  kiln::sum(plain.forward(shared_input())).backward();
  const std::vector<float> want = plain.a->weight.grad().to_vector<float>();
  std::vector<std::vector<float>> seen_a;
  {
    kiln::GradAccumulatedHookGuard guard([&](const kiln::TensorImpl* leaf) {
      if (leaf == seg.a->weight.impl()) seen_a.push_back(seg.a->weight.grad().to_vector<float>());
    });
    kiln::sum(seg.forward(shared_input())).backward();
  }
  REQUIRE(seen_a.size() == 1);
  const std::vector<float> got = seg.a->weight.grad().to_vector<float>();
  CHECK(seen_a[0] == got);  // complete when seen: nothing was added after the hook
  // The plain model's gradient, up to the order of the three parts' sum.
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
}

TEST_CASE("data-parallel: buckets over a weight shared by recompute segments sum the whole gradient") {
  // The reference: the same segmented model in one process (the same summation order, so bit for bit).
  SharedSegments plain(true), seg(true);
  seg.load_state_dict(plain.state_dict());
  kiln::sum(plain.forward(shared_input())).backward();
  PretendPair g;  // doubles each bucket: the peer had the same gradients
  g.delay_ms = 20;
  kiln::train::DataParallelOptions o;
  o.first_bucket_bytes = 2 * 4;  // head.bias alone, then head.weight + a's parameters
  o.bucket_bytes = 8 * 4;
  kiln::train::DataParallel dp(g, seg, o);
  REQUIRE(dp.overlaps());
  REQUIRE(dp.buckets().size() >= 2);
  dp.begin_step();
  {
    kiln::GradAccumulatedHookGuard guard(dp.backward_hook());
    kiln::sum(seg.forward(shared_input())).backward();
  }
  dp.all_reduce_gradients();
  for (auto [p, q] : {std::pair{&plain.a->weight, &seg.a->weight}, {&plain.a->bias, &seg.a->bias},
                      {&plain.head->weight, &seg.head->weight}}) {
    std::vector<float> want = p->grad().to_vector<float>();
    for (float& v : want) v *= 2;
    CHECK(q->grad().to_vector<float>() == want);
  }
  // A second backward into a bucket already summing is refused, naming the parameter.
  dp.begin_step();
  kiln::GradAccumulatedHookGuard guard(dp.backward_hook());
  kiln::sum(seg.forward(shared_input())).backward();
  CHECK_THROWS_WITH(kiln::sum(seg.forward(shared_input())).backward(),
                    doctest::Contains("was accumulated again after its bucket"));
  dp.all_reduce_gradients();
}
