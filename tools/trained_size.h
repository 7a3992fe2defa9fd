// The one rule `kiln predict` and `kiln export` share for flags that contradict what the weights were
// trained with (an --image-size other than the trained one): the same refusal text, and under --force
// the same consequence — the eval resize scaled with the size (resize * size / trained, rounded), so a
// model fed 48 px where it learned 32 px after a resize to 36 sees a resize to 54, as trained. Printing
// and words only: no files, no models.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln_cli {

// "--image-size 48 (trained at 32)".
std::string image_size_difference(const std::string& given, int64_t trained);
// "W was trained otherwise: D1; D2 (leave these flags out to predict or export as trained, or pass
// --force to use yours)": the text after "predict: " and "export: ".
std::string trained_otherwise(const std::string& weights, const std::vector<std::string>& differences);
// The eval resize for `size` when the weights resized to `resize` for `trained` px (0 stays 0).
int64_t scaled_resize(int64_t resize, int64_t trained, int64_t size);
// "resize scaled with the size: 36 -> 54" (or "" when there is no resize).
std::string scaled_resize_note(int64_t resize, int64_t trained, int64_t size);

}  // namespace kiln_cli
