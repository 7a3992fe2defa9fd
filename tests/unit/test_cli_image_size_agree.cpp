// `kiln export --image-size N` and `kiln predict --image-size N` on weights trained at another size
// (issue 34, item 3) agree: both refuse with the same words, and with --force both scale the eval resize
// with the size; the exported ONNX metadata then says image_size N, the scaled resize and
// trained_image_size. A resnet18_small (global pooling: any size runs) trained 1 epoch on 16 px JPEGs.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;

namespace {

// The error line's text after "kiln: error: <command>: ".
std::string error_after(const std::string& output, const std::string& command) {
  const std::string head = "kiln: error: " + command + ": ";
  const size_t p = output.find(head);
  if (p == std::string::npos) return "(no error: " + output + ")";
  const size_t e = output.find('\n', p);
  return output.substr(p + head.size(), e == std::string::npos ? std::string::npos : e - p - head.size());
}

// Whether the ONNX file holds the metadata_props entry key = value: a StringStringEntryProto is
// field 1 (key, tag 0x0a) then field 2 (value, tag 0x12), each a length-prefixed string (short here).
bool has_metadata(const std::string& onnx_bytes, const std::string& key, const std::string& value) {
  const std::string entry = std::string(1, '\x0a') + (char)key.size() + key + '\x12' + (char)value.size() + value;
  return onnx_bytes.find(entry) != std::string::npos;
}

}  // namespace

TEST_CASE("cli export and predict: an --image-size other than the trained one is refused in the same words, --force scales the resize") {
  const std::string d = kiln_test::cli_temp_dir("image_size_agree");
  kiln_test::make_image_folder(d + "/set", 2, 4, 16, 1, false);
  const std::string w = d + "/w.safetensors";
  const kiln_test::CliRun t = run_kiln("train --model resnet18_small --data " + d +
                                       "/set --channels 1 --image-size 16 --resize 18 --epochs 1 --batch 8 --threads 1 "
                                       "--device cpu --out " + d + "/out --save " + w);
  REQUIRE_MESSAGE(t.status == 0, t.output);

  const kiln_test::CliRun p = run_kiln("predict --weights " + w + " --data " + d + "/set --image-size 24 --out " + d + "/p.csv");
  const kiln_test::CliRun x = run_kiln("export --weights " + w + " --image-size 24 --onnx " + d + "/m.onnx");
  CAPTURE(p.output);
  CAPTURE(x.output);
  CHECK(p.status == 1);
  CHECK(x.status == 1);
  CHECK(contains(p.output, "--image-size 24 (trained at 16)"));
  CHECK(error_after(p.output, "predict") == error_after(x.output, "export"));
  CHECK_FALSE(std::filesystem::exists(d + "/m.onnx"));

  // --force: both scale the resize 18 -> 27 (18 * 24 / 16).
  const kiln_test::CliRun pf =
      run_kiln("predict --weights " + w + " --data " + d + "/set --image-size 24 --force --out " + d + "/p.csv");
  CHECK_MESSAGE(pf.status == 0, pf.output);
  CHECK(contains(pf.output, "resize scaled with the size: 18 -> 27"));
#ifdef KILN_WITH_ONNX
  const kiln_test::CliRun xf = run_kiln("export --weights " + w + " --image-size 24 --force --onnx " + d + "/m.onnx");
  REQUIRE_MESSAGE(xf.status == 0, xf.output);
  CHECK(contains(xf.output, "resize scaled with the size: 18 -> 27"));
  CHECK(contains(xf.output, "f32 (N, 1, 24, 24)"));
  std::ifstream in(d + "/m.onnx", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(has_metadata(bytes, "image_size", "24"));
  CHECK(has_metadata(bytes, "resize", "27"));
  CHECK(has_metadata(bytes, "trained_image_size", "16"));
  CHECK_FALSE(has_metadata(bytes, "resize", "18"));
  // At the trained size nothing changes: no trained_image_size.
  const kiln_test::CliRun xs = run_kiln("export --weights " + w + " --image-size 16 --onnx " + d + "/s.onnx");
  REQUIRE_MESSAGE(xs.status == 0, xs.output);
  std::ifstream ins(d + "/s.onnx", std::ios::binary);
  const std::string same((std::istreambuf_iterator<char>(ins)), std::istreambuf_iterator<char>());
  CHECK(has_metadata(same, "resize", "18"));
  CHECK(same.find("trained_image_size") == std::string::npos);
#endif
}
