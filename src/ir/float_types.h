// ir/float_types.h — bit-exact conversions for the small float types kiln stores as raw bits
// (float16/bfloat16 as uint16_t; float8 variants as uint8_t). Round-to-nearest-even throughout.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float f16_to_f32(uint16_t h) {
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

inline uint16_t f32_to_f16(float f) {
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

inline float bf16_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet nan
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace kiln
