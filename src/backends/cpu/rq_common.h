// backends/cpu/rq_common.h — helpers shared by the CPU kernel files of the "rnn_quant" families
// (quant.cpp, rnn.cpp, loss.cpp, roi.cpp, training.cpp, tfidf.cpp): element access in double for every
// numeric dtype kiln holds (small floats and 4-bit integers included), and the per-file hooks.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu::rq {

void register_quant(KernelRegistry& r);
void register_rnn(KernelRegistry& r);
void register_loss(KernelRegistry& r);
void register_roi(KernelRegistry& r);
void register_training(KernelRegistry& r);
void register_text(KernelRegistry& r);  // TfIdfVectorizer, BitCast (tfidf.cpp)

// ---- small floats held as one code per byte (float8 variants, float4 e2m1 in the low nibble,
// float8 e8m0). Round to nearest even; see f32_to_small().
enum class SmallFloat { kE4M3FN, kE4M3FNUZ, kE5M2, kE5M2FNUZ, kE2M1 };

struct SmallFloatFormat {
  int mbits;
  int bias;
  uint8_t sign;     // sign bit
  uint8_t max_mag;  // largest finite magnitude code
  bool fnuz;        // 0x80 is the only NaN, no negative zero
};

inline SmallFloatFormat small_float_format(SmallFloat f) {
  switch (f) {
    case SmallFloat::kE4M3FN: return {3, 7, 0x80, 0x7e, false};
    case SmallFloat::kE4M3FNUZ: return {3, 8, 0x80, 0x7f, true};
    case SmallFloat::kE5M2: return {2, 15, 0x80, 0x7b, false};
    case SmallFloat::kE5M2FNUZ: return {2, 16, 0x80, 0x7f, true};
    case SmallFloat::kE2M1: return {1, 1, 0x08, 0x07, false};
  }
  return {3, 7, 0x80, 0x7e, false};
}

// The small float kind of a dtype; false when `dt` is none.
inline bool small_float_of(DataType dt, SmallFloat* f) {
  switch (dt) {
    case DataType::kFloat8E4M3FN: *f = SmallFloat::kE4M3FN; return true;
    case DataType::kFloat8E4M3FNUZ: *f = SmallFloat::kE4M3FNUZ; return true;
    case DataType::kFloat8E5M2: *f = SmallFloat::kE5M2; return true;
    case DataType::kFloat8E5M2FNUZ: *f = SmallFloat::kE5M2FNUZ; return true;
    case DataType::kFloat4E2M1: *f = SmallFloat::kE2M1; return true;
    default: return false;
  }
}

inline float small_to_f32(uint8_t code, SmallFloat f) {
  const SmallFloatFormat s = small_float_format(f);
  if (s.fnuz && code == 0x80) return NAN;
  const bool neg = (code & s.sign) != 0;
  const uint32_t mag = code & (s.sign - 1);
  if (f == SmallFloat::kE4M3FN && mag == 0x7f) return NAN;
  if (f == SmallFloat::kE5M2 && mag >= 0x7c) return mag == 0x7c ? (neg ? -INFINITY : INFINITY) : NAN;
  const uint32_t e = mag >> s.mbits, m = mag & ((1u << s.mbits) - 1);
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), 1 - s.bias - s.mbits)
                         : std::ldexp(static_cast<float>(m | (1u << s.mbits)), static_cast<int>(e) - s.bias - s.mbits);
  return neg ? -v : v;
}

// float → small float, rounding to nearest even. Values beyond the largest finite one (after
// rounding) and infinities become ±max when `saturate`, else the format's overflow value (NaN, or
// ±inf for E5M2). E2M1 has no NaN or inf and always saturates.
inline uint8_t f32_to_small(float x, SmallFloat f, bool saturate) {
  const SmallFloatFormat s = small_float_format(f);
  const uint8_t sign = std::signbit(x) ? s.sign : 0;
  if (f == SmallFloat::kE2M1) saturate = true;
  auto overflow = [&]() -> uint8_t {
    if (saturate) return sign | s.max_mag;
    if (s.fnuz) return 0x80;
    return sign | (f == SmallFloat::kE5M2 ? 0x7c : 0x7f);
  };
  if (std::isnan(x)) {
    if (s.fnuz) return 0x80;
    if (f == SmallFloat::kE2M1) return sign | s.max_mag;  // no NaN to give
    return sign | 0x7f;
  }
  const float a = std::fabs(x);
  if (std::isinf(a)) return overflow();
  uint32_t code;
  if (a < std::ldexp(1.0f, 1 - s.bias)) {
    // subnormal range: units of the smallest subnormal (rounding may carry into the first normal)
    code = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, s.bias - 1 + s.mbits)));
  } else {
    int e;
    const float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
    --e;
    uint32_t q = static_cast<uint32_t>(std::nearbyint(std::ldexp(2 * fr - 1, s.mbits)));
    if (q == (1u << s.mbits)) { q = 0; ++e; }
    const int be = e + s.bias;
    if (be > 32) return overflow();
    code = static_cast<uint32_t>(be) << s.mbits | q;
  }
  if (code > s.max_mag) return overflow();
  if (code == 0 && s.fnuz) return 0;
  return static_cast<uint8_t>(sign | code);
}

inline float e8m0_to_f32(uint8_t b) {
  if (b == 0xff) return NAN;
  return std::ldexp(1.0f, static_cast<int>(b) - 127);
}

// Element i of a numeric tensor as double, for every dtype but strings and complex.
// int4 is held sign-extended in an int8, uint4 in a uint8, small floats as their code.
inline double load_f64(const Tensor& t, int64_t i) {
  const DataType dt = t.dtype();
  SmallFloat sf;
  if (small_float_of(dt, &sf)) return small_to_f32(t.data<uint8_t>()[i], sf);
  switch (dt) {
    case DataType::kFloat16: return f16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kBFloat16: return bf16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kFloat8E8M0: return e8m0_to_f32(t.data<uint8_t>()[i]);
    case DataType::kInt4: return t.data<int8_t>()[i];
    case DataType::kUInt4: return t.data<uint8_t>()[i] & 0x0f;
    default: {
      double v = 0;
      visit_numeric(dt, [&](auto tag) { v = static_cast<double>(t.data<typename decltype(tag)::type>()[i]); });
      return v;
    }
  }
}

// Stores v into element i of a float tensor (float32/64, float16, bfloat16).
inline void store_float(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DataType::kFloat32: t.data<float>()[i] = static_cast<float>(v); break;
    case DataType::kFloat64: t.data<double>()[i] = v; break;
    case DataType::kFloat16: t.data<uint16_t>()[i] = f32_to_f16(static_cast<float>(v)); break;
    case DataType::kBFloat16: t.data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v)); break;
    default: break;
  }
}

inline bool is_float_dtype(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

inline std::string require_float(const ir::Node& n, int input) {
  return require_dtypes(n, input, {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16});
}

// The values of a float tensor as double (a copy).
inline std::vector<double> to_f64(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = load_f64(t, i);
  return v;
}

}  // namespace kiln::cpu::rq
