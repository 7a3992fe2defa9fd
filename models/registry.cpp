// Model factory by name.
#include "models/registry.h"

#include <cstdlib>

#include "models/model_file.h"
#include "models/resnet.h"
#include "models/small_cnn.h"
#include "models/unet.h"

namespace kiln::models {

namespace {

// "unet" / "unet_small" with optional ":key=value,flag,..." options (registry.h). Null for other names.
std::shared_ptr<nn::Module> make_unet(const std::string& name, int64_t num_classes, int64_t in_channels,
                                      int64_t image_size) {
  const size_t colon = name.find(':');
  const std::string base = name.substr(0, colon);
  if (base != "unet" && base != "unet_small") return nullptr;
  UNetOptions o;
  o.in_channels = in_channels;
  o.num_classes = num_classes;
  if (base == "unet_small") o.base_width = 8;
  if (colon != std::string::npos) {
    const std::string opts = name.substr(colon + 1);
    size_t pos = 0;
    while (pos <= opts.size()) {
      size_t end = opts.find(',', pos);
      if (end == std::string::npos) end = opts.size();
      const std::string item = opts.substr(pos, end - pos);
      const size_t eq = item.find('=');
      const std::string key = item.substr(0, eq);
      auto number = [&]() -> int64_t {
        const std::string v = eq == std::string::npos ? "" : item.substr(eq + 1);
        char* e = nullptr;
        const long long n = std::strtoll(v.c_str(), &e, 10);
        KILN_CHECK(!v.empty() && e == v.c_str() + v.size(), "model '", name, "': option '", item,
                   "' needs an integer value (", key, "=N)");
        return (int64_t)n;
      };
      if (key == "base") o.base_width = number();
      else if (key == "depth") o.depth = number();
      else if (key == "bilinear" && eq == std::string::npos) o.bilinear = true;
      else if (key == "stride2" && eq == std::string::npos) o.first_stride = 2;
      else
        throw Error(str_cat("model '", name, "': unknown option '", item,
                            "' (known: base=N, depth=N, bilinear, stride2; e.g. unet:base=32,depth=3,bilinear)"));
      pos = end + 1;
    }
  }
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
