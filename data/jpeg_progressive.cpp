// Progressive JPEG decode at 1/4 and 1/8 scale (see jpeg_progressive.h). The layout follows the
// file: markers (tables, frame, scans), one scan decoder per kind of scan (DC first, DC refine,
// AC first, AC refine; ITU T.81 G.1.2), then the reduced IDCT per block and the colour conversion.
// Every "return false" means "let TurboJPEG do it"; none of them is an error report.
#include "data/jpeg_progressive.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace kiln {
namespace {

// Zigzag scan index -> row-major coefficient position (T.81 figure A.6).
constexpr uint8_t kNatural[64] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
                                  12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
                                  35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
                                  58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

constexpr int kFastBits = 9;

struct HuffTable {
  bool defined = false;
  uint16_t fast[1 << kFastBits];  // (code length << 8) | symbol for codes <= kFastBits long; 0: longer
  int32_t maxcode[17];            // largest code of each length, -1 when there is none
  int32_t valoff[17];             // symbol index of a code of length l = code + valoff[l]
  uint8_t vals[256];
  // AC tables: code and magnitude bits together within kFastBits, value in int8 range:
  // (value << 8) | (run << 4) | (bits used); 0 otherwise.
  int16_t fast_ac[1 << kFastBits];
};

inline int extend(uint32_t v, int s) { return v < (1u << (s - 1)) ? (int)v - (1 << s) + 1 : (int)v; }

// Canonical Huffman table from the DHT counts and symbols, with libjpeg's validity rules (at most
// 256 symbols, no all-ones code, DC symbols <= 15). False: let TurboJPEG report the bad table.
bool build_table(HuffTable& t, const uint8_t counts[16], const uint8_t* vals, int nvals, bool dc) {
  int total = 0;
  for (int l = 0; l < 16; ++l) total += counts[l];
  if (total > 256 || total != nvals) return false;
  if (dc)
    for (int i = 0; i < nvals; ++i)
      if (vals[i] > 15) return false;
  std::memcpy(t.vals, vals, (size_t)nvals);
  std::memset(t.fast, 0, sizeof t.fast);
  uint32_t code = 0;
  int p = 0;
  for (int l = 1; l <= 16; ++l) {
    t.valoff[l] = p - (int32_t)code;
    const int cnt = counts[l - 1];
    // libjpeg's rule (the codes of length l must stay below the all-ones code), checked before the
    // codes are entered: an over-full length would index fast[] past its end.
    if (code + (uint32_t)cnt >= (1u << l)) return false;
    for (int i = 0; i < cnt; ++i, ++p, ++code)
      if (l <= kFastBits) {
        const uint32_t first = code << (kFastBits - l), span = 1u << (kFastBits - l);
        for (uint32_t j = 0; j < span; ++j) t.fast[first + j] = (uint16_t)((l << 8) | vals[p]);
      }
    t.maxcode[l] = cnt ? (int32_t)code - 1 : -1;
    code <<= 1;
  }
  std::memset(t.fast_ac, 0, sizeof t.fast_ac);
  if (!dc)
    for (uint32_t p = 0; p < (1u << kFastBits); ++p) {
      const int e = t.fast[p];
      const int len = e >> 8, run = (e & 0xFF) >> 4, size = e & 15;
      if (!e || size == 0 || len + size > kFastBits) continue;
      const int v = extend((p >> (kFastBits - len - size)) & ((1u << size) - 1), size);
      if (v >= -128 && v <= 127) t.fast_ac[p] = (int16_t)(v * 256 + (run << 4) + len + size);
    }
  t.defined = true;
  return true;
}

// MSB-first bit reader over entropy-coded data: removes 0xFF00 stuffing, stops at a marker and
// then feeds zeros, counting them, so a scan that reads past its data is detected (overrun()).
struct BitReader {
  const uint8_t* p = nullptr;
  const uint8_t* end = nullptr;
  uint64_t buf = 0;
  int cnt = 0;          // valid bits at the top of buf
  int pad = 0;          // zero bits fed after the marker (or the end of the file)
  bool marker = false;  // p points at the 0xFF of the marker that ended the data

  void reset(const uint8_t* at, const uint8_t* e) {
    p = at;
    end = e;
    buf = 0;
    cnt = pad = 0;
    marker = false;
  }
  void refill() {
    // Fast path: the bytes needed hold no 0xFF, so they go in with one load.
    const int nb = (64 - cnt) >> 3;
    if (!marker && nb > 0 && end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      w = __builtin_bswap64(w);
      // A zero byte of ~w is a 0xFF of w; the bytes beyond the nb needed are made nonzero.
      const uint64_t inv = ~w | (nb == 8 ? 0 : (~0ull >> (8 * nb)));
      const uint64_t has_ff = (inv - 0x0101010101010101ull) & ~inv & 0x8080808080808080ull;
      if (!has_ff) {
        buf |= (nb == 8 ? w : w >> (64 - 8 * nb)) << (64 - 8 * nb - cnt);
        p += nb;
        cnt += 8 * nb;
        return;
      }
    }
    while (cnt <= 56) {
      uint64_t byte = 0;
      if (!marker) {
        if (p < end && *p != 0xFF) {
          byte = *p++;
        } else if (p < end) {
          const uint8_t* q = p + 1;  // 0xFF: fill bytes, then 0x00 (a stuffed 0xFF) or a marker
          while (q < end && *q == 0xFF) ++q;
          if (q < end && *q == 0) {
            byte = 0xFF;
            p = q + 1;
          } else {
            marker = true;
          }
        } else {
          marker = true;
        }
      }
      if (marker) pad += 8;
      buf |= byte << (56 - cnt);
      cnt += 8;
    }
  }
  bool overrun() const { return cnt < pad; }
  // n in 1..32, with at least n bits present.
  uint32_t take(int n) {
    const uint32_t v = (uint32_t)(buf >> (64 - n));
    buf <<= n;
    cnt -= n;
    return v;
  }
  void skip(int n) {
    buf <<= n;
    cnt -= n;
  }
  uint32_t bit() {
    if (cnt < 1) refill();
    return take(1);
  }
  // One Huffman symbol; false on a code no table entry matches (corrupt data).
  bool decode(const HuffTable& t, int& sym) {
    if (cnt < 32) refill();
    const uint16_t e = t.fast[buf >> (64 - kFastBits)];
    if (e) {
      const int len = e >> 8;
      buf <<= len;
      cnt -= len;
      sym = e & 0xFF;
      return true;
    }
    const uint32_t top = (uint32_t)(buf >> 48);
    for (int l = kFastBits + 1; l <= 16; ++l) {
      const int32_t c = (int32_t)(top >> (16 - l));
      if (c <= t.maxcode[l]) {
        buf <<= l;
        cnt -= l;
        sym = t.vals[c + t.valoff[l]];
        return true;
      }
    }
    return false;
  }
};

// The next marker code at or after p (skipping data bytes, 0xFF fill, stuffed zeros and RSTn),
// with p left just past it. 0 when the file ends first.
int next_marker(const uint8_t*& p, const uint8_t* end) {
  while (p < end) {
    const uint8_t* q = static_cast<const uint8_t*>(std::memchr(p, 0xFF, (size_t)(end - p)));
    if (!q) break;
    while (q < end && *q == 0xFF) ++q;
    if (q >= end) break;
    const int c = *q;
    p = q + 1;
    if (c != 0 && !(c >= 0xD0 && c <= 0xD7)) return c;
  }
  p = end;
  return 0;
}

struct Component {
  int id = 0, h = 1, v = 1, tq = 0;
  int bw = 0, bh = 0;    // blocks per row and rows in the buffer (covers the MCU-padded area)
  int rbw = 0, rbh = 0;  // blocks a non-interleaved scan codes: ceil(component size / 8)
  int s = 1;             // IDCT output size per block: 1, 2 or 4 pixels
  int up = 1;            // horizontal upsampling to output resolution: 2 for 4:2:2 chroma, else 1
  int dw = 0;            // width in pixels at its own resolution (libjpeg's downsampled_width)
  bool used = true;      // the output reads it (luma-only output of a colour file: chroma is not)
  bool keep_ac = false;  // decodes its AC scans (else they are skipped: the IDCT reads only the DC)
  // Coefficient storage, one entry per block (by * bw + bx): the DC in its own array (DC scans
  // then walk 2 bytes per block, not a 128-byte block); for keep_ac components, a mask of the
  // nonzero coefficients (bit = zigzag index; refinement needs to know them all) and only the AC
  // coefficients the reduced IDCT reads (24 of 63 for 2x2, 48 for 4x4) in `slots` per block.
  int16_t* dc = nullptr;
  uint64_t* nz = nullptr;
  int16_t* ac = nullptr;
  int slots = 0;
  int8_t slot[64];       // zigzag index -> slot, -1 when the IDCT does not read it
  int8_t slot_of_pos[64];  // row-major position -> slot (-1: not kept; the DC is not a slot)
  uint64_t used_mask = 0;  // zigzag indices that have a slot
  uint64_t col_ac[8];      // per column, the zigzag indices of its kept rows below row 0
  int64_t dc_pred = 0;
  int coef_bits[64];  // libjpeg's progression state: -1 never coded, else the last Al
  bool q_latched = false;
  uint16_t q[64];  // row-major quantizer, latched at the component's first scan as libjpeg does
  int dc_tbl = 0, ac_tbl = 0;
  size_t index(int bx, int by) const { return (size_t)by * bw + bx; }
};

// Per-thread buffers reused from image to image (a 2560x1600 4:4:4 file at 1/4 needs ~11 MB of
// coefficients and masks; allocating and faulting them in per image cost more than decoding the DC
// scans).
struct Scratch {
  std::vector<int16_t> dc, ac;
  std::vector<uint64_t> nz;
  std::vector<uint8_t> plane[3];
  std::vector<uint8_t> upsampled;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// libjpeg's post-IDCT range limit: index (value & 1023) of a sample centred on 0.
struct RangeLimit {
  uint8_t t[1024];
  RangeLimit() {
    for (int i = 0; i < 1024; ++i) {
      const int v = i < 512 ? i : i - 1024;  // the value as the IDCT computed it, modulo 1024
      // libjpeg's table: [0,128) -> +128, [128,512) -> 255, [512,896) -> 0, [896,1024) -> i-896.
      t[i] = (uint8_t)(i < 128 ? v + 128 : i < 512 ? 255 : i < 896 ? 0 : v + 128);
    }
  }
};
const RangeLimit& range_limit() {
  static const RangeLimit r;
  return r;
}

// YCbCr -> RGB with libjpeg's tables (16-bit fixed point, nearest-integer R and B terms).
struct ColorTables {
  int cr_r[256], cb_b[256];
  int32_t cr_g[256], cb_g[256];
  ColorTables() {
    auto fix = [](double x) { return (int32_t)(x * 65536.0 + 0.5); };
    for (int i = 0; i < 256; ++i) {
      const int32_t x = i - 128;
      cr_r[i] = (int)((fix(1.40200) * x + 32768) >> 16);
      cb_b[i] = (int)((fix(1.77200) * x + 32768) >> 16);
      cr_g[i] = -fix(0.71414) * x;
      cb_g[i] = -fix(0.34414) * x + 32768;
    }
  }
};
const ColorTables& color_tables() {
  static const ColorTables c;
  return c;
}
inline uint8_t clamp255(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

// Reduced inverse DCTs: libjpeg's jidctred.c arithmetic (13-bit constants, 2 extra bits between
// the passes), with its shortcuts for all-zero columns and rows.
//
// libjpeg-turbo runs the 4x4 and 2x2 IDCTs in SSE2 where it can: 16-bit dequantization (pmullw
// wraps), 32-bit sums, pass-1 results saturated to 16 bits, outputs saturated to [0, 255]; its C
// code dequantizes in int and wraps outputs through the range-limit table. On any file made from
// real pixels the two agree with the 64-bit arithmetic here. A corrupt or hostile file can push a
// block outside that common domain (found by fuzz_jpeg_progressive: a dequantized DC of ~40000);
// the IDCTs then report it (InRange::ok false) and the file is left to TurboJPEG, so the result is
// TurboJPEG's whatever path it takes. The domain: every dequantized coefficient and pass-1 value
// within int16, every sum within int32, every descaled output within [-512, 511] (where the
// wrapping table and saturation give the same byte).
constexpr int kConstBits = 13, kPass1Bits = 2;
inline int32_t descale(int64_t x, int n) { return (int32_t)((x + ((int64_t)1 << (n - 1))) >> n); }
struct InRange {
  bool ok = true;
  void i16(int64_t v) { ok &= v >= -32767 && v <= 32767; }
  void i32(int64_t v) { ok &= v >= -2147483647LL && v <= 2147483647LL; }
  int32_t out(int64_t sum, int n) {  // a pass-2 sum descaled to a sample centred on 0
    i32(sum);
    const int32_t x = descale(sum, n);
    ok &= x >= -512 && x <= 511;
    return x;
  }
};

inline uint8_t idct_1x1(int16_t dc_coef, uint16_t q0) {
  const int32_t dc = descale((int32_t)dc_coef * q0, 3);
  return range_limit().t[dc & 1023];
}

// A block as the reduced IDCTs read it: the DC, the kept AC terms (slots), which of them are
// nonzero (zigzag mask) and the component's maps.
struct BlockView {
  int16_t dc;
  const int16_t* a;
  uint64_t nz;
  const int8_t* slot_of_pos;
  const uint64_t* col_ac;
  const uint16_t* q;
  int64_t dq(int row, int col) const {  // dequantized coefficient
    const int pos = row * 8 + col;
    return (int64_t)(pos == 0 ? dc : a[slot_of_pos[pos]]) * q[pos];
  }
  bool col_has_ac(int col) const { return (nz & col_ac[col]) != 0; }
};

// A column or row whose AC terms are all zero takes jidctred.c's shortcut values, which equal
// what the full formulas give.
void idct_2x2(const BlockView& b, uint8_t* out, size_t stride, InRange& r) {
  const uint8_t* rl = range_limit().t;
  int32_t ws[2][8] = {};  // [output row][input column]
  for (int col : {0, 1, 3, 5, 7}) {
    const int64_t top = b.dq(0, col);
    r.i16(top);
    if (!b.col_has_ac(col)) {
      ws[0][col] = ws[1][col] = (int32_t)(top * (1 << kPass1Bits));
      r.i16(ws[0][col]);
      continue;
    }
    const int64_t z1 = b.dq(7, col), z2 = b.dq(5, col), z3 = b.dq(3, col), z4 = b.dq(1, col);
    r.i16(z1), r.i16(z2), r.i16(z3), r.i16(z4);
    const int64_t even = top * (1 << (kConstBits + 2));  // a shift of a negative value is UB in C++17
    const int64_t odd = z1 * -5906 + z2 * 6967 + z3 * -10426 + z4 * 29692;
    r.i32(even + odd), r.i32(even - odd);
    ws[0][col] = descale(even + odd, kConstBits - kPass1Bits + 2);
    ws[1][col] = descale(even - odd, kConstBits - kPass1Bits + 2);
    r.i16(ws[0][col]), r.i16(ws[1][col]);
  }
  for (int row = 0; row < 2; ++row) {
    const int32_t* w = ws[row];
    uint8_t* o = out + row * stride;
    if ((w[1] | w[3] | w[5] | w[7]) == 0) {
      o[0] = o[1] = rl[r.out(w[0], kPass1Bits + 3) & 1023];
      continue;
    }
    const int64_t even = (int64_t)w[0] * (1 << (kConstBits + 2));
    const int64_t odd = (int64_t)w[7] * -5906 + (int64_t)w[5] * 6967 + (int64_t)w[3] * -10426 + (int64_t)w[1] * 29692;
    o[0] = rl[r.out(even + odd, kConstBits + kPass1Bits + 3 + 2) & 1023];
    o[1] = rl[r.out(even - odd, kConstBits + kPass1Bits + 3 + 2) & 1023];
  }
}

void idct_4x4(const BlockView& b, uint8_t* out, size_t stride, InRange& r) {
  const uint8_t* rl = range_limit().t;
  int32_t ws[4][8] = {};
  for (int col : {0, 1, 2, 3, 5, 6, 7}) {
    const int64_t top = b.dq(0, col);
    r.i16(top);
    if (!b.col_has_ac(col)) {
      ws[0][col] = ws[1][col] = ws[2][col] = ws[3][col] = (int32_t)(top * (1 << kPass1Bits));
      r.i16(ws[0][col]);
      continue;
    }
    const int64_t d2 = b.dq(2, col), d6 = b.dq(6, col);
    const int64_t z1 = b.dq(7, col), z2 = b.dq(5, col), z3 = b.dq(3, col), z4 = b.dq(1, col);
    r.i16(d2), r.i16(d6), r.i16(z1), r.i16(z2), r.i16(z3), r.i16(z4);
    const int64_t t0 = top * (1 << (kConstBits + 1));
    const int64_t t2 = d2 * 15137 + d6 * -6270;
    const int64_t t10 = t0 + t2, t12 = t0 - t2;
    const int64_t o0 = z1 * -1730 + z2 * 11893 + z3 * -17799 + z4 * 8697;
    const int64_t o2 = z1 * -4176 + z2 * -4926 + z3 * 7373 + z4 * 20995;
    r.i32(t10 + o2), r.i32(t10 - o2), r.i32(t12 + o0), r.i32(t12 - o0);
    const int n = kConstBits - kPass1Bits + 1;
    ws[0][col] = descale(t10 + o2, n);
    ws[3][col] = descale(t10 - o2, n);
    ws[1][col] = descale(t12 + o0, n);
    ws[2][col] = descale(t12 - o0, n);
    for (int k = 0; k < 4; ++k) r.i16(ws[k][col]);
  }
  for (int row = 0; row < 4; ++row) {
    const int32_t* w = ws[row];
    uint8_t* o = out + row * stride;
    if ((w[1] | w[2] | w[3] | w[5] | w[6] | w[7]) == 0) {
      o[0] = o[1] = o[2] = o[3] = rl[r.out(w[0], kPass1Bits + 3) & 1023];
      continue;
    }
    const int64_t t0 = (int64_t)w[0] * (1 << (kConstBits + 1));
    const int64_t t2 = (int64_t)w[2] * 15137 + (int64_t)w[6] * -6270;
    const int64_t t10 = t0 + t2, t12 = t0 - t2;
    const int64_t z1 = w[7], z2 = w[5], z3 = w[3], z4 = w[1];
    const int64_t o0 = z1 * -1730 + z2 * 11893 + z3 * -17799 + z4 * 8697;
    const int64_t o2 = z1 * -4176 + z2 * -4926 + z3 * 7373 + z4 * 20995;
    const int n = kConstBits + kPass1Bits + 3 + 1;
    o[0] = rl[r.out(t10 + o2, n) & 1023];
    o[3] = rl[r.out(t10 - o2, n) & 1023];
    o[1] = rl[r.out(t12 + o0, n) & 1023];
    o[2] = rl[r.out(t12 - o0, n) & 1023];
  }
}

// Output pixels [x0, x1) of a row of w samples upsampled x2 horizontally, written at out[x]:
// libjpeg's triangle filter when fancy, else replication.
void upsample_h2v1(const uint8_t* in, int w, bool fancy, int x0, int x1, uint8_t* out) {
  for (int x = x0; x < x1; ++x) {
    const int i = x >> 1;
    int v;
    if (!fancy || w <= 2) v = in[i];
    else if (x == 0) v = in[0];
    else if (x == 2 * w - 1) v = in[w - 1];
    else if (x & 1) v = (3 * in[i] + in[i + 1] + 2) >> 2;
    else v = (3 * in[i] + in[i - 1] + 1) >> 2;
    out[x] = (uint8_t)v;
  }
}

class Decoder {
 public:
  Decoder(const uint8_t* data, size_t n, int denom, int channels, const int* roi)
      : p_(data), end_(data + n), denom_(denom), channels_(channels), roi_(roi) {}
  bool run(Image* out);

 private:
  bool read_u16(const uint8_t*& p, int& v) {
    if (end_ - p < 2) return false;
    v = (p[0] << 8) | p[1];
    p += 2;
    return true;
  }
  bool segment(const uint8_t*& body, int& len);  // a marker segment's body and its length
  bool parse_dqt(const uint8_t* b, int len);
  bool parse_dht(const uint8_t* b, int len);
  bool parse_sof2(const uint8_t* b, int len);
  bool parse_sos(const uint8_t* b, int len);
  bool decode_scan();
  bool restart();
  bool decode_dc_mcu(int mx, int my);
  bool decode_dc_block(const HuffTable& t, int64_t& pred, int16_t& dc);
  bool decode_ac_first(const Component& c, int16_t* ac, uint64_t& nz);
  bool decode_ac_refine(const Component& c, int16_t* ac, uint64_t& nz);
  bool finish(Image* out);
  bool prepare_output();
  void color_convert(Image* out);

  const uint8_t* p_;
  const uint8_t* end_;
  int denom_, channels_;
  const int* roi_;

  uint16_t qt_[4][64];
  bool qt_defined_[4] = {false, false, false, false};
  HuffTable dc_[4], ac_[4];
  int restart_interval_ = 0;
  bool frame_ = false, jfif_ = false, adobe_ = false;
  int adobe_transform_ = -1;
  int W_ = 0, H_ = 0, ncomp_ = 0, hmax_ = 1, vmax_ = 1, mcux_ = 0, mcuy_ = 0;
  Component comp_[3];
  int scans_ = 0;

  // Output: size, the window computed, a plane per used component, the blocks the window needs.
  int ow_ = 0, oh_ = 0, x0_ = 0, y0_ = 0, x1_ = 0, y1_ = 0;
  uint8_t* plane_[3] = {nullptr, nullptr, nullptr};
  size_t stride_[3] = {0, 0, 0};
  int bx0_[3], by0_[3], bx1_[3], by1_[3];

  // The current scan.
  int ns_ = 0, sc_[3] = {0, 0, 0};  // component indices in the scan
  int Ss_ = 0, Se_ = 0, Ah_ = 0, Al_ = 0;
  uint32_t eobrun_ = 0;
  int next_rst_ = 0;
  BitReader bits_;
};

bool Decoder::segment(const uint8_t*& body, int& len) {
  if (!read_u16(p_, len) || len < 2 || end_ - p_ < len - 2) return false;
  body = p_;
  len -= 2;
  p_ += len;
  return true;
}

bool Decoder::parse_dqt(const uint8_t* b, int len) {
  while (len > 0) {
    const int pq = b[0] >> 4, tq = b[0] & 15;
    const int need = 1 + 64 * (pq ? 2 : 1);
    if (pq > 1 || tq > 3 || len < need) return false;
    for (int k = 0; k < 64; ++k) {
      const int q = pq ? (b[1 + 2 * k] << 8) | b[2 + 2 * k] : b[1 + k];
      if (q > 32767) return false;  // libjpeg multiplies by it as a 16-bit signed value
      qt_[tq][kNatural[k]] = (uint16_t)q;
    }
    qt_defined_[tq] = true;
    b += need;
    len -= need;
  }
  return true;
}

bool Decoder::parse_dht(const uint8_t* b, int len) {
  while (len > 0) {
    if (len < 17) return false;
    const int tc = b[0] >> 4, th = b[0] & 15;
    if (tc > 1 || th > 3) return false;
    int total = 0;
    for (int l = 0; l < 16; ++l) total += b[1 + l];
    if (len < 17 + total) return false;
    if (!build_table(tc ? ac_[th] : dc_[th], b + 1, b + 17, total, tc == 0)) return false;
    b += 17 + total;
    len -= 17 + total;
  }
  return true;
}

bool Decoder::parse_sof2(const uint8_t* b, int len) {
  if (frame_ || len < 6) return false;
  if (b[0] != 8) return false;  // 12-bit samples
  H_ = (b[1] << 8) | b[2];
  W_ = (b[3] << 8) | b[4];
  ncomp_ = b[5];
  if (H_ == 0 || W_ == 0 || (ncomp_ != 1 && ncomp_ != 3) || len < 6 + 3 * ncomp_) return false;
  for (int i = 0; i < ncomp_; ++i) {
    Component& c = comp_[i];
    c.id = b[6 + 3 * i];
    c.h = b[7 + 3 * i] >> 4;
    c.v = b[7 + 3 * i] & 15;
    c.tq = b[8 + 3 * i];
    if (c.h < 1 || c.h > 4 || c.v < 1 || c.v > 4 || c.tq > 3) return false;
    for (int k = 0; k < 64; ++k) c.coef_bits[k] = -1;
  }
  if (ncomp_ == 1) {
    comp_[0].h = comp_[0].v = 1;  // one component: libjpeg ignores its sampling factors
  } else {
    // 4:4:4, 4:2:2 (luma 2x1) or 4:2:0 (luma 2x2) only.
    for (int i = 1; i < 3; ++i)
      if (comp_[i].h != 1 || comp_[i].v != 1) return false;
    const int lh = comp_[0].h, lv = comp_[0].v;
    if (!(lh == 1 && lv == 1) && !(lh == 2 && lv == 2) && !(lh == 2 && lv == 1)) return false;
  }
  hmax_ = comp_[0].h;
  vmax_ = comp_[0].v;
  mcux_ = (W_ + 8 * hmax_ - 1) / (8 * hmax_);
  mcuy_ = (H_ + 8 * vmax_ - 1) / (8 * vmax_);
  // libjpeg's IDCT size per component: the luma scale, doubled for subsampled chroma as long as
  // that removes upsampling (jdmaster.c), so 4:2:0 chroma at 1/8 takes a 2x2 IDCT.
  const int min_s = 8 / denom_;
  size_t n_dc = 0, n_ac = 0, n_nz = 0;
  for (int i = 0; i < ncomp_; ++i) {
    Component& c = comp_[i];
    int s = min_s;
    while (s < 8 && (hmax_ * min_s) % (c.h * s * 2) == 0 && (vmax_ * min_s) % (c.v * s * 2) == 0) s *= 2;
    c.s = s;
    // Whatever the IDCT size does not absorb is upsampled: only 4:2:2 chroma, horizontally x2.
    c.up = hmax_ * min_s / (c.h * s);
    if ((c.up != 1 && c.up != 2) || vmax_ * min_s != c.v * s) return false;
    c.dw = (int)(((int64_t)W_ * c.h * s + hmax_ * 8 - 1) / (hmax_ * 8));
    c.used = i == 0 || channels_ == 3;
    c.keep_ac = c.used && s > 1;
    const int cw = (W_ * c.h + hmax_ - 1) / hmax_, ch = (H_ * c.v + vmax_ - 1) / vmax_;
    c.rbw = (cw + 7) / 8;
    c.rbh = (ch + 7) / 8;
    c.bw = mcux_ * c.h;
    c.bh = mcuy_ * c.v;
    // The rows and columns of the 8x8 block a reduced IDCT reads (jidctred.c): 2x2 skips the
    // even ones but 0, 4x4 skips 4.
    c.slots = 0;
    c.used_mask = 0;
    for (int col = 0; col < 8; ++col) c.col_ac[col] = 0;
    for (int k = 0; k < 64; ++k) {
      const int row = kNatural[k] / 8, col = kNatural[k] % 8;
      const bool read = s == 2 ? (row == 0 || row % 2 == 1) && (col == 0 || col % 2 == 1) : row != 4 && col != 4;
      c.slot[k] = -1;
      c.slot_of_pos[kNatural[k]] = -1;
      if (k > 0 && c.keep_ac && read) {
        c.slot_of_pos[kNatural[k]] = (int8_t)c.slots;
        c.slot[k] = (int8_t)c.slots++;
        c.used_mask |= 1ull << k;
        if (row > 0) c.col_ac[col] |= 1ull << k;
      }
    }
    const size_t nb = (size_t)c.bw * c.bh;
    n_dc += nb;
    if (c.keep_ac) n_nz += nb, n_ac += nb * (size_t)c.slots;
  }

  Scratch& sc = scratch();
  if (sc.dc.size() < n_dc) sc.dc.resize(n_dc);
  if (sc.nz.size() < n_nz) sc.nz.resize(n_nz);
  if (sc.ac.size() < n_ac) sc.ac.resize(n_ac);
  // Zeroed per image: a coefficient no scan codes is zero.
  // (An empty vector's data() may be null, which memset must not get even for 0 bytes: at 1/8 scale
  // no component keeps AC coefficients, so nz and ac stay empty.)
  if (n_dc) std::memset(sc.dc.data(), 0, n_dc * sizeof(int16_t));
  if (n_nz) std::memset(sc.nz.data(), 0, n_nz * sizeof(uint64_t));
  if (n_ac) std::memset(sc.ac.data(), 0, n_ac * sizeof(int16_t));
  size_t o_dc = 0, o_ac = 0, o_nz = 0;
  for (int i = 0; i < ncomp_; ++i) {
    Component& c = comp_[i];
    const size_t nb = (size_t)c.bw * c.bh;
    c.dc = sc.dc.data() + o_dc;
    o_dc += nb;
    if (c.keep_ac) {
      c.nz = sc.nz.data() + o_nz;
      c.ac = sc.ac.data() + o_ac;
      o_nz += nb;
      o_ac += nb * (size_t)c.slots;
    }
  }
  frame_ = true;
  return true;
}

bool Decoder::parse_sos(const uint8_t* b, int len) {
  if (!frame_ || len < 1) return false;
  ns_ = b[0];
  if (ns_ < 1 || ns_ > ncomp_ || len != 4 + 2 * ns_) return false;
  // libjpeg's lookup (jdmarker.c get_sos): the first frame component with the id whose entry in
  // cur_comp_info is still empty, where cur_comp_info is filled by position in the scan but tested
  // by index in the frame. A scan listing its components out of frame order (ids 1, 3, 2) thus
  // finds a "repeat" and libjpeg stops with a fatal error: such a file is left to TurboJPEG.
  bool taken[3] = {false, false, false};  // cur_comp_info[j] != NULL, for frame index j
  for (int i = 0; i < ns_; ++i) {
    const int id = b[1 + 2 * i];
    int ci = -1;
    for (int j = 0; j < ncomp_ && ci < 0; ++j)
      if (comp_[j].id == id && !taken[j]) ci = j;
    if (ci < 0) return false;
    taken[i] = true;
    for (int j = 0; j < i; ++j)
      if (sc_[j] == ci) return false;
    sc_[i] = ci;
    comp_[ci].dc_tbl = b[2 + 2 * i] >> 4;
    comp_[ci].ac_tbl = b[2 + 2 * i] & 15;
    if (comp_[ci].dc_tbl > 3 || comp_[ci].ac_tbl > 3) return false;
  }
  const uint8_t* t = b + 1 + 2 * ns_;
  Ss_ = t[0];
  Se_ = t[1];
  Ah_ = t[2] >> 4;
  Al_ = t[2] & 15;
  // libjpeg's checks (jdphuff.c); its warnings about the progression are failures here.
  const bool dc = Ss_ == 0;
  if (dc ? Se_ != 0 : (Ss_ > Se_ || Se_ > 63 || ns_ != 1)) return false;
  if (Ah_ != 0 && Al_ != Ah_ - 1) return false;
  if (Al_ > 13) return false;
  int blocks_in_mcu = 0;
  for (int i = 0; i < ns_; ++i) {
    Component& c = comp_[sc_[i]];
    blocks_in_mcu += ns_ > 1 ? c.h * c.v : 1;
    if (!dc && c.coef_bits[0] < 0) return false;
    for (int k = Ss_; k <= Se_; ++k) {
      const int expected = c.coef_bits[k] < 0 ? 0 : c.coef_bits[k];
      if (Ah_ != expected) return false;
      c.coef_bits[k] = Al_;
    }
    if (!c.q_latched) {
      if (!qt_defined_[c.tq]) return false;
      std::memcpy(c.q, qt_[c.tq], sizeof c.q);
      c.q_latched = true;
    }
    if (dc && Ah_ == 0 && !dc_[c.dc_tbl].defined) return false;
    if (!dc && !ac_[c.ac_tbl].defined) return false;
  }
  if (blocks_in_mcu > 10) return false;
  return true;
}

bool Decoder::restart() {
  if (bits_.overrun()) return false;
  const uint8_t* p = bits_.p;
  // The marker must come next (libjpeg would resynchronise with warnings; leave that to it).
  while (p < end_ && *p != 0xFF) ++p;
  while (p < end_ && *p == 0xFF) ++p;
  if (p >= end_ || *p != 0xD0 + next_rst_) return false;
  next_rst_ = (next_rst_ + 1) & 7;
  bits_.reset(p + 1, end_);
  for (int i = 0; i < ncomp_; ++i) comp_[i].dc_pred = 0;
  eobrun_ = 0;
  return true;
}

// One MCU of a DC scan (first or refinement), interleaved (blocks of every component in the
// scan by their sampling factors) or not (one block).
bool Decoder::decode_dc_mcu(int mx, int my) {
  for (int i = 0; i < ns_; ++i) {
    Component& c = comp_[sc_[i]];
    const int nh = ns_ > 1 ? c.h : 1, nv = ns_ > 1 ? c.v : 1;
    for (int by = 0; by < nv; ++by)
      for (int bx = 0; bx < nh; ++bx) {
        int16_t& dc = c.dc[ns_ > 1 ? c.index(mx * c.h + bx, my * c.v + by) : c.index(mx, my)];
        if (!decode_dc_block(dc_[c.dc_tbl], c.dc_pred, dc)) return false;
      }
  }
  return true;
}

// One block of a DC scan: the first pass (a predicted difference, shifted by Al) or a refinement
// bit. pred is the component's predictor (libjpeg fails past the int range). Forced inline: it
// runs once per block, and a call measured ~2% slower on progressive files.
__attribute__((always_inline)) inline bool Decoder::decode_dc_block(const HuffTable& t, int64_t& pred, int16_t& dc) {
  if (Ah_ == 0) {
    int s;
    if (!bits_.decode(t, s)) return false;
    pred += s ? extend(bits_.take(s), s) : 0;
    if (pred > INT32_MAX || pred < INT32_MIN) return false;
    dc = (int16_t)(uint16_t)((uint32_t)pred << Al_);
  } else if (bits_.bit()) {
    dc = (int16_t)(dc | (1 << Al_));
  }
  return true;
}

bool Decoder::decode_ac_first(const Component& c, int16_t* ac, uint64_t& nz) {
  if (eobrun_ > 0) {
    --eobrun_;
    return true;
  }
  const HuffTable& t = ac_[c.ac_tbl];
  for (int k = Ss_; k <= Se_; ++k) {
    if (bits_.cnt < 32) bits_.refill();
    const int f = t.fast_ac[bits_.buf >> (64 - kFastBits)];
    int v;
    if (f) {  // run, code and magnitude bits in one lookup
      k += (f >> 4) & 15;
      bits_.skip(f & 15);
      v = f >> 8;
    } else {
      int rs;
      if (!bits_.decode(t, rs)) return false;
      const int r = rs >> 4, s = rs & 15;
      if (s == 0) {
        if (r == 15) {
          k += 15;  // sixteen zeros (the loop's ++k is the sixteenth)
          continue;
        }
        eobrun_ = 1u << r;
        if (r) eobrun_ += bits_.take(r);
        --eobrun_;
        break;
      }
      k += r;
      v = extend(bits_.take(s), s);
    }
    if (k > Se_) return false;
    const int16_t sv = (int16_t)(uint16_t)((uint32_t)v << Al_);
    if (sv) {
      nz |= 1ull << k;
      if (c.slot[k] >= 0) ac[c.slot[k]] = sv;
    }
  }
  return true;
}

// Refinement scan of one block. nz marks (in zigzag order) the coefficients already nonzero: the
// ones that take a correction bit. Walking the mask instead of the block keeps an end-of-band run,
// which most blocks of a refinement scan are in, from reading 128 bytes per block.
bool Decoder::decode_ac_refine(const Component& c, int16_t* ac, uint64_t& nz) {
  const int p1 = 1 << Al_, m1 = -p1;
  const uint64_t band_end = Se_ == 63 ? ~0ull : (1ull << (Se_ + 1)) - 1;  // bits <= Se
  // Correction bits for the nonzero coefficients with zigzag index in [from, to).
  auto refine_range = [&](int from, int to) {
    uint64_t m = nz & (~0ull << from) & (to >= 64 ? ~0ull : (1ull << to) - 1);
    while (m) {
      const int sl = c.slot[__builtin_ctzll(m)];
      if (bits_.bit() && sl >= 0) {
        int16_t& v = ac[sl];
        if ((v & p1) == 0) v = (int16_t)(v + (v >= 0 ? p1 : m1));
      }
      m &= m - 1;
    }
  };
  int k = Ss_;
  if (eobrun_ == 0) {
    const HuffTable& t = ac_[c.ac_tbl];
    while (k <= Se_) {
      int rs;
      if (!bits_.decode(t, rs)) return false;
      const int r = rs >> 4;
      int s = rs & 15;
      if (s) {
        if (s != 1) return false;
        s = bits_.bit() ? p1 : m1;
      } else if (r != 15) {
        eobrun_ = 1u << r;
        if (r) {
          if (bits_.cnt < r) bits_.refill();
          eobrun_ += bits_.take(r);
        }
        break;
      }
      // Skip r zero-history coefficients (the nonzero ones passed take correction bits) and stop
      // at the next zero one: there goes s (a ZRL, s = 0, just skips sixteen).
      uint64_t zeros = ~nz & (~0ull << k) & band_end;
      for (int i = 0; i < r && zeros; ++i) zeros &= zeros - 1;
      const int target = zeros ? __builtin_ctzll(zeros) : Se_ + 1;
      refine_range(k, target);
      k = target;
      if (s) {
        if (k > Se_) return false;
        nz |= 1ull << k;
        if (c.slot[k] >= 0) ac[c.slot[k]] = (int16_t)s;
      }
      ++k;
    }
  }
  if (eobrun_ > 0) {
    if (k <= Se_) refine_range(k, Se_ + 1);
    --eobrun_;
  }
  return true;
}

bool Decoder::decode_scan() {
  bits_.reset(p_, end_);
  eobrun_ = 0;
  next_rst_ = 0;
  for (int i = 0; i < ns_; ++i) comp_[sc_[i]].dc_pred = 0;
  int todo = restart_interval_;
  auto before_mcu = [&]() {
    if (restart_interval_ == 0) return true;
    if (todo == 0) {
      if (!restart()) return false;
      todo = restart_interval_;
    }
    --todo;
    return true;
  };
  if (Ss_ == 0) {
    const bool inter = ns_ > 1;
    const int nx = inter ? mcux_ : comp_[sc_[0]].rbw, ny = inter ? mcuy_ : comp_[sc_[0]].rbh;
    if (restart_interval_ == 0 && (!inter || (hmax_ == 1 && vmax_ == 1))) {
      // One block per component per MCU, no restarts: straight loops over the DC arrays, with
      // the predictors and table pointers in locals (a store to a member int could alias the bit
      // reader's count).
      int16_t* dcs[3];
      const HuffTable* tabs[3];
      int bws[3];
      int64_t pred[3] = {0, 0, 0};
      for (int i = 0; i < ns_; ++i) {
        dcs[i] = comp_[sc_[i]].dc;
        tabs[i] = &dc_[comp_[sc_[i]].dc_tbl];
        bws[i] = comp_[sc_[i]].bw;
      }
      for (int my = 0; my < ny; ++my)
        for (int mx = 0; mx < nx; ++mx)
          for (int i = 0; i < ns_; ++i)
            if (!decode_dc_block(*tabs[i], pred[i], dcs[i][(size_t)my * bws[i] + mx])) return false;
    } else {
      for (int my = 0; my < ny; ++my)
        for (int mx = 0; mx < nx; ++mx)
          if (!before_mcu() || !decode_dc_mcu(mx, my)) return false;
    }
  } else {
    Component& c = comp_[sc_[0]];
    for (int by = 0; by < c.rbh; ++by)
      for (int bx = 0; bx < c.rbw; ++bx) {
        if (!before_mcu()) return false;
        const size_t b = c.index(bx, by);
        int16_t* ac = c.ac + b * (size_t)c.slots;
        if (!(Ah_ == 0 ? decode_ac_first(c, ac, c.nz[b]) : decode_ac_refine(c, ac, c.nz[b]))) return false;
      }
  }
  if (bits_.overrun()) return false;
  p_ = bits_.p;  // at the marker that ended the data, or before padding the reader did not need
  return true;
}

bool Decoder::run(Image* out) {
  if (end_ - p_ < 2 || p_[0] != 0xFF || p_[1] != 0xD8) return false;
  p_ += 2;
  for (;;) {
    const int m = next_marker(p_, end_);
    const uint8_t* b = nullptr;
    int len = 0;
    switch (m) {
      case 0: return false;  // no EOI: truncated
      case 0xD9: return scans_ > 0 && finish(out);
      case 0xC2:
        if (!segment(b, len) || !parse_sof2(b, len)) return false;
        break;
      case 0xC4:
        if (!segment(b, len) || !parse_dht(b, len)) return false;
        break;
      case 0xDB:
        if (!segment(b, len) || !parse_dqt(b, len)) return false;
        break;
      case 0xDD: {
        if (!segment(b, len) || len != 2) return false;
        restart_interval_ = (b[0] << 8) | b[1];
        break;
      }
      case 0xDA: {
        if (!segment(b, len) || !parse_sos(b, len)) return false;
        ++scans_;
        // A scan whose coefficients the output never reads is skipped unread: AC scans of a
        // component decoded at 1x1 (the DC is all its IDCT uses) or of an unused component.
        const Component& c0 = comp_[sc_[0]];
        if (Ss_ > 0 && !c0.keep_ac) break;  // next_marker skips its data
        if (!decode_scan()) return false;
        break;
      }
      case 0xE0: case 0xEE: {
        if (!segment(b, len)) return false;
        if (m == 0xE0 && len >= 14 && std::memcmp(b, "JFIF\0", 5) == 0) jfif_ = true;
        if (m == 0xEE && len >= 12 && std::memcmp(b, "Adobe", 5) == 0) {
          adobe_ = true;
          adobe_transform_ = b[11];
        }
        break;
      }
      default:
        if ((m >= 0xE1 && m <= 0xEF) || m == 0xFE) {  // other APPn, COM
          if (!segment(b, len)) return false;
          break;
        }
        return false;  // another frame type (baseline, arithmetic, lossless), DNL, DAC, junk
    }
  }
}

bool Decoder::finish(Image* out) {
  if (!frame_) return false;
  // Colour space as libjpeg guesses it: RGB-coded files are left to TurboJPEG.
  if (ncomp_ == 3) {
    if (jfif_) {
    } else if (adobe_) {
      if (adobe_transform_ != 1) return false;
    } else if (comp_[0].id == 82 && comp_[1].id == 71 && comp_[2].id == 66) {
      return false;
    }
  }
  // Every coefficient of every component refined to the last bit: libjpeg then does not smooth.
  for (int i = 0; i < ncomp_; ++i)
    for (int k = 0; k < 64; ++k)
      if (comp_[i].coef_bits[k] != 0) return false;

  if (!prepare_output()) return false;
  InRange range;  // false once a block leaves the domain where libjpeg's C and SIMD IDCTs agree
  for (int i = 0; i < ncomp_; ++i) {
    const Component& c = comp_[i];
    if (!c.used) continue;
    for (int by = by0_[i]; by < by1_[i]; ++by)
      for (int bx = bx0_[i]; bx < bx1_[i]; ++bx) {
        const size_t b = c.index(bx, by);
        uint8_t* o = plane_[i] + (size_t)by * c.s * stride_[i] + (size_t)bx * c.s;
        const uint64_t nz = c.s > 1 ? c.nz[b] & c.used_mask : 0;
        if (nz == 0) {
          // No AC term the IDCT reads: every output pixel is the 1x1 value (jidctred.c's
          // all-zero shortcuts compute exactly this).
          // At 1/8 scale TurboJPEG runs this same C arithmetic, for any value; at 1/4 and 1/2 the
          // SIMD IDCT's 16-bit steps must not have wrapped or saturated.
          if (c.s > 1) {
            const int64_t dq = (int64_t)c.dc[b] * c.q[0];
            range.i16(dq * (1 << kPass1Bits));
            range.out(dq, 3);
          }
          const uint8_t v = idct_1x1(c.dc[b], c.q[0]);
          for (int r = 0; r < c.s; ++r) std::memset(o + r * stride_[i], v, (size_t)c.s);
          continue;
        }
        const BlockView v{c.dc[b], c.ac + b * (size_t)c.slots, nz, c.slot_of_pos, c.col_ac, c.q};
        if (c.s == 2) idct_2x2(v, o, stride_[i], range);
        else idct_4x4(v, o, stride_[i], range);
      }
  }
  if (!range.ok) return false;
  color_convert(out);
  return true;
}

bool Decoder::prepare_output() {
  ow_ = (W_ + denom_ - 1) / denom_;
  oh_ = (H_ + denom_ - 1) / denom_;
  x0_ = 0, y0_ = 0, x1_ = ow_, y1_ = oh_;
  if (roi_) {
    x0_ = std::max(0, roi_[0]);
    y0_ = std::max(0, roi_[1]);
    x1_ = std::min(ow_, roi_[2]);
    y1_ = std::min(oh_, roi_[3]);
    if (x1_ <= x0_ || y1_ <= y0_) x0_ = y0_ = x1_ = y1_ = 0;
  }
  // One plane per used component at its own resolution: the output's, or half its width for 4:2:2
  // chroma (upsampled in color_convert, which reads one column beyond each output pixel's own).
  for (int i = 0; i < ncomp_; ++i) {
    const Component& c = comp_[i];
    bx0_[i] = by0_[i] = bx1_[i] = by1_[i] = 0;
    if (!c.used) continue;
    const int pw = c.up == 1 ? ow_ : c.dw;
    const int nbx = (pw + c.s - 1) / c.s, nby = (oh_ + c.s - 1) / c.s;
    if (nbx > c.bw || nby > c.bh || (c.up == 2 && 2 * c.dw < ow_)) return false;
    const int cx0 = c.up == 1 ? x0_ : std::max(0, x0_ / 2 - 1);
    const int cx1 = c.up == 1 ? x1_ : std::min(c.dw, (x1_ + 1) / 2 + 1);
    bx0_[i] = cx0 / c.s;
    by0_[i] = y0_ / c.s;
    bx1_[i] = (cx1 + c.s - 1) / c.s;
    by1_[i] = (y1_ + c.s - 1) / c.s;
    stride_[i] = (size_t)nbx * c.s;
    std::vector<uint8_t>& pl = scratch().plane[i];
    if (pl.size() < stride_[i] * nby * c.s) pl.resize(stride_[i] * nby * c.s);
    plane_[i] = pl.data();
  }
  return true;
}

void Decoder::color_convert(Image* out) {
  const int ow = ow_, x0 = x0_, x1 = x1_;
  out->w = ow_;
  out->h = oh_;
  out->c = channels_;
  out->px.assign((size_t)ow_ * oh_ * channels_, 0);
  const ColorTables& ct = color_tables();
  for (int y = y0_; y < y1_; ++y) {
    const uint8_t* Y = plane_[0] + y * stride_[0];
    uint8_t* o = out->px.data() + ((size_t)y * ow + x0) * channels_;
    if (channels_ == 1) {
      std::memcpy(o, Y + x0, (size_t)(x1 - x0));
    } else if (ncomp_ == 1) {
      for (int x = x0; x < x1; ++x, o += 3) o[0] = o[1] = o[2] = Y[x];
    } else {
      const uint8_t* Cb = plane_[1] + y * stride_[1];
      const uint8_t* Cr = plane_[2] + y * stride_[2];
      if (comp_[1].up == 2) {
        // libjpeg's h2v1 upsampling into rows at output resolution: "fancy" (a 3:1 triangle, the
        // end columns replicated) except at 1/8 scale and for rows of 2 pixels or less, where it
        // replicates.
        std::vector<uint8_t>& rows = scratch().upsampled;
        rows.resize(2 * (size_t)ow);
        const bool fancy = denom_ < 8;
        upsample_h2v1(Cb, comp_[1].dw, fancy, x0, x1, rows.data());
        upsample_h2v1(Cr, comp_[2].dw, fancy, x0, x1, rows.data() + ow);
        Cb = rows.data();
        Cr = rows.data() + ow;
      }
      for (int x = x0; x < x1; ++x, o += 3) {
        const int yy = Y[x], cb = Cb[x], cr = Cr[x];
        o[0] = clamp255(yy + ct.cr_r[cr]);
        o[1] = clamp255(yy + (int)((ct.cb_g[cb] + ct.cr_g[cr]) >> 16));
        o[2] = clamp255(yy + ct.cb_b[cb]);
      }
    }
  }
}

}  // namespace

bool decode_jpeg_progressive_scaled(const uint8_t* data, size_t n, int denom, int channels, Image* out,
                                    const int* roi) {
  if ((denom != 4 && denom != 8) || (channels != 1 && channels != 3)) return false;
  Decoder d(data, n, denom, channels, roi);
  return d.run(out);
}

bool jpeg_is_progressive(const uint8_t* data, size_t n) {
  if (n < 4 || data[0] != 0xFF || data[1] != 0xD8) return false;
  const uint8_t* p = data + 2;
  const uint8_t* end = data + n;
  for (;;) {
    const int m = next_marker(p, end);
    if (m == 0 || m == 0xDA || m == 0xD9) return false;
    if (m == 0xC2) return true;
    if ((m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC)) return false;  // another SOF
    if (end - p < 2) return false;
    const int len = (p[0] << 8) | p[1];
    if (len < 2 || end - p < len) return false;
    p += len;
  }
}

}  // namespace kiln
