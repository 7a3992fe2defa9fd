// dropout with a Philox mask: element i is kept iff uniform(seed, offset, i) >= p, so the same
// (seed, offset) gives the same mask on every device and when a checkpointed forward is replayed.
// Data-parallel keyed rows (engine/core/rng_rows.h, set by train_step): x (n, F...) holds global rows
// [first, first + n) of a batch of `total`; global row r's element j uses counter window
// offset + r * ceil(F / 4) (j / 4, word j % 4), and the op reserves all `total` rows' windows. When F
// is a multiple of 4 this is the unkeyed stream of one process holding all `total` rows (element
// r * F + j at offset + (r * F + j) / 4), so N ranks draw one process's masks for the global batch.
#include "engine/ops/nn_common.h"
#include "engine/core/philox.h"
#include "engine/core/rng_rows.h"
#include "kernels/cpu/dropout.h"

namespace kiln {

Tensor dropout(const Tensor& x, double p, bool training) {
  check_defined(x, "dropout", "input");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability ", p, " must be in [0, 1]");
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  if (is_16bit(x.dtype())) return to_dtype(dropout(to_dtype(x, DType::f32), p, training), x.dtype());
  Tensor xc = contiguous(x.detach());
  int64_t n = x.numel();
  const RngRows rows_key = rng_rows();
  const bool keyed = rows_key.total >= 0 && x.dim() >= 1 && x.size(0) == rows_key.count;
  const uint64_t seed = global_rng().seed;
  Tensor y = empty(x.sizes(), x.dtype(), x.device());
  Tensor mask = empty(x.sizes(), DType::u8, x.device());
  if (!keyed) {
    uint64_t offset = rng_reserve((uint64_t)n);
    KILN_NN_TYPED(x.dtype(), "dropout",
                  KILN_DISPATCH(x.device(), dropout_forward<T>, n, ptr<T>(xc), p, seed, offset, ptr<T>(y),
                                ptr<uint8_t>(mask)));
  } else {
    int64_t F = 1;  // elements per row
    for (int64_t d = 1; d < x.dim(); ++d) F *= x.size(d);
    const uint64_t window = philox_counters_for((uint64_t)F);
    const uint64_t first = (uint64_t)rows_key.first, rows = (uint64_t)x.size(0);
    const uint64_t base = rng_reserve((uint64_t)rows_key.total * window * 4);  // all rows' windows
    if (F % 4 == 0) {  // rows are whole windows: one call over this rank's rows
      KILN_NN_TYPED(x.dtype(), "dropout",
                    KILN_DISPATCH(x.device(), dropout_forward<T>, n, ptr<T>(xc), p, seed, base + first * window,
                                  ptr<T>(y), ptr<uint8_t>(mask)));
    } else {  // each row starts a window of its own
      for (uint64_t r = 0; r < rows; ++r)
        KILN_NN_TYPED(x.dtype(), "dropout",
                      KILN_DISPATCH(x.device(), dropout_forward<T>, F, ptr<T>(xc) + (int64_t)r * F, p, seed,
                                    base + (first + r) * window, ptr<T>(y) + (int64_t)r * F, ptr<uint8_t>(mask) + (int64_t)r * F));
    }
  }
  auto node = record_op("dropout", {x}, {y}, [n, p](FunctionNode& nd, const std::vector<Tensor>& g) {
    Tensor m = nd.saved(0);
    Tensor go = contiguous(g[0]);
    Tensor dx = empty(go.sizes(), go.dtype(), go.device());
    KILN_NN_TYPED(go.dtype(), "dropout backward",
                  KILN_DISPATCH(go.device(), dropout_backward<T>, n, ptr<T>(go), ptr<uint8_t>(m), p, ptr<T>(dx)));
    return std::vector<Tensor>{dx};
  });
  if (node) node->save(mask);
  return y;
}

}  // namespace kiln
