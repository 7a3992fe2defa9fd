// Device discovery for `kiln devices` and --device (see devices.h).
#include "engine/core/devices.h"

#include <cstdlib>
#include <sstream>

#include "engine/core/error.h"

#ifdef KILN_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kiln {

namespace {
std::string cuda_version_str(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
}  // namespace

DeviceReport query_devices() {
  DeviceReport r;
#ifdef KILN_WITH_CUDA
  r.cuda_built = true;
  cudaRuntimeGetVersion(&r.runtime_version);
  const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
  if (vis && std::string(vis).empty()) {
    r.why_none = "CUDA_VISIBLE_DEVICES is set but empty: every GPU is hidden from this process";
    return r;
  }
  if (cudaDriverGetVersion(&r.driver_version) != cudaSuccess || r.driver_version == 0) {
    r.driver_version = 0;
    r.why_none = "no NVIDIA driver found (libcuda could not be loaded); kiln was built with CUDA runtime " +
                 cuda_version_str(r.runtime_version);
    return r;
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    r.why_none = e == cudaSuccess ? std::string("the NVIDIA driver reports no CUDA device")
                                  : std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    if (vis) r.why_none += std::string(" (CUDA_VISIBLE_DEVICES=") + vis + ")";
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return r;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    r.gpus.push_back({i, p.name, p.totalGlobalMem, p.major, p.minor});
  }
  if (r.gpus.empty()) r.why_none = "cudaGetDeviceProperties failed for every device";
#else
  r.why_none = "this kiln build has no CUDA backend (configured with KILN_CUDA=OFF or nvcc not found); rebuild "
               "with -DKILN_CUDA=ON on a machine with the CUDA toolkit";
#endif
  return r;
}

std::string format_device_report(const DeviceReport& r) {
  std::ostringstream os;
  os << "cpu: available\n";
  if (r.cuda_built) {
    os << "cuda: runtime " << cuda_version_str(r.runtime_version) << ", driver "
       << (r.driver_version ? cuda_version_str(r.driver_version) : std::string("none")) << "\n";
#if defined(KILN_WITH_CUDNN) && defined(KILN_CUDNN_MAJOR)
    os << "cudnn: " << KILN_CUDNN_MAJOR << " (found when kiln was configured)\n";
#else
    os << "cudnn: none (not found when kiln was configured): f32 CUDA convolutions fail, 16-bit ones need "
          "--kernels kiln\n";
#endif
  }
  for (const GpuInfo& g : r.gpus) {
    os << "cuda:" << g.index << ": " << g.name << ", " << (double)g.total_memory / (1024.0 * 1024 * 1024)
       << " GiB, compute capability " << g.cc_major << "." << g.cc_minor << "\n";
  }
  if (r.gpus.empty()) os << "no GPU: " << r.why_none << "\n";
  return os.str();
}

Device resolve_device(const std::string& spec, std::string* note) {
  if (note) note->clear();
  if (spec == "auto") {
    DeviceReport r = query_devices();
    if (!r.gpus.empty()) {
      if (note)
        *note = "device auto: using cuda:0 (" + r.gpus[0].name + ", " + std::to_string(r.gpus.size()) +
                " GPU(s) visible)";
      return Device::cuda(0);
    }
    if (note) *note = "device auto: using cpu (no usable GPU: " + r.why_none + ")";
    return Device::cpu();
  }
  Device d = Device::parse(spec);
  KILN_CHECK(!d.is_meta(), "--device meta cannot train or predict (it has no data); use cpu or cuda:N");
  if (d.is_cuda()) {
    DeviceReport r = query_devices();
    KILN_CHECK(!r.gpus.empty(), "--device ", spec, ": ", r.why_none);
    KILN_CHECK(d.index < (int)r.gpus.size(), "--device ", spec, ": only ", r.gpus.size(), " GPU(s) visible");
  }
  return d;
}

}  // namespace kiln
