#include "engine/tensor/tensor.h"

#include <cstring>

#include "engine/autograd/node.h"
#include "engine/core/host_sync.h"

namespace kiln {

TensorImpl::TensorImpl() = default;
TensorImpl::~TensorImpl() = default;

int64_t Tensor::size(int64_t d) const { return impl_->sizes[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = (int)dim() - 1; i >= 0; --i) {
    if (impl_->sizes[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->sizes[i];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return str_cat(dtype_name(dtype()), " ", shape_str(sizes()), " ", device().str());
}

void* Tensor::data_ptr() const {
  const Storage& s = impl_->storage;
  if (!s || !s->data) return nullptr;
  return static_cast<char*>(s->data) + impl_->offset * (int64_t)dtype_size(impl_->dtype);
}

namespace {
template <typename T>
double load_as_double(const char* p, DType dt) {
  (void)sizeof(T);
  switch (dt) {
    case DType::f32: return *reinterpret_cast<const float*>(p);
    case DType::f64: return *reinterpret_cast<const double*>(p);
    case DType::f16: return (float)*reinterpret_cast<const half*>(p);
    case DType::bf16: return (float)*reinterpret_cast<const bfloat16*>(p);
    case DType::i32: return *reinterpret_cast<const int32_t*>(p);
    case DType::i64: return (double)*reinterpret_cast<const int64_t*>(p);
    case DType::u8: return *reinterpret_cast<const uint8_t*>(p);
  }
  return 0;
}
}  // namespace

template <typename T>
std::vector<T> Tensor::to_vector() const {
  KILN_CHECK(device().is_cpu(), "to_vector: tensor ", str(), " is not on the cpu");
  note_host_sync(HostSyncKind::host_read);
  std::vector<T> out((size_t)numel());
  if (out.empty()) return out;
  const char* base = static_cast<const char*>(data_ptr());
  size_t es = dtype_size(dtype());
  Shape idx(dim(), 0);
  for (size_t n = 0; n < out.size(); ++n) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * impl_->strides[d];
    const char* p = base + off * (int64_t)es;
    if (dtype_of<T>::value == dtype()) std::memcpy(&out[n], p, sizeof(T));
    else out[n] = (T)load_as_double<T>(p, dtype());
    for (int d = (int)idx.size() - 1; d >= 0; --d) {
      if (++idx[d] < impl_->sizes[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

double Tensor::item() const {
  KILN_CHECK(numel() == 1, "item: tensor ", str(), " has ", numel(), " elements, expected 1");
  KILN_CHECK(device().is_cpu(), "item: tensor ", str(), " is not on the cpu (move it with to_device first)");
  note_host_sync(HostSyncKind::host_read);
  return load_as_double<double>(static_cast<const char*>(data_ptr()), dtype());
}

// ---- autograd accessors ----
static AutogradMeta& meta_of(TensorImpl* impl) {
  if (!impl->autograd) impl->autograd = std::make_unique<AutogradMeta>();
  return *impl->autograd;
}

bool Tensor::requires_grad() const {
  return impl_->autograd && (impl_->autograd->requires_grad || impl_->autograd->grad_fn);
}
Tensor& Tensor::set_requires_grad(bool r) {
  KILN_CHECK(!r || is_floating(dtype()), "requires_grad: only floating tensors can require gradients, got ", str());
  KILN_CHECK(is_leaf(), "requires_grad: can only be set on leaf tensors (this one comes from ",
             grad_fn() ? grad_fn()->name() : std::string("?"), ")");
  meta_of(impl_.get()).requires_grad = r;
  return *this;
}
bool Tensor::is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }
const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return impl_->autograd ? impl_->autograd->grad_fn : none;
}
int Tensor::output_nr() const { return impl_->autograd ? impl_->autograd->output_nr : 0; }
Tensor Tensor::grad() const { return impl_->autograd ? impl_->autograd->grad : Tensor(); }
void Tensor::set_grad(const Tensor& g) const { meta_of(impl_.get()).grad = g; }
void Tensor::zero_grad() const {
  if (impl_->autograd) impl_->autograd->grad = Tensor();
}
Tensor Tensor::grad_slot() const { return impl_->autograd ? impl_->autograd->grad_slot : Tensor(); }
void Tensor::set_grad_slot(const Tensor& slot) const {
  KILN_CHECK(!slot.defined() || (slot.sizes() == sizes() && slot.dtype() == dtype() && slot.device() == device()),
             "set_grad_slot: the slot of ", str(), " must have its shape, dtype and device, got ", slot.str());
  meta_of(impl_.get()).grad_slot = slot;
}
void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  run_backward({*this}, {gradient}, retain_graph);
}
Tensor Tensor::detach() const {
  auto t = std::make_shared<TensorImpl>();
  t->storage = impl_->storage;
  t->offset = impl_->offset;
  t->sizes = impl_->sizes;
  t->strides = impl_->strides;
  t->dtype = impl_->dtype;
  t->device = impl_->device;
  return Tensor(t);
}
const std::string& Tensor::name() const {
  static const std::string none;
  return impl_->autograd ? impl_->autograd->name : none;
}
void Tensor::set_name(const std::string& n) const { meta_of(impl_.get()).name = n; }

// ---- construction ----
Tensor empty(const Shape& sizes, DType dtype, Device device) {
  for (int64_t s : sizes) KILN_CHECK(s >= 0, "empty: negative size in shape ", shape_str(sizes));
  auto t = std::make_shared<TensorImpl>();
  t->sizes = sizes;
  t->strides = contiguous_strides(sizes);
  t->dtype = dtype;
  t->device = device;
  t->storage = make_storage((size_t)numel_of(sizes) * dtype_size(dtype), device);
  return Tensor(t);
}

Tensor empty_strided(const Shape& sizes, const Shape& strides, DType dtype, Device device) {
  int64_t extent = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) extent = 0;
    if (extent) extent += (sizes[i] - 1) * strides[i];
  }
  auto t = std::make_shared<TensorImpl>();
  t->sizes = sizes;
  t->strides = strides;
  t->dtype = dtype;
  t->device = device;
  t->storage = make_storage((size_t)extent * dtype_size(dtype), device);
  return Tensor(t);
}

Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  auto t = std::make_shared<TensorImpl>();
  t->storage = base.storage();
  t->offset = offset;
  t->sizes = sizes;
  t->strides = strides;
  t->dtype = base.dtype();
  t->device = base.device();
  return Tensor(t);
}

Tensor from_blob(void* data, const Shape& sizes, DType dtype, Device device, std::function<void(void*)> free_fn) {
  auto t = std::make_shared<TensorImpl>();
  t->sizes = sizes;
  t->strides = contiguous_strides(sizes);
  t->dtype = dtype;
  t->device = device;
  t->storage = wrap_storage(data, (size_t)numel_of(sizes) * dtype_size(dtype), device, std::move(free_fn));
  return Tensor(t);
}

}  // namespace kiln
