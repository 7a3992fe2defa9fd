// Copies, casts and device moves (differentiable where they are used in training).
#include "engine/ops/dispatch.h"
#include "kernels/common/cuda_backend.h"

namespace kiln {

namespace {

Tensor clone_as(const Tensor& x, MemoryFormat fmt) {
  Tensor out = empty(x.sizes(), x.dtype(), x.device(), fmt);
  launch_copy(out, x);
  record_op("clone", {x}, {out}, [](FunctionNode&, const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return out;
}

}  // namespace

Tensor empty(const Shape& s, DType dt, Device d, MemoryFormat fmt) {
  if (fmt == MemoryFormat::contiguous) return empty(s, dt, d);
  return empty_strided(s, strides_for(s, fmt), dt, d);
}

Tensor clone(const Tensor& x) {
  check_defined(x, "clone", "input");
  return clone_as(x, suggest_memory_format(x));
}

Tensor contiguous(const Tensor& x) {
  check_defined(x, "contiguous", "input");
  if (x.is_contiguous()) return x;
  return clone_as(x, MemoryFormat::contiguous);
}

Tensor contiguous(const Tensor& x, MemoryFormat fmt) {
  check_defined(x, "contiguous", "input");
  if (fmt == MemoryFormat::contiguous) return contiguous(x);
  KILN_CHECK(x.dim() == 4, "contiguous: ", memory_format_name(fmt), " needs a 4-D (N, C, H, W) tensor, got ", x.str());
  if (is_channels_last(x)) return x;
  return clone_as(x, fmt);
}

Tensor to_dtype(const Tensor& x, DType dt) {
  check_defined(x, "to_dtype", "input");
  if (x.dtype() == dt) return x;
  Tensor out = empty(x.sizes(), dt, x.device(), suggest_memory_format(x));
  launch_copy(out, x);
  if (is_floating(dt) && is_floating(x.dtype())) {
    DType src = x.dtype();
    record_op("to_dtype", {x}, {out}, [src](FunctionNode&, const std::vector<Tensor>& g) {
      return std::vector<Tensor>{to_dtype(g[0], src)};
    });
  }
  return out;
}

Tensor to_device(const Tensor& x, Device d) {
  check_defined(x, "to_device", "input");
  if (x.device() == d) return x;
  Tensor src = contiguous(x);
  Tensor out = empty(x.sizes(), x.dtype(), d);
  if (d.is_meta() || src.device().is_meta()) {
    KILN_CHECK(d.is_meta(), "to_device: a meta tensor ", x.str(), " has no data to copy to ", d.str());
  } else if (d.is_cpu() && src.device().is_cpu()) {
    launch_copy(out, src);
  } else {
    const CudaBackend* b = cuda_backend();  // the real runtime, or the CPU mode's memcpy in its tests
    if (!b) throw Error("to_device: " + d.str() + " is not available in this build (KILN_CUDA=OFF)");
    b->copy_bytes(out.data_ptr(), out.device(), src.data_ptr(), src.device(), src.nbytes());
  }
  Device from = x.device();
  record_op("to_device", {x}, {out}, [from](FunctionNode&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{to_device(g[0], from)};
  });
  return out;
}

Tensor& copy_(Tensor& dst, const Tensor& src) {
  check_defined(dst, "copy_", "destination");
  check_defined(src, "copy_", "source");
  broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  KILN_CHECK(broadcast_shapes(dst.sizes(), src.sizes(), "copy_") == dst.sizes(), "copy_: source ", src.str(),
             " does not broadcast to destination ", dst.str());
  check_inplace("copy_", dst, {src});
  Tensor s = src;
  if (src.device() != dst.device()) s = to_device(src.detach(), dst.device());
  launch_copy(dst, s);
  dst.bump_version();
  if (is_floating(dst.dtype()) && is_floating(src.dtype())) {
    Shape src_shape = src.sizes();
    DType src_dt = src.dtype();
    Device src_dev = src.device();
    record_inplace_op("copy_", dst, {src}, [src_shape, src_dt, src_dev](FunctionNode&, const std::vector<Tensor>& g) {
      Tensor gs = to_device(to_dtype(sum_to(g[0], src_shape), src_dt), src_dev);
      return std::vector<Tensor>{zeros_like(g[0]), gs};
    });
  }
  return dst;
}

Tensor& fill_(Tensor& t, double v) {
  check_defined(t, "fill_", "tensor");
  check_inplace("fill_", t, {});
  launch_fill(t, v);
  t.bump_version();
  record_inplace_op("fill_", t, {}, [](FunctionNode&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{zeros_like(g[0])};
  });
  return t;
}

Tensor& zero_(Tensor& t) { return fill_(t, 0.0); }

}  // namespace kiln
