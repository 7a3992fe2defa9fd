// libFuzzer target: parse_idx (engine/io/idx.h) on arbitrary bytes, plain or gzip (the seeds hold
// both). kiln::Error is the expected outcome for bad input; any other exception, a sanitizer report
// or an array whose byte count disagrees with its shape is a finding.
#include <cstdint>

#include "engine/io/idx.h"
#include "fuzz/fuzz_support.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    HostArray a = parse_idx(data, size, "fuzz.idx");
    fuzz::check_array(a);
  } catch (const Error&) {
  }
  return 0;
}
