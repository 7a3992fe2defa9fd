// Sequential: children named "0", "1", ... run in order (torchvision's downsample is one).
#pragma once
#include <initializer_list>

#include "engine/nn/module.h"

namespace kiln::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> mods);
  // Appends under the next index name; returns *this for chaining.
  Sequential& push_back(ModulePtr m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return children().size(); }
  ModulePtr operator[](size_t i) const;
  std::vector<Stage> stages() override;  // one per child
};

}  // namespace kiln::nn
