// A trained model's card: model, classes, preprocessing (see model_card.h).
#include "engine/train/model_card.h"

#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"

namespace kiln {

namespace {

// %.17g: a double (and a float widened to one) survives the text round trip exactly.
std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string json_list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + exact(v[i]);
  return s + "]";
}

int64_t int_at(const std::map<std::string, std::string>& m, const char* key, const std::string& source) {
  const std::string& v = m.at(key);
  size_t used = 0;
  int64_t r = -1;
  try {
    r = std::stoll(v, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  KILN_CHECK(used == v.size() && r >= 0, source, ": metadata '", key, "' is '", v, "', not a count");
  return r;
}

nlohmann::json json_at(const std::map<std::string, std::string>& m, const char* key, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(m.at(key), nullptr, false);
  KILN_CHECK(!j.is_discarded() && j.is_array(), source, ": metadata '", key, "' is not a JSON list: ", m.at(key));
  return j;
}

std::vector<double> numbers_at(const std::map<std::string, std::string>& m, const char* key,
                               const std::string& source) {
  std::vector<double> v;
  for (const nlohmann::json& e : json_at(m, key, source)) {
    KILN_CHECK(e.is_number(), source, ": metadata '", key, "' holds ", e.dump(), ", not a number");
    v.push_back(e.get<double>());
  }
  return v;
}

}  // namespace

std::string Preprocessing::normalize_text() const {
  KILN_CHECK(has_normalization(), "normalize_text: no normalization stored");
  bool identity = true;
  for (size_t i = 0; i < mean.size(); ++i) identity = identity && mean[i] == 0.0 && std[i] == 1.0;
  if (identity) return "none";
  std::string s;
  for (size_t i = 0; i < mean.size(); ++i) s += (i ? "," : "") + exact(mean[i]);
  s += ":";
  for (size_t i = 0; i < std.size(); ++i) s += (i ? "," : "") + exact(std[i]);
  return s;
}

std::map<std::string, std::string> ModelCard::to_metadata() const {
  std::map<std::string, std::string> m;
  const Preprocessing& p = preprocessing;
  if (!model.empty()) m["model"] = model;
  if (!task.empty()) m["task"] = task;
  if (num_classes > 0) m["num_classes"] = std::to_string(num_classes);
  if (p.channels > 0) m["in_channels"] = std::to_string(p.channels);
  if (p.image_size > 0) m["image_size"] = std::to_string(p.image_size);
  if (!p.data_format.empty()) m["data_format"] = p.data_format;
  if (p.resize > 0) m["resize"] = std::to_string(p.resize);
  if (!p.crop.empty()) m["crop"] = p.crop;
  if (!p.normalize.empty()) m["normalize"] = p.normalize;
  if (!precision.empty()) m["precision"] = precision;
  if (p.has_normalization()) {
    m["mean"] = json_list(p.mean);
    m["std"] = json_list(p.std);
  }
  // A folder name that is not UTF-8 is written with U+FFFD in its place (JSON text must be UTF-8):
  // writing never fails after training; predict then names that class as unknown.
  if (!class_names.empty())
    m["class_names"] = nlohmann::json(class_names).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return m;
}

ModelCard ModelCard::from_metadata(const std::map<std::string, std::string>& m, const std::string& source) {
  ModelCard c;
  Preprocessing& p = c.preprocessing;
  auto has = [&](const char* key) { return m.count(key) > 0; };
  if (has("model")) c.model = m.at("model");
  else c.missing.push_back("model");
  if (has("task")) {  // absent: a file written before tasks, a classifier
    c.task = m.at("task");
    KILN_CHECK(c.task == "classify" || c.task == "segment", source, ": metadata 'task' is '", c.task,
               "' (expected classify or segment)");
  }
  if (has("num_classes")) c.num_classes = int_at(m, "num_classes", source);
  else c.missing.push_back("number of classes");
  if (has("image_size")) p.image_size = int_at(m, "image_size", source);
  else c.missing.push_back("image size");
  if (has("in_channels")) p.channels = int_at(m, "in_channels", source);
  else c.missing.push_back("channels");
  if (has("data_format")) p.data_format = m.at("data_format");
  if (has("crop")) {
    p.crop = m.at("crop");
    KILN_CHECK(p.crop == "center" || p.crop == "none", source, ": metadata 'crop' is '", p.crop,
               "' (expected center or none)");
    if (has("resize")) p.resize = int_at(m, "resize", source);
  } else {
    c.missing.push_back("resize/crop");
  }
  if (has("normalize")) p.normalize = m.at("normalize");
  if (has("precision")) c.precision = m.at("precision");
  if (has("mean") && has("std")) {
    p.mean = numbers_at(m, "mean", source);
    p.std = numbers_at(m, "std", source);
    KILN_CHECK(!p.mean.empty() && p.mean.size() == p.std.size(), source, ": metadata 'mean' has ", p.mean.size(),
               " values and 'std' ", p.std.size());
    for (double s : p.std) KILN_CHECK(s > 0, source, ": metadata 'std' holds ", s, " (must be > 0)");
  } else {
    c.missing.push_back("normalization mean/std");
  }
  if (has("class_names")) {
    for (const nlohmann::json& e : json_at(m, "class_names", source)) {
      KILN_CHECK(e.is_string(), source, ": metadata 'class_names' holds ", e.dump(), ", not a name");
      c.class_names.push_back(e.get<std::string>());
    }
    KILN_CHECK(c.num_classes == 0 || (int64_t)c.class_names.size() == c.num_classes, source, ": ",
               c.class_names.size(), " class names for ", c.num_classes, " classes");
  } else {
    c.missing.push_back("class names");
  }
  return c;
}

ModelCard read_model_card(const std::string& path) {
  return ModelCard::from_metadata(read_safetensors(path).metadata, path);
}

ModelCard make_model_card(const std::string& model, int64_t num_classes, const TrainData& data,
                          const ImageOptions& image, int64_t channels, int64_t image_size) {
  ModelCard c;
  c.model = model;
  c.num_classes = num_classes;
  for (int64_t k = 0; k < num_classes; ++k)
    c.class_names.push_back(k < (int64_t)data.classes.size() ? data.classes[(size_t)k] : std::to_string(k));
  Preprocessing& p = c.preprocessing;
  p.data_format = data.format;
  p.image_size = image_size;
  p.channels = channels;
  p.mean = data.mean;
  p.std = data.std;
  if (data.format == "images") {
    p.crop = image.crop;
    p.resize = image.resize > 0 ? image.resize : image_size;
    p.normalize = image.normalize;
  } else {  // arrays are used at their size: an image of that size needs no resize or crop
    p.crop = "none";
    p.resize = image_size;
    p.normalize = data.format == "idx" ? "auto" : "none";
  }
  return c;
}

}  // namespace kiln
