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
//
// Float16/bfloat16 with head sizes that are multiples of 16 take a tensor-core kernel instead
// (attention_mma_kernel, WMMA 16x16x16 with float accumulation): one block of 4 warps per (64 queries,
// head, batch), each warp owning 16 query rows; per tile of 64 keys the warps compute their scores
// S = Q·Kᵀ on tensor cores into shared memory, take the online softmax over them in float (2 lanes per
// row; scale, bool mask and additive mask applied there), rescale their rows of the float output
// accumulator O in shared memory, and add P·V on tensor cores. K and V tiles are loaded with 16-byte
// vector loads.
#include <mma.h>

#include <cfloat>
#include <cstdlib>
#include <type_traits>

#include "backends/cuda/cuda_mma.cuh"
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

constexpr int kRows = 32;       // queries per block
constexpr int kKeys = 64;       // keys per tile
constexpr int kLanes = 8;       // threads per query row
constexpr int kMaxAcc = kMaxAttentionHead / kLanes;

// The (batch b, head h) slices of Q, K, V (rows strided by a.q_row, a.k_row, a.v_row), and the masks.
template <typename T, typename M>
struct HeadViews {
  const T* q;
  const T* k;
  const T* v;
  const M* mask;
  const bool* cond;
  __device__ HeadViews(const AttentionArgs& a, int64_t b, int64_t h) {
    q = static_cast<const T*>(a.q) + b * a.q_batch + h * a.q_head;
    const int64_t kvh = h / a.kv_group;  // grouped-query attention: the K/V head this query head reads
    k = static_cast<const T*>(a.k) + b * a.k_batch + kvh * a.k_head;
    v = static_cast<const T*>(a.v) + b * a.v_batch + kvh * a.v_head;
    // The masks' [S, T] planes of this (batch, head); an additive mask that repeats along the batch
    // (mask_period, Swin's shifted windows) is read at its entry b % mask_period.
    const int64_t mb = a.mask_period ? b % a.mask_period : b;
    mask = a.mask ? static_cast<const M*>(a.mask) + mb * a.ms[0] + h * a.ms[1] : nullptr;
    cond = a.cond ? a.cond + b * a.cs[0] + h * a.cs[1] : nullptr;
  }
  // The score of query s against key t after the bool mask (fill) and the additive mask.
  __device__ float masked(const AttentionArgs& a, int64_t s, int64_t t, float x) const {
    if (cond && cond[s * a.cs[2] + t * a.cs[3]] == a.fill_where_true) x = a.fill;
    if (mask) x += convert<float>(mask[s * a.ms[2] + t * a.ms[3]]);
    return x;
  }
};

// True when a row's probabilities are NaN (its scores all -inf, or one NaN or +inf: the sum of the
// exponentials l is then 0 or NaN) and the op maps them to 0 (zero_nan_rows: torch's SDPA export,
// Where(IsNaN(P), 0, P)), so the context row is 0, whatever V holds.
__device__ __forceinline__ bool nan_row_is_zero(const AttentionArgs& a, float l) {
  return a.zero_nan_rows && !(l > 0.f && l <= 3.402823466e38f);
}

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
  const int64_t S = a.s, NT = a.t;
  const HeadViews<T, M> hv(a, b, h);
  const T *q = hv.q, *k = hv.k, *v = hv.v;

  for (int i = tid; i < kRows * D; i += blockDim.x) {
    const int r = i / D, c = i % D;
    qs[r * kd + c] = s0 + r < S ? convert<float>(q[(s0 + r) * a.q_row + c]) * a.scale : 0.f;
  }
  const int64_t s = s0 + row;
  float m = -INFINITY, l = 0.f, acc[kMaxAcc];
  for (int j = 0; j < kMaxAcc; ++j) acc[j] = 0.f;
  const unsigned group = 0xffu << ((threadIdx.x % 32) / kLanes * kLanes);  // this row's 8 lanes in the warp

  for (int64_t t0 = 0; t0 < NT; t0 += kKeys) {
    __syncthreads();  // the previous tile's K/V/P are no longer read
    for (int i = tid; i < kKeys * D; i += blockDim.x) {
      const int r = i / D, c = i % D;
      ks[r * kd + c] = t0 + r < NT ? convert<float>(k[(t0 + r) * a.k_row + c]) : 0.f;
    }
    for (int i = tid; i < kKeys * Dv; i += blockDim.x) {
      const int r = i / Dv, c = i % Dv;
      vs[r * Dv + c] = t0 + r < NT ? convert<float>(v[(t0 + r) * a.v_row + c]) : 0.f;
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
        x = hv.masked(a, s, t, x);
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
  T* y = static_cast<T*>(a.y) + b * a.y_batch + s * a.y_row + h * Dv;
  const float inv = 1.f / l;  // l == 0 (no keys, or every key -inf): NaN, as softmax over nothing
  const bool zero = nan_row_is_zero(a, l);
  for (int j = 0; j < kMaxAcc; ++j) {
    const int d = lane + kLanes * j;
    if (d < Dv) y[d] = convert<T>(zero ? 0.f : acc[j] * inv);
  }
}

// ---- Tensor-core kernel (float16, bfloat16; D, Dv multiples of 16, 16-byte aligned rows).

constexpr int kMmaRows = 64;   // queries per block (4 warps x 16)
constexpr int kMmaKeys = 64;   // keys per tile
constexpr int kMmaWarps = 4;
constexpr int kPadH = 8;       // row padding of half tiles (elements): keeps WMMA ldm a multiple of 8
constexpr int kPadF = 4;       // row padding of float tiles

size_t mma_smem_bytes(int d, int dv) {
  return sizeof(uint16_t) * (size_t(kMmaRows) * (d + kPadH) + size_t(kMmaKeys) * (d + kPadH) + size_t(kMmaKeys) * (dv + kPadH) +
                             size_t(kMmaRows) * (kMmaKeys + kPadH)) +
         sizeof(float) * (size_t(kMmaRows) * (kMmaKeys + kPadF) + size_t(kMmaRows) * (dv + kPadF));
}

// Rows [r0, r0 + rows) of a [*, ld]-strided matrix of `cols` 2-byte values into shared memory with row
// pitch `pitch`, 8 values per 16-byte load; rows past `valid` are zero.
template <typename T>
__device__ void load_tile(T* dst, int pitch, const T* src, int64_t ld, int64_t r0, int rows, int cols, int64_t valid) {
  const int vecs = cols / 8;
  for (int i = threadIdx.x; i < rows * vecs; i += blockDim.x) {
    const int r = i / vecs, c = (i % vecs) * 8;
    uint4 x{};
    if (r0 + r < valid) x = *reinterpret_cast<const uint4*>(src + (r0 + r) * ld + c);
    *reinterpret_cast<uint4*>(dst + r * pitch + c) = x;
  }
}

template <typename T, typename M>
__global__ void __launch_bounds__(kMmaWarps * 32) attention_mma_kernel(AttentionArgs a) {
  using namespace nvcuda;
  extern __shared__ __align__(128) unsigned char mma_smem[];
  const int D = a.d, Dv = a.dv;
  const int qp = D + kPadH, vp = Dv + kPadH, pp = kMmaKeys + kPadH, sp = kMmaKeys + kPadF, op = Dv + kPadF;
  T* qs = reinterpret_cast<T*>(mma_smem);      // [64][qp]
  T* ks = qs + kMmaRows * qp;                  // [64][qp]  keys as rows
  T* vs = ks + kMmaKeys * qp;                  // [64][vp]
  T* ps = vs + kMmaKeys * vp;                  // [64][pp]  probabilities
  float* ss = reinterpret_cast<float*>(ps + kMmaRows * pp);  // [64][sp] scores
  float* os = ss + kMmaRows * sp;                            // [64][op] output accumulator
  const int b = blockIdx.z, h = blockIdx.y;
  const int64_t s0 = int64_t{blockIdx.x} * kMmaRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t S = a.s, NT = a.t;
  const HeadViews<T, M> hv(a, b, h);
  const T *q = hv.q, *k = hv.k, *v = hv.v;

  load_tile(qs, qp, q, a.q_row, s0, kMmaRows, D, S);
  for (int i = threadIdx.x; i < kMmaRows * op; i += blockDim.x) os[i] = 0.f;
  // Softmax state: lanes 2r and 2r+1 of a warp share its row r (of 16), each taking half of the keys.
  const int wrow = lane / 2, half = lane % 2, row = warp * 16 + wrow;
  const int64_t s = s0 + row;
  float m = -INFINITY, l = 0.f;

  for (int64_t t0 = 0; t0 < NT; t0 += kMmaKeys) {
    __syncthreads();  // the previous tile's K/V are no longer read (and Q, O are written, first time)
    load_tile(ks, qp, k, a.k_row, t0, kMmaKeys, D, NT);
    load_tile(vs, vp, v, a.v_row, t0, kMmaKeys, Dv, NT);
    __syncthreads();
    // S = Q·Kᵀ for this warp's 16 rows: 4 blocks of 16 keys.
    for (int n = 0; n < kMmaKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int kk = 0; kk < D; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, qs + warp * 16 * qp + kk, qp);
        wmma::load_matrix_sync(fb, ks + n * 16 * qp + kk, qp);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(ss + warp * 16 * sp + n * 16, acc, sp, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax over the row's 64 scores (32 per lane).
    float* sr = ss + row * sp;
    float tile_max = -INFINITY;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const int64_t t = t0 + j;
      float x = -INFINITY;
      if (t < NT && s < S) {
        x = sr[j] * a.scale;
        x = hv.masked(a, s, t, x);
      }
      sr[j] = x;
      tile_max = fmaxf(tile_max, x);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float corr = m_new == -INFINITY ? 1.f : __expf(m - m_new);
    float sum = 0.f;
    T* pr = ps + row * pp;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const float p = m_new == -INFINITY ? 0.f : __expf(sr[j] - m_new);
      const T pt = convert<T>(p);
      pr[j] = pt;
      sum += convert<float>(pt);  // the sum of the probabilities P·V uses
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * corr + sum;
    m = m_new;
    float* orow = os + row * op;
    for (int c = half; c < Dv; c += 2) orow[c] *= corr;
    __syncwarp();
    // O += P·V for this warp's rows.
    for (int n = 0; n < Dv; n += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, os + warp * 16 * op + n, op, wmma::mem_row_major);
      for (int kk = 0; kk < kMmaKeys; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, ps + warp * 16 * pp + kk, pp);
        wmma::load_matrix_sync(fb, vs + kk * vp + n, vp);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(os + warp * 16 * op + n, acc, op, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncthreads();  // O's zeros are visible when there were no keys at all
  if (s >= S) return;
  T* y = static_cast<T*>(a.y) + b * a.y_batch + s * a.y_row + h * Dv;
  const float inv = 1.f / l;  // l == 0 (no keys, or every key -inf): NaN, as softmax over nothing
  const bool zero = nan_row_is_zero(a, l);
  const float* orow = os + row * op;
  for (int c = half; c < Dv; c += 2) y[c] = convert<T>(zero ? 0.f : orow[c] * inv);
}

// ---- Register-resident tensor-core kernel (float16, bfloat16; D = Dv = 64 or 128): FlashAttention-2's
// layout with PTX mma.sync m16n8k16. One block of W warps (2, 4 or 8: a tactic each; 4 by default) per
// (16·W queries, head, batch); each warp keeps
// its 16 query rows of Q, the scores of a 64-key tile, the probabilities and the output accumulator in
// registers (the scores' accumulator layout is the probabilities' operand layout, so P never goes
// through shared memory); K and Vᵀ tiles are staged in shared memory, with pitches that make every
// fragment load conflict-free. A row's 64 scores are spread over the 4 lanes of a quad (16 each), so
// its maximum and sum take two shuffles. Same math as the kernels above: scores scaled, masked, online
// softmax in float, probabilities rounded to T before P·V and before they are summed.

constexpr int kFaKeys = 64;  // keys per tile
constexpr int kFaPad = 8;    // row padding (elements) of the K and Vᵀ tiles

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, packed as one register (the first in the low half); `sum` gets the rounded values.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float x, float y, float& sum) {
  const T tx = convert<T>(x), ty = convert<T>(y);
  sum += convert<float>(tx) + convert<float>(ty);
  const uint16_t lo = *reinterpret_cast<const uint16_t*>(&tx), hi = *reinterpret_cast<const uint16_t*>(&ty);
  return uint32_t{lo} | (uint32_t{hi} << 16);
}

template <typename T>
__device__ __forceinline__ uint32_t ld32(const T* p) { return *reinterpret_cast<const uint32_t*>(p); }

// Q of this lane's two query rows as mma A fragments: register j of step kk holds row rows[j & 1],
// columns kk*16 + tq*2 (+8 for j >= 2); rows past S are zero.
template <typename T, int D>
__device__ __forceinline__ void load_q_fragments(const AttentionArgs& a, const HeadViews<T, T>& hv, const int64_t (&rows)[2],
                                                 int tq, uint32_t (&qf)[D / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = rows[j & 1];
      qf[kk][j] = r < a.s ? ld32(hv.q + r * a.q_row + kk * 16 + tq * 2 + (j >> 1) * 8) : 0u;
    }
}

// The output rows: O / l in T (a row whose probabilities are NaN as zero_nan_rows says).
template <typename T, int D>
__device__ __forceinline__ void store_rows(const AttentionArgs& a, int64_t b, int64_t h, const int64_t (&rows)[2], int tq,
                                           const float (&o)[D / 8][4], const float (&l)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (rows[i] >= a.s) continue;
    T* y = static_cast<T*>(a.y) + b * a.y_batch + rows[i] * a.y_row + h * D + tq * 2;
    const float inv = 1.f / l[i];  // l == 0 (no keys, or every key -inf): NaN, as softmax over nothing
    const bool zero = nan_row_is_zero(a, l[i]);
    float unused = 0.f;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(y + n * 8) =
          pack2<T>(zero ? 0.f : o[n][2 * i] * inv, zero ? 0.f : o[n][2 * i + 1] * inv, unused);
  }
}

// The online softmax step of the register-resident kernels for one tile: sc holds this lane's scores
// of its two rows (scaled, masked, -inf where there is no key), tmax their per-lane maxima. Updates the
// rows' running maximum m and sum l, gives the factors corr that rescale the output so far, and packs
// the probabilities (rounded to T, as they are summed) as P·V's A fragments: keys 16kk.. are score
// blocks 2kk (registers 0, 1) and 2kk+1 (2, 3). A row's 64 scores are spread over the 4 lanes of a
// quad, so its maximum and sum take two shuffles.
template <typename T>
__device__ __forceinline__ void online_softmax(const float (&sc)[kFaKeys / 8][4], float (&tmax)[2], float (&m)[2], float (&l)[2],
                                               float (&corr)[2], uint32_t (&pf)[kFaKeys / 16][4]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 1));
    tmax[i] = fmaxf(tmax[i], __shfl_xor_sync(0xffffffffu, tmax[i], 2));
    const float m_new = fmaxf(m[i], tmax[i]);
    // Nothing seen yet on this row (every score -inf so far): no rescaling, no probability.
    corr[i] = m_new == -INFINITY ? 1.f : __expf(m[i] - m_new);
    m[i] = m_new;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < kFaKeys / 8; ++n)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const bool none = m[i] == -INFINITY;
      const float p0 = none ? 0.f : __expf(sc[n][2 * i] - m[i]), p1 = none ? 0.f : __expf(sc[n][2 * i + 1] - m[i]);
      pf[n / 2][i + 2 * (n & 1)] = pack2<T>(p0, p1, sum[i]);
    }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
    sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
    l[i] = l[i] * corr[i] + sum[i];
  }
}

template <typename T, int D, int W>
__global__ void __launch_bounds__(W * 32) attention_fa_kernel(AttentionArgs a) {
  extern __shared__ __align__(16) unsigned char fa_smem[];
  constexpr int kp = D + kFaPad, vp = kFaKeys + kFaPad;
  T* ks = reinterpret_cast<T*>(fa_smem);  // [kFaKeys][kp]: the tile's keys as rows
  T* vt = ks + kFaKeys * kp;              // [D][vp]: the tile's values, transposed
  const int b = blockIdx.z, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int64_t S = a.s, NT = a.t;
  const HeadViews<T, T> hv(a, b, h);
  const int64_t row0 = int64_t{blockIdx.x} * (W * 16) + warp * 16;
  const int64_t rows[2] = {row0 + g, row0 + g + 8};  // this lane's two query rows

  // Q as A fragments: register j of step kk holds row rows[j & 1], columns kk*16 + tq*2 (+8 for j >= 2).
  uint32_t qf[D / 16][4];
  load_q_fragments<T, D>(a, hv, rows, tq, qf);
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int64_t t0 = 0; t0 < NT; t0 += kFaKeys) {
    __syncthreads();  // the previous tile is no longer read
    load_tile(ks, kp, hv.k, a.k_row, t0, kFaKeys, D, NT);
    // Vᵀ: a warp takes 32 consecutive keys of one 8-column chunk, so its 2-byte stores hit 16 words.
    for (int i = threadIdx.x; i < kFaKeys * (D / 8); i += blockDim.x) {
      const int r = i % kFaKeys, c = (i / kFaKeys) * 8;
      uint4 x{};
      if (t0 + r < NT) x = *reinterpret_cast<const uint4*>(hv.v + (t0 + r) * a.v_row + c);
      const T* e = reinterpret_cast<const T*>(&x);
#pragma unroll
      for (int j = 0; j < 8; ++j) vt[(c + j) * vp + r] = e[j];
    }
    __syncthreads();

    // S = Q·Kᵀ: 8 blocks of 8 keys; sc[n][e] is row rows[e >> 1], key t0 + n*8 + tq*2 + (e & 1).
    float sc[kFaKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kFaKeys / 8; ++n) {
      sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
      const T* kr = ks + (n * 8 + g) * kp + tq * 2;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) mma16816<T>(sc[n], qf[kk], ld32(kr + kk * 16), ld32(kr + kk * 16 + 8));
    }
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kFaKeys / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = rows[e >> 1], t = t0 + n * 8 + tq * 2 + (e & 1);
        float x = -INFINITY;
        if (t < NT && r < S) x = hv.masked(a, r, t, sc[n][e] * a.scale);
        sc[n][e] = x;
        tmax[e >> 1] = fmaxf(tmax[e >> 1], x);
      }
    float corr[2];
    uint32_t pf[kFaKeys / 16][4];
    online_softmax<T>(sc, tmax, m, l, corr, pf);
    // O = O·corr + P·V: 8-column blocks of Dv, B fragments from Vᵀ rows.
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= corr[0];
      o[n][1] *= corr[0];
      o[n][2] *= corr[1];
      o[n][3] *= corr[1];
      const T* vr = vt + (n * 8 + g) * vp + tq * 2;
#pragma unroll
      for (int kk = 0; kk < kFaKeys / 16; ++kk) mma16816<T>(o[n], pf[kk], ld32(vr + kk * 16), ld32(vr + kk * 16 + 8));
    }
  }
  store_rows<T, D>(a, b, h, rows, tq, o, l);
}

size_t fa_smem_bytes(int d) { return sizeof(uint16_t) * (size_t(kFaKeys) * (d + kFaPad) + size_t(d) * (kFaKeys + kFaPad)); }

template <typename T, int D, int W>
int launch_fa(const AttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.s + W * 16 - 1) / (W * 16)), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.b));
  attention_fa_kernel<T, D, W><<<grid, W * 32, fa_smem_bytes(D), stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

template <typename T, int D>
int launch_fa_warps(const AttentionArgs& a, int warps, cudaStream_t stream) {
  if (warps == 2) return launch_fa<T, D, 2>(a, stream);
  if (warps == 8) return launch_fa<T, D, 8>(a, stream);
  return launch_fa<T, D, 4>(a, stream);
}

// Shapes and dtype alone (what reshape() knows): the tensor-core kernels apply.
bool mma_shapes_fit(const AttentionArgs& a) {
  // 16-byte pieces: every row, head and batch step a multiple of 8 elements.
  for (int64_t st : {a.q_row, a.k_row, a.v_row, a.y_row, a.q_head, a.k_head, a.v_head, a.q_batch, a.k_batch, a.v_batch, a.y_batch})
    if (st % 8 != 0) return false;
  return a.elem != kElemF32 && a.d % 16 == 0 && a.dv % 16 == 0 && a.s <= 65535 * int64_t{kMmaRows};
}
bool fa_shapes_fit(const AttentionArgs& a) { return mma_shapes_fit(a) && a.d == a.dv && (a.d == 64 || a.d == 128); }

// The pointers too (known at run): 16-byte rows of Q, K, V for the fragment loads, 4-byte output pairs.
bool mma_fits(const AttentionArgs& a) {
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  return mma_shapes_fit(a) && aligned(a.q) && aligned(a.k) && aligned(a.v);
}
bool fa_fits(const AttentionArgs& a) { return fa_shapes_fit(a) && mma_fits(a) && (reinterpret_cast<uintptr_t>(a.y) & 3) == 0; }

// ---- The register-resident kernel with its key tiles in flight (tactics fp2, fp4, fp8; float16,
// bfloat16; D = Dv = 32, 64 or 128). The math and the fragment layouts are attention_fa_kernel's; what
// differs is how K and V reach shared memory. Both tiles are kept row-major as they lie in memory and
// copied with cp.async into two buffers each, so the copies of tile i + 1 run while tile i is scored
// and summed: per tile, wait for K_i (V_i may still be in flight), start K_{i+1} and V_{i+1}, score,
// take the online softmax, then wait for V_i and add P·V. The B fragments come from ldmatrix (Kᵀ as is,
// V transposed by ldmatrix.trans), four per instruction.
//
// Masks (kMask): kNoMask checks only the last tile's keys against T. kMaskGlobal reads every score's
// mask entry from global memory as HeadViews::masked does (any strides, an additive and a bool mask
// together). kMaskStaged, for one mask whose keys are contiguous and whose rows are 16-byte aligned
// (mask_stages says when), copies the block's rows x 64 keys of the mask into shared memory with K_i, in
// K's cp.async group, so the mask is read from shared memory like K and its copy overlaps the previous
// tile. A warp whose 16 rows see only -inf in a tile (a causal mask's tiles past the diagonal: every
// entry filled with a fill of -inf, or an additive -inf) skips the tile: its scores, probabilities and
// P·V. That is exact for finite Q, K and V — each skipped score would be -inf, its probability 0, the
// row's maximum and sum unchanged — and where Q, K or V hold an infinity or NaN at skipped keys they
// contribute nothing, where the unfused graph's row would turn NaN (as flash-attention kernels' causal
// tile skipping).

constexpr int kFpPad = 8;  // row padding (elements) of the K and V tiles: 8 rows of a fragment hit 8 bank quads
constexpr int kNoMask = 0, kMaskGlobal = 1, kMaskStaged = 2;
constexpr int kMaskPad = 16;  // bytes after each staged mask row: the 8 rows of a fragment hit different banks

size_t fp_smem_bytes(int d) { return sizeof(uint16_t) * 4 * size_t(kFaKeys) * (d + kFpPad); }

// The staged mask tiles: two buffers of `rows` rows of 64 keys of `elem` bytes each (and the padding).
__host__ __device__ constexpr int fp_mask_pitch(int elem) { return kFaKeys * elem + kMaskPad; }
size_t fp_mask_bytes(int rows, int elem) { return 2 * size_t(rows) * fp_mask_pitch(elem); }
// The pipelined kernel's dynamic shared memory: K and V tiles, and the staged mask tiles of `mask_elem`
// bytes per entry (0: none).
size_t fp_launch_smem_bytes(int d, int w, int mask_elem) {
  return fp_smem_bytes(d) + (mask_elem ? fp_mask_bytes(w * 16, mask_elem) : 0);
}

// Whether the pipelined kernel stages a's mask in shared memory (kMaskStaged): one mask, bool or of Q's
// 2-byte type, an entry per query row (a mask whose rows repeat, row stride 0 as a key-padding mask
// [B,1,1,T], is one row the per-score path reads from the L1 cache; staged, each block would copy it
// W*16 times), contiguous along the keys, each (batch, head) plane and each row starting on 16 bytes,
// and T a multiple of one 16-byte copy's keys (a copy is then all keys or all past T).
bool mask_stages(const AttentionArgs& a) {
  if ((a.mask != nullptr) == (a.cond != nullptr)) return false;
  const int elem = a.cond ? 1 : 2;
  const int64_t* st = a.cond ? a.cs : a.ms;
  const void* base = a.cond ? static_cast<const void*>(a.cond) : a.mask;
  auto aligned = [&](int64_t stride) { return (stride * elem) % 16 == 0; };
  return st[3] == 1 && st[2] > 0 && aligned(st[0]) && aligned(st[1]) && aligned(st[2]) && st[0] >= 0 && st[1] >= 0 &&
         (reinterpret_cast<uintptr_t>(base) & 15) == 0 && a.t % (16 / elem) == 0;
}

// Head sizes up to 64 are held to 128 registers (the compiler takes 131-145 otherwise), so that 512
// threads of blocks fit an SM's registers: 4 blocks of 4 warps instead of 3.
template <typename T, int D, int W, int kMask>
__global__ void __launch_bounds__(W * 32, D <= 64 ? 16 / W : 1) attention_fp_kernel(AttentionArgs a) {
  extern __shared__ __align__(16) unsigned char fp_smem[];
  constexpr int P = D + kFpPad, kTile = kFaKeys * P;
  T* ks = reinterpret_cast<T*>(fp_smem);  // [2][kFaKeys][P]: keys as rows
  T* vs = ks + 2 * kTile;                 // [2][kFaKeys][P]: values as rows
  const int b = blockIdx.z, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int64_t S = a.s, NT = a.t;
  const HeadViews<T, T> hv(a, b, h);
  const int64_t row0 = int64_t{blockIdx.x} * (W * 16) + warp * 16;
  const int64_t rows[2] = {row0 + g, row0 + g + 8};  // this lane's two query rows

  // Rows t0.. of K or V (row stride ld) into a tile; rows past T are zero-filled.
  auto fetch = [&](T* dst, const T* src, int64_t ld, int64_t t0) {
    constexpr int vecs = D / 8;
    for (int i = threadIdx.x; i < kFaKeys * vecs; i += W * 32) {
      const int r = i / vecs, c = (i % vecs) * 8;
      const bool in = t0 + r < NT;
      cp_async16(smem_addr(dst + r * P + c), in ? src + (t0 + r) * ld + c : src, in);
    }
  };
  // The staged mask (kMaskStaged): the block's W*16 rows of 64 keys.
  const bool by_cond = kMask == kMaskStaged && hv.cond != nullptr;
  const int melem = by_cond ? 1 : 2;
  const int64_t mrow_stride = by_cond ? a.cs[2] : a.ms[2];
  constexpr int mrows = W * 16;
  const int mpitch = fp_mask_pitch(melem);
  unsigned char* mts = reinterpret_cast<unsigned char*>(vs + 2 * kTile);  // [2][mrows][mpitch] bytes
  const unsigned char* mplane = by_cond ? reinterpret_cast<const unsigned char*>(hv.cond)
                                        : reinterpret_cast<const unsigned char*>(hv.mask);
  const int64_t block_row0 = int64_t{blockIdx.x} * (W * 16);
  auto fetch_mask = [&](unsigned char* dst, int64_t t0) {
    const int chunks = kFaKeys * melem / 16;  // 16-byte copies per row
    for (int i = threadIdx.x; i < mrows * chunks; i += W * 32) {
      const int r = i / chunks, c = i % chunks;
      const int64_t row = block_row0 + r, key = t0 + c * (16 / melem);
      const bool in = row < S && key < NT;
      cp_async16(smem_addr(dst + r * mpitch + c * 16), in ? mplane + (row * mrow_stride + key) * melem : mplane, in);
    }
  };
  const int64_t tiles = (NT + kFaKeys - 1) / kFaKeys;
  fetch(ks, hv.k, a.k_row, 0);
  if constexpr (kMask == kMaskStaged) fetch_mask(mts, 0);
  cp_commit();
  fetch(vs, hv.v, a.v_row, 0);
  cp_commit();

  uint32_t qf[D / 16][4];
  load_q_fragments<T, D>(a, hv, rows, tq, qf);
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  // ldmatrix row addresses: lane i names row i % 8 of matrix i / 8.
  const int k_row = lane & 7, k_col = (lane >> 3) * 8;                    // Kᵀ: matrices along D
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8;  // V: 2 key halves x 2 column blocks

  for (int64_t i = 0; i < tiles; ++i) {
    const int64_t t0 = i * kFaKeys;
    const T* kt = ks + (i & 1) * kTile;
    const T* vt = vs + (i & 1) * kTile;
    cp_wait<1>();      // K_i (and its mask tile) is here (V_i may not be)
    __syncthreads();   // for every thread's copies, and every warp is done with tile i - 1's buffers
    if (i + 1 < tiles) {
      fetch(ks + ((i + 1) & 1) * kTile, hv.k, a.k_row, t0 + kFaKeys);
      if constexpr (kMask == kMaskStaged) fetch_mask(mts + ((i + 1) & 1) * mrows * mpitch, t0 + kFaKeys);
    }
    cp_commit();
    if (i + 1 < tiles) fetch(vs + ((i + 1) & 1) * kTile, hv.v, a.v_row, t0 + kFaKeys);
    cp_commit();

    // This lane's two staged mask rows, and whether the warp's 16 rows see only -inf in this tile.
    const unsigned char* mrow[2] = {nullptr, nullptr};
    bool dead = false;
    if constexpr (kMask == kMaskStaged) {
      const unsigned char* mt = mts + (i & 1) * mrows * mpitch;
#pragma unroll
      for (int j = 0; j < 2; ++j) mrow[j] = mt + (warp * 16 + g + j * 8) * mpitch;
      bool all_inf = true;
#pragma unroll
      for (int n = 0; n < kFaKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n * 8 + tq * 2 + (e & 1);
          bool inf;
          if (by_cond)
            inf = mrow[e >> 1][key] == static_cast<unsigned char>(a.fill_where_true) && a.fill == -INFINITY;
          else
            inf = convert<float>(reinterpret_cast<const T*>(mrow[e >> 1])[key]) == -INFINITY;
          all_inf = all_inf && (inf || t0 + key >= NT || rows[e >> 1] >= S);
        }
      dead = __all_sync(0xffffffffu, all_inf);
    }

    // S = Q·Kᵀ: 8 blocks of 8 keys; sc[n][e] is row rows[e >> 1], key t0 + n*8 + tq*2 + (e & 1).
    float sc[kFaKeys / 8][4];
    uint32_t pf[kFaKeys / 16][4];
    float corr[2] = {1.f, 1.f};
    if (!dead) {
#pragma unroll
      for (int n = 0; n < kFaKeys / 8; ++n) {
        sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) {
          uint32_t b0, b1, b2, b3;
          ldmatrix_x4(smem_addr(kt + (n * 8 + k_row) * P + kk * 16 + k_col), b0, b1, b2, b3);
          mma16816<T>(sc[n], qf[kk], b0, b1);
          mma16816<T>(sc[n], qf[kk + 1], b2, b3);
        }
      }
      const bool tail = t0 + kFaKeys > NT;
      float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kFaKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t t = t0 + n * 8 + tq * 2 + (e & 1);
          float x;
          if constexpr (kMask == kMaskGlobal) {
            const int64_t r = rows[e >> 1];
            x = t < NT && r < S ? hv.masked(a, r, t, sc[n][e] * a.scale) : -INFINITY;
          } else if constexpr (kMask == kMaskStaged) {
            const int key = n * 8 + tq * 2 + (e & 1);
            x = sc[n][e] * a.scale;
            if (by_cond) {
              if (mrow[e >> 1][key] == static_cast<unsigned char>(a.fill_where_true)) x = a.fill;
            } else {
              x += convert<float>(reinterpret_cast<const T*>(mrow[e >> 1])[key]);
            }
            x = t < NT && rows[e >> 1] < S ? x : -INFINITY;
          } else {
            x = !tail || t < NT ? sc[n][e] * a.scale : -INFINITY;
          }
          sc[n][e] = x;
          tmax[e >> 1] = fmaxf(tmax[e >> 1], x);
        }
      online_softmax<T>(sc, tmax, m, l, corr, pf);
    }
    cp_wait<2>();      // V_i is here (K_{i+1}, V_{i+1} may not be)
    __syncthreads();
    if (dead) continue;  // the tile adds nothing to this warp's rows
    // O = O·corr + P·V, two 8-column blocks of Dv per ldmatrix.
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        o[n + c][0] *= corr[0];
        o[n + c][1] *= corr[0];
        o[n + c][2] *= corr[1];
        o[n + c][3] *= corr[1];
      }
#pragma unroll
      for (int kk = 0; kk < kFaKeys / 16; ++kk) {
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4_trans(smem_addr(vt + (kk * 16 + v_row) * P + n * 8 + v_col), b0, b1, b2, b3);
        mma16816<T>(o[n], pf[kk], b0, b1);
        mma16816<T>(o[n + 1], pf[kk], b2, b3);
      }
    }
  }
  store_rows<T, D>(a, b, h, rows, tq, o, l);
}

template <typename T, int D, int W, int kMask>
int launch_fp(const AttentionArgs& a, cudaStream_t stream) {
  auto kernel = attention_fp_kernel<T, D, W, kMask>;
  const size_t smem = fp_launch_smem_bytes(D, W, kMask == kMaskStaged ? (a.cond ? 1 : 2) : 0);
  // Once per instantiation, for the largest launch it makes (head size 128 and a staged mask need more
  // than the default 48 KiB).
  static const cudaError_t opt_in =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(fp_launch_smem_bytes(D, W, kMask == kMaskStaged ? 2 : 0)));
  if (opt_in != cudaSuccess) return static_cast<int>(opt_in);
  const dim3 grid(static_cast<unsigned>((a.s + W * 16 - 1) / (W * 16)), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.b));
  kernel<<<grid, W * 32, smem, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

template <typename T, int D, int W>
int launch_fp_masked(const AttentionArgs& a, cudaStream_t stream) {
  if (!a.mask && !a.cond) return launch_fp<T, D, W, kNoMask>(a, stream);
  return mask_stages(a) ? launch_fp<T, D, W, kMaskStaged>(a, stream) : launch_fp<T, D, W, kMaskGlobal>(a, stream);
}

template <typename T, int D>
int launch_fp_warps(const AttentionArgs& a, int warps, cudaStream_t stream) {
  if (warps == 2) return launch_fp_masked<T, D, 2>(a, stream);
  if (warps == 8) return launch_fp_masked<T, D, 8>(a, stream);
  return launch_fp_masked<T, D, 4>(a, stream);
}

// The register-resident variants: plain (fa*) or pipelined (fp*), and their warps per block.
bool is_plain(int v) { return v == kAttentionFa2 || v == kAttentionFa4 || v == kAttentionFa8; }
bool is_pipelined(int v) { return v == kAttentionFp2 || v == kAttentionFp4 || v == kAttentionFp8; }
int warps_of(int v) { return v == kAttentionFa2 || v == kAttentionFp2 ? 2 : v == kAttentionFa8 || v == kAttentionFp8 ? 8 : 4; }

bool fp_shapes_fit(const AttentionArgs& a) { return mma_shapes_fit(a) && a.d == a.dv && (a.d == 32 || a.d == 64 || a.d == 128); }
bool fp_fits(const AttentionArgs& a) { return fp_shapes_fit(a) && mma_fits(a) && (reinterpret_cast<uintptr_t>(a.y) & 3) == 0; }

template <typename T>
int launch_mma(const AttentionArgs& a, cudaStream_t stream) {
  // The register-resident kernels for the head sizes transformers use (32: Swin; 64: BERT, GPT-2, ViT;
  // 128), unless the plan chose the WMMA kernel (tactic "wmma").
  // Auto: the pipelined kernel with 4 warps where it applies (on an H200 it beats the plain one 1.8-2.7x
  // on BERT's and ViT's attentions at batch 1), else the plain one.
  const int variant = a.variant != kAttentionAuto ? a.variant : fp_fits(a) ? kAttentionFp4 : kAttentionFa4;
  if (is_pipelined(variant) && fp_fits(a)) {
    const int warps = warps_of(variant);
    if (a.d == 32) return launch_fp_warps<T, 32>(a, warps, stream);
    return a.d == 64 ? launch_fp_warps<T, 64>(a, warps, stream) : launch_fp_warps<T, 128>(a, warps, stream);
  }
  if (is_plain(variant) && fa_fits(a)) {
    const int warps = warps_of(variant);
    return a.d == 64 ? launch_fa_warps<T, 64>(a, warps, stream) : launch_fa_warps<T, 128>(a, warps, stream);
  }
  auto kernel = attention_mma_kernel<T, T>;
  static const cudaError_t opt_in = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         static_cast<int>(mma_smem_bytes(kMaxAttentionHead, kMaxAttentionHead)));
  if (opt_in != cudaSuccess) return static_cast<int>(opt_in);
  const dim3 grid(static_cast<unsigned>((a.s + kMmaRows - 1) / kMmaRows), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.b));
  kernel<<<grid, kMmaWarps * 32, mma_smem_bytes(a.d, a.dv), stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

bool attention_variant_applies(const AttentionArgs& a, int v) {
  if (!(a.b > 0 && a.s > 0 && a.heads > 0 && a.heads <= 65535 && a.b <= 65535 && mma_shapes_fit(a))) return false;
  if (v == kAttentionWmma) return true;
  if (is_plain(v)) return fa_shapes_fit(a);
  if (is_pipelined(v)) return fp_shapes_fit(a);
  return false;
}

bool attention_variants_apply(const AttentionArgs& a) {
  for (int v = kAttentionAuto + 1; v < kAttentionVariants; ++v)
    if (v != kAttentionWmma && attention_variant_applies(a, v)) return true;
  return false;
}

int launch_attention(const AttentionArgs& a, cudaStream_t stream) {
  if (a.b > 0 && a.s > 0 && a.heads > 0 && a.dv > 0 && a.d > 0 && a.d <= kMaxAttentionHead && a.dv <= kMaxAttentionHead &&
      a.heads <= 65535 && a.b <= 65535 && mma_fits(a)) {
    if (a.elem == kElemF16) return launch_mma<__half>(a, stream);
    if (a.elem == kElemBF16) return launch_mma<__nv_bfloat16>(a, stream);
  }
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
