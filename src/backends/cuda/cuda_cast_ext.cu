// backends/cuda/cuda_cast_ext.cu — Cast to and from the small types (float8 variants, float4e2m1,
// float8e8m0, int4/uint4, int2/uint2; stored one per byte) on the GPU, with the CPU kernel's rules:
// values travel through a wide value (double for floats, int64 signed, uint64 unsigned) and the
// conversions are ir/float_types.h's own, so results match the CPU bit for bit.
#include "backends/cuda/cuda_types.cuh"
#include "ir/float_types.h"

namespace kiln::cuda {
namespace {

enum Code : int {
  kF32 = 1, kU8 = 2, kI8 = 3, kU16 = 4, kI16 = 5, kI32 = 6, kI64 = 7, kBool = 9, kF16 = 10, kF64 = 11, kU32 = 12,
  kU64 = 13, kBF16 = 16, kE4M3FN = 17, kE4M3FNUZ = 18, kE5M2 = 19, kE5M2FNUZ = 20, kU4 = 21, kI4 = 22, kE2M1 = 23,
  kE8M0 = 24, kU2 = 25, kI2 = 26,
};

struct Wide {
  int kind;  // 0 float, 1 signed, 2 unsigned
  double f;
  int64_t s;
  uint64_t u;
};

__device__ bool mini_of(int code, MiniFloat* m) {
  switch (code) {
    case kE4M3FN: *m = MiniFloat::kE4M3FN; return true;
    case kE4M3FNUZ: *m = MiniFloat::kE4M3FNUZ; return true;
    case kE5M2: *m = MiniFloat::kE5M2; return true;
    case kE5M2FNUZ: *m = MiniFloat::kE5M2FNUZ; return true;
    case kE2M1: *m = MiniFloat::kE2M1; return true;
    default: return false;
  }
}

__device__ Wide read(const void* x, int code, int64_t i) {
  Wide w{0, 0, 0, 0};
  const auto* b = static_cast<const uint8_t*>(x);
  MiniFloat m;
  if (mini_of(code, &m)) {
    w.f = mini_to_f32(b[i], m);
    return w;
  }
  switch (code) {
    case kE8M0: w.f = e8m0_to_f32(b[i]); break;
    case kF32: w.f = static_cast<const float*>(x)[i]; break;
    case kF64: w.f = static_cast<const double*>(x)[i]; break;
    case kF16: w.f = f16_to_f32(static_cast<const uint16_t*>(x)[i]); break;
    case kBF16: w.f = bf16_to_f32(static_cast<const uint16_t*>(x)[i]); break;
    case kI4: w.kind = 1; w.s = ((b[i] & 0xf) ^ 8) - 8; break;
    case kI2: w.kind = 1; w.s = ((b[i] & 0x3) ^ 2) - 2; break;
    case kU4: w.kind = 2; w.u = b[i] & 0xf; break;
    case kU2: w.kind = 2; w.u = b[i] & 0x3; break;
    case kI8: w.kind = 1; w.s = static_cast<const int8_t*>(x)[i]; break;
    case kI16: w.kind = 1; w.s = static_cast<const int16_t*>(x)[i]; break;
    case kI32: w.kind = 1; w.s = static_cast<const int32_t*>(x)[i]; break;
    case kI64: w.kind = 1; w.s = static_cast<const int64_t*>(x)[i]; break;
    case kU8: w.kind = 2; w.u = b[i]; break;
    case kBool: w.kind = 2; w.u = b[i] != 0; break;
    case kU16: w.kind = 2; w.u = static_cast<const uint16_t*>(x)[i]; break;
    case kU32: w.kind = 2; w.u = static_cast<const uint32_t*>(x)[i]; break;
    case kU64: w.kind = 2; w.u = static_cast<const uint64_t*>(x)[i]; break;
    default: break;
  }
  return w;
}

__device__ float as_f32(const Wide& w) {
  return w.kind == 0 ? static_cast<float>(w.f) : w.kind == 1 ? static_cast<float>(w.s) : static_cast<float>(w.u);
}

// double → integer as numpy on x86 (the CPU kernel's rule): through int32 for types narrower than 32
// bits and int32, through int64 otherwise; NaN and out-of-range give the minimum, then wrap.
__device__ int64_t via_int32(double d) {
  return (d > -2147483649.0 && d < 2147483648.0) ? static_cast<int32_t>(d) : INT32_MIN;
}
__device__ int64_t via_int64(double d) {
  return (d >= -9223372036854775808.0 && d < 9223372036854775808.0) ? static_cast<int64_t>(d) : INT64_MIN;
}
__device__ int64_t as_int(const Wide& w, bool narrow) {
  if (w.kind == 0) return narrow ? via_int32(w.f) : via_int64(w.f);
  return w.kind == 1 ? w.s : static_cast<int64_t>(w.u);
}

__device__ void write(void* y, int code, int64_t i, const Wide& w, bool saturate, int round) {
  auto* b = static_cast<uint8_t*>(y);
  MiniFloat m;
  if (mini_of(code, &m)) {
    b[i] = f32_to_mini(as_f32(w), m, saturate);
    return;
  }
  switch (code) {
    case kE8M0: b[i] = f32_to_e8m0(as_f32(w), saturate, static_cast<E8M0Round>(round)); break;
    case kI4: b[i] = static_cast<uint8_t>(((as_int(w, false) & 0xf) ^ 8) - 8); break;
    case kU4: b[i] = static_cast<uint8_t>(as_int(w, false) & 0xf); break;
    case kI2: b[i] = static_cast<uint8_t>(((as_int(w, false) & 0x3) ^ 2) - 2); break;
    case kU2: b[i] = static_cast<uint8_t>(as_int(w, false) & 0x3); break;
    case kBool: b[i] = w.kind == 0 ? w.f != 0 : w.kind == 1 ? w.s != 0 : w.u != 0; break;
    case kF32: static_cast<float*>(y)[i] = as_f32(w); break;
    case kF64: static_cast<double*>(y)[i] = w.kind == 0 ? w.f : w.kind == 1 ? static_cast<double>(w.s) : static_cast<double>(w.u); break;
    case kF16: static_cast<uint16_t*>(y)[i] = f32_to_f16(as_f32(w)); break;
    case kBF16: static_cast<uint16_t*>(y)[i] = f32_to_bf16(as_f32(w)); break;
    case kI8: static_cast<int8_t*>(y)[i] = static_cast<int8_t>(as_int(w, true)); break;
    case kI16: static_cast<int16_t*>(y)[i] = static_cast<int16_t>(as_int(w, true)); break;
    case kI32: static_cast<int32_t*>(y)[i] = static_cast<int32_t>(as_int(w, true)); break;
    case kI64: static_cast<int64_t*>(y)[i] = as_int(w, false); break;
    case kU8: b[i] = static_cast<uint8_t>(as_int(w, true)); break;
    case kU16: static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>(as_int(w, true)); break;
    case kU32: static_cast<uint32_t*>(y)[i] = static_cast<uint32_t>(as_int(w, false)); break;
    case kU64: static_cast<uint64_t*>(y)[i] = static_cast<uint64_t>(as_int(w, false)); break;
    default: break;
  }
}

__global__ void cast_ext_kernel(const void* x, int from, void* y, int to, int64_t n, bool saturate, int round) {
  KILN_GRID_LOOP(i, n) { write(y, to, i, read(x, from, i), saturate, round); }
}

// ---- QuantizeLinear / DequantizeLinear (backends/cpu/quant.cpp's rules, element for element)

__device__ double wide_value(const Wide& w) {
  return w.kind == 0 ? w.f : w.kind == 1 ? static_cast<double>(w.s) : static_cast<double>(w.u);
}

__device__ int64_t scale_index(const QuantArgs& a, int64_t i) {
  switch (a.map_kind) {
    case 1: return (i / a.inner) % a.len;
    case 2: {
      const int64_t in = i % a.inner, d = (i / a.inner) % a.len, o = i / (a.inner * a.len);
      return (o * a.blocks + d / a.block) * a.inner + in;
    }
    default: return 0;
  }
}

// x / s in the reference's precision: 0 float, 1 double, 2 float16, 3 bfloat16 (operands and result rounded).
__device__ double divide(double x, double s, int t) {
  switch (t) {
    case 1: return x / s;
    case 2: {
      auto r = [](double v) { return static_cast<double>(f16_to_f32(f32_to_f16(static_cast<float>(v)))); };
      return r(r(x) / r(s));
    }
    case 3: {
      auto r = [](double v) { return static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(v)))); };
      return r(r(x) / r(s));
    }
    default: return static_cast<float>(x) / static_cast<float>(s);
  }
}

__device__ bool int_range(int code, int64_t* lo, int64_t* hi) {
  switch (code) {
    case kU8: *lo = 0; *hi = 255; return true;
    case kI8: *lo = -128; *hi = 127; return true;
    case kU16: *lo = 0; *hi = 65535; return true;
    case kI16: *lo = -32768; *hi = 32767; return true;
    case kU4: *lo = 0; *hi = 15; return true;
    case kI4: *lo = -8; *hi = 7; return true;
    case kU2: *lo = 0; *hi = 3; return true;
    case kI2: *lo = -2; *hi = 1; return true;
    default: return false;
  }
}

__global__ void quantize_kernel(QuantArgs a) {
  KILN_GRID_LOOP(i, a.n) {
    const int64_t k = scale_index(a, i);
    const double q = divide(wide_value(read(a.x, a.x_code, i)), wide_value(read(a.scale, a.scale_code, k)), a.div_type);
    const double z = a.zp ? wide_value(read(a.zp, a.zp_code, k)) : 0.0;
    int64_t lo, hi;
    MiniFloat m;
    if (int_range(a.y_code, &lo, &hi)) {
      double r = isnan(q) ? static_cast<double>(lo) : rint(q) + z;
      r = fmin(fmax(r, static_cast<double>(lo)), static_cast<double>(hi));
      Wide w{1, 0, static_cast<int64_t>(r), 0};
      write(a.y, a.y_code, i, w, true, 0);
    } else if (mini_of(a.y_code, &m)) {
      // float8 adds a zero point only when it is not zero (keeps -0); float4 always adds it.
      const double v = m == MiniFloat::kE2M1 || z != 0 ? q + z : q;
      static_cast<uint8_t*>(a.y)[i] = f32_to_mini(static_cast<float>(v), m, a.saturate);
    }
  }
}

// The common case of the quantize_kernel above, in float: one scale and zero point for the whole
// tensor, float32 or float16 x, float32 scale, int8/uint8 y, the division in float (div_type 0) —
// every activation QuantizeLinear of an INT8 engine. Same arithmetic: q = x / s in float, NaN to the
// low end, rint(q) + z, saturated (rint of a float is exact; past 2^24 the clamp decides either way).
// Four values a thread (one 16- or 8-byte load, one 4-byte store) when n % 4 == 0.
template <typename TX, typename TY>
__global__ void quantize_tensor_kernel(const TX* __restrict__ x, const float* __restrict__ scale, const TY* __restrict__ zp,
                                       TY* __restrict__ y, int64_t n4, float lo, float hi) {
  const float s = *scale, z = zp ? static_cast<float>(*zp) : 0.f;
  auto one = [&](float v) {
    const float q = v / s;
    const float r = isnan(q) ? lo : fminf(fmaxf(rintf(q) + z, lo), hi);
    return static_cast<TY>(static_cast<int>(r));
  };
  KILN_GRID_LOOP(i, n4) {
    float v[4];
    if constexpr (sizeof(TX) == 4) {
      const float4 f = reinterpret_cast<const float4*>(x)[i];
      v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
      const uint2 h = reinterpret_cast<const uint2*>(x)[i];
      v[0] = f16_to_f32(static_cast<uint16_t>(h.x & 0xffff)), v[1] = f16_to_f32(static_cast<uint16_t>(h.x >> 16));
      v[2] = f16_to_f32(static_cast<uint16_t>(h.y & 0xffff)), v[3] = f16_to_f32(static_cast<uint16_t>(h.y >> 16));
    }
    TY out[4] = {one(v[0]), one(v[1]), one(v[2]), one(v[3])};
    *reinterpret_cast<uint32_t*>(y + i * 4) = *reinterpret_cast<const uint32_t*>(out);
  }
}

template <typename TY>
int launch_quantize_tensor(const QuantArgs& a, cudaStream_t stream) {
  const float lo = sizeof(TY) == 1 && static_cast<TY>(-1) < 0 ? -128.f : 0.f, hi = lo < 0 ? 127.f : 255.f;
  const int64_t n4 = a.n / 4;
  const auto* zp = static_cast<const TY*>(a.zp);
  if (a.x_code == kF32)
    quantize_tensor_kernel<float, TY><<<grid_for(n4), kThreads, 0, stream>>>(static_cast<const float*>(a.x),
                                                                          static_cast<const float*>(a.scale), zp,
                                                                          static_cast<TY*>(a.y), n4, lo, hi);
  else
    quantize_tensor_kernel<uint16_t, TY><<<grid_for(n4), kThreads, 0, stream>>>(static_cast<const uint16_t*>(a.x),
                                                                             static_cast<const float*>(a.scale), zp,
                                                                             static_cast<TY*>(a.y), n4, lo, hi);
  return static_cast<int>(cudaGetLastError());
}

// Whether the per-tensor fast path computes `a` (see quantize_tensor_kernel).
bool quantize_tensor_fits(const QuantArgs& a) {
  const bool aligned = (reinterpret_cast<uintptr_t>(a.x) % 16 == 0) && (reinterpret_cast<uintptr_t>(a.y) % 4 == 0);
  return a.map_kind == 0 && a.div_type == 0 && (a.x_code == kF32 || a.x_code == kF16) && a.scale_code == kF32 &&
         (a.y_code == kI8 || a.y_code == kU8) && (!a.zp || a.zp_code == a.y_code) && a.n % 4 == 0 && aligned;
}

__global__ void dequantize_kernel(QuantArgs a) {
  KILN_GRID_LOOP(i, a.n) {
    const int64_t k = scale_index(a, i);
    const double x = wide_value(read(a.x, a.x_code, i));
    const double s = wide_value(read(a.scale, a.scale_code, k));
    const double z = a.zp ? wide_value(read(a.zp, a.zp_code, k)) : 0.0;
    // The reference computes int32 in double and everything else in float.
    const double v = a.x_code == kI32 ? (x - z) * s
                                      : static_cast<double>((static_cast<float>(x) - static_cast<float>(z)) * static_cast<float>(s));
    Wide w{0, v, 0, 0};
    write(a.y, a.y_code, i, w, true, 0);
  }
}

}  // namespace

int launch_quantize(const QuantArgs& a, cudaStream_t stream) {
  if (a.n == 0) return cudaSuccess;
  if (quantize_tensor_fits(a)) return a.y_code == kI8 ? launch_quantize_tensor<int8_t>(a, stream) : launch_quantize_tensor<uint8_t>(a, stream);
  quantize_kernel<<<grid_for(a.n), kThreads, 0, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

int launch_dequantize(const QuantArgs& a, cudaStream_t stream) {
  if (a.n == 0) return cudaSuccess;
  dequantize_kernel<<<grid_for(a.n), kThreads, 0, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

int launch_cast_ext(const void* x, int from, void* y, int to, int64_t n, bool saturate, int e8m0_round, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  cast_ext_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, from, y, to, n, saturate, e8m0_round);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kiln::cuda
