// Model factory by name.
#include "models/registry.h"


#include "models/model_file.h"
#include "models/resnet.h"
#include "models/small_cnn.h"
#include "models/unet.h"

namespace kiln::models {

namespace {

// "unet" / "unet_small" with optional ":key=value,flag,..." options (registry.h). Null for other names.
std::shared_ptr<nn::Module> make_unet(const std::string& name, int64_t num_classes, int64_t in_channels,
                                      int64_t image_size) {
  UNetOptions o = unet_options_from_name(name);
  o.in_channels = in_channels;
  o.num_classes = num_classes;
  auto m = unet(o);
  KILN_CHECK(image_size <= 0 || image_size >= m->min_size(), "model '", name, "': --image-size ", image_size,
             " is smaller than ", m->min_size(), " (2^depth", o.first_stride == 2 ? " x 2 for stride2" : "",
             "): the bottleneck would be empty");
  return m;
}

}  // namespace

bool is_segmentation_model(const std::string& name) {
  const std::string base = name.substr(0, name.find(':'));
  return base == "unet" || base == "unet_small";
}

std::vector<std::string> model_names() {
  return {"resnet18",       "resnet34",       "resnet50",        "resnet101",       "resnet18_small",
          "resnet34_small", "resnet50_small", "resnet101_small", "small_cnn",     "unet",
          "unet_small"};
}

std::shared_ptr<nn::Module> make_model(const std::string& name, int64_t num_classes, int64_t in_channels,
                                       int64_t image_size) {
  std::shared_ptr<nn::Module> m;
  if (name == "resnet18") m = resnet18(num_classes, in_channels, false);
  else if (name == "resnet34") m = resnet34(num_classes, in_channels, false);
  else if (name == "resnet18_small") m = resnet18(num_classes, in_channels, true);
  else if (name == "resnet34_small") m = resnet34(num_classes, in_channels, true);
  else if (name == "resnet50") m = resnet50(num_classes, in_channels, false);
  else if (name == "resnet101") m = resnet101(num_classes, in_channels, false);
  else if (name == "resnet50_small") m = resnet50(num_classes, in_channels, true);
  else if (name == "resnet101_small") m = resnet101(num_classes, in_channels, true);
  else if (name == "small_cnn") m = small_cnn(num_classes, in_channels, image_size);
  else if (is_segmentation_model(name)) m = make_unet(name, num_classes, in_channels, image_size);
  else if (is_model_file_name(name)) m = load_model_file(name, {num_classes, in_channels, image_size});
  if (!m) {
    std::string known;
    for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(str_cat("unknown model '", name, "' (known: ", known, "; or a model file, NAME.json)"));
  }
  m->name_tensors();
  return m;
}

}  // namespace kiln::models
