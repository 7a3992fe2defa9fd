// softmax / log_softmax, cross_entropy / nll_loss / mse_loss and dropout kernels (cpu):
// against direct references, PyTorch's composed label-smoothing formula (nll part + smoothing part,
// each with its own normalization, as in aten/native/LossNLL.cpp), values printed by PyTorch 1.13,
// central differences, and the Philox stream.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/philox.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/softmax.h"

using namespace kiln;

namespace {

std::vector<double> rand_vec(size_t n, std::mt19937& g, double lo = -2, double hi = 2) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central-difference gradient of a scalar function f at x.
template <typename F>
std::vector<double> numgrad(F f, std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double x0 = x[i];
    x[i] = x0 + h;
    double fp = f(x);
    x[i] = x0 - h;
    double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

std::vector<double> ref_log_softmax(int64_t rows, int64_t cols, const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) s += std::exp(x[r * cols + j]);
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = x[r * cols + j] - std::log(s);
  }
  return y;
}

// PyTorch 1.13's cross_entropy with label smoothing, composed the way aten does it:
//   (1 - ls) * nll_loss(logp, t, w, reduction) + (ls / K) * smooth,
//   smooth_i = -sum_c w_c logp_ic (0 if ignored); mean: sum(smooth) / sum(w[t_i] non-ignored)
//   (unweighted: / count of non-ignored). Returns the per-sample vector for none.
std::vector<double> ref_cross_entropy(int64_t N, int64_t K, const std::vector<double>& logits,
                                      const std::vector<int64_t>& t, const std::vector<double>* w, double ls,
                                      int64_t ignore, Reduction red) {
  auto lp = ref_log_softmax(N, K, logits);
  std::vector<double> nll(N, 0), smooth(N, 0);
  double wsum = 0, cnt = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (t[i] == ignore) continue;
    double wt = w ? (*w)[t[i]] : 1.0;
    nll[i] = -wt * lp[i * K + t[i]];
    wsum += wt;
    cnt += 1;
    for (int64_t c = 0; c < K; ++c) smooth[i] -= (w ? (*w)[c] : 1.0) * lp[i * K + c];
  }
  if (red == Reduction::none) {
    std::vector<double> out(N);
    for (int64_t i = 0; i < N; ++i) out[i] = (1 - ls) * nll[i] + ls / K * smooth[i];
    return out;
  }
  double sn = 0, ss = 0;
  for (int64_t i = 0; i < N; ++i) sn += nll[i], ss += smooth[i];
  if (red == Reduction::sum) return {(1 - ls) * sn + ls / K * ss};
  double nll_mean = sn / wsum;                    // nll_loss: divide by total weight
  double smooth_mean = ss / (w ? wsum : cnt);     // smoothing term: weight.gather(target).sum() or count
  return {(1 - ls) * nll_mean + ls / K * smooth_mean};
}

}  // namespace

TEST_CASE("softmax / log_softmax forward match the reference and backward matches central differences") {
  std::mt19937 g(31);
  for (auto rc : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {7, 33}, {2, 1000}}) {
    int64_t R = rc.first, Cc = rc.second;
    auto x = rand_vec(R * Cc, g, -5, 5);
    auto lref = ref_log_softmax(R, Cc, x);
    std::vector<double> ls(x.size()), sm(x.size());
    cpu::log_softmax_forward<double>(R, Cc, x.data(), ls.data());
    cpu::softmax_forward<double>(R, Cc, x.data(), sm.data());
    for (size_t i = 0; i < x.size(); ++i) {
      REQUIRE(ls[i] == doctest::Approx(lref[i]).epsilon(1e-13));
      REQUIRE(sm[i] == doctest::Approx(std::exp(lref[i])).epsilon(1e-13));
    }
    if (x.size() > 200) continue;  // central differences on the small ones
    auto dy = rand_vec(x.size(), g);
    std::vector<double> dls(x.size()), dsm(x.size());
    cpu::log_softmax_backward<double>(R, Cc, ls.data(), dy.data(), dls.data());
    cpu::softmax_backward<double>(R, Cc, sm.data(), dy.data(), dsm.data());
    auto nl = numgrad([&](const std::vector<double>& xx) { return dot(ref_log_softmax(R, Cc, xx), dy); }, x);
    auto ns = numgrad(
        [&](const std::vector<double>& xx) {
          auto l = ref_log_softmax(R, Cc, xx);
          for (auto& v : l) v = std::exp(v);
          return dot(l, dy);
        },
        x);
    for (size_t i = 0; i < x.size(); ++i) {
      REQUIRE(std::abs(dls[i] - nl[i]) < 1e-7);
      REQUIRE(std::abs(dsm[i] - ns[i]) < 1e-7);
    }
  }
  // Large logits do not overflow (max-subtracted), in f32.
  std::vector<float> big = {1000.f, 1001.f, 999.f}, out(3);
  cpu::softmax_forward<float>(1, 3, big.data(), out.data());
  CHECK(out[1] == doctest::Approx(0.665240955).epsilon(1e-6));
}

TEST_CASE("cross_entropy with weight + label smoothing + ignore_index matches PyTorch 1.13's printed values") {
  // torch.nn.functional.cross_entropy(logits, t, weight=w, ignore_index=0, label_smoothing=0.2), float64
  std::vector<double> logits = {1.0, 2.0, 0.5, 0.1, -1.0, 3.0, 2.0, 2.0, -2.0, 0.0, 1.0, 0.0};
  std::vector<int64_t> t = {1, 2, 0, 1};
  std::vector<double> w = {0.5, 2.0, 1.5};
  std::vector<double> logp(12), out(4), d(12);
  cpu::cross_entropy_forward<double>(4, 3, logits.data(), t.data(), w.data(), 0.2, 0, Reduction::mean, out.data(),
                                     logp.data());
  CHECK(out[0] == doctest::Approx(0.5357552819666751).epsilon(1e-14));
  double one = 1.0;
  cpu::cross_entropy_backward<double>(4, 3, &one, logp.data(), t.data(), w.data(), 0.2, 0, Reduction::mean, d.data());
  const double gmean[] = {0.07241538343539604, -0.10183165893418974, 0.029416275498793668, 0.007609688794952257,
                          -0.019691978379382264, 0.012082289584430044, 0, 0, 0, 0.06587107410034415,
                          -0.1196209360794762, 0.053749861979132035};
  for (int i = 0; i < 12; ++i) CHECK(d[i] == doctest::Approx(gmean[i]).epsilon(1e-13));
  cpu::cross_entropy_forward<double>(4, 3, logits.data(), t.data(), w.data(), 0.2, 0, Reduction::sum, out.data(),
                                     logp.data());
  CHECK(out[0] == doctest::Approx(2.946654050816713).epsilon(1e-14));
  cpu::cross_entropy_forward<double>(4, 3, logits.data(), t.data(), w.data(), 0.2, 0, Reduction::none, out.data(),
                                     logp.data());
  const double none[] = {1.0501550636681638, 0.7338021878087205, 0.0, 1.1626967993398287};
  for (int i = 0; i < 4; ++i) CHECK(out[i] == doctest::Approx(none[i]).epsilon(1e-14));
}

TEST_CASE("cross_entropy matches the composed formula for every weight/smoothing/ignore/reduction combination, "
          "and its gradient matches central differences") {
  std::mt19937 g(32);
  const int64_t N = 6, K = 4;
  for (int weighted = 0; weighted < 2; ++weighted)
    for (double ls : {0.0, 0.1, 0.35})
      for (int64_t ignore : {-100, 2})
        for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
          INFO("weighted=", weighted, " ls=", ls, " ignore=", ignore, " red=", (int)red);
          auto logits = rand_vec(N * K, g);
          std::vector<int64_t> t = {0, 2, 3, 1, 2, 3};
          auto w = rand_vec(K, g, 0.2, 2.0);
          const std::vector<double>* wp = weighted ? &w : nullptr;
          auto want = ref_cross_entropy(N, K, logits, t, wp, ls, ignore, red);
          std::vector<double> out(red == Reduction::none ? N : 1), logp(N * K), d(N * K);
          cpu::cross_entropy_forward<double>(N, K, logits.data(), t.data(), weighted ? w.data() : nullptr, ls, ignore,
                                             red, out.data(), logp.data());
          for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == doctest::Approx(want[i]).epsilon(1e-12));
          auto go = rand_vec(out.size(), g);
          cpu::cross_entropy_backward<double>(N, K, go.data(), logp.data(), t.data(), weighted ? w.data() : nullptr,
                                              ls, ignore, red, d.data());
          auto num = numgrad(
              [&](const std::vector<double>& z) { return dot(ref_cross_entropy(N, K, z, t, wp, ls, ignore, red), go); },
              logits);
          for (size_t i = 0; i < d.size(); ++i) REQUIRE(std::abs(d[i] - num[i]) < 1e-7);
          // f32 agrees.
          std::vector<float> lf(logits.begin(), logits.end()), wf(w.begin(), w.end()), of(out.size()), lpf(N * K);
          cpu::cross_entropy_forward<float>(N, K, lf.data(), t.data(), weighted ? wf.data() : nullptr, ls, ignore, red,
                                            of.data(), lpf.data());
          for (size_t i = 0; i < out.size(); ++i) REQUIRE(std::abs(of[i] - out[i]) < 1e-5 * (1 + std::abs(out[i])));
        }
}

TEST_CASE("cross_entropy / nll_loss: out-of-range target names the index and K, all-ignored mean is NaN") {
  std::vector<double> logits(6, 0.0), logp(6), out(1);
  std::vector<int64_t> t = {1, 3};
  try {
    cpu::cross_entropy_forward<double>(2, 3, logits.data(), t.data(), nullptr, 0.0, -100, Reduction::mean, out.data(),
                                       logp.data());
    FAIL("expected kiln::Error");
  } catch (const kiln::Error& e) {
    std::string m = e.what();
    CHECK(m.find("cross_entropy_forward") != std::string::npos);
    CHECK(m.find("target 3") != std::string::npos);
    CHECK(m.find("K=3") != std::string::npos);
  }
  t = {-1, 0};
  CHECK_THROWS_AS(cpu::nll_loss_forward<double>(2, 3, logp.data(), t.data(), nullptr, -100, Reduction::sum, out.data()),
                  kiln::Error);
  t = {5, 5};
  cpu::cross_entropy_forward<double>(2, 3, logits.data(), t.data(), nullptr, 0.1, 5, Reduction::mean, out.data(),
                                     logp.data());
  CHECK(std::isnan(out[0]));
}

TEST_CASE("nll_loss forward/backward on log-probs (weighted mean divides by the target weights)") {
  std::mt19937 g(33);
  const int64_t N = 5, K = 3;
  auto lp = rand_vec(N * K, g, -3, 0);
  std::vector<int64_t> t = {0, 2, 1, 2, -100};
  std::vector<double> w = {0.3, 1.7, 2.5}, out(1), d(N * K);
  cpu::nll_loss_forward<double>(N, K, lp.data(), t.data(), w.data(), -100, Reduction::mean, out.data());
  double num = 0, den = 0;
  for (int64_t i = 0; i < 4; ++i) num -= w[t[i]] * lp[i * K + t[i]], den += w[t[i]];
  CHECK(out[0] == doctest::Approx(num / den).epsilon(1e-14));
  double go = 0.7;
  cpu::nll_loss_backward<double>(N, K, &go, t.data(), w.data(), -100, Reduction::mean, d.data());
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < K; ++c)
      CHECK(d[i * K + c] == doctest::Approx(i < 4 && c == t[i] ? -0.7 * w[c] / den : 0.0).epsilon(1e-14));
}

TEST_CASE("mse_loss forward/backward, all reductions") {
  std::mt19937 g(34);
  const int64_t n = 37;
  auto x = rand_vec(n, g), y = rand_vec(n, g);
  for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
    std::vector<double> out(red == Reduction::none ? n : 1), dx(n);
    cpu::mse_loss_forward<double>(n, x.data(), y.data(), red, out.data());
    auto ref = [&](const std::vector<double>& xx) {
      std::vector<double> l(n);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) l[i] = (xx[i] - y[i]) * (xx[i] - y[i]), s += l[i];
      if (red == Reduction::none) return l;
      return std::vector<double>{red == Reduction::sum ? s : s / n};
    };
    auto want = ref(x);
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == doctest::Approx(want[i]).epsilon(1e-14));
    auto go = rand_vec(out.size(), g);
    cpu::mse_loss_backward<double>(n, go.data(), x.data(), y.data(), red, dx.data());
    auto ng = numgrad([&](const std::vector<double>& xx) { return dot(ref(xx), go); }, x);
    for (int64_t i = 0; i < n; ++i) REQUIRE(std::abs(dx[i] - ng[i]) < 1e-7);
  }
}

TEST_CASE("dropout keeps element i iff philox_uniform(seed, offset, i) >= p, scales by 1/(1-p)") {
  const int64_t n = 10001;
  std::vector<float> x(n), y(n), dx(n), dy(n, 2.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = 0.5f + (float)(i % 7);
  std::vector<uint8_t> mask(n);
  const double p = 0.3;
  cpu::dropout_forward<float>(n, x.data(), p, 1234, 77, y.data(), mask.data());
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool keep = philox_uniform(1234, 77, i) >= (float)p;
    REQUIRE((mask[i] == 1) == keep);
    REQUIRE(y[i] == (keep ? x[i] * (float)(1.0 / 0.7) : 0.0f));
    kept += keep;
  }
  CHECK(std::abs((double)kept / n - 0.7) < 0.02);
  cpu::dropout_backward<float>(n, dy.data(), mask.data(), p, dx.data());
  for (int64_t i = 0; i < n; ++i) REQUIRE(dx[i] == (mask[i] ? 2.0f * (float)(1.0 / 0.7) : 0.0f));
  // A different offset gives a different mask; p = 0 keeps everything, p = 1 drops everything.
  std::vector<uint8_t> mask2(n);
  cpu::dropout_forward<float>(n, x.data(), p, 1234, 78, y.data(), mask2.data());
  CHECK(mask2 != mask);
  cpu::dropout_forward<float>(n, x.data(), 0.0, 1, 0, y.data(), nullptr);
  CHECK(y == x);
  cpu::dropout_forward<float>(n, x.data(), 1.0, 1, 0, y.data(), mask.data());
  for (int64_t i = 0; i < n; ++i) REQUIRE((y[i] == 0.0f && mask[i] == 0));
  CHECK_THROWS_AS(cpu::dropout_forward<float>(n, x.data(), 1.5, 1, 0, y.data(), nullptr), kiln::Error);
}
