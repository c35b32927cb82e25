// ir/float_types.h — bit-exact conversions for the small float types kiln stores as raw bits
// (float16/bfloat16 as uint16_t; float8 variants as uint8_t). Round-to-nearest-even throughout.
// Host and device: the CUDA Cast kernel (backends/cuda/cuda_cast_ext.cu) uses the same functions, so
// this header stays C++17 and includes no other kiln header.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KILN_FT_HD __host__ __device__
#else
#define KILN_FT_HD
#endif

namespace kiln {

KILN_FT_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KILN_FT_HD inline float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

KILN_FT_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // subnormal: normalize
    int e = -1;
    do { ++e; mant <<= 1; } while ((mant & 0x400) == 0);
    mant &= 0x3ff;
    return bits_f32(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | mant << 13);
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | mant << 13);
  return bits_f32(sign | (exp + 112) << 23 | mant << 13);
}

KILN_FT_HD inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | (abs > 0x7f800000u ? 0x7e00 : 0x7c00);  // nan / inf
  if (abs >= 0x477ff000u) return sign | 0x7c00;                                // overflow → inf
  if (abs < 0x38800000u) {                                                      // subnormal or zero
    // value = abs_float; scale to units of 2^-24 with round-to-nearest-even
    const float a = bits_f32(abs);
    const float scaled = a * 16777216.0f;  // 2^24
    float r = std::nearbyint(scaled);
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t mant = abs & 0x7fffff;
  uint32_t exp = (abs >> 23) - 112;
  uint32_t h = exp << 10 | mant >> 13;
  const uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

// f32_to_f16 of f with finite values past ±65504 saturated to it (what a half engine's constants get;
// infinities and NaN as f32_to_f16 gives them), without branches, so a loop of it vectorizes: 10x the
// scalar path on a model's weights (GPT-2's 163M took 2.7 s to convert on an H200 host). Equal to
// f32_to_f16(clamped f) for every one of the 2^32 float bit patterns (checked once exhaustively; the
// unit test CastSmallFloat.SaturatedHalfMatchesTheScalarPath checks a stride of them). The subnormal
// halves come from the FPU's round-to-nearest-even of an addition, as the scalar path's nearbyint does.
KILN_FT_HD inline uint16_t f32_to_f16_saturated(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  // A normal half: the exponent rebiased, the 13 dropped mantissa bits rounded to nearest even (a
  // carry out of the mantissa moves up into the exponent, as it should).
  const uint32_t normal = (abs - (112u << 23) + 0xfffu + ((abs >> 13) & 1u)) >> 13;
  // A subnormal half: adding 0.5 leaves the value in units of 2^-24, rounded, in the low mantissa bits.
  const uint32_t sub = f32_bits(bits_f32(abs) + 0.5f) - 0x3f000000u;
  uint32_t h = abs < 0x38800000u ? sub : normal;
  h = abs >= 0x477ff000u ? 0x7bffu : h;  // finite and rounding past 65504: saturated
  h = abs >= 0x7f800000u ? 0x7c00u : h;  // inf
  h = abs > 0x7f800000u ? 0x7e00u : h;   // NaN
  return static_cast<uint16_t>(sign | h);
}

KILN_FT_HD inline float bf16_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

KILN_FT_HD inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet nan
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

// ---- 8-bit and 4-bit floats (stored one per byte), matching ONNX's reference (ml_dtypes) bit for bit.
//
// Formats: E4M3FN (no inf; S.1111.111 is NaN; max 448), E4M3FNUZ (no inf, no -0; 0x80 is NaN; max 240),
// E5M2 (IEEE-like with inf and NaN; max 57344), E5M2FNUZ (0x80 is NaN; max 57344), FLOAT4E2M1 (no inf or
// NaN; max 6). float → small float rounds to nearest even. With `saturate`, out-of-range values and
// infinities become ±max; without it they become the format's overflow value (NaN, or inf for E5M2;
// FLOAT4E2M1 always saturates).
enum class MiniFloat { kE4M3FN, kE4M3FNUZ, kE5M2, kE5M2FNUZ, kE2M1 };

// E4M3FN's largest finite magnitude: what FP8 quantization scales a calibrated range onto and
// saturates at.
inline constexpr float kE4M3FNMax = 448.0f;

struct MiniFloatSpec {
  int mbits;
  int bias;
  uint8_t max_code;  // largest finite magnitude code
  uint8_t sign_bit;
};

KILN_FT_HD constexpr MiniFloatSpec mini_float_spec(MiniFloat f) {
  switch (f) {
    case MiniFloat::kE4M3FN: return {3, 7, 0x7e, 0x80};
    case MiniFloat::kE4M3FNUZ: return {3, 8, 0x7f, 0x80};
    case MiniFloat::kE5M2: return {2, 15, 0x7b, 0x80};
    case MiniFloat::kE5M2FNUZ: return {2, 16, 0x7f, 0x80};
    case MiniFloat::kE2M1: return {1, 1, 0x07, 0x08};
  }
  return {3, 7, 0x7e, 0x80};
}

KILN_FT_HD inline float mini_to_f32(uint8_t b, MiniFloat f) {
  const MiniFloatSpec s = mini_float_spec(f);
  const bool uz = f == MiniFloat::kE4M3FNUZ || f == MiniFloat::kE5M2FNUZ;
  if (uz && b == 0x80) return NAN;
  const bool neg = (b & s.sign_bit) != 0;
  const uint32_t mag = b & (s.sign_bit - 1);
  if (f == MiniFloat::kE4M3FN && mag == 0x7f) return neg ? -NAN : NAN;
  if (f == MiniFloat::kE5M2 && mag >= 0x7c) {
    if (mag == 0x7c) return neg ? -INFINITY : INFINITY;
    return neg ? -NAN : NAN;
  }
  const uint32_t e = mag >> s.mbits, m = mag & ((1u << s.mbits) - 1);
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), 1 - s.bias - s.mbits)
                         : std::ldexp(static_cast<float>(m | (1u << s.mbits)), static_cast<int>(e) - s.bias - s.mbits);
  return neg ? -v : v;
}

KILN_FT_HD inline uint8_t f32_to_mini(float x, MiniFloat f, bool saturate) {
  const MiniFloatSpec s = mini_float_spec(f);
  const bool uz = f == MiniFloat::kE4M3FNUZ || f == MiniFloat::kE5M2FNUZ;
  const uint8_t sign = std::signbit(x) ? s.sign_bit : 0;
  // What a value too large (or infinite) becomes.
  auto overflow = [&]() -> uint8_t {
    if (saturate || f == MiniFloat::kE2M1) return sign | s.max_code;
    if (uz) return 0x80;
    if (f == MiniFloat::kE5M2) return sign | 0x7c;
    return sign | 0x7f;  // E4M3FN NaN
  };
  if (std::isnan(x)) {
    if (uz) return 0x80;
    if (f == MiniFloat::kE2M1) return sign ? 0x0 : 0x8;  // what ml_dtypes produces
    return sign | (f == MiniFloat::kE5M2 ? 0x7e : 0x7f);
  }
  const float a = std::fabs(x);
  if (std::isinf(a)) return overflow();
  const float min_normal = std::ldexp(1.0f, 1 - s.bias);
  uint32_t code;
  if (a < min_normal) {
    code = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, s.bias - 1 + s.mbits)));  // carries into e=1
  } else {
    int e;
    const float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
    --e;                                 // a = (2 fr) * 2^e, 2 fr in [1, 2)
    uint32_t q = static_cast<uint32_t>(std::nearbyint(std::ldexp(2 * fr - 1, s.mbits)));
    if (q == (1u << s.mbits)) { q = 0; ++e; }
    const int be = e + s.bias;
    if (be > 31) return overflow();
    code = static_cast<uint32_t>(be) << s.mbits | q;
  }
  if (code > s.max_code) return overflow();
  if (code == 0 && uz) return 0;
  return static_cast<uint8_t>(sign | code);
}

// FLOAT8E8M0: an exponent only (2^(e-127)); 0xff is NaN. `round_mode` is "up" (default), "down" or
// "nearest"; `saturate` keeps rounding from reaching NaN.
enum class E8M0Round { kUp, kDown, kNearest };

KILN_FT_HD inline float e8m0_to_f32(uint8_t b) {
  if (b == 0xff) return NAN;
  if (b == 0) return bits_f32(0x00400000u);  // 2^-127, a float32 subnormal
  return bits_f32(static_cast<uint32_t>(b) << 23);
}

KILN_FT_HD inline uint8_t f32_to_e8m0(float x, bool saturate, E8M0Round mode) {
  const uint32_t u = f32_bits(x);
  uint32_t e = (u >> 23) & 0xff;
  if (e == 0xff) return 0xff;
  bool up = false;
  if (mode == E8M0Round::kUp) {
    up = (u & 0x7fffff) != 0;
  } else if (mode == E8M0Round::kNearest) {
    const bool g = (u & 0x400000) != 0, r = (u & 0x200000) != 0, st = (u & 0x1fffff) != 0;
    up = g && (r || st || e > 0);
  }
  if (up && saturate && e == 0xfe) up = false;
  return static_cast<uint8_t>(e + (up ? 1 : 0));
}

}  // namespace kiln
