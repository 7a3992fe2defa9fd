// Module tree, names, state dicts, modes and device moves.
#include "engine/nn/module.h"

#include <map>
#include <set>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/nn/recompute.h"
#include "engine/ops/ops.h"

namespace kiln::nn {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
std::string list_str(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}
}  // namespace

Tensor Module::operator()(const Tensor& x) {
  if (name_.empty()) return recompute_segments_ > 0 ? recompute_sequential(stages(), recompute_segments_, x) : forward(x);
  ModuleScope scope(name_);
  return recompute_segments_ > 0 ? recompute_sequential(stages(), recompute_segments_, x) : forward(x);
}

void Module::set_recompute_segments(int segments) {
  KILN_CHECK(segments >= 0, type_name_, ": recompute segments must be >= 0, got ", segments);
  KILN_CHECK(segments == 0 || !stages().empty(), type_name_,
             " cannot be split into recompute segments (it defines no stages)");
  recompute_segments_ = segments;
}

void Module::check_new_name(const std::string& name) const {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_, ": bad member name '", name,
             "' (non-empty, no dots)");
  auto taken = [&](const auto& v) {
    for (const auto& e : v)
      if (e.first == name) return true;
    return false;
  };
  KILN_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), type_name_, ": member '", name,
             "' registered twice");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name);
  KILN_CHECK(t.defined(), type_name_, ": parameter '", name, "' is undefined");
  KILN_CHECK(is_floating(t.dtype()), type_name_, ": parameter '", name, "' must be floating, got ", t.str());
  t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  KILN_CHECK(t.defined(), type_name_, ": buffer '", name, "' is undefined");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name);
  KILN_CHECK(m != nullptr, type_name_, ": child '", name, "' is null");
  KILN_CHECK(m->name_.empty(), type_name_, ": child '", name, "' (", m->type_name(), ") already has a parent as '",
             m->name_, "'");
  m->name_ = name;
  children_.emplace_back(name, std::move(m));
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  std::vector<std::string> known;
  for (const auto& [n, m] : children_) {
    if (n == name) return m;
    known.push_back(n);
  }
  throw Error(str_cat(type_name_, ": no child '", name, "' (children: ", list_str(known), ")"));
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  out.emplace_back(prefix, shared_from_this());
  for (const auto& [n, m] : children_)
    for (auto& e : m->named_modules(join(prefix, n))) out.push_back(std::move(e));
  return out;
}

void Module::apply(const std::function<void(const std::string&, Module&)>& fn, const std::string& prefix) {
  fn(prefix, *this);
  for (const auto& [n, m] : children_) m->apply(fn, join(prefix, n));
}

NamedTensors Module::named_parameters(const std::string& prefix) const {
  NamedTensors out;
  for (const auto& [n, t] : params_) out.emplace_back(join(prefix, n), t);
  for (const auto& [n, m] : children_)
    for (auto& e : m->named_parameters(join(prefix, n))) out.push_back(std::move(e));
  return out;
}

NamedTensors Module::named_buffers(const std::string& prefix) const {
  NamedTensors out;
  for (const auto& [n, t] : buffers_) out.emplace_back(join(prefix, n), t);
  for (const auto& [n, m] : children_)
    for (auto& e : m->named_buffers(join(prefix, n))) out.push_back(std::move(e));
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& e : named_parameters()) out.push_back(e.second);
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& e : named_buffers()) out.push_back(e.second);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& e : named_parameters()) n += e.second.numel();
  return n;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect_state("", out);
  return out;
}

void Module::collect_state(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [n, t] : params_) out.emplace_back(join(prefix, n), t.detach());
  for (const auto& [n, t] : buffers_) out.emplace_back(join(prefix, n), t.detach());
  for (const auto& [n, c] : children_) c->collect_state(join(prefix, n), out);
}

LoadResult Module::load_state_dict(const NamedTensors& state, bool strict) {
  NamedTensors own = state_dict();
  std::map<std::string, Tensor> given;
  for (const auto& [n, t] : state) given[n] = t;
  std::set<std::string> expected;
  LoadResult r;
  std::vector<std::string> shape_errors;
  for (const auto& [n, t] : own) {
    expected.insert(n);
    auto it = given.find(n);
    if (it == given.end()) {
      r.missing_keys.push_back(n);
      continue;
    }
    const Tensor& src = it->second;
    if (!src.defined() || src.sizes() != t.sizes())
      shape_errors.push_back(str_cat(n, ": checkpoint ", src.defined() ? shape_str(src.sizes()) : "undefined",
                                     ", model ", shape_str(t.sizes())));
  }
  for (const auto& [n, t] : state)
    if (!expected.count(n)) r.unexpected_keys.push_back(n);
  std::string problems;
  if (strict && !r.missing_keys.empty()) problems += str_cat("; missing keys: ", list_str(r.missing_keys));
  if (strict && !r.unexpected_keys.empty()) problems += str_cat("; unexpected keys: ", list_str(r.unexpected_keys));
  if (!shape_errors.empty()) problems += str_cat("; shape mismatch: ", list_str(shape_errors));
  KILN_CHECK(problems.empty(), "load_state_dict (", type_name_, "): ", problems.substr(2));
  NoGradGuard ng;
  for (auto& [n, t] : own) {
    auto it = given.find(n);
    if (it == given.end()) continue;
    Tensor dst = t;
    copy_(dst, it->second);
  }
  return r;
}

Module& Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
  return *this;
}

// Swaps t's data for a copy on d, keeping the handle (and its autograd flags) valid; `always`: a copy even
// when t is already on d.
static void move_in_place(const Tensor& t, Device d, bool always = false) {
  if (t.device() == d && !always) return;
  Tensor moved = t.device() == d ? clone(t.detach()) : to_device(t.detach(), d);
  TensorImpl* dst = t.impl();
  TensorImpl* src = moved.impl();
  dst->storage = src->storage;
  dst->offset = src->offset;
  dst->sizes = src->sizes;
  dst->strides = src->strides;
  dst->device = src->device;
}

Module& Module::to(Device d) {
  NoGradGuard ng;
  for (auto& [n, t] : params_) {
    t.zero_grad();
    MemoryScope ms(MemoryTag::param);
    move_in_place(t, d);
  }
  for (auto& [n, t] : buffers_) {
    MemoryScope ms(MemoryTag::param);
    move_in_place(t, d);
  }
  for (auto& [n, m] : children_) m->to(d);
  return *this;
}

Module& Module::rehome(Device d) {
  NoGradGuard ng;
  for (auto& [n, t] : params_) {
    t.zero_grad();
    MemoryScope ms(MemoryTag::param);
    move_in_place(t, d, true);
  }
  for (auto& [n, t] : buffers_) {
    MemoryScope ms(MemoryTag::param);
    move_in_place(t, d, true);
  }
  for (auto& [n, m] : children_) m->rehome(d);
  return *this;
}

// Swaps t's data for a copy cast to dt, keeping the handle valid.
static void cast_in_place(const Tensor& t, DType dt) {
  if (t.dtype() == dt || !is_floating(t.dtype())) return;
  Tensor cast = to_dtype(t.detach(), dt);
  TensorImpl* dst = t.impl();
  TensorImpl* src = cast.impl();
  dst->storage = src->storage;
  dst->offset = src->offset;
  dst->sizes = src->sizes;
  dst->strides = src->strides;
  dst->dtype = src->dtype;
}

Module& Module::to(DType dt) {
  KILN_CHECK(is_floating(dt), type_name_, ".to: parameters need a floating dtype, got ", dtype_name(dt));
  NoGradGuard ng;
  MemoryScope ms(MemoryTag::param);
  for (auto& [n, t] : params_) {
    t.zero_grad();
    cast_in_place(t, dt);
  }
  for (auto& [n, t] : buffers_) cast_in_place(t, dt);
  for (auto& [n, m] : children_) m->to(dt);
  return *this;
}

void Module::reset_all_parameters() {
  apply([](const std::string&, Module& m) { m.reset_parameters(); });
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t.zero_grad();
}

void Module::name_tensors() {
  for (auto& [n, t] : named_parameters()) t.set_name(n);
  for (auto& [n, t] : named_buffers()) t.set_name(n);
}

}  // namespace kiln::nn
