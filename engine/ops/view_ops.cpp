// View ops: new sizes/strides/offset over the same storage, each with its backward.
#include <algorithm>
#include <numeric>

#include "engine/ops/dispatch.h"

namespace kiln {
namespace {

Tensor make_tracked_view(const Tensor& x, const Shape& sizes, const Shape& strides, int64_t offset) {
  Tensor v = make_view(x, sizes, strides, offset);
  if (x.requires_grad() || x.impl()->is_view) v.impl()->is_view = true;
  return v;
}

Shape infer_size(const Shape& s, int64_t numel, const char* op, const Shape& from) {
  Shape out = s;
  int infer = -1;
  int64_t prod = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      KILN_CHECK(infer < 0, op, ": only one dimension can be -1 in ", shape_str(s));
      infer = (int)i;
    } else {
      KILN_CHECK(s[i] >= 0, op, ": invalid size ", s[i], " in ", shape_str(s));
      prod *= s[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(prod != 0 && numel % prod == 0, op, ": shape ", shape_str(s), " is invalid for input of shape ",
               shape_str(from));
    out[infer] = numel / prod;
  }
  KILN_CHECK(numel_of(out) == numel, op, ": shape ", shape_str(s), " is invalid for input of shape ", shape_str(from),
             " (", numel, " elements)");
  return out;
}

// Strides for viewing (sizes, strides) as new_sizes without a copy, or false if impossible.
bool view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes, Shape* out) {
  out->assign(new_sizes.size(), 0);
  if (numel_of(sizes) == 0 || sizes.empty()) {
    *out = contiguous_strides(new_sizes);
    return true;
  }
  int64_t view_d = (int64_t)new_sizes.size() - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = (int64_t)sizes.size() - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        (*out)[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& s) {
  check_defined(x, "view", "input");
  Shape ns = infer_size(s, x.numel(), "view", x.sizes());
  Shape st;
  KILN_CHECK(view_strides(x.sizes(), x.strides(), ns, &st), "view: cannot view ", x.str(), " as ", shape_str(ns),
             " without a copy (its strides are incompatible); use reshape");
  Tensor out = make_tracked_view(x, ns, st, x.offset());
  Shape in_shape = x.sizes();
  record_op("view", {x}, {out}, [in_shape](FunctionNode&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{reshape(g[0], in_shape)};
  });
  return out;
}

Tensor reshape(const Tensor& x, const Shape& s) {
  check_defined(x, "reshape", "input");
  Shape ns = infer_size(s, x.numel(), "reshape", x.sizes());
  Shape st;
  if (view_strides(x.sizes(), x.strides(), ns, &st)) return view(x, ns);
  return view(contiguous(x), ns);  // row-major copy (clone would keep a channels-last layout)
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  check_defined(x, "permute", "input");
  KILN_CHECK((int64_t)dims.size() == x.dim(), "permute: ", dims.size(), " dims given for ", x.str());
  std::vector<int64_t> d(dims.size());
  std::vector<bool> used(dims.size(), false);
  Shape sz(dims.size()), st(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    d[i] = wrap_dim(dims[i], x.dim(), "permute");
    KILN_CHECK(!used[d[i]], "permute: dim ", d[i], " repeated");
    used[d[i]] = true;
    sz[i] = x.sizes()[d[i]];
    st[i] = x.strides()[d[i]];
  }
  Tensor out = make_tracked_view(x, sz, st, x.offset());
  std::vector<int64_t> inv(d.size());
  for (size_t i = 0; i < d.size(); ++i) inv[d[i]] = (int64_t)i;
  record_op("permute", {x}, {out}, [inv](FunctionNode&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{permute(g[0], inv)};
  });
  return out;
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  check_defined(x, "transpose", "input");
  std::vector<int64_t> p(x.dim());
  std::iota(p.begin(), p.end(), 0);
  if (x.dim() == 0) return x;
  std::swap(p[wrap_dim(d0, x.dim(), "transpose")], p[wrap_dim(d1, x.dim(), "transpose")]);
  return permute(x, p);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined(x, "slice", "input");
  int d = wrap_dim(dim, x.dim(), "slice");
  KILN_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = x.sizes()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sz = x.sizes(), st = x.strides();
  sz[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_tracked_view(x, sz, st, x.offset() + start * x.strides()[d]);
  Shape in_shape = x.sizes();
  record_op("slice", {x}, {out}, [in_shape, d, start, end, step](FunctionNode&, const std::vector<Tensor>& g) {
    Tensor gi = zeros(in_shape, g[0].dtype(), g[0].device());
    Tensor v = slice(gi, d, start, end, step);
    launch_copy(v, g[0]);
    return std::vector<Tensor>{gi};
  });
  return out;
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check_defined(x, "narrow", "input");
  int d = wrap_dim(dim, x.dim(), "narrow");
  KILN_CHECK(start >= 0 && length >= 0 && start + length <= x.sizes()[d], "narrow: range [", start, ", ",
             start + length, ") out of bounds for dim ", d, " of ", x.str());
  return slice(x, d, start, start + length, 1);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  check_defined(x, "select", "input");
  int d = wrap_dim(dim, x.dim(), "select");
  int64_t n = x.sizes()[d];
  KILN_CHECK(index >= -n && index < n, "select: index ", index, " out of range for dim ", d, " of ", x.str());
  if (index < 0) index += n;
  return squeeze(narrow(x, d, index, 1), d);
}

Tensor expand(const Tensor& x, const Shape& s) {
  check_defined(x, "expand", "input");
  KILN_CHECK(s.size() >= x.sizes().size(), "expand: cannot expand ", x.str(), " to fewer dims ", shape_str(s));
  size_t lead = s.size() - x.sizes().size();
  Shape sz(s.size()), st(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (i < lead) {
      KILN_CHECK(s[i] >= 0, "expand: size -1 not allowed for new leading dim in ", shape_str(s));
      sz[i] = s[i];
      st[i] = 0;
      continue;
    }
    int64_t cur = x.sizes()[i - lead];
    int64_t want = s[i] == -1 ? cur : s[i];
    KILN_CHECK(cur == want || cur == 1, "expand: ", x.str(), " cannot be expanded to ", shape_str(s), " (dim ", i,
               ": ", cur, " vs ", want, ")");
    sz[i] = want;
    st[i] = cur == want ? x.strides()[i - lead] : 0;
  }
  Tensor out = make_tracked_view(x, sz, st, x.offset());
  Shape in_shape = x.sizes();
  record_op("expand", {x}, {out}, [in_shape](FunctionNode&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to(g[0], in_shape)};
  });
  return out;
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  check_defined(x, "squeeze", "input");
  if (x.dim() == 0) return x;
  int d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.sizes()[d] != 1) return x;
  Shape sz = x.sizes(), st = x.strides();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_tracked_view(x, sz, st, x.offset());
  Shape in_shape = x.sizes();
  record_op("squeeze", {x}, {out}, [in_shape](FunctionNode&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{reshape(g[0], in_shape)};
  });
  return out;
}

Tensor squeeze(const Tensor& x) {
  check_defined(x, "squeeze", "input");
  Shape sz;
  for (int64_t s : x.sizes())
    if (s != 1) sz.push_back(s);
  return reshape(x, sz);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  check_defined(x, "unsqueeze", "input");
  int d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape sz = x.sizes(), st = x.strides();
  int64_t new_stride = d < x.dim() ? x.strides()[d] * x.sizes()[d] : 1;
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  Tensor out = make_tracked_view(x, sz, st, x.offset());
  Shape in_shape = x.sizes();
  record_op("unsqueeze", {x}, {out}, [in_shape](FunctionNode&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{reshape(g[0], in_shape)};
  });
  return out;
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  check_defined(x, "flatten", "input");
  if (x.dim() == 0) return reshape(x, {1});
  int s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  KILN_CHECK(s <= e, "flatten: start_dim ", s, " after end_dim ", e);
  Shape sz;
  for (int i = 0; i < s; ++i) sz.push_back(x.sizes()[i]);
  int64_t p = 1;
  for (int i = s; i <= e; ++i) p *= x.sizes()[i];
  sz.push_back(p);
  for (int i = e + 1; i < x.dim(); ++i) sz.push_back(x.sizes()[i]);
  return reshape(x, sz);
}

}  // namespace kiln
