// dropout with a Philox mask: element i is kept iff uniform(seed, offset, i) >= p, so the same
// (seed, offset) gives the same mask on every device and when a checkpointed forward is replayed.
#include "engine/ops/nn_common.h"
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
  uint64_t offset = rng_reserve((uint64_t)n), seed = global_rng().seed;
  Tensor y = empty(x.sizes(), x.dtype(), x.device());
  Tensor mask = empty(x.sizes(), DType::u8, x.device());
  KILN_NN_TYPED(x.dtype(), "dropout",
                KILN_DISPATCH(x.device(), dropout_forward<T>, n, ptr<T>(xc), p, seed, offset, ptr<T>(y),
                              ptr<uint8_t>(mask)));
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
