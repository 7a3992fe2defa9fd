#include "engine/core/device.h"

#include <cstdlib>

#include "engine/core/error.h"

namespace kiln {

std::string Device::str() const {
  switch (type) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::meta: return "meta";
    case DeviceType::cuda: return "cuda:" + std::to_string(index);
  }
  return "?";
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "meta") return meta();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5) {
    char* end = nullptr;
    long i = std::strtol(s.c_str() + 5, &end, 10);
    if (*end == 0 && i >= 0 && i < 1024) return cuda((int)i);
  }
  throw Error("unknown device '" + s + "' (expected cpu, meta, cuda or cuda:N)");
}

}  // namespace kiln
