// Samplers: which data set indices an epoch visits, in what order, and how they are cut into
// batches. Every random choice comes from Philox keyed by the seed with the epoch in the counter,
// so an epoch's order depends only on (seed, epoch). Must not touch images or threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

enum class SamplerKind { sequential, random, weighted };

struct SamplerSpec {
  SamplerKind kind = SamplerKind::sequential;
  uint64_t seed = 0;
  // weighted: per-class weights (index = label), or balance = 1 / class frequency.
  std::vector<double> class_weights;
  bool balance = false;
  size_t num_samples = 0;  // weighted: draws per epoch (0 = data set size)
};

std::vector<size_t> sequential_indices(size_t n);
// Fisher-Yates with Philox words: a uniform permutation of [0, n) for (seed, epoch).
std::vector<size_t> random_permutation(size_t n, uint64_t seed, uint64_t epoch);
// num_samples draws with replacement, P(i) = w[i] / sum(w) (torch WeightedRandomSampler).
// Throws kiln::Error for negative/non-finite weights or an all-zero sum.
std::vector<size_t> weighted_indices(const std::vector<double>& sample_weights, size_t num_samples, uint64_t seed,
                                     uint64_t epoch);
// Per-sample weights from per-class weights; balance: class_weight = 1 / count (0 for empty classes).
std::vector<double> sample_weights_from_classes(const std::vector<int64_t>& labels,
                                                const std::vector<double>& class_weights);
std::vector<double> balanced_class_weights(const std::vector<int64_t>& labels, size_t num_classes);

// The indices of one epoch for spec (labels used by weighted).
std::vector<size_t> epoch_indices(const SamplerSpec& spec, const std::vector<int64_t>& labels,
                                  size_t num_classes, uint64_t epoch);

// Cuts indices into batches of batch_size; the last short batch is dropped when drop_last.
std::vector<std::vector<size_t>> make_batches(const std::vector<size_t>& indices, size_t batch_size, bool drop_last);

}  // namespace kiln
