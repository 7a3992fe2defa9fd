// .npy header parsing (a tiny reader for the Python dict literal numpy writes) and writing.
#include "engine/io/npy.h"

#include <cctype>
#include <cstring>

#include "engine/io/atomic_file.h"
#include "engine/io/file_bytes.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "kiln io assumes a little-endian host");

namespace kiln {

namespace {

const char kMagic[] = "\x93NUMPY";  // 6 bytes

// Parsed header values. The dict literal is e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
struct NpyHeader {
  std::string descr;
  bool have_descr = false, have_order = false, have_shape = false;
  bool fortran = false;
  Shape shape;
};

// Recursive-descent reader for the subset of Python literals numpy uses in headers.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& source) : s_(text), src_(source) {}

  NpyHeader parse() {
    NpyHeader h;
    skip();
    expect('{');
    skip();
    while (peek() != '}') {
      std::string key = string_lit();
      skip();
      expect(':');
      skip();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"')
          fail("'descr' is not a simple type string (structured dtypes are not supported)");
        h.descr = string_lit();
        h.have_descr = true;
      } else if (key == "fortran_order") {
        h.fortran = bool_lit();
        h.have_order = true;
      } else if (key == "shape") {
        h.shape = tuple_lit();
        h.have_shape = true;
      } else {
        fail("unexpected key '" + key + "'");
      }
      skip();
      if (peek() == ',') {
        ++i_;
        skip();
      } else if (peek() != '}') {
        fail("expected ',' or '}'");
      }
    }
    ++i_;
    skip();
    if (i_ != s_.size()) fail("trailing characters after the header dict");
    if (!h.have_descr || !h.have_order || !h.have_shape)
      fail("header must contain 'descr', 'fortran_order' and 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Error(str_cat(src_, ": npy: malformed header: ", why, " at offset ", i_, " in \"", s_, "\""));
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip() {
    while (i_ < s_.size() && std::isspace((unsigned char)s_[i_])) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string_lit() {
    char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string");
    ++i_;
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) ++i_;
    if (i_ >= s_.size()) fail("unterminated string");
    return s_.substr(start, i_++ - start);
  }
  bool bool_lit() {
    if (s_.compare(i_, 4, "True") == 0) { i_ += 4; return true; }
    if (s_.compare(i_, 5, "False") == 0) { i_ += 5; return false; }
    fail("expected True or False");
  }
  Shape tuple_lit() {
    Shape out;
    expect('(');
    skip();
    while (peek() != ')') {
      if (!std::isdigit((unsigned char)peek())) fail("shape must be a tuple of non-negative integers");
      int64_t v = 0;
      while (std::isdigit((unsigned char)peek())) {
        if (v > (INT64_MAX - 9) / 10) fail("shape dimension too large");
        v = v * 10 + (s_[i_++] - '0');
      }
      if (peek() == 'L') ++i_;  // Python 2 long suffix in old files
      out.push_back(v);
      skip();
      if (peek() == ',') { ++i_; skip(); }
      else if (peek() != ')') fail("expected ',' or ')' in shape");
    }
    ++i_;
    return out;
  }

  const std::string& s_;
  const std::string& src_;
  size_t i_ = 0;
};

// Maps a numpy type string to a kiln dtype, or throws with the reason.
DType descr_to_dtype(const std::string& d, const std::string& source) {
  if (d == "<f4") return DType::f32;
  if (d == "<f8") return DType::f64;
  if (d == "<f2") return DType::f16;
  if (d == "<i8") return DType::i64;
  if (d == "<i4") return DType::i32;
  if (d == "|u1" || d == "<u1" || d == "u1") return DType::u8;
  std::string why = "unsupported dtype '" + d + "'";
  if (!d.empty() && d[0] == '>') why += " (big-endian; save it little-endian, e.g. a.astype('<f4'))";
  throw Error(str_cat(source, ": npy: ", why, "; supported: <f4 <f8 <f2 <i8 <i4 |u1"));
}

const char* dtype_to_descr(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::f16: return "<f2";
    case DType::i64: return "<i8";
    case DType::i32: return "<i4";
    case DType::u8: return "|u1";
    case DType::bf16: return nullptr;
  }
  return nullptr;
}

}  // namespace

HostArray parse_npy(const uint8_t* data, size_t size, const std::string& source) {
  const std::string pre = str_cat(source, ": npy: ");
  KILN_CHECK(size >= 10, pre, "file is ", size, " bytes, too short for an npy header");
  KILN_CHECK(std::memcmp(data, kMagic, 6) == 0, pre, "bad magic (not a .npy file)");
  const int major = data[6], minor = data[7];
  KILN_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, pre, "unsupported format version ", major,
             ".", minor);
  size_t len_bytes = major == 1 ? 2 : 4;
  KILN_CHECK(size >= 8 + len_bytes, pre, "truncated header length");
  uint64_t hlen = major == 1 ? (uint64_t)(data[8] | (data[9] << 8))
                             : (uint64_t)data[8] | ((uint64_t)data[9] << 8) | ((uint64_t)data[10] << 16) |
                                   ((uint64_t)data[11] << 24);
  const size_t hstart = 8 + len_bytes;
  KILN_CHECK(hlen <= size - hstart, pre, "header length ", hlen, " exceeds the file (", size, " bytes; truncated?)");
  std::string text(reinterpret_cast<const char*>(data + hstart), (size_t)hlen);
  NpyHeader h = HeaderParser(text, source).parse();
  KILN_CHECK(!h.fortran, pre, "fortran_order=True is not supported (save a C-ordered array, np.ascontiguousarray)");
  HostArray a;
  a.dtype = descr_to_dtype(h.descr, source);
  a.shape = h.shape;
  uint64_t need = 0;
  KILN_CHECK(checked_nbytes(a.dtype, a.shape, &need), pre, "shape ", shape_str(a.shape), " overflows");
  const uint64_t have = size - hstart - hlen;
  KILN_CHECK(have >= need, pre, "data truncated: ", h.descr, " shape ", shape_str(a.shape), " needs ", need,
             " bytes, file has ", have);
  KILN_CHECK(have == need, pre, have - need, " unexpected trailing bytes after the ", need, "-byte array");
  a.bytes.assign(data + hstart + hlen, data + hstart + hlen + need);
  return a;
}

HostArray read_npy(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_npy(bytes.data(), bytes.size(), path);
}

std::vector<uint8_t> serialize_npy(const HostArray& a) {
  const char* descr = dtype_to_descr(a.dtype);
  KILN_CHECK(descr, "write_npy: dtype ", dtype_name(a.dtype), " has no numpy equivalent (convert to f32 first)");
  uint64_t need = 0;
  KILN_CHECK(checked_nbytes(a.dtype, a.shape, &need) && need == a.bytes.size(), "write_npy: ", a.bytes.size(),
             " bytes for ", dtype_name(a.dtype), " shape ", shape_str(a.shape));
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape[i]);
  shape += a.shape.size() == 1 ? ",)" : ")";  // numpy spells a 1-d shape "(3,)"
  std::string dict = str_cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Pad with spaces and end with '\n' so the data starts at a multiple of 64 bytes (numpy's rule).
  int major = 1;
  size_t pre = 10;
  size_t total = pre + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  if (padded - pre > 65535) {
    major = 2;
    pre = 12;
    total = pre + dict.size() + 1;
    padded = (total + 63) / 64 * 64;
  }
  dict.append(padded - total, ' ');
  dict.push_back('\n');
  const uint64_t hlen = dict.size();
  std::vector<uint8_t> out(pre + hlen + need);
  std::memcpy(out.data(), kMagic, 6);
  out[6] = (uint8_t)major;
  out[7] = 0;
  for (size_t i = 0; i < pre - 8; ++i) out[8 + i] = (uint8_t)(hlen >> (8 * i));
  std::memcpy(out.data() + pre, dict.data(), hlen);
  if (need) std::memcpy(out.data() + pre + hlen, a.bytes.data(), need);
  return out;
}

void write_npy(const std::string& path, const HostArray& a) { atomic_write_file(path, serialize_npy(a)); }

}  // namespace kiln
