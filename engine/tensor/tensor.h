// Tensor: a view (sizes, strides, offset in elements, dtype, device) over a ref-counted Storage,
// plus optional autograd state. A Tensor is a handle: copies share the same TensorImpl, like
// PyTorch. Ops live in engine/ops; this file holds only the view itself and its accessors.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/core/half.h"
#include "engine/core/shape.h"
#include "engine/tensor/storage.h"

namespace kiln {

class Node;
class Tensor;
struct AutogradMeta;

struct TensorImpl {
  Storage storage;
  int64_t offset = 0;  // in elements
  Shape sizes;
  Shape strides;  // in elements
  DType dtype = DType::f32;
  Device device;
  bool is_view = false;  // shares storage with a tensor that autograd tracks separately
  std::unique_ptr<AutogradMeta> autograd;

  TensorImpl();
  ~TensorImpl();
};

template <typename T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  const Shape& sizes() const { return impl_->sizes; }
  const Shape& shape() const { return impl_->sizes; }
  const Shape& strides() const { return impl_->strides; }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t dim() const { return (int64_t)impl_->sizes.size(); }
  int64_t numel() const { return numel_of(impl_->sizes); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  int64_t offset() const { return impl_->offset; }
  const Storage& storage() const { return impl_->storage; }
  size_t nbytes() const { return (size_t)numel() * dtype_size(dtype()); }
  bool is_contiguous() const;
  std::string str() const;  // "f32 (2, 3) cpu"

  // Address of element 0 (nullptr on meta or when empty).
  void* data_ptr() const;
  template <typename T>
  T* data() const {
    KILN_CHECK(dtype_of<T>::value == dtype(), "data<", dtype_name(dtype_of<T>::value), ">() on a ", dtype_name(dtype()),
               " tensor");
    return static_cast<T*>(data_ptr());
  }
  // Copies a CPU tensor's elements (any layout) into a vector, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;
  // Value of a one-element tensor, as double.
  double item() const;

  // Version counter of the storage (bumped by in-place ops).
  uint64_t version() const { return impl_->storage ? impl_->storage->version : 0; }
  void bump_version() const {
    if (impl_->storage) ++impl_->storage->version;
  }

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& set_requires_grad(bool r);
  bool is_leaf() const;
  const std::shared_ptr<Node>& grad_fn() const;
  int output_nr() const;
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  void zero_grad() const;  // drops .grad (like set_to_none=True)
  // Where this leaf's gradient is written when backward first defines it (after zero_grad): a tensor of
  // the leaf's shape, usually a view into a data-parallel gradient bucket, which then becomes .grad (the
  // gradient is copied in, not given its own allocation). Undefined (the default): .grad takes the
  // incoming buffer or a copy of it.
  Tensor grad_slot() const;
  void set_grad_slot(const Tensor& slot) const;
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // Same data, no autograd history.
  Tensor detach() const;
  const std::string& name() const;
  void set_name(const std::string& n) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// ---- construction ----
Tensor empty(const Shape& sizes, DType dtype = DType::f32, Device device = Device::cpu());
Tensor empty_strided(const Shape& sizes, const Shape& strides, DType dtype, Device device);
// A new view of `base`'s storage (autograd-free; ops add history).
Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);
// Wraps existing memory (not owned unless free_fn frees it).
Tensor from_blob(void* data, const Shape& sizes, DType dtype, Device device = Device::cpu(),
                 std::function<void(void*)> free_fn = nullptr);

template <typename T>
Tensor tensor_from(const std::vector<T>& values, const Shape& sizes) {
  KILN_CHECK((int64_t)values.size() == numel_of(sizes), "tensor_from: ", values.size(), " values for shape ",
             shape_str(sizes));
  Tensor t = empty(sizes, dtype_of<T>::value);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace kiln
