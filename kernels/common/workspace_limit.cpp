// kiln's CUDA scratch-memory bounds (see workspace_limit.h).
#include "kernels/common/workspace_limit.h"

#include <cstdlib>
#include <string>

#include "engine/core/error.h"
#include "engine/memory/alloc_config.h"

namespace kiln {

size_t cudnn_workspace_limit() {
  const char* v = std::getenv("KILN_CUDNN_WORKSPACE_LIMIT");
  if (!v || !*v) return kCudnnWorkspaceLimitDefault;
  try {
    return parse_bytes(v);
  } catch (const Error& e) {
    throw Error(std::string("KILN_CUDNN_WORKSPACE_LIMIT='") + v + "': " + e.what());
  }
}

size_t cublas_workspace_bytes(int compute_major) {
  const char* v = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  if (!v || !*v) return compute_major > 0 && compute_major < 9 ? size_t(4) << 20 : size_t(32) << 20;
  // ":4096:8" or ":4096:2:16:8": (size in KiB, count) pairs.
  const std::string s = v;
  size_t total = 0, i = 0;
  int pairs = 0;
  auto number = [&](unsigned long long* out) {
    KILN_CHECK(i < s.size() && s[i] == ':', "CUBLAS_WORKSPACE_CONFIG='", s, "': expected :SIZE_KiB:COUNT pairs");
    ++i;
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    KILN_CHECK(i > start && i - start < 12, "CUBLAS_WORKSPACE_CONFIG='", s, "': expected :SIZE_KiB:COUNT pairs");
    *out = std::stoull(s.substr(start, i - start));
  };
  while (i < s.size()) {
    unsigned long long kib = 0, count = 0;
    number(&kib);
    number(&count);
    total += (size_t)(kib * 1024 * count);
    ++pairs;
  }
  KILN_CHECK(pairs > 0, "CUBLAS_WORKSPACE_CONFIG='", s, "': expected :SIZE_KiB:COUNT pairs");
  return total;
}

}  // namespace kiln
