// libFuzzer target: parse_npy (engine/io/npy.h) on arbitrary bytes. kiln::Error is the expected
// outcome for bad input; anything else (another exception, a sanitizer report, an array whose byte
// count disagrees with its shape, an array that does not survive write + read back) is a finding.
#include <cstdint>

#include "engine/io/npy.h"
#include "fuzz/fuzz_support.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  HostArray a;
  try {
    a = parse_npy(data, size, "fuzz.npy");
  } catch (const Error&) {
    return 0;
  }
  fuzz::check_array(a);
  std::vector<uint8_t> again = serialize_npy(a);
  HostArray b = parse_npy(again.data(), again.size(), "fuzz (rewritten)");
  FUZZ_ASSERT(b.dtype == a.dtype && b.shape == a.shape && b.bytes == a.bytes);
  return 0;
}
