// The CPU elementwise kernels' contiguous bf16 rows (kernels/cpu/elementwise.cpp: unary, binary with both
// operands contiguous or one a broadcast scalar, and the f32 <-> bf16 casts), compiled per instruction set
// and dispatched by cpu_isa(): at every level this machine has, each result is bit for bit the scalar
// formula (half.h's conversions around elementwise_math.h's f32 math), on lengths that are no multiple of any
// vector width (1 .. 70001, the longest split across threads in chunks) and on NaN (quiet, signalling,
// negative), +-inf, -0, subnormals, the largest finite values (x3 overflows) and ties of the rounding;
// where both operands of a binary op are NaN, only that the result is a NaN (its payload is the hardware's).
#include <doctest/doctest.h>

#include <cstdint>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/half.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/elementwise.h"
#include "support/cpu_paths.h"

using namespace kiln;
using kiln::test::IsaGuard;
using cpu::CpuIsa;

namespace {

std::vector<CpuIsa> levels() {  // those this CPU supports (the bf16 levels run the avx512 rows)
  std::vector<CpuIsa> v = {CpuIsa::baseline};
  for (CpuIsa l : {CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16})
    if ((int)cpu::cpu_isa_supported() >= (int)l) v.push_back(l);
  return v;
}

const int64_t kLengths[] = {1, 7, 15, 16, 17, 31, 33, 69, 1000, 70001};

// n bf16 patterns: the specials every 3rd value (so each lands on every lane position), the rest a
// permutation of all 2^16 patterns (odd multiplier), offset by `seed` so x and y differ.
std::vector<uint16_t> bf16_data(int64_t n, uint32_t seed) {
  static const uint16_t special[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1, 0x0001,
                                     0x8001, 0x7f7f, 0xff7f, 0x0080, 0x3f80, 0xbf80, 0x007f};
  const int ns = (int)(sizeof special / sizeof special[0]);
  std::vector<uint16_t> v((size_t)n);
  for (int64_t i = 0; i < n; ++i)
    v[(size_t)i] = i % 3 == 0 ? special[(i / 3 + seed) % ns] : (uint16_t)((uint32_t)(i + seed) * 40503u);
  return v;
}

StridedOperand operand(void* p, DType dt, int64_t stride) {
  StridedOperand o;
  o.data = static_cast<char*>(p), o.dtype = dt, o.strides[0] = stride;
  return o;
}

LoopShape shape1(int64_t n) {
  LoopShape s;
  s.ndim = 1, s.sizes[0] = n;
  return s;
}

float f(uint16_t b) { return bf16_bits_to_float(b); }

// How many of the n outputs differ from want(i) in their bits.
template <typename F>
int64_t mismatches(const std::vector<uint16_t>& out, F want) {
  int64_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) bad += out[i] != want(i);
  return bad;
}

}  // namespace

TEST_CASE("elementwise bf16 rows: unary ops give the scalar formula's bits at every level") {
  struct U {
    UnaryOp op;
    float a, b;
    const char* name;
  };
  const U ops[] = {{UnaryOp::relu, 0, 0, "relu"},           {UnaryOp::neg, 0, 0, "neg"},
                   {UnaryOp::abs, 0, 0, "abs"},             {UnaryOp::mul_scalar, 3, 0, "mul_scalar 3"},
                   {UnaryOp::add_scalar, 0.5f, 0, "add_scalar 0.5"}, {UnaryOp::exp, 0, 0, "exp"},
                   {UnaryOp::clamp, -1, 2, "clamp -1 2"}};
  for (CpuIsa isa : levels()) {
    IsaGuard g(isa);
    for (const U& u : ops)
      for (int64_t n : kLengths) {
        const std::vector<uint16_t> x = bf16_data(n, 1);
        std::vector<uint16_t> out((size_t)n, 0x1234);
        cpu::unary(u.op, shape1(n), operand(out.data(), DType::bf16, 1),
                   operand(const_cast<uint16_t*>(x.data()), DType::bf16, 1), u.a, u.b);
        INFO(std::string(cpu::cpu_isa_name(isa)), " ", std::string(u.name), " n ", n);
        CHECK(mismatches(out, [&](size_t i) {
                return float_to_bf16_bits(unary_math<float>(u.op, f(x[i]), u.a, u.b));
              }) == 0);
      }
  }
}

TEST_CASE("elementwise bf16 rows: binary ops, both contiguous or one a broadcast scalar, give the scalar formula's bits at every level") {
  struct B {
    BinaryOp op;
    float a;
    const char* name;
  };
  const B ops[] = {{BinaryOp::add, 1, "add"},          {BinaryOp::add, 0.5f, "add alpha 0.5"},
                   {BinaryOp::sub, 1, "sub"},          {BinaryOp::mul, 1, "mul"},
                   {BinaryOp::maximum, 1, "maximum"},  {BinaryOp::relu_grad, 1, "relu_grad"}};
  for (CpuIsa isa : levels()) {
    IsaGuard g(isa);
    for (const B& b : ops)
      for (int64_t n : kLengths)
        for (int mode = 0; mode < 3; ++mode) {  // 0 both contiguous, 1 y a scalar, 2 x a scalar
          const std::vector<uint16_t> x = bf16_data(n, 2), y = bf16_data(n, 7);
          // the broadcast scalar: a finite value, then NaN and -0 (each mode and op sees each of them)
          const uint16_t scalar = n % 3 == 0 ? 0x7fc1 : n % 3 == 1 ? 0xc040 : 0x8000;
          std::vector<uint16_t> xs = x, ys = y;
          if (mode == 1) ys.assign(1, scalar);
          if (mode == 2) xs.assign(1, scalar);
          std::vector<uint16_t> out((size_t)n, 0x1234);
          cpu::binary(b.op, shape1(n), operand(out.data(), DType::bf16, 1),
                      operand(xs.data(), DType::bf16, mode == 2 ? 0 : 1),
                      operand(ys.data(), DType::bf16, mode == 1 ? 0 : 1), b.a);
          INFO(std::string(cpu::cpu_isa_name(isa)), " ", std::string(b.name), " mode ", mode, " n ", n);
          // Both operands NaN: IEEE leaves which payload comes out to the hardware's operand order (x86 takes
          // the first source, and the compiler may swap a commutative op's operands, before this change as
          // after: the scalar baseline loop already did), so there only "a NaN" is checked.
          int64_t bad = 0;
          for (int64_t i = 0; i < n; ++i) {
            const float xv = f(mode == 2 ? xs[0] : xs[(size_t)i]), yv = f(mode == 1 ? ys[0] : ys[(size_t)i]);
            const uint16_t want = float_to_bf16_bits(binary_math<float>(b.op, xv, yv, b.a));
            const uint16_t got = out[(size_t)i];
            bad += std::isnan(xv) && std::isnan(yv) ? (got & 0x7fff) <= 0x7f80 : got != want;
          }
          CHECK(bad == 0);
        }
  }
}

TEST_CASE("elementwise bf16 rows: f32 <-> bf16 casts give half.h's bits at every level") {
  for (CpuIsa isa : levels()) {
    IsaGuard g(isa);
    for (int64_t n : kLengths) {
      // f32 on, beside and halfway between bf16 values (ties to even both ways), from the bf16 patterns
      const std::vector<uint16_t> hi = bf16_data(n, 3);
      static const uint32_t low[] = {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x0001u};
      std::vector<float> src((size_t)n);
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t u = ((uint32_t)hi[(size_t)i] << 16) | low[i % 6];
        std::memcpy(&src[(size_t)i], &u, 4);
      }
      std::vector<uint16_t> down((size_t)n, 0x1234);
      cpu::copy(shape1(n), operand(down.data(), DType::bf16, 1), operand(src.data(), DType::f32, 1));
      INFO(std::string(cpu::cpu_isa_name(isa)), " n ", n);
      CHECK(mismatches(down, [&](size_t i) { return float_to_bf16_bits(src[i]); }) == 0);
      std::vector<float> up((size_t)n, -1.0f);
      cpu::copy(shape1(n), operand(up.data(), DType::f32, 1), operand(const_cast<uint16_t*>(hi.data()), DType::bf16, 1));
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float want = bf16_bits_to_float(hi[(size_t)i]);
        bad += std::memcmp(&up[(size_t)i], &want, 4) != 0;
      }
      CHECK(bad == 0);
    }
  }
}
