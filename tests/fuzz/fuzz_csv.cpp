// libFuzzer target: csv_dataset (data/dataset.h) on an arbitrary CSV file (the bytes are written to
// an in-memory file, since the parser takes a path). kiln::Error is the expected outcome for bad
// input; any other exception, a sanitizer report, a hang, or a data set whose labels fall outside
// its classes is a finding. A CSV of paths only is a data set without labels (label -1, no classes).
#include <cstdint>

#include "data/dataset.h"
#include "fuzz/fuzz_support.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("fuzz.csv");
  const std::string& path = file.set(data, size);
  try {
    ImageDataset ds = csv_dataset(path);
    FUZZ_ASSERT(!ds.samples.empty());
    if (!ds.labelled) {
      FUZZ_ASSERT(ds.classes.empty());
      for (const ImageSample& s : ds.samples) FUZZ_ASSERT(s.label == -1);
    } else {
      for (const ImageSample& s : ds.samples) FUZZ_ASSERT(s.label >= 0 && (size_t)s.label < ds.classes.size());
    }
  } catch (const Error&) {
  }
  return 0;
}
