// backends/cuda/cuda_attention.cu — kiln.Attention in one kernel: softmax(scale·Q·Kᵀ [masked]) · V for
// every (batch, head), read straight from the projected [B, S, H·D] layouts and written into the
// [B, S, H·Dv] output, with the softmax computed online over tiles of keys (running maximum and sum,
// as flash attention does), so no [B, H, S, T] scores tensor and no head transposes exist.
//
// One block per (tile of 32 queries, head, batch); 256 threads, 8 per query row. For each tile of 64
// keys: K and V rows go to shared memory (as float); each thread scores 8 keys of its row, the row's
// 8 threads agree on the running maximum and sum with warp shuffles, write their probabilities to
// shared memory, and accumulate P·V for 1/8 of the row's Dv output columns in registers.
// Float math throughout (float16/bfloat16 inputs are widened on load).
#include <cfloat>

#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

constexpr int kRows = 32;       // queries per block
constexpr int kKeys = 64;       // keys per tile
constexpr int kLanes = 8;       // threads per query row
constexpr int kMaxAcc = kMaxAttentionHead / kLanes;

template <typename T, typename M>
__global__ void __launch_bounds__(kRows * kLanes) attention_kernel(AttentionArgs a) {
  extern __shared__ float smem[];
  const int D = a.d, Dv = a.dv;
  const int kd = D + 1;  // padded rows: the 8 lanes of a row read 8 different keys without bank conflicts
  float* qs = smem;                    // [kRows][kd]
  float* ks = qs + kRows * kd;         // [kKeys][kd]
  float* vs = ks + kKeys * kd;         // [kKeys][Dv]
  float* ps = vs + kKeys * Dv;         // [kRows][kKeys]
  const int b = blockIdx.z, h = blockIdx.y, s0 = blockIdx.x * kRows;
  const int tid = threadIdx.x, row = tid / kLanes, lane = tid % kLanes;
  const int64_t S = a.s, NT = a.t, H = a.heads;
  const T* q = static_cast<const T*>(a.q) + b * S * H * D + h * D;
  const T* k = static_cast<const T*>(a.k) + b * NT * H * D + h * D;
  const T* v = static_cast<const T*>(a.v) + b * NT * H * Dv + h * Dv;
  const M* mask = static_cast<const M*>(a.mask);
  const bool* cond = a.cond;

  for (int i = tid; i < kRows * D; i += blockDim.x) {
    const int r = i / D, c = i % D;
    qs[r * kd + c] = s0 + r < S ? convert<float>(q[(s0 + r) * H * D + c]) * a.scale : 0.f;
  }
  const int64_t s = s0 + row;
  float m = -INFINITY, l = 0.f, acc[kMaxAcc];
  for (int j = 0; j < kMaxAcc; ++j) acc[j] = 0.f;
  const unsigned group = 0xffu << ((threadIdx.x % 32) / kLanes * kLanes);  // this row's 8 lanes in the warp

  for (int64_t t0 = 0; t0 < NT; t0 += kKeys) {
    __syncthreads();  // the previous tile's K/V/P are no longer read
    for (int i = tid; i < kKeys * D; i += blockDim.x) {
      const int r = i / D, c = i % D;
      ks[r * kd + c] = t0 + r < NT ? convert<float>(k[(t0 + r) * H * D + c]) : 0.f;
    }
    for (int i = tid; i < kKeys * Dv; i += blockDim.x) {
      const int r = i / Dv, c = i % Dv;
      vs[r * Dv + c] = t0 + r < NT ? convert<float>(v[(t0 + r) * H * Dv + c]) : 0.f;
    }
    __syncthreads();
    float sc[kKeys / kLanes];
    float tile_max = -INFINITY;
    for (int j = 0; j < kKeys / kLanes; ++j) {
      const int c = lane + kLanes * j;
      const int64_t t = t0 + c;
      float x = -INFINITY;
      if (t < NT && s < S) {
        x = 0.f;
        const float* qr = qs + row * kd;
        const float* kr = ks + c * kd;
        for (int d = 0; d < D; ++d) x = fmaf(qr[d], kr[d], x);
        if (cond && cond[b * a.cs[0] + h * a.cs[1] + s * a.cs[2] + t * a.cs[3]] == a.fill_where_true) x = a.fill;
        if (mask) x += convert<float>(mask[b * a.ms[0] + h * a.ms[1] + s * a.ms[2] + t * a.ms[3]]);
      }
      sc[j] = x;
      tile_max = fmaxf(tile_max, x);
    }
    for (int off = 1; off < kLanes; off <<= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(group, tile_max, off));
    const float m_new = fmaxf(m, tile_max);
    // Nothing seen yet on this row (every score -inf so far): no rescaling, no probability.
    const float corr = m_new == -INFINITY ? 1.f : __expf(m - m_new);
    float sum = 0.f;
    for (int j = 0; j < kKeys / kLanes; ++j) {
      const float p = m_new == -INFINITY ? 0.f : __expf(sc[j] - m_new);
      ps[row * kKeys + lane + kLanes * j] = p;
      sum += p;
    }
    for (int off = 1; off < kLanes; off <<= 1) sum += __shfl_xor_sync(group, sum, off);
    l = l * corr + sum;
    m = m_new;
    __syncwarp(group);  // the row's probabilities are written (by these 8 lanes) before they are read
    const float* pr = ps + row * kKeys;
    for (int j = 0; j < kMaxAcc; ++j) {
      const int d = lane + kLanes * j;
      if (d >= Dv) break;
      float x = acc[j] * corr;
      for (int c = 0; c < kKeys; ++c) x = fmaf(pr[c], vs[c * Dv + d], x);
      acc[j] = x;
    }
  }
  if (s >= S) return;
  T* y = static_cast<T*>(a.y) + (b * S + s) * H * Dv + h * Dv;
  const float inv = 1.f / l;  // l == 0 (no keys, or every key -inf): NaN, as softmax over nothing
  for (int j = 0; j < kMaxAcc; ++j) {
    const int d = lane + kLanes * j;
    if (d < Dv) y[d] = convert<T>(acc[j] * inv);
  }
}

}  // namespace

int launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.b == 0 || a.s == 0 || a.heads == 0 || a.dv == 0) return cudaSuccess;
  if (a.d <= 0 || a.d > kMaxAttentionHead || a.dv > kMaxAttentionHead) return cudaErrorInvalidValue;
  if (a.s > 65535 * int64_t{kRows} || a.heads > 65535 || a.b > 65535) return cudaErrorInvalidValue;
  const size_t smem = sizeof(float) * (kRows * (a.d + 1) + kKeys * (a.d + 1) + kKeys * a.dv + kRows * kKeys);
  const dim3 grid(static_cast<unsigned>((a.s + kRows - 1) / kRows), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.b));
  return dispatch_float(a.elem, [&](auto t) {
    using T = decltype(t);
    auto kernel = attention_kernel<T, T>;
    // Once per type, for the largest head size (so that no launch, captured in a graph or not, needs it).
    static const cudaError_t opt_in = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(sizeof(float) * (kRows * (kMaxAttentionHead + 1) + kKeys * (kMaxAttentionHead + 1) +
                                          kKeys * kMaxAttentionHead + kRows * kKeys)));
    if (opt_in != cudaSuccess) return static_cast<int>(opt_in);
    kernel<<<grid, kRows * kLanes, smem, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
