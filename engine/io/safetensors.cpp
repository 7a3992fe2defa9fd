// safetensors parsing (strict header validation) and serialization.
#include "engine/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/io/atomic_file.h"
#include "engine/io/file_bytes.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "kiln io assumes a little-endian host");

namespace kiln {

namespace {

using ojson = nlohmann::ordered_json;

constexpr uint64_t kMaxHeader = 100ull << 20;  // 100 MiB, the reference's limit

bool safetensors_dtype(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::f32;
  else if (s == "F64") *out = DType::f64;
  else if (s == "F16") *out = DType::f16;
  else if (s == "BF16") *out = DType::bf16;
  else if (s == "I32") *out = DType::i32;
  else if (s == "I64") *out = DType::i64;
  else if (s == "U8") *out = DType::u8;
  else return false;
  return true;
}

bool known_unsupported(const std::string& s) {
  static const char* names[] = {"BOOL", "I8", "I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2"};
  for (const char* n : names)
    if (s == n) return true;
  return false;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
  size_t header_index;
};

// Parses one tensor entry; every failure names the source and the tensor.
Entry parse_entry(const std::string& source, const std::string& name, const ojson& v, size_t index) {
  auto bad = [&](const std::string& why) {
    return Error(str_cat(source, ": safetensors tensor '", name, "': ", why));
  };
  if (!v.is_object()) throw bad(str_cat("entry must be a JSON object, got ", v.type_name()));
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& k = it.key();
    if (k != "dtype" && k != "shape" && k != "data_offsets") throw bad(str_cat("unknown field '", k, "'"));
  }
  Entry e;
  e.name = name;
  e.header_index = index;
  if (!v.contains("dtype") || !v["dtype"].is_string()) throw bad("missing or non-string 'dtype'");
  const std::string ds = v["dtype"].get<std::string>();
  if (!safetensors_dtype(ds, &e.dtype)) {
    if (known_unsupported(ds)) throw bad(str_cat("dtype ", ds, " is not supported by kiln (supported: F32 F64 F16 BF16 I32 I64 U8)"));
    throw bad(str_cat("unknown dtype '", ds, "'"));
  }
  if (!v.contains("shape") || !v["shape"].is_array()) throw bad("missing or non-array 'shape'");
  for (const auto& d : v["shape"]) {
    if (d.is_number_unsigned()) {
      uint64_t u = d.get<uint64_t>();
      if (u > (uint64_t)INT64_MAX) throw bad(str_cat("shape dim ", u, " too large"));
      e.shape.push_back((int64_t)u);
    } else if (d.is_number_integer()) {
      throw bad(str_cat("negative shape dim ", d.get<int64_t>(), " in ", v["shape"].dump()));
    } else {
      throw bad(str_cat("shape must hold non-negative integers, got ", v["shape"].dump()));
    }
  }
  const ojson* off = v.contains("data_offsets") ? &v["data_offsets"] : nullptr;
  if (!off || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    throw bad(str_cat("'data_offsets' must be [begin, end] of non-negative integers, got ",
                      off ? off->dump() : std::string("nothing")));
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.end < e.begin) throw bad(str_cat("data_offsets [", e.begin, ", ", e.end, "] end before begin"));
  uint64_t need = 0;
  if (!checked_nbytes(e.dtype, e.shape, &need))
    throw bad(str_cat("shape ", shape_str(e.shape), " overflows the size limit"));
  if (need != e.end - e.begin)
    throw bad(str_cat("size mismatch: dtype ", ds, " shape ", shape_str(e.shape), " needs ", need,
                      " bytes but data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin));
  return e;
}

}  // namespace

const HostArray* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t.array;
  return nullptr;
}

const HostArray& SafetensorsFile::at(const std::string& name) const {
  const HostArray* a = find(name);
  KILN_CHECK(a, "safetensors: no tensor named '", name, "' (file has ", tensors.size(), " tensors)");
  return *a;
}

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& source) {
  const std::string pre = str_cat(source, ": safetensors: ");
  KILN_CHECK(size >= 8, pre, "file is ", size, " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, data, 8);  // little-endian host (static_assert above)
  KILN_CHECK(n <= kMaxHeader, pre, "header length ", n, " exceeds the 100 MiB limit (corrupt file?)");
  KILN_CHECK(n <= size - 8, pre, "header length ", n, " exceeds the ", size - 8, " bytes after the length field (truncated?)");
  KILN_CHECK(n >= 2, pre, "header length ", n, " too small for a JSON object");
  const char* text = reinterpret_cast<const char*>(data + 8);

  // Parse, rejecting duplicate keys in the top-level object (a later duplicate would silently
  // shadow a tensor otherwise).
  std::set<std::string> seen;
  std::string duplicate;
  ojson::parser_callback_t cb = [&](int depth, ojson::parse_event_t ev, ojson& parsed) {
    if (ev == ojson::parse_event_t::key && depth == 1) {
      std::string k = parsed.get<std::string>();
      if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  ojson header;
  try {
    header = ojson::parse(text, text + n, cb);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(pre, "header is not valid JSON (", e.what(), ")"));
  }
  KILN_CHECK(header.is_object(), pre, "header must be a JSON object, got ", header.type_name());
  KILN_CHECK(duplicate.empty(), pre, "tensor '", duplicate, "' appears twice in the header");

  SafetensorsFile out;
  std::vector<Entry> entries;
  size_t index = 0;
  for (auto it = header.begin(); it != header.end(); ++it, ++index) {
    if (it.key() == "__metadata__") {
      KILN_CHECK(it.value().is_object(), pre, "__metadata__ must be an object of strings");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        KILN_CHECK(m.value().is_string(), pre, "__metadata__ value for '", m.key(), "' must be a string, got ",
                   m.value().dump());
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(source, it.key(), it.value(), index));
  }

  // Bounds and overlap: sort by (begin, end) and walk. Zero-size tensors overlap nothing.
  const uint64_t data_size = size - 8 - n;
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    KILN_CHECK(e.end <= data_size, source, ": safetensors tensor '", e.name, "': data_offsets [", e.begin, ", ",
               e.end, "] out of bounds of the ", data_size, "-byte data block (truncated file?)");
    if (e.end == e.begin) continue;
    if (prev)
      KILN_CHECK(e.begin >= prev->end, source, ": safetensors tensor '", e.name, "': data_offsets [", e.begin,
                 ", ", e.end, "] overlap tensor '", prev->name, "' [", prev->begin, ", ", prev->end, "]");
    prev = &e;
  }

  const uint8_t* block = data + 8 + n;
  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    NamedArray na;
    na.name = e.name;
    na.array.dtype = e.dtype;
    na.array.shape = e.shape;
    na.array.bytes.assign(block + e.begin, block + e.end);
    out.tensors.push_back(std::move(na));
  }
  return out;
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

std::vector<uint8_t> serialize_safetensors(const std::vector<NamedArray>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& kv : metadata) m[kv.first] = kv.second;
    header["__metadata__"] = m;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const NamedArray& t : tensors) {
    KILN_CHECK(!t.name.empty(), "write_safetensors: empty tensor name");
    KILN_CHECK(t.name != "__metadata__", "write_safetensors: '__metadata__' is reserved, not a tensor name");
    KILN_CHECK(names.insert(t.name).second, "write_safetensors: duplicate tensor name '", t.name, "'");
    uint64_t need = 0;
    KILN_CHECK(checked_nbytes(t.array.dtype, t.array.shape, &need), "write_safetensors: tensor '", t.name,
               "': invalid shape ", shape_str(t.array.shape));
    KILN_CHECK(need == t.array.bytes.size(), "write_safetensors: tensor '", t.name, "': ", t.array.bytes.size(),
               " bytes for ", dtype_name(t.array.dtype), " shape ", shape_str(t.array.shape), " (needs ", need, ")");
    ojson e = ojson::object();
    e["dtype"] = safetensors_dtype_name(t.array.dtype);
    e["shape"] = t.array.shape;
    e["data_offsets"] = {offset, offset + need};
    header[t.name] = e;
    offset += need;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data block starts 8-byte aligned
  std::vector<uint8_t> out(8 + text.size() + offset);
  uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  uint8_t* p = out.data() + 8 + text.size();
  for (const NamedArray& t : tensors) {
    if (!t.array.bytes.empty()) std::memcpy(p, t.array.bytes.data(), t.array.bytes.size());
    p += t.array.bytes.size();
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedArray>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  atomic_write_file(path, serialize_safetensors(tensors, metadata));
}

}  // namespace kiln
