// `kiln devices`: what compute devices this build and this machine offer, and when no GPU is
// usable, exactly why (no CUDA in this build, CUDA_VISIBLE_DEVICES empty, no driver, no device).
// Also resolves `--device auto|cpu|cuda:N`. Must not initialize anything beyond device queries.
#pragma once
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace kiln {

struct GpuInfo {
  int index = 0;
  std::string name;
  size_t total_memory = 0;
  int cc_major = 0, cc_minor = 0;
};

struct DeviceReport {
  bool cuda_built = false;      // compiled with KILN_WITH_CUDA
  int driver_version = 0;       // cudaDriverGetVersion (0 = no driver)
  int runtime_version = 0;      // cudaRuntimeGetVersion
  std::vector<GpuInfo> gpus;
  std::string why_none;         // set when gpus is empty
};

DeviceReport query_devices();
// Human-readable report (several lines, ends with a newline).
std::string format_device_report(const DeviceReport& r);
// "auto" -> cuda:0 when a GPU is usable, else cpu; "cpu", "cuda", "cuda:N" checked against the report.
// `note` receives a one-line explanation of the choice for auto (may be empty).
Device resolve_device(const std::string& spec, std::string* note = nullptr);

}  // namespace kiln
