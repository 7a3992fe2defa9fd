// cat, stack and constant pad, built on copies into views of the output.
#include "engine/ops/dispatch.h"

namespace kiln {

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  KILN_CHECK(!xs.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& f = xs[0];
  check_defined(f, "cat", "tensor 0");
  int d = wrap_dim(dim, f.dim(), "cat");
  Shape out = f.sizes();
  out[d] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    check_defined(t, "cat", "a tensor");
    check_same_dtype(f, t, "cat");
    check_same_device(f, t, "cat");
    KILN_CHECK(t.dim() == f.dim(), "cat: tensor ", i, " ", t.str(), " has ", t.dim(), " dims, expected ", f.dim());
    for (int64_t k = 0; k < f.dim(); ++k)
      KILN_CHECK(k == d || t.sizes()[k] == f.sizes()[k], "cat: tensor ", i, " ", t.str(), " does not match ",
                 f.str(), " outside dim ", d);
    out[d] += t.sizes()[d];
  }
  Tensor y = empty(out, f.dtype(), f.device());
  std::vector<int64_t> starts;
  int64_t at = 0;
  for (const Tensor& t : xs) {
    starts.push_back(at);
    launch_copy(narrow(y, d, at, t.sizes()[d]), t);
    at += t.sizes()[d];
  }
  std::vector<int64_t> lens;
  for (const Tensor& t : xs) lens.push_back(t.sizes()[d]);
  record_op("cat", xs, {y}, [d, starts, lens](FunctionNode&, const std::vector<Tensor>& g) {
    std::vector<Tensor> r;
    for (size_t i = 0; i < starts.size(); ++i) r.push_back(contiguous(narrow(g[0], d, starts[i], lens[i])));
    return r;
  });
  return y;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  KILN_CHECK(!xs.empty(), "stack: expected a non-empty list of tensors");
  int d = wrap_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> u;
  for (size_t i = 0; i < xs.size(); ++i) {
    KILN_CHECK(xs[i].sizes() == xs[0].sizes(), "stack: tensor ", i, " ", xs[i].str(), " differs in shape from ",
               xs[0].str());
    u.push_back(unsqueeze(xs[i], d));
  }
  return cat(u, d);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  check_defined(x, "pad", "input");
  KILN_CHECK(pads.size() % 2 == 0 && (int64_t)pads.size() / 2 <= x.dim(), "pad: ", pads.size(),
             " padding values for ", x.str(), " (need pairs, at most 2 per dim)");
  Shape out = x.sizes();
  std::vector<int64_t> lo(x.dim(), 0);
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    int64_t d = x.dim() - 1 - (int64_t)i;
    KILN_CHECK(pads[2 * i] >= 0 && pads[2 * i + 1] >= 0, "pad: negative padding is not supported");
    lo[d] = pads[2 * i];
    out[d] += pads[2 * i] + pads[2 * i + 1];
  }
  Tensor y = full(out, value, x.dtype(), x.device());
  Tensor inner = y;
  for (int64_t d = 0; d < x.dim(); ++d) inner = narrow(inner, d, lo[d], x.sizes()[d]);
  launch_copy(inner, x);
  Shape xs = x.sizes();
  record_op("pad", {x}, {y}, [lo, xs](FunctionNode&, const std::vector<Tensor>& g) {
    Tensor v = g[0];
    for (size_t d = 0; d < xs.size(); ++d) v = narrow(v, (int64_t)d, lo[d], xs[d]);
    return std::vector<Tensor>{contiguous(v)};
  });
  return y;
}

}  // namespace kiln
