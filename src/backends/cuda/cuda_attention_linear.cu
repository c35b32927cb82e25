// backends/cuda/cuda_attention_linear.cu — LinearAttention as the CPU computes it
// (backends/cpu/attention.cpp).
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

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
