// kiln's row reduction, softmax, batch-norm and loss kernels (kernels/cuda/*.cu) run in the CPU
// execution mode (kiln_cuda_cpu: blocks of fibres, warp shuffles, __syncthreads) against the CPU
// backend on adversarial inputs: NaN, +-inf, -0, denormals, huge and tiny values, ties, and sizes
// that are not multiples of the warp or the block, on both the warp-per-row and block-per-row paths.
#include <doctest/doctest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "engine/core/half.h"
#include "engine/core/op_modes.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/batch_norm_sync.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/softmax.h"
#include "cuda_cpu/adversarial.h"
// The CPU mode's declarations (same signatures, namespace kiln::cuda_on_cpu); after the CPU backend's.
#include "kernels/cuda_cpu/prelude.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/deferred_error.h"
#include "kernels/cuda/nn_backend.h"

namespace cpu = kiln::cpu;
namespace gpu = kiln::cuda_on_cpu;
using kiln::DType;
using kiln::ReduceOp;
using kiln_test::adversarial;
using kiln_test::compare;

namespace {

template <typename T> DType dtype_of();
template <> DType dtype_of<float>() { return DType::f32; }
template <> DType dtype_of<double>() { return DType::f64; }
template <> DType dtype_of<kiln::half>() { return DType::f16; }

template <typename T>
void reduce_compare(const std::vector<T>& x, int64_t rows, int64_t cols, double rtol, const std::string& label) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::var,
                      ReduceOp::var_unbiased}) {
    const bool arg = op == ReduceOp::max || op == ReduceOp::min;
    std::vector<T> want((size_t)rows, T(-5.0)), got((size_t)rows, T(-5.0));
    std::vector<int64_t> wi((size_t)rows, -9), gi((size_t)rows, -9);
    cpu::reduce_rows(op, dtype_of<T>(), x.data(), rows, cols, want.data(), arg ? wi.data() : nullptr);
    gpu::reduce_rows(op, dtype_of<T>(), x.data(), rows, cols, got.data(), arg ? gi.data() : nullptr);
    const std::string what = kiln::str_cat(label, "reduce op ", (int)op, " (", rows, ", ", cols, ")");
    CHECK_MESSAGE(compare(got, want, arg ? 0.0 : rtol, arg ? 0.0 : 1e-30, what) == 0, what);
    if (arg) CHECK_MESSAGE(gi == wi, what, ": indices differ");
  }
}

template <typename T>
void reduce_case(int64_t rows, int64_t cols, uint64_t seed, double rtol) {
  reduce_compare(adversarial<T>((size_t)(rows * cols), seed), rows, cols, rtol, "");
}

}  // namespace

TEST_CASE("CPU mode: reduce_rows: few long rows are reduced by the whole grid, NaN and inf in the last block") {
  // rows == 1 is a full-tensor sum / max / min (the AMP found-inf check is a max and a min): it ran
  // in one block of 1024 threads. Now chunks of the row go to the grid's blocks, then one combine.
  const double inf = INFINITY, nan = std::nan("");
  gpu::clear_launch_geometry();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 100003}, {3, 50001}, {1, 16385}, {2, 4097 * 5}}) {
    const size_t n = (size_t)(rows * cols);
    std::vector<float> x = kiln_test::moderate<float>(n, (uint64_t)(70 + cols));
    const std::string at = kiln::str_cat("(", rows, ", ", cols, ") ");
    reduce_compare(x, rows, cols, 1e-5, at + "finite ");
    for (int k = 0; k < 5; ++k) {  // specials in the last block of each row (the row's end)
      std::vector<float> y = x;
      for (int64_t r = 0; r < rows; ++r) {
        float* row = y.data() + r * cols;
        if (k == 0) row[cols - 1] = (float)nan;
        if (k == 1) row[cols - 1] = (float)inf;
        if (k == 2) row[cols - 2] = (float)-inf;
        if (k == 3) row[cols - 7] = row[cols - 1] = (float)nan;  // the first NaN's index wins
        if (k == 4) row[cols - 3] = (float)inf, row[cols - 1] = (float)-inf;
      }
      reduce_compare(y, rows, cols, 1e-5, kiln::str_cat(at, "special ", k, " "));
    }
  }
  reduce_compare(kiln_test::moderate<double>(70001, 80), 1, 70001, 1e-12, "f64 ");
  reduce_compare(kiln_test::moderate<kiln::half>(3 * 20000, 81), 3, 20000, 1e-3, "f16 ");
  CHECK(gpu::most_blocks_launched("reduce_row_chunks") >= 12);
  CHECK(gpu::most_blocks_launched("reduce_block_rows") == 0);
}

TEST_CASE("CPU mode: reduce_rows: warp and block paths against the CPU backend on adversarial rows") {
  // cols <= 4096: a warp per row, 8 rows per block (rows not a multiple of 8); above: a block per row.
  reduce_case<float>(1, 1, 1, 1e-6);
  reduce_case<float>(11, 31, 2, 1e-6);
  reduce_case<float>(9, 33, 3, 1e-6);
  reduce_case<double>(5, 100, 4, 1e-12);
  reduce_case<float>(3, 4097, 5, 1e-6);
  reduce_case<kiln::half>(4, 77, 6, 1e-3);
  // Ties and constant rows: the first extreme wins on both backends.
  std::vector<float> ties(3 * 40, 2.0f);
  ties[5] = ties[17] = 9.0f;
  ties[40 + 3] = ties[40 + 30] = -1.0f;
  std::vector<float> gw(3), gg(3);
  std::vector<int64_t> iw(3), ig(3);
  cpu::reduce_rows(ReduceOp::max, DType::f32, ties.data(), 3, 40, gw.data(), iw.data());
  gpu::reduce_rows(ReduceOp::max, DType::f32, ties.data(), 3, 40, gg.data(), ig.data());
  CHECK(ig == iw);
  CHECK(ig[0] == 5);
  cpu::reduce_rows(ReduceOp::min, DType::f32, ties.data(), 3, 40, gw.data(), iw.data());
  gpu::reduce_rows(ReduceOp::min, DType::f32, ties.data(), 3, 40, gg.data(), ig.data());
  CHECK(ig == iw);
  CHECK(ig[1] == 3);
  // Empty: no launch, nothing written.
  gpu::reduce_rows(ReduceOp::sum, DType::f32, ties.data(), 0, 40, gg.data(), nullptr);
}

namespace {

template <typename T>
void softmax_case(int64_t rows, int64_t cols, uint64_t seed, double rtol, int special_every) {
  const std::vector<T> x = adversarial<T>((size_t)(rows * cols), seed, special_every);
  const std::vector<T> dy = adversarial<T>((size_t)(rows * cols), seed + 100, 0);
  const size_t n = (size_t)(rows * cols);
  for (bool log : {false, true}) {
    std::vector<T> yw(n), yg(n), dw(n), dg(n);
    if (log) {
      cpu::log_softmax_forward(rows, cols, x.data(), yw.data());
      gpu::log_softmax_forward(rows, cols, x.data(), yg.data());
    } else {
      cpu::softmax_forward(rows, cols, x.data(), yw.data());
      gpu::softmax_forward(rows, cols, x.data(), yg.data());
    }
    const std::string what = kiln::str_cat(log ? "log_" : "", "softmax (", rows, ", ", cols, ")");
    CHECK_MESSAGE(compare(yg, yw, rtol, rtol, what + " forward") == 0, what);
    if (log) {
      cpu::log_softmax_backward(rows, cols, yw.data(), dy.data(), dw.data());
      gpu::log_softmax_backward(rows, cols, yw.data(), dy.data(), dg.data());
    } else {
      cpu::softmax_backward(rows, cols, yw.data(), dy.data(), dw.data());
      gpu::softmax_backward(rows, cols, yw.data(), dy.data(), dg.data());
    }
    CHECK_MESSAGE(compare(dg, dw, rtol, rtol, what + " backward") == 0, what);
  }
}

}  // namespace

TEST_CASE("CPU mode: softmax and log_softmax: forward and backward, warp and block rows, adversarial") {
  softmax_case<float>(1, 1, 11, 1e-5, 0);
  softmax_case<float>(13, 37, 12, 1e-5, 9);  // NaN / inf rows among finite ones
  softmax_case<double>(6, 65, 13, 1e-12, 9);
  softmax_case<float>(2, 4099, 14, 1e-5, 0);  // block per row (512 threads), cols not a multiple of 512
  // All-negative and all-positive huge rows (the max subtraction matters).
  std::vector<float> x(2 * 33);
  for (int i = 0; i < 33; ++i) x[i] = -1e30f + (float)i * 1e24f, x[33 + i] = 80.0f + (float)i;
  std::vector<float> yw(66), yg(66);
  cpu::softmax_forward<float>(2, 33, x.data(), yw.data());
  gpu::softmax_forward<float>(2, 33, x.data(), yg.data());
  CHECK(compare(yg, yw, 1e-5, 1e-7, "softmax huge rows") == 0);
}

TEST_CASE("CPU mode: batch_norm: train and eval, forward and backward, against the CPU backend") {
  for (auto [N, C, HW] : {std::tuple<int64_t, int64_t, int64_t>{2, 3, 1}, {3, 5, 7}, {2, 2, 1000}}) {
    const size_t n = (size_t)(N * C * HW);
    const std::vector<float> x = kiln_test::moderate<float>(n, 20 + n), dy = kiln_test::moderate<float>(n, 21 + n);
    const std::vector<float> gamma = kiln_test::moderate<float>((size_t)C, 22), beta = kiln_test::moderate<float>((size_t)C, 23);
    const double eps = 1e-5, mom = 0.1;
    std::vector<float> rmw((size_t)C, 0.5f), rvw((size_t)C, 2.0f), rmg = rmw, rvg = rvw;
    std::vector<float> yw(n), yg(n), smw((size_t)C), sig((size_t)C), smg((size_t)C), siw((size_t)C);
    cpu::batch_norm_forward_train<float>(N, C, HW, x.data(), gamma.data(), beta.data(), eps, yw.data(), smw.data(),
                                         siw.data(), rmw.data(), rvw.data(), mom);
    gpu::batch_norm_forward_train<float>(N, C, HW, x.data(), gamma.data(), beta.data(), eps, yg.data(), smg.data(),
                                         sig.data(), rmg.data(), rvg.data(), mom);
    const std::string what = kiln::str_cat("batch_norm (", N, ", ", C, ", ", HW, ")");
    CHECK_MESSAGE(compare(yg, yw, 1e-4, 1e-5, what + " y") == 0, what);
    CHECK_MESSAGE(compare(smg, smw, 1e-5, 1e-6, what + " mean") == 0, what);
    CHECK_MESSAGE(compare(sig, siw, 1e-4, 1e-6, what + " invstd") == 0, what);
    CHECK_MESSAGE(compare(rmg, rmw, 1e-5, 1e-6, what + " running mean") == 0, what);
    CHECK_MESSAGE(compare(rvg, rvw, 1e-4, 1e-6, what + " running var") == 0, what);
    std::vector<float> dxw(n), dxg(n), dgw((size_t)C), dgg((size_t)C), dbw((size_t)C), dbg((size_t)C);
    cpu::batch_norm_backward_train<float>(N, C, HW, dy.data(), x.data(), gamma.data(), smw.data(), siw.data(),
                                          dxw.data(), dgw.data(), dbw.data());
    gpu::batch_norm_backward_train<float>(N, C, HW, dy.data(), x.data(), gamma.data(), smw.data(), siw.data(),
                                          dxg.data(), dgg.data(), dbg.data());
    CHECK_MESSAGE(compare(dxg, dxw, 1e-3, 1e-4, what + " dx") == 0, what);
    CHECK_MESSAGE(compare(dgg, dgw, 1e-4, 1e-4, what + " dgamma") == 0, what);
    CHECK_MESSAGE(compare(dbg, dbw, 1e-5, 1e-5, what + " dbeta") == 0, what);
    cpu::batch_norm_forward_eval<float>(N, C, HW, x.data(), gamma.data(), beta.data(), rmw.data(), rvw.data(), eps,
                                        yw.data());
    gpu::batch_norm_forward_eval<float>(N, C, HW, x.data(), gamma.data(), beta.data(), rmw.data(), rvw.data(), eps,
                                        yg.data());
    CHECK_MESSAGE(compare(yg, yw, 1e-5, 1e-6, what + " eval y") == 0, what);
    cpu::batch_norm_backward_eval<float>(N, C, HW, dy.data(), x.data(), gamma.data(), rmw.data(), rvw.data(), eps,
                                         dxw.data(), dgw.data(), dbw.data());
    gpu::batch_norm_backward_eval<float>(N, C, HW, dy.data(), x.data(), gamma.data(), rmw.data(), rvw.data(), eps,
                                         dxg.data(), dgg.data(), dbg.data());
    CHECK_MESSAGE(compare(dxg, dxw, 1e-5, 1e-6, what + " eval dx") == 0, what);
    CHECK_MESSAGE(compare(dgg, dgw, 1e-4, 1e-4, what + " eval dgamma") == 0, what);
    CHECK_MESSAGE(compare(dbg, dbw, 1e-5, 1e-5, what + " eval dbeta") == 0, what);
  }
}

TEST_CASE("CPU mode: batch_norm staged kernels (SyncBatchNorm): each stage against the CPU backend's") {
  // The statistics of two "ranks" summed between the stages, as engine/ops/nn_norm_sync.cpp does; the
  // device sums are what crosses to the host (issue 33, defect 4: x, y, dy, dx stay on the device).
  for (auto [N, C, HW] : {std::tuple<int64_t, int64_t, int64_t>{2, 3, 37}, {1, 5, 1}, {3, 2, 600}, {0, 4, 9}}) {
    const size_t n = (size_t)(N * C * HW);
    const std::vector<double> x = kiln_test::moderate<double>(n, 90 + n), dy = kiln_test::moderate<double>(n, 91 + n);
    const std::vector<double> other = kiln_test::moderate<double>((size_t)(2 * C), 92);  // the other rank's sums
    std::vector<double> gamma((size_t)C), beta((size_t)C);
    for (int64_t c = 0; c < C; ++c) gamma[(size_t)c] = 0.5 + 0.25 * (double)c, beta[(size_t)c] = 0.1 * (double)c - 0.2;
    const std::string what = kiln::str_cat("bn sync (", N, ", ", C, ", ", HW, ")");
    std::vector<double> sw((size_t)C), sg((size_t)C);
    cpu::batch_norm_channel_sums<double>(N, C, HW, x.data(), sw.data());
    gpu::batch_norm_channel_sums<double>(N, C, HW, x.data(), sg.data());
    CHECK_MESSAGE(compare(sg, sw, 1e-13, 1e-13, what + " sums") == 0, what);
    const int64_t M = N * HW + 7;  // seven values on the other rank
    std::vector<double> mean((size_t)C), var((size_t)C);
    for (int64_t c = 0; c < C; ++c) mean[(size_t)c] = (sw[(size_t)c] + other[(size_t)c]) / (double)M;
    std::vector<double> qw((size_t)C), qg((size_t)C);
    cpu::batch_norm_channel_centered_squares<double>(N, C, HW, x.data(), mean.data(), qw.data());
    gpu::batch_norm_channel_centered_squares<double>(N, C, HW, x.data(), mean.data(), qg.data());
    CHECK_MESSAGE(compare(qg, qw, 1e-13, 1e-13, what + " centered squares") == 0, what);
    for (int64_t c = 0; c < C; ++c) var[(size_t)c] = (qw[(size_t)c] + 3.0) / (double)M;
    std::vector<double> yw(n), yg(n), smw((size_t)C), smg((size_t)C), siw((size_t)C), sig((size_t)C);
    std::vector<double> rmw((size_t)C, 0.5), rmg((size_t)C, 0.5), rvw((size_t)C, 2.0), rvg((size_t)C, 2.0);
    cpu::batch_norm_forward_with_stats<double>(N, C, HW, x.data(), gamma.data(), beta.data(), 1e-5, mean.data(),
                                               var.data(), M, yw.data(), smw.data(), siw.data(), rmw.data(), rvw.data(), 0.1);
    gpu::batch_norm_forward_with_stats<double>(N, C, HW, x.data(), gamma.data(), beta.data(), 1e-5, mean.data(),
                                               var.data(), M, yg.data(), smg.data(), sig.data(), rmg.data(), rvg.data(), 0.1);
    CHECK_MESSAGE(compare(yg, yw, 1e-13, 1e-13, what + " y") == 0, what);
    CHECK_MESSAGE(compare(smg, smw, 0, 0, what + " save_mean") == 0, what);
    CHECK_MESSAGE(compare(sig, siw, 1e-15, 0, what + " save_invstd") == 0, what);
    CHECK_MESSAGE(compare(rmg, rmw, 1e-15, 0, what + " running_mean") == 0, what);
    CHECK_MESSAGE(compare(rvg, rvw, 1e-15, 0, what + " running_var") == 0, what);
    std::vector<double> gw((size_t)(2 * C)), gg((size_t)(2 * C));
    cpu::batch_norm_grad_sums<double>(N, C, HW, dy.data(), x.data(), smw.data(), gw.data());
    gpu::batch_norm_grad_sums<double>(N, C, HW, dy.data(), x.data(), smw.data(), gg.data());
    CHECK_MESSAGE(compare(gg, gw, 1e-12, 1e-12, what + " grad sums") == 0, what);
    std::vector<double> global = gw;
    for (size_t i = 0; i < global.size(); ++i) global[i] += other[i];
    std::vector<double> dxw(n), dxg(n), dgw((size_t)C), dgg((size_t)C), dbw((size_t)C), dbg((size_t)C);
    cpu::batch_norm_backward_with_sums<double>(N, C, HW, dy.data(), x.data(), gamma.data(), smw.data(), siw.data(),
                                               global.data(), gw.data(), M, dxw.data(), dgw.data(), dbw.data());
    gpu::batch_norm_backward_with_sums<double>(N, C, HW, dy.data(), x.data(), gamma.data(), smw.data(), siw.data(),
                                               global.data(), gw.data(), M, dxg.data(), dgg.data(), dbg.data());
    CHECK_MESSAGE(compare(dxg, dxw, 1e-13, 1e-13, what + " dx") == 0, what);
    CHECK_MESSAGE(compare(dgg, dgw, 0, 0, what + " dgamma") == 0, what);
    CHECK_MESSAGE(compare(dbg, dbw, 0, 0, what + " dbeta") == 0, what);
  }
  const std::vector<float> xf = kiln_test::moderate<float>(2 * 3 * 50, 93);
  std::vector<double> dw(3), dg(3);
  cpu::batch_norm_channel_sums<float>(2, 3, 50, xf.data(), dw.data());
  gpu::batch_norm_channel_sums<float>(2, 3, 50, xf.data(), dg.data());
  CHECK(compare(dg, dw, 1e-12, 1e-12, "f32 sums") == 0);
}

TEST_CASE("CPU mode: losses: cross_entropy, nll and mse, every reduction, ignored targets, against the CPU backend") {
  using kiln::Reduction;
  for (auto [N, K] : {std::pair<int64_t, int64_t>{1, 1}, {7, 5}, {37, 3}, {300, 10}}) {
    const std::vector<float> logits = kiln_test::moderate<float>((size_t)(N * K), 30 + N);
    const std::vector<float> w = kiln_test::moderate<float>((size_t)K, 31, 0.3);
    std::vector<float> weight(w.size());
    for (size_t i = 0; i < w.size(); ++i) weight[i] = 1.0f + std::fabs(w[i]);
    std::vector<int64_t> t((size_t)N);
    for (int64_t i = 0; i < N; ++i) t[(size_t)i] = (i * 7 + 3) % K;
    if (N > 2) t[1] = -100;  // ignore_index
    for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum})
      for (bool weighted : {false, true})
        for (double ls : {0.0, 0.1}) {
          const size_t on = r == Reduction::none ? (size_t)N : 1;
          const float* wp = weighted ? weight.data() : nullptr;
          std::vector<float> ow(on), og(on), lpw((size_t)(N * K)), lpg((size_t)(N * K));
          cpu::cross_entropy_forward<float>(N, K, logits.data(), t.data(), wp, ls, -100, r, ow.data(), lpw.data());
          gpu::cross_entropy_forward<float>(N, K, logits.data(), t.data(), wp, ls, -100, r, og.data(), lpg.data());
          const std::string what = kiln::str_cat("cross_entropy N ", N, " K ", K, " reduction ", (int)r,
                                                 weighted ? " weighted" : "", " ls ", ls);
          CHECK_MESSAGE(compare(og, ow, 1e-5, 1e-6, what) == 0, what);
          CHECK_MESSAGE(compare(lpg, lpw, 1e-5, 1e-6, what + " logp") == 0, what);
          const std::vector<float> go = kiln_test::moderate<float>(on, 33);
          std::vector<float> dw((size_t)(N * K)), dg((size_t)(N * K));
          cpu::cross_entropy_backward<float>(N, K, go.data(), lpw.data(), t.data(), wp, ls, -100, r, dw.data());
          gpu::cross_entropy_backward<float>(N, K, go.data(), lpw.data(), t.data(), wp, ls, -100, r, dg.data());
          CHECK_MESSAGE(compare(dg, dw, 1e-5, 1e-6, what + " backward") == 0, what);
          if (ls != 0.0) continue;
          cpu::nll_loss_forward<float>(N, K, lpw.data(), t.data(), wp, -100, r, ow.data());
          gpu::nll_loss_forward<float>(N, K, lpw.data(), t.data(), wp, -100, r, og.data());
          CHECK_MESSAGE(compare(og, ow, 1e-5, 1e-6, what + " nll") == 0, what);
          cpu::nll_loss_backward<float>(N, K, go.data(), t.data(), wp, -100, r, dw.data());
          gpu::nll_loss_backward<float>(N, K, go.data(), t.data(), wp, -100, r, dg.data());
          CHECK_MESSAGE(compare(dg, dw, 1e-6, 1e-7, what + " nll backward") == 0, what);
        }
  }
  for (int64_t n : {1, 33, 1000, 70000}) {  // 70000: more than one block of partial sums
    const std::vector<float> x = adversarial<float>((size_t)n, 40 + n, n > 1000 ? 0 : 11), y = adversarial<float>((size_t)n, 41 + n, 0);
    for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
      const size_t on = r == Reduction::none ? (size_t)n : 1;
      std::vector<float> ow(on), og(on), go = kiln_test::moderate<float>(on, 42), dw((size_t)n), dg((size_t)n);
      cpu::mse_loss_forward<float>(n, x.data(), y.data(), r, ow.data());
      gpu::mse_loss_forward<float>(n, x.data(), y.data(), r, og.data());
      const std::string what = kiln::str_cat("mse n ", n, " reduction ", (int)r);
      CHECK_MESSAGE(compare(og, ow, 1e-5, 1e-6, what) == 0, what);
      cpu::mse_loss_backward<float>(n, go.data(), x.data(), y.data(), r, dw.data());
      gpu::mse_loss_backward<float>(n, go.data(), x.data(), y.data(), r, dg.data());
      CHECK_MESSAGE(compare(dg, dw, 1e-5, 1e-6, what + " backward") == 0, what);
    }
  }
}

TEST_CASE("CPU mode: cross_entropy: an out-of-range target is reported at the next check, as on the GPU") {
  std::vector<float> logits(4 * 3, 0.5f), lp(12), out(1);
  std::vector<int64_t> t = {0, 1, 7, 2};
  gpu::cross_entropy_forward<float>(4, 3, logits.data(), t.data(), nullptr, 0.0, -100, kiln::Reduction::mean,
                                    out.data(), lp.data());
  CHECK_THROWS_WITH_AS(gpu::check_deferred_errors(0, "test"), doctest::Contains("target 7 at position 2"), kiln::Error);
}

TEST_CASE("CPU mode: loss target check: a grid of blocks over a large N, the last target bad or all good") {
  // N = B*H*W for segmentation: the check must spread over the grid (it was one block of 1024
  // threads walking all N in every forward and backward).
  using kiln::Reduction;
  const int64_t N = 100000, K = 3;
  const std::vector<float> logp = kiln_test::moderate<float>((size_t)(N * K), 50);
  const std::vector<float> weight = {0.5f, 2.0f, 1.25f};
  std::vector<int64_t> t((size_t)N);
  for (int64_t i = 0; i < N; ++i) t[(size_t)i] = i % 11 == 5 ? -100 : (i * 7 + 1) % K;
  for (Reduction r : {Reduction::mean, Reduction::sum}) {  // good targets: D over all N matches the CPU
    std::vector<float> ow(1), og(1), go = {0.75f}, dw((size_t)(N * K)), dg((size_t)(N * K));
    gpu::clear_launch_geometry();
    cpu::nll_loss_forward<float>(N, K, logp.data(), t.data(), weight.data(), -100, r, ow.data());
    gpu::nll_loss_forward<float>(N, K, logp.data(), t.data(), weight.data(), -100, r, og.data());
    CHECK(compare(og, ow, 1e-5, 1e-6, "nll forward") == 0);
    cpu::nll_loss_backward<float>(N, K, go.data(), t.data(), weight.data(), -100, r, dw.data());
    gpu::nll_loss_backward<float>(N, K, go.data(), t.data(), weight.data(), -100, r, dg.data());
    CHECK(compare(dg, dw, 1e-6, 1e-9, "nll backward") == 0);
    CHECK_NOTHROW(gpu::check_deferred_errors(0, "test"));
    CHECK(gpu::most_blocks_launched("target_stats_kernel") >= 64);
  }
  t[(size_t)N - 1] = K;  // the last sample's target is out of range
  std::vector<float> og(1), dg((size_t)(N * K)), go = {1.0f};
  gpu::nll_loss_forward<float>(N, K, logp.data(), t.data(), nullptr, -100, Reduction::mean, og.data());
  CHECK_THROWS_WITH_AS(gpu::check_deferred_errors(0, "test"), doctest::Contains("target 3 at position 99999"), kiln::Error);
  gpu::nll_loss_backward<float>(N, K, go.data(), t.data(), nullptr, -100, Reduction::mean, dg.data());
  CHECK_THROWS_WITH_AS(gpu::check_deferred_errors(0, "test"), doctest::Contains("target 3 at position 99999"), kiln::Error);
  CHECK(std::isnan(og[0]));
}
