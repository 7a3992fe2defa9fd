// Sequential, random and weighted samplers over Philox (see sampler.h).
#include "data/sampler.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"
#include "engine/core/philox.h"

namespace kiln {
namespace {

// Sampler streams use their own key so they never share numbers with augmentation streams.
constexpr uint64_t kSamplerKey = 0x9E3779B97F4A7C15ull;

struct EpochRng {
  uint64_t key, base;
  uint64_t i = 0;
  EpochRng(uint64_t seed, uint64_t epoch) : key(seed ^ kSamplerKey), base(epoch << 40) {}
  uint64_t next64() {
    uint64_t a = philox_word(key, base, i), b = philox_word(key, base, i + 1);
    i += 2;
    return (a << 32) | b;
  }
  // Uniform in [0, n): multiply-shift (bias below n / 2^64).
  size_t below(size_t n) { return (size_t)(((unsigned __int128)next64() * n) >> 64); }
  double uniform() { return (double)(next64() >> 11) * (1.0 / 9007199254740992.0); }
};

}  // namespace

std::vector<size_t> sequential_indices(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

std::vector<size_t> random_permutation(size_t n, uint64_t seed, uint64_t epoch) {
  std::vector<size_t> v = sequential_indices(n);
  EpochRng rng(seed, epoch);
  for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
  return v;
}

std::vector<size_t> weighted_indices(const std::vector<double>& w, size_t num_samples, uint64_t seed,
                                     uint64_t epoch) {
  KILN_CHECK(!w.empty(), "weighted sampler: no weights");
  std::vector<double> cum(w.size());
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    KILN_CHECK(std::isfinite(w[i]) && w[i] >= 0, "weighted sampler: weight ", i, " is ", w[i],
               " (must be finite and >= 0)");
    s += w[i];
    cum[i] = s;
  }
  KILN_CHECK(s > 0, "weighted sampler: all weights are zero");
  EpochRng rng(seed, epoch);
  std::vector<size_t> out(num_samples);
  for (auto& o : out) {
    double u = rng.uniform() * s;
    size_t k = (size_t)(std::upper_bound(cum.begin(), cum.end(), u) - cum.begin());
    // Never pick a zero-weight entry (u can land on a flat step only at its left edge).
    while (k < w.size() && w[k] == 0) ++k;
    o = std::min(k, w.size() - 1);
  }
  return out;
}

std::vector<double> sample_weights_from_classes(const std::vector<int64_t>& labels,
                                                const std::vector<double>& cw) {
  std::vector<double> w(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    KILN_CHECK(labels[i] >= 0 && (size_t)labels[i] < cw.size(), "weighted sampler: label ", labels[i],
               " of sample ", i, " has no class weight (", cw.size(), " given)");
    w[i] = cw[(size_t)labels[i]];
  }
  return w;
}

std::vector<double> balanced_class_weights(const std::vector<int64_t>& labels, size_t num_classes) {
  std::vector<double> cnt(num_classes, 0);
  for (auto l : labels)
    if (l >= 0 && (size_t)l < num_classes) cnt[(size_t)l] += 1;
  for (auto& c : cnt) c = c > 0 ? 1.0 / c : 0.0;
  return cnt;
}

std::vector<size_t> epoch_indices(const SamplerSpec& spec, const std::vector<int64_t>& labels, size_t num_classes,
                                  uint64_t epoch) {
  switch (spec.kind) {
    case SamplerKind::sequential: return sequential_indices(labels.size());
    case SamplerKind::random: return random_permutation(labels.size(), spec.seed, epoch);
    case SamplerKind::weighted:
    default: {
      KILN_CHECK(spec.balance || !spec.class_weights.empty(),
                 "weighted sampler: give class weights or balance = true");
      std::vector<double> cw = spec.balance ? balanced_class_weights(labels, num_classes) : spec.class_weights;
      size_t n = spec.num_samples ? spec.num_samples : labels.size();
      return weighted_indices(sample_weights_from_classes(labels, cw), n, spec.seed, epoch);
    }
  }
}

std::vector<std::vector<size_t>> make_batches(const std::vector<size_t>& idx, size_t bs, bool drop_last) {
  KILN_CHECK(bs > 0, "batching: batch size must be > 0");
  std::vector<std::vector<size_t>> out;
  for (size_t i = 0; i < idx.size(); i += bs) {
    size_t e = std::min(idx.size(), i + bs);
    if (e - i < bs && drop_last) break;
    out.emplace_back(idx.begin() + (long)i, idx.begin() + (long)e);
  }
  return out;
}

}  // namespace kiln
