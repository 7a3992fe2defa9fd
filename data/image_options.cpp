// Parsers of the image-pipeline options (see image_options.h).
#include "data/image_options.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "engine/core/error.h"

namespace kiln {

namespace {

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool parse_float(const std::string& s, float* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = (float)v;
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) v.push_back(item);
  if (!s.empty() && s.back() == sep) v.push_back("");
  return v;
}

std::vector<float> parse_floats(const std::string& s, const std::string& whole) {
  std::vector<float> v;
  for (const std::string& item : split(s, ',')) {
    float f = 0;
    KILN_CHECK(parse_float(item, &f), "--normalize '", whole, "': '", item, "' is not a number");
    v.push_back(f);
  }
  return v;
}

}  // namespace

ImageSizeSchedule ImageSizeSchedule::parse(const std::string& text) {
  ImageSizeSchedule s;
  if (text.empty()) return s;
  const std::vector<std::string> parts = split(text, ',');
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    const size_t colon = p.find(':');
    int64_t size = 0, epochs = 0;
    const bool last = i + 1 == parts.size();
    const bool ok = colon == std::string::npos
                        ? parse_int(p, &size) && last
                        : parse_int(p.substr(0, colon), &size) && parse_int(p.substr(colon + 1), &epochs) &&
                              epochs >= 1 && !last;
    KILN_CHECK(ok && size >= 4 && size <= 8192, "--image-size '", text,
               "': expected SIZE or a schedule SIZE:EPOCHS,...,SIZE (e.g. 128:10,224), sizes 4..8192, EPOCHS >= 1, "
               "the last stage without :EPOCHS");
    s.stages.push_back({(int)size, epochs});
  }
  return s;
}

int ImageSizeSchedule::at_epoch(int64_t epoch) const {
  int64_t start = 0;
  for (const Stage& st : stages) {
    if (st.epochs == 0 || epoch < start + st.epochs) return st.size;
    start += st.epochs;
  }
  return stages.empty() ? 0 : stages.back().size;
}

std::string ImageSizeSchedule::str() const {
  std::string s;
  for (const Stage& st : stages) {
    if (!s.empty()) s += ",";
    s += std::to_string(st.size);
    if (st.epochs > 0) s += ":" + std::to_string(st.epochs);
  }
  return s;
}

Normalization Normalization::parse(const std::string& text) {
  Normalization n;
  if (text == "none" || text.empty()) return n;
  if (text == "imagenet") {
    n.kind = Kind::imagenet;
    return n;
  }
  if (text == "auto") {
    n.kind = Kind::automatic;
    return n;
  }
  const size_t colon = text.find(':');
  KILN_CHECK(colon != std::string::npos, "--normalize '", text,
             "': expected imagenet, auto, none or MEANS:STDS (e.g. 0.5,0.5,0.5:0.25,0.25,0.25 or 0.286:0.353)");
  n.kind = Kind::custom;
  n.mean = parse_floats(text.substr(0, colon), text);
  n.std = parse_floats(text.substr(colon + 1), text);
  KILN_CHECK(n.mean.size() == n.std.size() && (n.mean.size() == 1 || n.mean.size() == 3), "--normalize '", text,
             "': give 1 or 3 means and as many stds (got ", n.mean.size(), " and ", n.std.size(), ")");
  for (float s : n.std) KILN_CHECK(s > 0, "--normalize '", text, "': stds must be > 0");
  return n;
}

void Normalization::values(int channels, float* m, float* s) const {
  static const float in_mean[3] = {0.485f, 0.456f, 0.406f}, in_std[3] = {0.229f, 0.224f, 0.225f};
  for (int c = 0; c < channels; ++c) {
    switch (kind) {
      case Kind::none:
      case Kind::automatic:  // filled from the data by the caller
        m[c] = 0.f;
        s[c] = 1.f;
        break;
      case Kind::imagenet:
        m[c] = channels == 3 ? in_mean[c] : (in_mean[0] + in_mean[1] + in_mean[2]) / 3.f;
        s[c] = channels == 3 ? in_std[c] : (in_std[0] + in_std[1] + in_std[2]) / 3.f;
        break;
      case Kind::custom:
        KILN_CHECK((int)mean.size() == channels || mean.size() == 1, "--normalize ", str(), ": ", mean.size(),
                   " values for ", channels, " channels (--channels ", channels, ")");
        m[c] = mean.size() == 1 ? mean[0] : mean[(size_t)c];
        s[c] = std.size() == 1 ? std[0] : std[(size_t)c];
        break;
    }
  }
}

std::string Normalization::str() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::imagenet: return "imagenet";
    case Kind::automatic: return "auto";
    case Kind::custom: break;
  }
  std::ostringstream os;
  for (size_t i = 0; i < mean.size(); ++i) os << (i ? "," : "") << mean[i];
  os << ":";
  for (size_t i = 0; i < std.size(); ++i) os << (i ? "," : "") << std[i];
  return os.str();
}

void ImageOptions::validate() const {
  ImageSizeSchedule::parse(image_size);
  Normalization::parse(normalize);
  KILN_CHECK(resize >= 0, "--resize must be >= 0, got ", resize);
  KILN_CHECK(crop == "center" || crop == "none", "--crop '", crop, "': expected center or none");
  KILN_CHECK(channels == 1 || channels == 3, "--channels must be 1 or 3, got ", channels);
  KILN_CHECK(workers >= 0, "--workers must be >= 0, got ", workers);
  KILN_CHECK(prefetch >= 1, "--prefetch must be >= 1 (batches decoded ahead), got ", prefetch);
  KILN_CHECK(augment == "none" || augment == "flip" || augment == "rrc" || augment.rfind("rrc:", 0) == 0,
             "--augment '", augment, "': expected none, flip, rrc or rrc:MIN_SCALE");
  if (augment.rfind("rrc:", 0) == 0) {
    float f = 0;
    KILN_CHECK(parse_float(augment.substr(4), &f) && f > 0 && f <= 1, "--augment '", augment,
               "': MIN_SCALE must be in (0, 1]");
  }
}

bool ImageOptions::uses_rrc() const { return augment.rfind("rrc", 0) == 0; }
bool ImageOptions::uses_flip() const { return augment != "none"; }
float ImageOptions::rrc_min_scale() const {
  float f = 0.08f;
  if (augment.rfind("rrc:", 0) == 0) parse_float(augment.substr(4), &f);
  return f;
}

nlohmann::json ImageOptions::to_json() const {
  return {{"image_size", image_size}, {"resize", resize},       {"crop", crop},
          {"augment", augment},       {"normalize", normalize}, {"balance", balance},
          {"workers", workers},       {"pin_memory", pin_memory}, {"channels", channels},
          {"prefetch", prefetch}};
}

}  // namespace kiln
