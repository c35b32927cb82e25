// backends/cuda/cuda_seq.cu — sequence-model ops as the CPU computes them (backends/cpu/newops_seq.cpp,
// attention.cpp): RotaryEmbedding, CausalConvWithState, LinearAttention.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T, typename C>
__global__ void rotary_kernel(RotaryArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  T* y = static_cast<T*>(a.y);
  const int64_t half = a.rd / 2;
  KILN_GRID_LOOP(t, a.b * a.s * a.h) {
    const int64_t b = t / (a.s * a.h), s = (t / a.h) % a.s, h = t % a.h;
    const int64_t off = a.packed ? ((b * a.s + s) * a.h + h) * a.dh : ((b * a.h + h) * a.s + s) * a.dh;
    int64_t row = a.positions ? a.positions[b * a.s + s] : a.per_batch_rows ? b * a.s + s : s;
    const bool bad = row < 0 || row >= a.cache_rows;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t i1 = a.interleaved ? 2 * i : i, i2 = a.interleaved ? 2 * i + 1 : i + half;
      const C x1 = convert<C>(x[off + i1]), x2 = convert<C>(x[off + i2]);
      const C c = bad ? C(NAN) : convert<C>(cs[row * half + i]), sv = bad ? C(NAN) : convert<C>(sn[row * half + i]);
      y[off + i1] = convert<T>(c * x1 - sv * x2);
      y[off + i2] = convert<T>(sv * x1 + c * x2);
    }
    for (int64_t i = a.rd; i < a.dh; ++i) y[off + i] = x[off + i];
  }
}

template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return convert<float>(convert<T>(v));
}

template <typename T, typename C>
__global__ void causal_conv_kernel(CausalConvArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const T* bias = static_cast<const T*>(a.bias);
  const T* past = static_cast<const T*>(a.past);
  T* y = static_cast<T*>(a.y);
  T* present = static_cast<T*>(a.present);
  const int64_t p = a.k - 1;
  // The padded sequence of (b, c) at position j: past for j < p, x after.
  auto seq = [&](int64_t bc, int64_t j) -> C {
    if (j < p) return past ? convert<C>(past[bc * p + j]) : C(0);
    return convert<C>(x[bc * a.l + (j - p)]);
  };
  KILN_GRID_LOOP(i, a.b * a.c * a.l) {
    const int64_t bc = i / a.l, t = i % a.l, c = bc % a.c;
    C acc = bias ? convert<C>(bias[c]) : C(0);
    for (int64_t j = 0; j < a.k; ++j) acc += convert<C>(w[c * a.k + j]) * seq(bc, t + j);
    if (a.silu) {
      if constexpr (!std::is_same<T, float>::value && !std::is_same<T, double>::value) acc = round_to<T>(acc);
      acc = acc / (C(1) + exp(-acc));
    }
    y[i] = convert<T>(acc);
  }
  if (present)
    KILN_GRID_LOOP(i, a.b * a.c * p) {
      const int64_t bc = i / p, j = i % p;
      present[i] = convert<T>(seq(bc, a.l + j));
    }
}

// One thread per state column (b, h, m).
template <typename T>
__global__ void linear_attention_kernel(LinearAttentionArgs a) {
  const T* q = static_cast<const T*>(a.q);
  const T* k = static_cast<const T*>(a.k);
  const T* v = static_cast<const T*>(a.v);
  const T* past = static_cast<const T*>(a.past);
  const T* decay = static_cast<const T*>(a.decay);
  const T* beta = static_cast<const T*>(a.beta);
  T* y = static_cast<T*>(a.y);
  const bool gated = a.rule == 1 || a.rule == 3, delta = a.rule == 2 || a.rule == 3;
  const int64_t group = a.hq / a.hk;
  KILN_GRID_LOOP(col, a.b * a.hk * a.dv) {
    const int64_t m = col % a.dv, bh = col / a.dv, b = bh / a.hk, h = bh % a.hk;
    float* S = a.workspace + bh * a.dk * a.dv + m;  // S[d] at S[d * dv]
    for (int64_t d = 0; d < a.dk; ++d) S[d * a.dv] = past ? convert<float>(past[bh * a.dk * a.dv + d * a.dv + m]) : 0.f;
    for (int64_t t = 0; t < a.t; ++t) {
      const int64_t bt = b * a.t + t;
      const T* kt = k + bt * a.hk * a.dk + h * a.dk;
      const float vt = convert<float>(v[bt * a.hk * a.dv + h * a.dv + m]);
      if (gated)
        for (int64_t d = 0; d < a.dk; ++d)
          S[d * a.dv] *= expf(convert<float>(decay[bt * a.decay_w + (a.decay_w == a.hk ? h : h * a.dk + d)]));
      float u = vt;
      if (delta) {
        const float bv = convert<float>(beta[bt * a.beta_w + (a.beta_w == 1 ? 0 : h)]);
        float r = 0;
        for (int64_t d = 0; d < a.dk; ++d) r += S[d * a.dv] * convert<float>(kt[d]);
        u = bv * (vt - r);
      }
      for (int64_t d = 0; d < a.dk; ++d) S[d * a.dv] += convert<float>(kt[d]) * u;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t hq = h * group + g;
        const T* qt = q + bt * a.hq * a.dk + hq * a.dk;
        float o = 0;
        for (int64_t d = 0; d < a.dk; ++d) o += convert<float>(qt[d]) * S[d * a.dv];
        y[bt * a.hq * a.dv + hq * a.dv + m] = convert<T>(o * a.scale);
      }
    }
    if (a.present)
      for (int64_t d = 0; d < a.dk; ++d) static_cast<T*>(a.present)[bh * a.dk * a.dv + d * a.dv + m] = convert<T>(S[d * a.dv]);
  }
}

}  // namespace

int launch_rotary(const RotaryArgs& a, cudaStream_t stream) {
  const int64_t n = a.b * a.s * a.h;
  if (n == 0) return cudaSuccess;
  return dispatch_real_compute(a.elem, [&](auto tt, auto ct) {
    using T = decltype(tt);
    using C = decltype(ct);
    rotary_kernel<T, C><<<grid_for(n), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_causal_conv(const CausalConvArgs& a, cudaStream_t stream) {
  const int64_t n = a.b * a.c * (a.l > a.k ? a.l : a.k);
  if (n == 0) return cudaSuccess;
  return dispatch_real_compute(a.elem, [&](auto tt, auto ct) {
    using T = decltype(tt);
    using C = decltype(ct);
    causal_conv_kernel<T, C><<<grid_for(n), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_linear_attention(const LinearAttentionArgs& a, cudaStream_t stream) {
  const int64_t n = a.b * a.hk * a.dv;
  if (n == 0) return cudaSuccess;
  if (a.hk <= 0 || a.hq % a.hk != 0) return cudaErrorInvalidValue;
  return dispatch_real_compute(a.elem, [&](auto tt, auto) {
    using T = decltype(tt);
    linear_attention_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
