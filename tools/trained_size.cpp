// The shared refusal and --force rule of predict and export (see trained_size.h).
#include "tools/trained_size.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"

namespace kiln_cli {

std::string image_size_difference(const std::string& given, int64_t trained) {
  return kiln::str_cat("--image-size ", given, " (trained at ", trained, ")");
}

std::string trained_otherwise(const std::string& weights, const std::vector<std::string>& differences) {
  std::string list;
  for (const std::string& d : differences) list += (list.empty() ? "" : "; ") + d;
  return kiln::str_cat(weights, " was trained otherwise: ", list,
                       " (leave these flags out to predict or export as trained, or pass --force to use yours)");
}

int64_t scaled_resize(int64_t resize, int64_t trained, int64_t size) {
  if (resize <= 0 || trained <= 0) return resize;
  return std::max<int64_t>(size, (int64_t)std::llround((double)resize * (double)size / (double)trained));
}

std::string scaled_resize_note(int64_t resize, int64_t trained, int64_t size) {
  if (resize <= 0 || trained <= 0) return "";
  return kiln::str_cat("resize scaled with the size: ", resize, " -> ", scaled_resize(resize, trained, size));
}

}  // namespace kiln_cli
