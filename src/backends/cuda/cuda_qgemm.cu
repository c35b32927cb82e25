// backends/cuda/cuda_qgemm.cu — kiln.QConv's 1x1 int8 convolutions as a tensor-core GEMM of our own.
//
// A 1x1 convolution of channels-last int8 X is a product of the pixels' rows X [P, K] (strided
// pixels for stride > 1) with W [M, K]: both K-contiguous, the "row.col" form of the int8 mma.sync
// instruction (m16n8k32, int32 accumulation). Why our own and not cuDNN's: ResNet-50's expansion
// layers (K 64..512, M 4K) are bound by writing Y, and with the residual read as well cuDNN's fused
// graphs ran them at ~1.2 TB/s on the H200 (tests/gpu/results/h200_int8_probe_lt_stem.log: 64>256 at
// 56x56, batch 256, 0.38 ms with the residual, 0.18 without); cuBLASLt's int8 GEMM with a per-row
// alpha and an int8 C was slower still. The epilogue here is one pass over a staged int32 tile.
//
// One CTA computes a 128-pixel x BN-channel tile (BN 64 or 128) with 8 warps: K in steps of 64 bytes,
// three cp.async stages in shared memory (16-byte chunks, XOR-swizzled so ldmatrix reads hit 8
// distinct bank groups), ldmatrix.x4 for both operands. Then the int32 tile goes to shared memory
// and each thread takes 4 channels of a row at a time: v = acc · scale[m] + bias[m] (+ zmul · Z, its
// tile loaded into shared memory with the first stage),
// ReLU, round half to even and saturate to int8 (QuantizeLinear's rounding) or float32 out.
//
// FP8 engines' 1x1 convolutions (QGemmArgs::fp8: X, W, Z and an 8-bit Y in E4M3) run the same
// kernels with the E4M3 mma.sync (same m16n8k32 fragments, float32 sums) and E4M3 conversions
// (nearest even, saturating at ±448) in the epilogue: one template parameter.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_mma.cuh"
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

constexpr int kBM = 128, kBK = 64, kStages = 3, kThreadsQ = 256;

// Byte offset of (row, 16-byte chunk) in a tile of 64-byte rows, swizzled: the 8 rows one ldmatrix
// reads at one logical chunk land in 8 different 16-byte bank groups.
__device__ __forceinline__ int swz(int row, int chunk) { return row * kBK + ((chunk ^ ((row >> 1) & 3)) << 4); }

// One operand tile's 16-byte chunks that a thread copies each stage (kChunks of them, 4 per 64-byte
// row): their shared-memory offsets and source rows, worked out once.
template <int kChunks>
struct TileRows {
  const int8_t* src[kChunks];
  bool ok[kChunks];
  int off[kChunks], chunk[kChunks];
  // source_row(r): the operand row of tile row r, or -1 past its rows.
  template <typename RowFn>
  __device__ __forceinline__ void init(int tid, const int8_t* base, int k, RowFn source_row) {
    for (int i = 0; i < kChunks; ++i) {
      const int idx = tid + i * kThreadsQ, r = idx >> 2;
      chunk[i] = idx & 3;
      off[i] = swz(r, chunk[i]);
      const int64_t row = source_row(r);
      ok[i] = row >= 0;
      src[i] = base + (ok[i] ? row : 0) * k + chunk[i] * 16;
    }
  }
  // Bytes [k0, k0 + 64) of each row to shared memory at `dst` (zeros past K or past the rows).
  __device__ __forceinline__ void load(uint32_t dst, int k0, int k, const int8_t* any) const {
    for (int i = 0; i < kChunks; ++i) {
      const bool valid = ok[i] && k0 + chunk[i] * 16 < k;
      cp_async16(dst + off[i], valid ? src[i] + k0 : any, valid);
    }
  }
};

int8_t __device__ __forceinline__ saturate_i8(float v) {
  const int q = __float2int_rn(v);
  return static_cast<int8_t>(q < -128 ? -128 : q > 127 ? 127 : q);
}

// The 8-bit element: int8 (int32 sums) or E4M3 (float32 sums). value() reads a residual byte;
// quantized() rounds an output to nearest even and saturates (int8: to [-128, 127]; E4M3: ±448).
template <bool F8>
struct Elem;
template <>
struct Elem<false> {
  using Acc = int;
  __device__ __forceinline__ static void mma(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { mma_s8(d, a, b0, b1); }
  __device__ __forceinline__ static float value(unsigned char b) { return static_cast<float>(static_cast<int8_t>(b)); }
  __device__ __forceinline__ static unsigned char quantized(float v) { return static_cast<unsigned char>(saturate_i8(v)); }
  __device__ __forceinline__ static int bits(int v) { return v; }
  __device__ __forceinline__ static float acc_value(int b) { return static_cast<float>(b); }
};
template <>
struct Elem<true> {
  using Acc = float;
  __device__ __forceinline__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { mma_e4m3(d, a, b0, b1); }
  __device__ __forceinline__ static float value(unsigned char b) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3)));
  }
  __device__ __forceinline__ static unsigned char quantized(float v) {
    return static_cast<unsigned char>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
  }
  __device__ __forceinline__ static int bits(float v) { return __float_as_int(v); }
  __device__ __forceinline__ static float acc_value(int b) { return __int_as_float(b); }
};

// One warp's share of a 64-byte K step: its kMT x 16 rows of the A tile at `sa` (from row m0) times
// 32 rows of the B tile at `sb` (from row n0), both swizzled 64-byte rows, into acc[mt][nt] (the
// m16n8 fragment of rows m0 + 16·mt, columns n0 + 8·nt).
template <int kMT, bool F8>
__device__ __forceinline__ void warp_mma_step(typename Elem<F8>::Acc (&acc)[kMT][4][4], uint32_t sa, uint32_t sb, int m0, int n0,
                                              int lane) {
  for (int kk = 0; kk < 2; ++kk) {
    uint32_t af[kMT][4], bf[4][2];
    for (int mt = 0; mt < kMT; ++mt) {
      const int row = m0 + mt * 16 + (lane & 15);
      ldmatrix_x4(sa + swz(row, kk * 2 + (lane >> 4)), af[mt][0], af[mt][1], af[mt][2], af[mt][3]);
    }
    for (int pair = 0; pair < 2; ++pair) {
      const int row = n0 + pair * 16 + ((lane >> 4) << 3) + (lane & 7);
      ldmatrix_x4(sb + swz(row, kk * 2 + ((lane >> 3) & 1)), bf[pair * 2][0], bf[pair * 2][1], bf[pair * 2 + 1][0],
                  bf[pair * 2 + 1][1]);
    }
    for (int mt = 0; mt < kMT; ++mt)
      for (int nt = 0; nt < 4; ++nt) Elem<F8>::mma(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
  }
}

// The input pixel row of output pixel p of a 1x1 convolution with a.stride (X [N, ih, iw, K] read at
// every stride-th row and column; the output is [N, oh, ow, M]).
__device__ __forceinline__ int64_t strided_row(const QGemmArgs& a, int64_t p) {
  if (a.stride == 1) return p;
  const int64_t per = static_cast<int64_t>(a.oh) * a.ow, img = p / per, rem = p % per;
  return (img * a.ih + rem / a.ow * a.stride) * a.iw + rem % a.ow * a.stride;
}

// Blocks per SM: two of the 128-channel tile (125 registers a thread), three of the 64-channel one
// (its shared memory is half): more blocks waiting on memory at once.
template <int BN, bool F8>
__global__ void __launch_bounds__(kThreadsQ, BN == 64 ? 3 : 2) qgemm_kernel(QGemmArgs a) {
  using E = Elem<F8>;
  constexpr int kWarpsN = BN / 32, kWarpsM = 8 / kWarpsN, kWM = kBM / kWarpsM, kMT = kWM / 16;
  constexpr int kTileA = kBM * kBK, kTileB = BN * kBK, kStage = kTileA + kTileB;
  constexpr int kLd = BN + 8;  // int32 epilogue tile's row stride
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / kWarpsN, warp_n = warp % kWarpsN;
  const int n_tiles = (a.m + BN - 1) / BN;
  const int64_t p0 = static_cast<int64_t>(blockIdx.x / n_tiles) * kBM;
  const int n0 = static_cast<int>(blockIdx.x % n_tiles) * BN;
  const int kblocks = (a.k + kBK - 1) / kBK;

  // Each thread's rows of the A tile (2 chunks per stage) and of the B tile: their source rows once
  // (-1: past the operand's rows, zero-filled).
  constexpr int kAChunks = kBM * 4 / kThreadsQ, kBChunks = BN * 4 / kThreadsQ;
  TileRows<kAChunks> ta;
  ta.init(tid, a.x, a.k, [&](int r) -> int64_t {
    const int64_t p = p0 + r;
    return p < a.rows ? strided_row(a, p) : -1;
  });
  TileRows<kBChunks> tb;
  tb.init(tid, a.w, a.k, [&](int r) -> int64_t { return n0 + r < a.m ? n0 + r : -1; });
  const uint32_t base = smem_addr(smem);
  // The residual's tile goes to shared memory with the first stage (M % 16 == 0: 16-byte rows), so
  // its reads overlap the main loop instead of stalling the epilogue once per row.
  constexpr int kPipe = kStages * kStage, kEpi = kBM * kLd * 4, kZAt = kPipe > kEpi ? kPipe : kEpi;
  const bool z_staged = a.z && a.m % 16 == 0;
  if (z_staged) {
    constexpr int kZChunks = kBM * BN / 16 / kThreadsQ;
    for (int i = 0; i < kZChunks; ++i) {
      const int idx = tid + i * kThreadsQ, r = idx / (BN / 16), c = (idx % (BN / 16)) * 16;
      const bool ok = p0 + r < a.rows && n0 + c < a.m;
      cp_async16(base + kZAt + r * BN + c, ok ? a.z + (p0 + r) * a.m + n0 + c : a.z, ok);
    }
  }
  auto load_stage = [&](int stage, int kb) {
    const uint32_t sa = base + stage * kStage;
    ta.load(sa, kb * kBK, a.k, a.x);
    tb.load(sa + kTileA, kb * kBK, a.k, a.w);
  };

  typename E::Acc acc[kMT][4][4];
  for (int i = 0; i < kMT; ++i)
    for (int j = 0; j < 4; ++j)
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

  for (int s = 0; s < kStages - 1; ++s) {
    if (s < kblocks) load_stage(s, s);
    cp_commit();
  }
  for (int kb = 0; kb < kblocks; ++kb) {
    cp_wait<kStages - 2>();
    __syncthreads();
    if (kb + kStages - 1 < kblocks) load_stage((kb + kStages - 1) % kStages, kb + kStages - 1);
    cp_commit();
    const uint32_t sa = base + (kb % kStages) * kStage;
    warp_mma_step<kMT, F8>(acc, sa, sa + kTileA, warp_m * kWM, warp_n * 32, lane);
  }
  cp_wait<0>();
  __syncthreads();

  // The int32 (E4M3: float32) tile to shared memory as bits (the pipeline's buffers are free now).
  int* tile = reinterpret_cast<int*>(smem);
  const int g = lane >> 2, tig = lane & 3;
  for (int mt = 0; mt < kMT; ++mt)
    for (int nt = 0; nt < 4; ++nt) {
      const int r = warp_m * kWM + mt * 16 + g, c = warp_n * 32 + nt * 8 + tig * 2;
      *reinterpret_cast<int2*>(tile + r * kLd + c) = make_int2(E::bits(acc[mt][nt][0]), E::bits(acc[mt][nt][1]));
      *reinterpret_cast<int2*>(tile + (r + 8) * kLd + c) = make_int2(E::bits(acc[mt][nt][2]), E::bits(acc[mt][nt][3]));
    }
  __syncthreads();

  // 4 channels per thread, fixed: their scale and bias once.
  constexpr int kQuads = BN / 4, kRowStep = kThreadsQ / kQuads;
  const int cq = (tid % kQuads) * 4, j = n0 + cq;
  if (j >= a.m) return;
  const float4 sc = *reinterpret_cast<const float4*>(a.scale + j);
  const float4 bi = *reinterpret_cast<const float4*>(a.bias + j);
  for (int r = tid / kQuads; r < kBM; r += kRowStep) {
    const int64_t p = p0 + r;
    if (p >= a.rows) break;
    const int4 v4 = *reinterpret_cast<const int4*>(tile + r * kLd + cq);
    float v[4] = {E::acc_value(v4.x) * sc.x + bi.x, E::acc_value(v4.y) * sc.y + bi.y, E::acc_value(v4.z) * sc.z + bi.z,
                  E::acc_value(v4.w) * sc.w + bi.w};
    const int64_t o = p * a.m + j;
    if (a.z) {
      const uchar4 z = z_staged ? *reinterpret_cast<const uchar4*>(smem + kZAt + r * BN + cq)
                                : *reinterpret_cast<const uchar4*>(a.z + o);
      v[0] += a.zmul * E::value(z.x);
      v[1] += a.zmul * E::value(z.y);
      v[2] += a.zmul * E::value(z.z);
      v[3] += a.zmul * E::value(z.w);
    }
    if (a.relu)  // NaN kept (an E4M3 sum can be NaN), as the unfused Relu does; fmaxf would make it 0
      for (float& e : v) e = e < 0.f ? 0.f : e;
    if (a.int8_out) {
      const uchar4 q = make_uchar4(E::quantized(v[0]), E::quantized(v[1]), E::quantized(v[2]), E::quantized(v[3]));
      *reinterpret_cast<uchar4*>(static_cast<int8_t*>(a.y) + o) = q;
    } else {
      *reinterpret_cast<float4*>(static_cast<float*>(a.y) + o) = make_float4(v[0], v[1], v[2], v[3]);
    }
  }
}

template <int BN, bool F8>
int launch_tile(const QGemmArgs& a, cudaStream_t stream) {
  constexpr int kPipe = kStages * (kBM + BN) * kBK, kEpi = kBM * (BN + 8) * 4;
  constexpr int kSmem = (kPipe > kEpi ? kPipe : kEpi) + kBM * BN;  // + the residual's tile
  // Above 48 KiB of dynamic shared memory a kernel must opt in; once per template instance (a
  // thread-safe static), before the first launch — the kernel's reshape and tuning come first.
  static const cudaError_t opted =
      cudaFuncSetAttribute(qgemm_kernel<BN, F8>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (opted != cudaSuccess) return static_cast<int>(opted);
  const int64_t blocks = (a.rows + kBM - 1) / kBM * ((a.m + BN - 1) / BN);
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  qgemm_kernel<BN, F8><<<static_cast<unsigned>(blocks), kThreadsQ, kSmem, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

// ---- The streaming form: short K, int8 out (tactics "stream64", "stream128") ----
//
// ResNet's expansion layers (K 64..256) do one K step or a few per tile, so the blocked kernel above
// runs each tile as load, wait, multiply, store: with two blocks an SM, the SM's loads stop while it
// stores and its stores while it loads (~45% of the copy bandwidth on the H100). Here a block stays
// resident (one per SM's slots, grid = what fits) and walks pixel tiles of one channel tile: its W
// slice (BN x K, all of K) is loaded once, and tile t + 1's X rows and residual go in flight
// (cp.async) before tile t is multiplied, so the memory system always has the next tile's reads.
// The epilogue runs on the accumulators in registers (each thread's 8 channels are fixed for the
// block: their scale and bias stay in registers), reads the residual from the staged tile and writes
// the int8 result over it; the block then stores the tile with 16-byte writes. Shared memory:
// W (kb x BN x 64), X (2 x kb x 128 x 64), Z/Y (2 x 128 x (BN + 16)), kb = ceil(K / 64) <= 4.
constexpr int kStreamMaxK = 256;

template <int BN, bool F8>
__global__ void __launch_bounds__(kThreadsQ, 2) qgemm_stream_kernel(QGemmArgs a, int m_tiles, int per_col) {
  using E = Elem<F8>;
  constexpr int kWarpsN = BN / 32, kWarpsM = 8 / kWarpsN, kWM = kBM / kWarpsM, kMT = kWM / 16;
  constexpr int kZLd = BN + 16;  // the Z/Y tile's row stride: 16-byte rows, the 8 rows of a fragment in distinct banks
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / kWarpsN, warp_n = warp % kWarpsN, g = lane >> 2, tig = lane & 3;
  const int n_tiles = (a.m + BN - 1) / BN, n0 = static_cast<int>(blockIdx.x % n_tiles) * BN;
  const int kb_count = (a.k + kBK - 1) / kBK, chunks = kb_count * 4;  // 16-byte chunks of a 64-byte-padded row
  const int tile_b = BN * kBK, tile_a = kBM * kBK;
  const uint32_t base = smem_addr(smem);
  const uint32_t sb = base, sa0 = sb + kb_count * tile_b, sz0 = sa0 + 2 * kb_count * tile_a;
  unsigned char* zt0 = smem + (sz0 - base);
  const int a_stride = kb_count * tile_a, z_stride = kBM * kZLd;

  // W's rows n0 .. n0 + BN, all of K, once.
  for (int idx = tid; idx < BN * chunks; idx += kThreadsQ) {
    const int r = idx / chunks, ch = idx % chunks;
    const bool ok = n0 + r < a.m && ch * 16 < a.k;
    cp_async16(sb + (ch >> 2) * tile_b + swz(r, ch & 3), ok ? a.w + static_cast<int64_t>(n0 + r) * a.k + ch * 16 : a.w, ok);
  }
  // Tile t's X rows (strided pixels for stride > 1) and its residual into buffer `buf`.
  auto load_tile = [&](int t, int buf) {
    const int64_t p0 = static_cast<int64_t>(t) * kBM;
    const uint32_t sa = sa0 + buf * a_stride;
    for (int idx = tid; idx < kBM * chunks; idx += kThreadsQ) {
      const int r = idx / chunks, ch = idx % chunks;
      const int64_t p = p0 + r;
      const bool ok = p < a.rows && ch * 16 < a.k;
      const int64_t row = ok ? strided_row(a, p) : 0;
      cp_async16(sa + (ch >> 2) * tile_a + swz(r, ch & 3), ok ? a.x + row * a.k + ch * 16 : a.x, ok);
    }
    if (a.z) {
      const uint32_t sz = sz0 + buf * z_stride;
      for (int idx = tid; idx < kBM * BN / 16; idx += kThreadsQ) {
        const int r = idx / (BN / 16), c = (idx % (BN / 16)) * 16;
        const bool ok = p0 + r < a.rows && n0 + c < a.m;
        cp_async16(sz + r * kZLd + c, ok ? a.z + (p0 + r) * a.m + n0 + c : a.z, ok);
      }
    }
  };

  // This thread's 8 output channels (2 per 8-column fragment) and their scale and bias.
  float sc[4][2], bi[4][2];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int j = n0 + warp_n * 32 + nt * 8 + tig * 2 + e;
      sc[nt][e] = j < a.m ? a.scale[j] : 0.f;
      bi[nt][e] = j < a.m ? a.bias[j] : 0.f;
    }

  int t = static_cast<int>(blockIdx.x / n_tiles), buf = 0;
  if (t < m_tiles) load_tile(t, 0);
  cp_commit();
  for (; t < m_tiles; t += per_col, buf ^= 1) {
    if (t + per_col < m_tiles) load_tile(t + per_col, buf ^ 1);
    cp_commit();
    cp_wait<1>();
    __syncthreads();

    typename E::Acc acc[kMT][4][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;
    const uint32_t sa = sa0 + buf * a_stride;
    for (int kb = 0; kb < kb_count; ++kb)
      warp_mma_step<kMT, F8>(acc, sa + kb * tile_a, sb + kb * tile_b, warp_m * kWM, warp_n * 32, lane);

    // Epilogue in registers; the int8 result replaces the residual in the staged tile.
    unsigned char* zt = zt0 + buf * z_stride;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp_m * kWM + mt * 16 + g + h * 8, c = warp_n * 32 + nt * 8 + tig * 2;
          float v0 = static_cast<float>(acc[mt][nt][h * 2]) * sc[nt][0] + bi[nt][0];
          float v1 = static_cast<float>(acc[mt][nt][h * 2 + 1]) * sc[nt][1] + bi[nt][1];
          uchar2* at = reinterpret_cast<uchar2*>(zt + r * kZLd + c);
          if (a.z) {
            const uchar2 z = *at;
            v0 += a.zmul * E::value(z.x);
            v1 += a.zmul * E::value(z.y);
          }
          if (a.relu) {  // NaN kept, as above
            v0 = v0 < 0.f ? 0.f : v0;
            v1 = v1 < 0.f ? 0.f : v1;
          }
          *at = make_uchar2(E::quantized(v0), E::quantized(v1));
        }
    __syncthreads();
    const int64_t p0 = static_cast<int64_t>(t) * kBM;
    for (int idx = tid; idx < kBM * BN / 16; idx += kThreadsQ) {
      const int r = idx / (BN / 16), c = (idx % (BN / 16)) * 16;
      if (p0 + r < a.rows && n0 + c < a.m)
        *reinterpret_cast<int4*>(static_cast<int8_t*>(a.y) + (p0 + r) * a.m + n0 + c) =
            *reinterpret_cast<const int4*>(zt + r * kZLd + c);
    }
    __syncthreads();  // the next iteration's prefetch refills this buffer
  }
  cp_wait<0>();
}

template <int BN, bool F8>
int launch_stream(const QGemmArgs& a, cudaStream_t stream) {
  const int kb_count = (a.k + kBK - 1) / kBK;
  const int smem = kb_count * (BN + 2 * kBM) * kBK + 2 * kBM * (BN + 16);
  cudaError_t e = cudaFuncSetAttribute(qgemm_stream_kernel<BN, F8>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int dev = 0, sms = 0, per_sm = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, qgemm_stream_kernel<BN, F8>, kThreadsQ, smem);
  if (e != cudaSuccess) return static_cast<int>(e);
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  const int64_t m_tiles = (a.rows + kBM - 1) / kBM, n_tiles = (a.m + BN - 1) / BN;
  if (m_tiles > 0x3fffffff) return cudaErrorInvalidConfiguration;  // the kernel's t + per_col stays an int
  // Blocks per channel tile: as many as stay resident together, at most one per pixel tile.
  const int64_t per_col = std::max<int64_t>(1, std::min<int64_t>(m_tiles, int64_t{per_sm} * sms / n_tiles));
  qgemm_stream_kernel<BN, F8><<<static_cast<unsigned>(per_col * n_tiles), kThreadsQ, smem, stream>>>(
      a, static_cast<int>(m_tiles), static_cast<int>(per_col));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

bool qgemm_fits(int64_t k, int64_t m) { return k > 0 && k % 16 == 0 && m > 0 && m % 4 == 0; }

bool qgemm_stream_fits(int64_t k, int64_t m, bool int8_out) {
  return qgemm_fits(k, m) && k <= kStreamMaxK && m % 16 == 0 && int8_out;
}

int launch_qgemm(const QGemmArgs& a, int tile_n, bool streaming, cudaStream_t stream) {
  if (a.rows <= 0) return cudaSuccess;
  if (!qgemm_fits(a.k, a.m) || a.stride < 1) return cudaErrorInvalidValue;
  if (streaming && !qgemm_stream_fits(a.k, a.m, a.int8_out)) return cudaErrorInvalidValue;
  if (tile_n != 64 && tile_n != 128) return cudaErrorInvalidValue;
  auto run = [&](auto f8) {
    constexpr bool F8 = decltype(f8)::value;
    if (streaming) return tile_n == 64 ? launch_stream<64, F8>(a, stream) : launch_stream<128, F8>(a, stream);
    return tile_n == 64 ? launch_tile<64, F8>(a, stream) : launch_tile<128, F8>(a, stream);
  };
  return a.fp8 ? run(std::true_type{}) : run(std::false_type{});
}

}  // namespace kiln::cuda
