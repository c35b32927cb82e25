// backends/cuda/cuda_attention_op.cu — the ONNX Attention op in its general form (every mask, GQA,
// past key/value, softcap, qk output modes) as four plain kernels: gather K/V, scores, row softmax,
// P·V. Models whose attention kiln fuses run kiln.Attention (cuda_attention.cu) instead; this is the
// op as exported, computed as the CPU kernel computes it.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Element (b, h, s, e) of a Q/K/V-like input with `heads` heads, `seq` tokens, head size `dim`.
__device__ __forceinline__ int64_t at(bool packed, int64_t b, int64_t h, int64_t s, int64_t e, int64_t heads, int64_t seq,
                                      int64_t dim) {
  return packed ? ((b * seq + s) * heads + h) * dim + e : ((b * heads + h) * seq + s) * dim + e;
}

// dst [B, Hkv, T, dim] = past [B, Hkv, P, dim] followed by the new tokens of x.
template <typename T>
__global__ void gather_kv_kernel(const T* x, const T* past, T* dst, OnnxAttentionArgs a, int64_t dim) {
  const int64_t total = a.past + a.skv;
  KILN_GRID_LOOP(i, a.b * a.hkv * total * dim) {
    const int64_t e = i % dim, t = i / dim % total, bh = i / (dim * total);
    const int64_t b = bh / a.hkv, h = bh % a.hkv;
    dst[i] = t < a.past ? past[(bh * a.past + t) * dim + e] : x[at(a.kv_packed, b, h, t - a.past, e, a.hkv, a.skv, dim)];
  }
}

template <typename T, typename C>
__device__ __forceinline__ void put_qk(const OnnxAttentionArgs& a, int mode, int64_t i, C v) {
  if (a.qk_out && a.mode == mode) static_cast<T*>(a.qk_out)[i] = convert<T>(v);
}

// One thread per score (b, h, i, j) over T = past + new keys.
template <typename T, typename C>
__global__ void scores_kernel(OnnxAttentionArgs a, const T* kbuf, C* scores) {
  const int64_t total = a.past + a.skv, group = a.hq / a.hkv;
  const T* q = static_cast<const T*>(a.q);
  KILN_GRID_LOOP(idx, a.b * a.hq * a.sq * total) {
    const int64_t j = idx % total, i = idx / total % a.sq, h = idx / (total * a.sq) % a.hq, b = idx / (total * a.sq * a.hq);
    const T* kr = kbuf + ((b * a.hkv + h / group) * total + j) * a.d;
    C x = 0;
    for (int64_t e = 0; e < a.d; ++e) x += convert<C>(q[at(a.q_packed, b, h, i, e, a.hq, a.sq, a.d)]) * convert<C>(kr[e]);
    x *= C(a.scale);
    put_qk<T, C>(a, 0, idx, x);
    if (a.softcap > 0) x = C(a.softcap) * tanh(x / C(a.softcap));
    put_qk<T, C>(a, 1, idx, x);
    if (a.mask) {
      if (j >= a.mask_len) {
        x = -INFINITY;
      } else {
        const int64_t m = b * a.mask_strides[0] + h * a.mask_strides[1] + i * a.mask_strides[2] + j * a.mask_strides[3];
        if (a.mask_bool) x = static_cast<const bool*>(a.mask)[m] ? x : C(-INFINITY);
        else x += convert<C>(static_cast<const T*>(a.mask)[m]);
      }
    }
    if (a.causal && j > i + a.past) x = -INFINITY;
    if (a.nonpad && j >= a.nonpad[b]) x = -INFINITY;
    put_qk<T, C>(a, 2, idx, x);
    scores[idx] = x;
  }
}

// One thread per row: softmax in place (a row of -inf only becomes NaN, as the reference's 0/0).
template <typename T, typename C>
__global__ void softmax_rows_kernel(OnnxAttentionArgs a, C* scores) {
  const int64_t total = a.past + a.skv;
  KILN_GRID_LOOP(r, a.b * a.hq * a.sq) {
    C* row = scores + r * total;
    C mx = -INFINITY;
    for (int64_t j = 0; j < total; ++j) mx = row[j] > mx ? row[j] : mx;
    if (mx == C(-INFINITY)) {
      for (int64_t j = 0; j < total; ++j) row[j] = NAN;
    } else {
      C sum = 0;
      for (int64_t j = 0; j < total; ++j) sum += (row[j] = exp(row[j] - mx));
      for (int64_t j = 0; j < total; ++j) row[j] /= sum;
    }
    for (int64_t j = 0; j < total; ++j) put_qk<T, C>(a, 3, r * total + j, row[j]);
  }
}

// One thread per output element (b, h, i, e): Σ_j P[b, h, i, j] · V[b, h / group, j, e].
template <typename T, typename C>
__global__ void pv_kernel(OnnxAttentionArgs a, const C* scores, const T* vbuf) {
  const int64_t total = a.past + a.skv, group = a.hq / a.hkv;
  T* y = static_cast<T*>(a.y);
  KILN_GRID_LOOP(idx, a.b * a.hq * a.sq * a.dv) {
    const int64_t e = idx % a.dv, i = idx / a.dv % a.sq, h = idx / (a.dv * a.sq) % a.hq, b = idx / (a.dv * a.sq * a.hq);
    const C* p = scores + ((b * a.hq + h) * a.sq + i) * total;
    const T* vp = vbuf + (b * a.hkv + h / group) * total * a.dv + e;
    C acc = 0;
    for (int64_t j = 0; j < total; ++j) acc += p[j] * convert<C>(vp[j * a.dv]);
    y[at(a.q_packed, b, h, i, e, a.hq, a.sq, a.dv)] = convert<T>(acc);
  }
}

size_t elem_bytes(int elem) { return elem == kElemF64 ? 8 : elem == kElemF32 ? 4 : 2; }

}  // namespace

size_t onnx_attention_workspace(const OnnxAttentionArgs& a) {
  const int64_t total = a.past + a.skv;
  const size_t e = elem_bytes(a.elem), c = a.elem == kElemF64 ? 8 : 4;
  return aligned(static_cast<size_t>(a.b * a.hkv * total * a.d) * e) +
         aligned(static_cast<size_t>(a.b * a.hkv * total * a.dv) * e) + aligned(static_cast<size_t>(a.b * a.hq * a.sq * total) * c);
}

int launch_onnx_attention(const OnnxAttentionArgs& a, cudaStream_t stream) {
  const int64_t total = a.past + a.skv;
  if (a.hkv <= 0 || a.hq % a.hkv != 0) return cudaErrorInvalidValue;
  return dispatch_real_compute(a.elem, [&](auto tt, auto ct) {
    using T = decltype(tt);
    using C = decltype(ct);
    char* ws = static_cast<char*>(a.workspace);
    const size_t kbytes = aligned(static_cast<size_t>(a.b * a.hkv * total * a.d) * sizeof(T));
    const size_t vbytes = aligned(static_cast<size_t>(a.b * a.hkv * total * a.dv) * sizeof(T));
    T* kbuf = a.present_k ? static_cast<T*>(a.present_k) : reinterpret_cast<T*>(ws);
    T* vbuf = a.present_v ? static_cast<T*>(a.present_v) : reinterpret_cast<T*>(ws + kbytes);
    C* scores = reinterpret_cast<C*>(ws + kbytes + vbytes);
    const int64_t nk = a.b * a.hkv * total * a.d, nv = a.b * a.hkv * total * a.dv;
    if (nk > 0)
      gather_kv_kernel<T><<<grid_for(nk), kThreads, 0, stream>>>(static_cast<const T*>(a.k), static_cast<const T*>(a.past_k),
                                                                 kbuf, a, a.d);
    if (nv > 0)
      gather_kv_kernel<T><<<grid_for(nv), kThreads, 0, stream>>>(static_cast<const T*>(a.v), static_cast<const T*>(a.past_v),
                                                                 vbuf, a, a.dv);
    const int64_t ns = a.b * a.hq * a.sq * total, rows = a.b * a.hq * a.sq, ny = rows * a.dv;
    if (ns > 0) {
      scores_kernel<T, C><<<grid_for(ns), kThreads, 0, stream>>>(a, kbuf, scores);
      softmax_rows_kernel<T, C><<<grid_for(rows), kThreads, 0, stream>>>(a, scores);
    }
    if (ny > 0) pv_kernel<T, C><<<grid_for(ny), kThreads, 0, stream>>>(a, scores, vbuf);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
