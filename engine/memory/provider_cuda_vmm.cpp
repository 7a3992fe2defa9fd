// The cuda provider's growable ranges through the driver's virtual memory management (see
// provider_cuda.h). Never run on the build machines (no GPU): only compiled there.
#ifdef KILN_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/host_sync.h"
#include "engine/memory/cuda_device_guard.h"
#include "engine/memory/provider_cuda.h"

namespace kiln {

struct CudaProvider::Vmm {
  // Driver entry points (looked up through cudaGetDriverEntryPointByVersion).
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*get_granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*address_reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;

  CUmemAllocationProp prop;
  CUmemAccessDesc access;
  size_t granule = 0;
  // Per reserved range (by base): the physical handle behind each granule, 0 when uncommitted.
  std::map<CUdeviceptr, std::vector<CUmemGenericAllocationHandle>> ranges;
  std::mutex mu;

  std::string message(CUresult r) const {
    const char* s = nullptr;
    if (get_error_string) get_error_string(r, &s);
    return s ? s : ("CUresult " + std::to_string((int)r));
  }
  void check(CUresult r, const char* what, int device, CUdeviceptr p, size_t n) const {
    if (r != CUDA_SUCCESS)
      throw Error(str_cat(what, " on cuda:", device, " at ", (const void*)(uintptr_t)p, " (", n, " bytes): ",
                          message(r)));
  }
  // The range holding p, and p's granule index in it.
  std::vector<CUmemGenericAllocationHandle>& find(CUdeviceptr p, size_t* index, int device) {
    auto it = ranges.upper_bound(p);
    KILN_CHECK(it != ranges.begin(), "cuda:", device, ": address ", (const void*)(uintptr_t)p,
               " is not in a reserved range");
    --it;
    *index = (size_t)((p - it->first) / granule);
    KILN_CHECK(*index < it->second.size(), "cuda:", device, ": address ", (const void*)(uintptr_t)p,
               " is past its reserved range");
    return it->second;
  }
};

namespace {

template <typename F>
bool entry(const char* name, F*& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p) {
    cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<F*>(p);
  return true;
}


}  // namespace

CudaProvider::CudaProvider(int device) : device_(device) {}

CudaProvider::~CudaProvider() { delete vmm_; }

CudaProvider::Vmm* CudaProvider::vmm() const {
  std::lock_guard<std::mutex> g(vmm_mu_);
  auto* self = const_cast<CudaProvider*>(this);
  if (vmm_checked_) return vmm_;
  self->vmm_checked_ = true;
  const char* env = std::getenv("KILN_CUDA_VMM");
  if (env && std::strcmp(env, "0") == 0) return nullptr;
  CudaDeviceGuard ds(device_);
  auto* v = new Vmm();
  bool ok = entry("cuGetErrorString", v->get_error_string) && entry("cuDeviceGet", v->device_get) &&
            entry("cuDeviceGetAttribute", v->device_get_attribute) &&
            entry("cuMemGetAllocationGranularity", v->get_granularity) &&
            entry("cuMemAddressReserve", v->address_reserve) && entry("cuMemAddressFree", v->address_free) &&
            entry("cuMemCreate", v->create) && entry("cuMemRelease", v->release) && entry("cuMemMap", v->map) &&
            entry("cuMemUnmap", v->unmap) && entry("cuMemSetAccess", v->set_access);
  CUdevice dev = 0;
  int supported = 0;
  ok = ok && v->device_get(&dev, device_) == CUDA_SUCCESS &&
       v->device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) ==
           CUDA_SUCCESS &&
       supported;
  if (ok) {
    std::memset(&v->prop, 0, sizeof v->prop);
    v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    v->prop.location.id = device_;
    std::memset(&v->access, 0, sizeof v->access);
    v->access.location = v->prop.location;
    v->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ok = v->get_granularity(&v->granule, &v->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS &&
         v->granule > 0 && (v->granule & (v->granule - 1)) == 0;
  }
  if (!ok) {
    delete v;
    return nullptr;
  }
  self->vmm_ = v;
  return v;
}

size_t CudaProvider::granule() const {
  Vmm* v = vmm();
  return v ? v->granule : 0;
}

void* CudaProvider::reserve(size_t bytes) {
  Vmm* v = vmm();
  if (!v || bytes == 0) return nullptr;
  std::lock_guard<std::mutex> g(v->mu);
  size_t n = (bytes + v->granule - 1) / v->granule;
  CUdeviceptr p = 0;
  if (v->address_reserve(&p, n * v->granule, v->granule, 0, 0) != CUDA_SUCCESS) return nullptr;
  v->ranges[p].assign(n, 0);
  return reinterpret_cast<void*>((uintptr_t)p);
}

bool CudaProvider::commit(void* ptr, size_t bytes) {
  Vmm* v = vmm();
  KILN_CHECK(v, "cuda:", device_, ": commit without virtual memory management");
  CudaDeviceGuard ds(device_);
  std::lock_guard<std::mutex> g(v->mu);
  const size_t G = v->granule;
  const CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
  KILN_CHECK(p % G == 0 && bytes % G == 0, "cuda:", device_, ": commit of ", bytes, " bytes at ", ptr,
             " is not granule-aligned (", G, ")");
  size_t first = 0;
  auto& handles = v->find(p, &first, device_);
  const size_t count = bytes / G;
  KILN_CHECK(first + count <= handles.size(), "cuda:", device_, ": commit of ", bytes, " bytes at ", ptr,
             " runs past its reserved range");
  size_t done = 0;
  for (; done < count; ++done) {
    CUmemGenericAllocationHandle h = 0;
    CUresult r = v->create(&h, G, &v->prop, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) break;  // not there: undo below, the allocator retries or reports
    v->check(r, "cuMemCreate", device_, p + done * G, G);
    r = v->map(p + done * G, G, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      v->release(h);
      if (r == CUDA_ERROR_OUT_OF_MEMORY) break;
      v->check(r, "cuMemMap", device_, p + done * G, G);
    }
    handles[first + done] = h;
    v->check(v->set_access(p + done * G, G, &v->access, 1), "cuMemSetAccess", device_, p + done * G, G);
  }
  if (done == count) return true;
  for (size_t i = 0; i < done; ++i) {  // roll back this call's granules
    v->unmap(p + i * G, G);
    v->release(handles[first + i]);
    handles[first + i] = 0;
  }
  return false;
}

void CudaProvider::decommit(void* ptr, size_t bytes) {
  Vmm* v = vmm();
  KILN_CHECK(v, "cuda:", device_, ": decommit without virtual memory management");
  CudaDeviceGuard ds(device_);
  // Kernels queued on any stream may still use these bytes: wait for them before unmapping.
  note_host_sync(HostSyncKind::device_sync);
  cudaError_t e = cudaDeviceSynchronize();
  KILN_CHECK(e == cudaSuccess, "cudaDeviceSynchronize before unmapping on cuda:", device_, ": ", cudaGetErrorString(e));
  std::lock_guard<std::mutex> g(v->mu);
  const size_t G = v->granule;
  const CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
  size_t first = 0;
  auto& handles = v->find(p, &first, device_);
  for (size_t i = 0; i < bytes / G && first + i < handles.size(); ++i) {
    CUmemGenericAllocationHandle& h = handles[first + i];
    if (!h) continue;
    v->check(v->unmap(p + i * G, G), "cuMemUnmap", device_, p + i * G, G);
    v->check(v->release(h), "cuMemRelease", device_, p + i * G, G);
    h = 0;
  }
}

void CudaProvider::release(void* ptr, size_t) {
  Vmm* v = vmm();
  if (!v) return;
  std::lock_guard<std::mutex> g(v->mu);
  auto it = v->ranges.find((CUdeviceptr)(uintptr_t)ptr);
  KILN_CHECK(it != v->ranges.end(), "cuda:", device_, ": release of ", ptr, ", which is not a reserved range");
  for (CUmemGenericAllocationHandle h : it->second)
    KILN_CHECK(h == 0, "cuda:", device_, ": release of a range that still has committed memory");
  v->check(v->address_free(it->first, it->second.size() * v->granule), "cuMemAddressFree", device_, it->first,
           it->second.size() * v->granule);
  v->ranges.erase(it);
}

}  // namespace kiln
#endif
