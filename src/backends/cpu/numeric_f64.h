// backends/cpu/numeric_f64.h — element access in double for every numeric dtype kiln holds (small
// floats and 4-bit integers included), for the CPU kernels that compute in double (quant.cpp, rnn.cpp,
// loss.cpp, roi.cpp, nn_norm_lp.cpp, training.cpp, tfidf.cpp; cast.cpp reads small floats through
// small_float_of). The dtype visitor with accumulator types
// is numeric.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

// ---- small floats held as one code per byte (float8 variants, float4 e2m1 in the low nibble):
// the conversions of ir/float_types.h (round to nearest even; `saturate` clamps overflow to ±max).
inline bool small_float_of(DataType dt, MiniFloat* f) {
  switch (dt) {
    case DataType::kFloat8E4M3FN: *f = MiniFloat::kE4M3FN; return true;
    case DataType::kFloat8E4M3FNUZ: *f = MiniFloat::kE4M3FNUZ; return true;
    case DataType::kFloat8E5M2: *f = MiniFloat::kE5M2; return true;
    case DataType::kFloat8E5M2FNUZ: *f = MiniFloat::kE5M2FNUZ; return true;
    case DataType::kFloat4E2M1: *f = MiniFloat::kE2M1; return true;
    default: return false;
  }
}

// Element i of a numeric tensor as double, for every dtype but strings and complex.
// int4/int2 are held one per byte (sign-extended), uint4/uint2 likewise, small floats as their code.
inline double load_f64(const Tensor& t, int64_t i) {
  const DataType dt = t.dtype();
  MiniFloat sf;
  if (small_float_of(dt, &sf)) return mini_to_f32(t.data<uint8_t>()[i], sf);
  switch (dt) {
    case DataType::kFloat16: return f16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kBFloat16: return bf16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kFloat8E8M0: return e8m0_to_f32(t.data<uint8_t>()[i]);
    // sub-byte integers: the low bits of their byte, sign-extended or not
    case DataType::kInt4: return ((t.data<uint8_t>()[i] & 0x0f) ^ 0x08) - 0x08;
    case DataType::kUInt4: return t.data<uint8_t>()[i] & 0x0f;
    case DataType::kInt2: return ((t.data<uint8_t>()[i] & 0x03) ^ 0x02) - 0x02;
    case DataType::kUInt2: return t.data<uint8_t>()[i] & 0x03;
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

}  // namespace kiln::cpu
