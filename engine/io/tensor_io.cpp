// Tensor <-> HostArray conversion and the safetensors / .npy entry points over Tensors.
#include "engine/io/tensor_io.h"

#include <cstring>
#include <set>

#include "engine/autograd/grad_mode.h"
#include "engine/io/npy.h"
#include "engine/io/safetensors.h"
#include "engine/ops/ops.h"

namespace kiln {

HostArray to_host_array(const Tensor& t) {
  KILN_CHECK(t.defined(), "to_host_array: undefined tensor");
  KILN_CHECK(!t.device().is_meta(), "to_host_array: a meta tensor ", t.str(), " has no data");
  NoGradGuard ng;
  Tensor h = t.detach();
  if (!h.device().is_cpu()) h = to_device(h, Device::cpu());
  if (!h.is_contiguous()) h = contiguous(h);
  HostArray a = make_host_array(h.dtype(), h.sizes());
  if (a.nbytes() > 0) std::memcpy(a.bytes.data(), h.data_ptr(), a.nbytes());
  return a;
}

Tensor from_host_array(const HostArray& a, Device d) {
  Tensor t = empty(a.shape, a.dtype, Device::cpu());
  KILN_CHECK(t.nbytes() == a.nbytes(), "from_host_array: ", a.nbytes(), " bytes for ", t.str());
  if (a.nbytes() > 0) std::memcpy(t.data_ptr(), a.bytes.data(), a.nbytes());
  if (!d.is_cpu()) t = to_device(t, d);
  return t;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<NamedArray> arrays;
  arrays.reserve(tensors.size());
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(seen.insert(name).second, "save_safetensors: ", path, ": duplicate tensor name '", name, "'");
    KILN_CHECK(t.defined(), "save_safetensors: ", path, ": tensor '", name, "' is undefined");
    arrays.push_back({name, to_host_array(t)});
  }
  write_safetensors(path, arrays, metadata);
}

NamedTensors load_safetensors(const std::string& path, Device d) {
  SafetensorsFile f = read_safetensors(path);
  NamedTensors out;
  out.reserve(f.tensors.size());
  for (const NamedArray& na : f.tensors) out.emplace_back(na.name, from_host_array(na.array, d));
  return out;
}

void save_npy(const std::string& path, const Tensor& t) { write_npy(path, to_host_array(t)); }

Tensor load_npy(const std::string& path, Device d) { return from_host_array(read_npy(path), d); }

}  // namespace kiln
