// The layer table of model files (see model_file_layers.h). Shapes are inferred by the same formulas
// the ops use (kernels/common/nn_desc.h), so a layer that would not run is refused when the file is read.
#include "models/model_file_layers.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/upsampling.h"
#include "engine/ops/ops.h"
#include "engine/ops/upsampling.h"
#include "kernels/common/nn_desc.h"

namespace kiln::models {

std::string sample_shape_str(const SampleShape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + ")";
}

// ---- field readers ----

int64_t LayerArgs::get_int(const char* field, int64_t def, int64_t min) const {
  if (!spec.contains(field)) return def;
  const nlohmann::json& v = spec.at(field);
  KILN_CHECK(v.is_number_integer(), where, ": field '", field, "' must be an integer, got ", v.dump());
  const int64_t r = v.get<int64_t>();
  KILN_CHECK(r >= min, where, ": field '", field, "' must be >= ", min, ", got ", r);
  return r;
}

int64_t LayerArgs::need_int(const char* field, int64_t min) const {
  KILN_CHECK(spec.contains(field), where, ": missing field '", field, "'");
  return get_int(field, 0, min);
}

double LayerArgs::get_double(const char* field, double def, double lo, double hi) const {
  if (!spec.contains(field)) return def;
  const nlohmann::json& v = spec.at(field);
  KILN_CHECK(v.is_number(), where, ": field '", field, "' must be a number, got ", v.dump());
  const double r = v.get<double>();
  KILN_CHECK(r >= lo && r <= hi, where, ": field '", field, "' must be in [", lo, ", ", hi, "], got ", r);
  return r;
}

bool LayerArgs::get_bool(const char* field, bool def) const {
  if (!spec.contains(field)) return def;
  const nlohmann::json& v = spec.at(field);
  KILN_CHECK(v.is_boolean(), where, ": field '", field, "' must be true or false, got ", v.dump());
  return v.get<bool>();
}

namespace {

const SampleShape& need_image(const LayerArgs& a) {
  KILN_CHECK(a.in[0].size() == 3, a.where, ": needs an image input (C, H, W), got ", sample_shape_str(a.in[0]),
             " from '", a.in_names[0], "'");
  return a.in[0];
}

// An optional explicit count (in_channels, num_features, in_features) must equal the inferred one.
void check_declared(const LayerArgs& a, const char* field, int64_t inferred) {
  if (!a.has(field)) return;
  const int64_t d = a.get_int(field, 0, 1);
  KILN_CHECK(d == inferred, a.where, ": ", field, " is ", d, " but its input '", a.in_names[0], "' has shape ",
             sample_shape_str(a.in[0]), " (", inferred, ")");
}

BuiltLayer unary(const char* type_name, std::function<Tensor(const Tensor&)> fn, const LayerArgs& a,
                 nlohmann::json attrs = nlohmann::json::object()) {
  return {std::make_shared<OpLayer>(type_name, std::move(attrs), std::move(fn)), nullptr, a.in[0]};
}

BuiltLayer build_conv2d(const LayerArgs& a) {
  const SampleShape& s = need_image(a);
  nn::Conv2dOptions o;
  o.in_channels = s[0];
  // "num_classes": a fully convolutional head (a segmenter's per-pixel logits, unet's outc).
  // Any other string gets need_int's error.
  if (a.has("out_channels") && a.spec.at("out_channels") == "num_classes") {
    o.out_channels = a.input.num_classes;
  } else {
    o.out_channels = a.need_int("out_channels", 1);
  }
  o.kernel = a.need_int("kernel", 1);
  o.stride = a.get_int("stride", 1, 1);
  o.padding = a.get_int("padding", 0, 0);
  o.dilation = a.get_int("dilation", 1, 1);
  o.groups = a.get_int("groups", 1, 1);
  o.bias = a.get_bool("bias", true);
  check_declared(a, "in_channels", s[0]);
  KILN_CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0, a.where, ": groups ", o.groups,
             " must divide the input channels ", o.in_channels, " (from '", a.in_names[0], "', shape ",
             sample_shape_str(s), ") and out_channels ", o.out_channels);
  Conv2dDesc d;
  d.H = s[1], d.W = s[2], d.R = o.kernel, d.S = o.kernel, d.stride_h = d.stride_w = o.stride;
  d.pad_h = d.pad_w = o.padding, d.dil_h = d.dil_w = o.dilation;
  const int64_t span = o.dilation * (o.kernel - 1) + 1;  // the kernel's extent
  KILN_CHECK(s[1] + 2 * o.padding >= span && s[2] + 2 * o.padding >= span && d.out_h() >= 1 && d.out_w() >= 1, a.where, ": input ", sample_shape_str(s), " from '", a.in_names[0],
             "' is too small for kernel ", o.kernel, " (dilation ", o.dilation, ", padding ", o.padding, ")");
  return {std::make_shared<nn::Conv2d>(o), nullptr, {o.out_channels, d.out_h(), d.out_w()}};
}

BuiltLayer build_batch_norm(const LayerArgs& a) {
  const SampleShape& s = need_image(a);
  check_declared(a, "num_features", s[0]);
  const double eps = a.get_double("eps", 1e-5, 1e-12, 1.0), momentum = a.get_double("momentum", 0.1, 0.0, 1.0);
  return {std::make_shared<nn::BatchNorm2d>(s[0], eps, momentum), nullptr, s};
}

// max_pool / avg_pool: kernel, stride (default kernel), padding (at most half the kernel), ceil_mode.
BuiltLayer build_pool(const LayerArgs& a, bool is_max) {
  const SampleShape& s = need_image(a);
  const int64_t k = a.need_int("kernel", 1), st = a.get_int("stride", k, 1), p = a.get_int("padding", 0, 0);
  const int64_t dil = is_max ? a.get_int("dilation", 1, 1) : 1;
  const bool ceil = a.get_bool("ceil_mode", false);
  KILN_CHECK(2 * p <= k, a.where, ": padding ", p, " must be at most half the kernel ", k);
  const int64_t oh = pool_out_size(s[1], k, st, p, dil, ceil), ow = pool_out_size(s[2], k, st, p, dil, ceil);
  KILN_CHECK(oh >= 1 && ow >= 1, a.where, ": input ", sample_shape_str(s), " from '", a.in_names[0],
             "' is too small for kernel ", k);
  nlohmann::json attrs = {{"kernel", k}, {"stride", st}, {"padding", p}, {"ceil_mode", ceil}};
  if (is_max) {
    attrs["dilation"] = dil;
    return {std::make_shared<OpLayer>("MaxPool2d", attrs, [=](const Tensor& x) {
              return max_pool2d(x, {k, k}, {st, st}, {p, p}, {dil, dil}, ceil);
            }),
            nullptr, {s[0], oh, ow}};
  }
  const bool include_pad = a.get_bool("count_include_pad", true);
  attrs["count_include_pad"] = include_pad;
  return {std::make_shared<OpLayer>("AvgPool2d", attrs, [=](const Tensor& x) {
            return avg_pool2d(x, {k, k}, {st, st}, {p, p}, ceil, include_pad);
          }),
          nullptr, {s[0], oh, ow}};
}

BuiltLayer build_adaptive_avg_pool(const LayerArgs& a) {
  const SampleShape& s = need_image(a);
  const int64_t o = a.get_int("output_size", 1, 1);
  return {std::make_shared<nn::AdaptiveAvgPool2d>(o), nullptr, {s[0], o, o}};
}

BuiltLayer build_linear(const LayerArgs& a) {
  const SampleShape& s = a.in[0];
  KILN_CHECK(s.size() == 1, a.where, ": needs a flat input (features), got ", sample_shape_str(s), " from '",
             a.in_names[0], "' (put a flatten layer before it)");
  int64_t out = 0;
  KILN_CHECK(a.has("out_features"), a.where, ": missing field 'out_features'");
  const nlohmann::json& v = a.spec.at("out_features");
  if (v.is_string()) {
    KILN_CHECK(v.get<std::string>() == "num_classes", a.where, ": out_features must be a positive integer or "
               "\"num_classes\", got ", v.dump());
    out = a.input.num_classes;
  } else {
    out = a.get_int("out_features", 0, 1);
  }
  check_declared(a, "in_features", s[0]);
  return {std::make_shared<nn::Linear>(s[0], out, a.get_bool("bias", true)), nullptr, {out}};
}

BuiltLayer build_flatten(const LayerArgs& a) {
  int64_t n = 1;
  for (int64_t d : a.in[0]) n *= d;
  return {std::make_shared<nn::Flatten>(1, -1), nullptr, {n}};
}

// add: every input has the same shape; concat: same shape but for the channels (dim 1 of the batch).
BuiltLayer build_add(const LayerArgs& a) {
  for (size_t i = 1; i < a.in.size(); ++i)
    KILN_CHECK(a.in[i] == a.in[0], a.where, ": input shapes differ: ", sample_shape_str(a.in[0]), " from '",
               a.in_names[0], "' vs ", sample_shape_str(a.in[i]), " from '", a.in_names[i], "'");
  BuiltLayer b;
  b.out = a.in[0];
  b.join = [](const std::vector<Tensor>& xs) {
    Tensor y = xs[0];
    for (size_t i = 1; i < xs.size(); ++i) y = add(y, xs[i]);
    return y;
  };
  return b;
}

BuiltLayer build_concat(const LayerArgs& a) {
  SampleShape out = a.in[0];
  KILN_CHECK(!out.empty(), a.where, ": cannot concatenate scalars");
  for (size_t i = 1; i < a.in.size(); ++i) {
    const SampleShape& s = a.in[i];
    bool ok = s.size() == out.size();
    for (size_t d = 1; ok && d < s.size(); ++d) ok = s[d] == a.in[0][d];
    KILN_CHECK(ok, a.where, ": inputs must match in every dim but the channels: ", sample_shape_str(a.in[0]),
               " from '", a.in_names[0], "' vs ", sample_shape_str(s), " from '", a.in_names[i], "'");
    out[0] += s[0];
  }
  BuiltLayer b;
  b.out = out;
  b.join = [](const std::vector<Tensor>& xs) { return cat(xs, 1); };
  return b;
}

// The output shape of a one-input module, from the module itself run on the meta device (no
// arithmetic, no memory): the op's own shape rules, so file and op never disagree. An op's refusal
// becomes the layer's error.
// fn: the module's forward, or its op on meta copies of its parameters (a module's own parameters live on
// the CPU, and an op refuses to mix devices).
SampleShape meta_out_shape(const std::function<Tensor(const Tensor&)>& fn, const LayerArgs& a) {
  Shape in = {1};
  for (int64_t d : a.in[0]) in.push_back(d);
  try {
    const Tensor y = fn(empty(in, DType::f32, Device::meta()));
    return SampleShape(y.sizes().begin() + 1, y.sizes().end());
  } catch (const Error& e) {
    throw Error(str_cat(a.where, ": input ", sample_shape_str(a.in[0]), " from '", a.in_names[0], "': ", e.what()));
  }
}

// A module's constructor refusing its options: the error names the layer.
template <typename M, typename O>
std::shared_ptr<M> make_layer_module(const O& o, const LayerArgs& a) {
  try {
    return std::make_shared<M>(o);
  } catch (const Error& e) {
    throw Error(str_cat(a.where, ": ", e.what()));
  }
}

BuiltLayer build_conv_transpose2d(const LayerArgs& a) {
  const SampleShape& s = need_image(a);
  nn::ConvTranspose2dOptions o;
  o.in_channels = s[0];
  // "num_classes": a fully convolutional head (a segmenter's per-pixel logits, unet's outc).
  // Any other string gets need_int's error.
  if (a.has("out_channels") && a.spec.at("out_channels") == "num_classes") {
    o.out_channels = a.input.num_classes;
  } else {
    o.out_channels = a.need_int("out_channels", 1);
  }
  o.kernel = a.need_int("kernel", 1);
  o.stride = a.get_int("stride", 1, 1);
  o.padding = a.get_int("padding", 0, 0);
  o.output_padding = a.get_int("output_padding", 0, 0);
  o.dilation = a.get_int("dilation", 1, 1);
  o.groups = a.get_int("groups", 1, 1);
  o.bias = a.get_bool("bias", true);
  check_declared(a, "in_channels", s[0]);
  KILN_CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0, a.where, ": groups ", o.groups,
             " must divide the input channels ", o.in_channels, " (from '", a.in_names[0], "', shape ",
             sample_shape_str(s), ") and out_channels ", o.out_channels);
  auto m = make_layer_module<nn::ConvTranspose2d>(o, a);
  const Tensor w = empty(m->weight.sizes(), DType::f32, Device::meta());
  const Tensor b = o.bias ? empty(m->bias.sizes(), DType::f32, Device::meta()) : Tensor();
  const SampleShape out = meta_out_shape(
      [&](const Tensor& x) {
        return conv_transpose2d(x, w, b, {o.stride, o.stride}, {o.padding, o.padding},
                                {o.output_padding, o.output_padding}, o.groups, {o.dilation, o.dilation});
      },
      a);
  return {m, nullptr, out};
}

// upsample: exactly one of size (an integer or [h, w]) and scale_factor (a number or [h, w]); mode
// nearest (default) or bilinear; align_corners (bilinear only).
BuiltLayer build_upsample(const LayerArgs& a) {
  need_image(a);
  nn::UpsampleOptions o;
  auto list = [&](const char* field, auto one) {
    using T = decltype(one);
    std::vector<T> r;
    const nlohmann::json& v = a.spec.at(field);
    auto item = [&](const nlohmann::json& x) {
      const bool ok = std::is_integral<T>::value ? x.is_number_integer() : x.is_number();
      KILN_CHECK(ok && x.get<T>() > 0, a.where, ": field '", field, "' must be a positive ",
                 std::is_integral<T>::value ? "integer" : "number", " or a list of two, got ", v.dump());
      r.push_back(x.get<T>());
    };
    if (v.is_array()) {
      KILN_CHECK(v.size() == 1 || v.size() == 2, a.where, ": field '", field, "' takes 1 or 2 values, got ", v.dump());
      for (const nlohmann::json& x : v) item(x);
    } else {
      item(v);
    }
    return r;
  };
  KILN_CHECK(a.has("size") != a.has("scale_factor"), a.where, ": give exactly one of 'size' and 'scale_factor'");
  if (a.has("size")) o.size = list("size", int64_t(0));
  else o.scale_factor = list("scale_factor", double(0));
  if (a.has("mode")) {
    const nlohmann::json& v = a.spec.at("mode");
    KILN_CHECK(v.is_string(), a.where, ": field 'mode' must be \"nearest\" or \"bilinear\", got ", v.dump());
    try {
      o.mode = interp_mode_from_string(v.get<std::string>());
    } catch (const Error& e) {
      throw Error(str_cat(a.where, ": field 'mode': ", e.what()));
    }
  }
  o.align_corners = a.get_bool("align_corners", false);
  KILN_CHECK(!o.align_corners || o.mode == InterpMode::bilinear, a.where, ": align_corners is for mode bilinear only");
  auto m = make_layer_module<nn::Upsample>(o, a);
  const SampleShape out = meta_out_shape([&](const Tensor& x) { return m->forward(x); }, a);
  return {m, nullptr, out};
}

const std::vector<LayerType>& table() {
  static const std::vector<LayerType> t = {
      {"conv2d", {"out_channels", "kernel", "stride", "padding", "dilation", "groups", "bias", "in_channels"}, 1, 1,
       "", build_conv2d},
      {"batch_norm", {"eps", "momentum", "num_features"}, 1, 1, "", build_batch_norm},
      {"relu", {}, 1, 1, "", [](const LayerArgs& a) { return BuiltLayer{std::make_shared<nn::ReLU>(), nullptr, a.in[0]}; }},
      {"leaky_relu", {"negative_slope"}, 1, 1, "",
       [](const LayerArgs& a) {
         const double s = a.get_double("negative_slope", 0.01, -1e6, 1e6);
         return unary("LeakyReLU", [s](const Tensor& x) { return leaky_relu(x, s); }, a, {{"negative_slope", s}});
       }},
      {"gelu", {}, 1, 1, "", [](const LayerArgs& a) { return unary("GELU", [](const Tensor& x) { return gelu(x); }, a); }},
      {"sigmoid", {}, 1, 1, "",
       [](const LayerArgs& a) { return unary("Sigmoid", [](const Tensor& x) { return sigmoid(x); }, a); }},
      {"tanh", {}, 1, 1, "", [](const LayerArgs& a) { return unary("Tanh", [](const Tensor& x) { return tanh(x); }, a); }},
      {"max_pool", {"kernel", "stride", "padding", "dilation", "ceil_mode"}, 1, 1, "",
       [](const LayerArgs& a) { return build_pool(a, true); }},
      {"avg_pool", {"kernel", "stride", "padding", "ceil_mode", "count_include_pad"}, 1, 1, "",
       [](const LayerArgs& a) { return build_pool(a, false); }},
      {"adaptive_avg_pool", {"output_size"}, 1, 1, "", build_adaptive_avg_pool},
      {"linear", {"out_features", "bias", "in_features"}, 1, 1, "", build_linear},
      {"dropout", {"p"}, 1, 1, "",
       [](const LayerArgs& a) {
         return BuiltLayer{std::make_shared<nn::Dropout>(a.get_double("p", 0.5, 0.0, 0.999999)), nullptr, a.in[0]};
       }},
      {"flatten", {}, 1, 1, "", build_flatten},
      {"add", {}, 2, 64, "", build_add},
      {"concat", {}, 2, 64, "", build_concat},
      {"upsample", {"scale_factor", "size", "mode", "align_corners"}, 1, 1, "", build_upsample},
      {"conv_transpose2d",
       {"out_channels", "kernel", "stride", "padding", "output_padding", "dilation", "groups", "bias", "in_channels"}, 1,
       1, "", build_conv_transpose2d},
  };
  return t;
}

}  // namespace

const LayerType* find_layer_type(const std::string& type) {
  for (const LayerType& t : table())
    if (t.type == type) return &t;
  return nullptr;
}

std::vector<std::string> layer_type_names() {
  std::vector<std::string> r;
  for (const LayerType& t : table()) r.push_back(t.type);
  return r;
}

}  // namespace kiln::models
