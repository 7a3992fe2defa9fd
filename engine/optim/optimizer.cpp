// Optimizer base: groups, step loop, lr factors, state dicts.
#include "engine/optim/optimizer.h"

#include "engine/core/meta_target.h"

#include <set>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln::optim {

bool no_decay_bias_and_norm(const std::string&, const Tensor& p) { return p.dim() <= 1; }

std::vector<ParamGroup> make_param_groups(const NamedTensors& params, double lr, double wd,
                                          const NoDecayFn& no_decay) {
  ParamGroup decay{{}, lr, wd, -1}, plain{{}, lr, 0.0, -1};
  for (const auto& e : params) (no_decay && no_decay(e.first, e.second) ? plain : decay).params.push_back(e);
  std::vector<ParamGroup> out;
  if (!decay.params.empty()) out.push_back(decay);
  if (!plain.params.empty()) out.push_back(plain);
  return out;
}

Optimizer::Optimizer(std::string type, std::vector<ParamGroup> groups) : type_(std::move(type)), groups_(std::move(groups)) {
  KILN_CHECK(!groups_.empty(), type_, ": no parameter groups");
  std::set<std::string> names;
  for (size_t k = 0; k < groups_.size(); ++k) {
    ParamGroup& g = groups_[k];
    KILN_CHECK(g.lr >= 0 && g.weight_decay >= 0, type_, ": group ", k, ": lr ", g.lr, " and weight_decay ",
               g.weight_decay, " must be >= 0");
    if (g.initial_lr < 0) g.initial_lr = g.lr;
    for (size_t i = 0; i < g.params.size(); ++i) {
      auto& [name, p] = g.params[i];
      if (name.empty()) name = "group" + std::to_string(k) + ".param" + std::to_string(i);
      KILN_CHECK(p.defined() && is_floating(p.dtype()), type_, ": parameter '", name, "' must be a floating tensor");
      KILN_CHECK(names.insert(name).second, type_, ": parameter '", name, "' given twice");
    }
  }
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& e : g.params) e.second.zero_grad();
}

void Optimizer::set_lr_factor(double f) {
  KILN_CHECK(f >= 0, type_, ": negative learning-rate factor ", f);
  for (auto& g : groups_) g.lr = g.initial_lr * f;
}

void Optimizer::step() {
  NoGradGuard ng;
  for (auto& group : groups_) {
    for (auto& [name, p] : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      KILN_CHECK(g.sizes() == p.sizes() && g.device() == p.device() && g.dtype() == p.dtype(), type_,
                 ": gradient of '", name, "' is ", g.str(), ", parameter is ", p.str());
      update(name, p, g, group);
    }
  }
  ++steps_;
}

Tensor* Optimizer::find_state(const std::string& param, const std::string& key) {
  auto it = state_.find(param);
  if (it == state_.end()) return nullptr;
  auto jt = it->second.find(key);
  return jt == it->second.end() ? nullptr : &jt->second;
}

Tensor& Optimizer::state(const std::string& param, const std::string& key, const Tensor& like, bool* created) {
  Tensor* t = find_state(param, key);
  if (created) *created = (t == nullptr);
  if (t) return *t;
  MemoryScope ms(MemoryTag::optimizer);
  return state_[param][key] = make_state(key, like);
}

// A step counter lives on the host of its parameter's device: the CPU (a GPU's host too), or the meta device
// when it imitates the CPU (a plan of a CPU run counts them; one of a GPU run does not).
static Device host_of(Device d) {
  if (d.is_meta()) return meta_target().is_cpu() ? Device::meta() : Device::cpu();
  return d.is_cuda() ? Device::cpu() : d;
}

Tensor Optimizer::make_state(const std::string& key, const Tensor& p) const {
  if (key == "step") return zeros({}, DType::i64, host_of(p.device()));
  return zeros(p.sizes(), p.dtype(), p.device());
}

void Optimizer::create_state() {
  NoGradGuard ng;
  MemoryScope ms(MemoryTag::optimizer);
  for (const auto& g : groups_)
    for (const auto& [name, p] : g.params)
      for (const std::string& key : state_keys())
        if (!find_state(name, key)) state_[name][key] = make_state(key, p);
}

void Optimizer::rehome(Device device) {
  NoGradGuard ng;
  MemoryScope ms(MemoryTag::optimizer);
  for (const auto& g : groups_)
    for (const auto& [name, p] : g.params)
      for (const std::string& key : state_keys())
        if (Tensor* t = find_state(name, key)) {
          const Device d = key == "step" ? host_of(device) : device;
          *t = t->device() == d ? clone(*t) : to_device(*t, d);
        }
}

bool Optimizer::use_fused(const Tensor& p, const Tensor& g) const {
  // cpu: an OpenMP loop; cuda: one kernel per parameter (only in a CUDA build, where cuda tensors
  // exist). A meta run takes the path of the device it imitates (the fused path allocates nothing;
  // the update is skipped), so predicted memory matches the real run on either device.
  const Device d = p.device().is_meta() ? meta_target() : p.device();
  const bool has_fused = d.is_cpu() || d.is_cuda();
  return fused_ && has_fused && p.dtype() == DType::f32 && p.is_contiguous() && g.is_contiguous();
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  out.emplace_back("step", scalar_tensor((double)steps_, DType::i64));
  for (size_t k = 0; k < groups_.size(); ++k) {
    out.emplace_back("group." + std::to_string(k) + ".lr", scalar_tensor(groups_[k].lr, DType::f64));
    out.emplace_back("group." + std::to_string(k) + ".initial_lr", scalar_tensor(groups_[k].initial_lr, DType::f64));
  }
  for (const auto& [param, entries] : state_)
    for (const auto& [key, t] : entries) out.emplace_back("state." + param + "." + key, t);
  return out;
}

void Optimizer::load_state_dict(const NamedTensors& sd) {
  std::map<std::string, Tensor> params;
  for (const auto& g : groups_)
    for (const auto& [n, p] : g.params) params[n] = p;
  NoGradGuard ng;
  decltype(state_) fresh;
  for (const auto& [name, t] : sd) {
    if (name == "step") {
      steps_ = (int64_t)t.item();
    } else if (name.rfind("group.", 0) == 0) {
      size_t dot = name.find('.', 6);
      KILN_CHECK(dot != std::string::npos, type_, ".load_state_dict: bad key '", name, "'");
      const std::string index = name.substr(6, dot - 6);  // digits only: std::stoul threw std::invalid_argument
      KILN_CHECK(!index.empty() && index.size() <= 9 && index.find_first_not_of("0123456789") == std::string::npos,
                 type_, ".load_state_dict: bad group index in key '", name, "'");
      const size_t k = (size_t)std::stoul(index);
      KILN_CHECK(k < groups_.size(), type_, ".load_state_dict: '", name, "' names group ", k, " of ", groups_.size());
      std::string field = name.substr(dot + 1);
      if (field == "lr") groups_[k].lr = t.item();
      else if (field == "initial_lr") groups_[k].initial_lr = t.item();
      else throw Error(str_cat(type_, ".load_state_dict: unknown group field '", name, "'"));
    } else if (name.rfind("state.", 0) == 0) {
      size_t dot = name.rfind('.');
      std::string param = name.substr(6, dot - 6), key = name.substr(dot + 1);
      auto it = params.find(param);
      KILN_CHECK(it != params.end(), type_, ".load_state_dict: state for unknown parameter '", param, "'");
      const Tensor& p = it->second;
      bool scalar = key == "step";
      KILN_CHECK(scalar || t.sizes() == p.sizes(), type_, ".load_state_dict: '", name, "' is ", shape_str(t.sizes()),
                 ", parameter is ", shape_str(p.sizes()));
      MemoryScope ms(MemoryTag::optimizer);
      Tensor dst = scalar ? empty({}, t.dtype(), Device::cpu()) : empty(p.sizes(), p.dtype(), p.device());
      copy_(dst, t);
      fresh[param][key] = dst;
      written_.insert(param);
    } else {
      throw Error(str_cat(type_, ".load_state_dict: unexpected key '", name, "'"));
    }
  }
  state_ = std::move(fresh);
}

}  // namespace kiln::optim
