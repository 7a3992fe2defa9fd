// libFuzzer target: parse_safetensors (engine/io/safetensors.h) on arbitrary bytes. A kiln::Error is
// the expected outcome for bad input; anything else (another exception, a sanitizer report, an
// array whose byte count disagrees with its shape, a file that does not survive write + read back)
// is a finding. Must not catch other exceptions.
#include <cstdint>

#include "engine/io/safetensors.h"
#include "fuzz/fuzz_support.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SafetensorsFile f;
  try {
    f = parse_safetensors(data, size, "fuzz.safetensors");
  } catch (const Error&) {
    return 0;
  }
  for (const NamedArray& t : f.tensors) fuzz::check_array(t.array);
  // What kiln read, kiln writes back, and reading that gives the same tensors and metadata.
  std::vector<uint8_t> again = serialize_safetensors(f.tensors, f.metadata);
  SafetensorsFile g = parse_safetensors(again.data(), again.size(), "fuzz (rewritten)");
  FUZZ_ASSERT(g.metadata == f.metadata && g.tensors.size() == f.tensors.size());
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    FUZZ_ASSERT(g.tensors[i].name == f.tensors[i].name);
    FUZZ_ASSERT(g.tensors[i].array.dtype == f.tensors[i].array.dtype);
    FUZZ_ASSERT(g.tensors[i].array.shape == f.tensors[i].array.shape);
    FUZZ_ASSERT(g.tensors[i].array.bytes == f.tensors[i].array.bytes);
  }
  return 0;
}
