// Sequential container.
#include "engine/nn/sequential.h"

#include "engine/nn/recompute.h"

#include <string>

namespace kiln::nn {

Sequential::Sequential(std::initializer_list<ModulePtr> mods) : Module("Sequential") {
  for (const ModulePtr& m : mods) push_back(m);
}

Sequential& Sequential::push_back(ModulePtr m) {
  add_child(std::to_string(children().size()), std::move(m));
  return *this;
}

ModulePtr Sequential::operator[](size_t i) const {
  KILN_CHECK(i < children().size(), "Sequential: index ", i, " out of range (size ", children().size(), ")");
  return children()[i].second;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& [n, m] : children()) y = (*m)(y);
  return y;
}

std::vector<Stage> Sequential::stages() { return sequential_stages(*this); }

}  // namespace kiln::nn
