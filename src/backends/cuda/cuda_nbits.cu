// backends/cuda/cuda_nbits.cu — com.microsoft MatMulNBits' kernels (layout and launchers in cuda_nbits.h).
//
// A nibble q becomes a float without a conversion instruction: one byte permute makes the bits
// 0x4B0000qq (2^23 + q), one subtraction leaves q, and (q − z) · s is one multiply-add with −z · s.
//
// The fused kernel (up to kNBitsFusedRows rows of A) is bound by three things besides reading W once:
// the half-to-float conversions of A (16 per clock per SM: converting A's values once per row of W cost
// 14 us per row of A at K 4096, N 11008 on an H200), the reads of A (M · N · K of them), and waiting
// (a block that waited at a barrier per 1024 columns). So a block
// converts A once into shared memory, as float32 (all of K when 48 KiB holds it), laid out so that a
// warp's 16-byte reads are conflict-free; each warp takes two rows of W, so each value of A read serves
// both; and each lane requests its next chunk of W before it multiplies the current one.
#include <algorithm>

#include "backends/cuda/cuda_nbits.h"
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

constexpr int kWarps = 8;                       // warps per block of the fused kernel
constexpr int kRowsPerWarp = 2;                 // rows of W per warp
constexpr int kBlockRows = kWarps * kRowsPerWarp;
constexpr int kSlice = 1024;                    // a group of A's columns: 32 lanes x 32 values
constexpr int kSliceBytes = 48 * 1024;          // shared memory for A's slice (no opt-in past 48 KiB)

// Group column k (0..1023) lives at this float of the group: lane k / 32's values 4j..4j+3
// (j = (k % 32) / 4) are the 16 bytes at (j · 32 + lane) · 4, so a warp reading one j reads 512
// contiguous bytes.
__device__ __forceinline__ int slice_index(int k) { return (((k & 31) >> 2) * 32 + (k >> 5)) * 4 + (k & 3); }

// The 16 bytes (32 values) of chunk c of a row whose bytes start at `row`, `row_bytes` long: one 16-byte
// load when kAligned (rows a multiple of 16 bytes), else two 8-byte ones (the second only inside the
// row; zeros past it).
template <bool kAligned>
__device__ __forceinline__ void load_w(const uint8_t* row, int64_t row_bytes, int64_t c, uint32_t (&q)[4]) {
  if constexpr (kAligned) {
    const uint4 r = __ldg(reinterpret_cast<const uint4*>(row) + c);
    q[0] = r.x, q[1] = r.y, q[2] = r.z, q[3] = r.w;
  } else {
    const uint2 r0 = __ldg(reinterpret_cast<const uint2*>(row) + 2 * c);
    q[0] = r0.x, q[1] = r0.y, q[2] = 0, q[3] = 0;
    if (c * 16 + 8 < row_bytes) {
      const uint2 r1 = __ldg(reinterpret_cast<const uint2*>(row) + 2 * c + 1);
      q[2] = r1.x, q[3] = r1.y;
    }
  }
}

// The 16 values in words q[2h], q[2h + 1] (values 16h .. 16h + 15 of a chunk) dequantized.
__device__ __forceinline__ void dequantize16(const uint32_t (&q)[4], int h, float s, float z, float (&v)[16]) {
  const float zs = -z * s;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const uint32_t word = q[2 * h + w], lo = word & 0x0F0F0F0Fu, hi = (word >> 4) & 0x0F0F0F0Fu;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // bytes [nibble, 0, 0, 0x4B]: 2^23 + nibble as a float
      const uint32_t sel = static_cast<uint32_t>(i) | 0x7650u;
      v[8 * w + 2 * i] = fmaf(__uint_as_float(__byte_perm(lo, 0x4B000000u, sel)) - 8388608.f, s, zs);
      v[8 * w + 2 * i + 1] = fmaf(__uint_as_float(__byte_perm(hi, 0x4B000000u, sel)) - 8388608.f, s, zs);
    }
  }
}

// The scale and zero point of row n's block `blk`.
template <typename T>
__device__ __forceinline__ void block_params(const NBitsArgs& w, int64_t n, int64_t blocks, int64_t blk, float& s, float& z) {
  s = convert<float>(static_cast<const T*>(w.scales)[n * blocks + blk]);
  z = 8.f;
  if (w.zp_packed) z = static_cast<float>((w.zp_packed[n * ((blocks + 1) / 2) + (blk >> 1)] >> ((blk & 1) * 4)) & 15);
  else if (w.zp_float) z = convert<float>(static_cast<const T*>(w.zp_float)[n * blocks + blk]);
}

// Row n's chunk of 32 values at kc (kc < K): its bytes, and the scale and zero point of each half (one
// block each; the same block from 32 values up; a second half wholly past K gets none).
template <typename T, bool kAlignedW>
struct WChunk {
  uint32_t q[4] = {};
  float s[2] = {}, z[2] = {};
  __device__ __forceinline__ void load(const NBitsArgs& w, int64_t n, int64_t blocks, int64_t row_bytes, int64_t kc, int shift) {
    load_w<kAlignedW>(w.b + n * row_bytes, row_bytes, kc / 32, q);
    block_params<T>(w, n, blocks, kc >> shift, s[0], z[0]);
    if (w.block > 16) s[1] = s[0], z[1] = z[0];
    else if (kc + 16 < w.K) block_params<T>(w, n, blocks, (kc + 16) >> shift, s[1], z[1]);
  }
};

// y [M, N] (M <= MR) for kBlockRows rows of W per block. A is staged in shared memory as float32 a
// slice of `cols` columns at a time (a multiple of kSlice; usually all of K: one wait per block), in
// groups of kSlice permuted by slice_index, zeros past K. Then each lane takes its chunk of 32 values
// in each group of the slice for both its warp's rows of W, the next chunk's bytes requested before
// the current one is multiplied; 16 values at a time, each value of A read once for both rows.
template <typename T, int MR, bool kVecA, bool kAlignedW>
__global__ void __launch_bounds__(kWarps * 32) nbits_rows_kernel(NBitsArgs w, int block_shift, int M, int cols, const T* __restrict__ a,
                                                                const T* __restrict__ bias, T* __restrict__ y) {
  extern __shared__ float4 slice4[];  // A's slice, [M][cols] floats, each kSlice permuted by slice_index
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t blocks = (w.K + w.block - 1) / w.block, row_bytes = blocks * (w.block / 2);
  int64_t n[kRowsPerWarp];
  bool live[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    n[r] = int64_t{blockIdx.x} * kBlockRows + warp * kRowsPerWarp + r;
    live[r] = n[r] < w.N;
  }
  float acc[MR][kRowsPerWarp];
#pragma unroll
  for (int m = 0; m < MR; ++m)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) acc[m][r] = 0.f;
  for (int64_t k0 = 0; k0 < w.K; k0 += cols) {
    __syncthreads();  // the previous slice is no longer read
    for (int i = threadIdx.x; i < M * (cols / 4); i += kWarps * 32) {
      const int m = i / (cols / 4), k = (i % (cols / 4)) * 4;
      const int64_t g = k0 + k;
      const T* src = a + m * w.K + g;
      float4 v;
      if (kVecA && sizeof(T) == 2 && g + 4 <= w.K) {
        const uint2 raw = __ldg(reinterpret_cast<const uint2*>(src));  // four 16-bit values
        const T* e = reinterpret_cast<const T*>(&raw);
        v = make_float4(convert<float>(e[0]), convert<float>(e[1]), convert<float>(e[2]), convert<float>(e[3]));
      } else {
        v.x = g < w.K ? convert<float>(src[0]) : 0.f;
        v.y = g + 1 < w.K ? convert<float>(src[1]) : 0.f;
        v.z = g + 2 < w.K ? convert<float>(src[2]) : 0.f;
        v.w = g + 3 < w.K ? convert<float>(src[3]) : 0.f;
      }
      slice4[(m * cols + (k / kSlice) * kSlice + slice_index(k % kSlice)) / 4] = v;
    }
    __syncthreads();
    const int64_t end = k0 + cols < w.K ? k0 + cols : w.K;
    int64_t kc = k0 + 32 * lane;  // this lane's chunk in the slice's first group
    WChunk<T, kAlignedW> cur[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (kc < end && live[r]) cur[r].load(w, n[r], blocks, row_bytes, kc, block_shift);
    for (int group = 0; kc < end; ++group, kc += kSlice) {
      WChunk<T, kAlignedW> next[kRowsPerWarp];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
        if (kc + kSlice < end && live[r]) next[r].load(w, n[r], blocks, row_bytes, kc + kSlice, block_shift);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float wv[kRowsPerWarp][16];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) dequantize16(cur[r].q, h, cur[r].s[h], cur[r].z[h], wv[r]);
#pragma unroll
        for (int m = 0; m < MR; ++m) {
          if (m >= M) break;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float4 av = slice4[(m * cols + group * kSlice) / 4 + (4 * h + j) * 32 + lane];
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) {
              float p = acc[m][r];
              p = fmaf(wv[r][4 * j], av.x, p);
              p = fmaf(wv[r][4 * j + 1], av.y, p);
              p = fmaf(wv[r][4 * j + 2], av.z, p);
              acc[m][r] = fmaf(wv[r][4 * j + 3], av.w, p);
            }
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) cur[r] = next[r];
    }
  }
#pragma unroll
  for (int m = 0; m < MR; ++m) {
    if (m >= M) break;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      float v = acc[m][r];
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0 && live[r]) y[m * w.N + n[r]] = convert<T>(bias ? v + convert<float>(bias[n[r]]) : v);
    }
  }
}

// W as T [N, K]: thread x of block (x, y) dequantizes 16 values of rows y, y + gridDim.y, ...
template <typename T, bool kVec>
__global__ void nbits_dequantize_kernel(NBitsArgs w, int block_shift, T* __restrict__ out) {
  const int64_t blocks = (w.K + w.block - 1) / w.block, row_bytes = blocks * (w.block / 2);
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x, k0 = c * 16;  // this thread's 16 values
  if (k0 >= w.K) return;
  for (int64_t n = blockIdx.y; n < w.N; n += gridDim.y) {
    const uint2 r = __ldg(reinterpret_cast<const uint2*>(w.b + n * row_bytes) + c);
    const uint32_t q[4] = {r.x, r.y, 0, 0};
    float s, z, v[16];
    block_params<T>(w, n, blocks, k0 >> block_shift, s, z);
    dequantize16(q, 0, s, z, v);
    T* dst = out + n * w.K + k0;
    if (kVec) {
      constexpr int kPer = 16 / sizeof(T);
#pragma unroll
      for (int j = 0; j < 16; j += kPer) {
        uint4 raw;
        T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
        for (int t = 0; t < kPer; ++t) e[t] = convert<T>(v[j + t]);
        *reinterpret_cast<uint4*>(dst + j) = raw;
      }
    } else {
      const int64_t valid = w.K - k0;
#pragma unroll
      for (int j = 0; j < 16; ++j)
        if (j < valid) dst[j] = convert<T>(v[j]);
    }
  }
}

// log2(block): a value's block is its index shifted right by this.
int block_shift_of(int64_t block) {
  int s = 0;
  while ((int64_t{1} << s) < block) ++s;
  return s;
}

// 16-byte loads of W where its rows are a multiple of 16 bytes, 8-byte loads of A where its rows allow.
template <typename T, int MR>
void rows_launch(const NBitsArgs& w, const T* a, const T* bias, T* y, int M, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>((w.N + kBlockRows - 1) / kBlockRows);
  const int shift = block_shift_of(w.block);
  const int64_t row_bytes = (w.K + w.block - 1) / w.block * (w.block / 2);
  const bool aligned_w = row_bytes % 16 == 0 && aligned16(w.b);
  const bool vec_a = reinterpret_cast<uintptr_t>(a) % 8 == 0 && w.K % 4 == 0 && sizeof(T) == 2;
  // As many groups of kSlice columns as K needs and 48 KiB holds for M rows (M 8: one group at a time).
  const int64_t groups = std::min<int64_t>((w.K + kSlice - 1) / kSlice, kSliceBytes / (int64_t{M} * kSlice * 4));
  const int cols = static_cast<int>(groups * kSlice);
  const size_t smem = static_cast<size_t>(M) * cols * sizeof(float);
  if (vec_a && aligned_w) nbits_rows_kernel<T, MR, true, true><<<grid, kWarps * 32, smem, stream>>>(w, shift, M, cols, a, bias, y);
  else if (aligned_w) nbits_rows_kernel<T, MR, false, true><<<grid, kWarps * 32, smem, stream>>>(w, shift, M, cols, a, bias, y);
  else if (vec_a) nbits_rows_kernel<T, MR, true, false><<<grid, kWarps * 32, smem, stream>>>(w, shift, M, cols, a, bias, y);
  else nbits_rows_kernel<T, MR, false, false><<<grid, kWarps * 32, smem, stream>>>(w, shift, M, cols, a, bias, y);
}

template <typename T>
int rows_typed(const NBitsArgs& w, const void* a, const void* bias, void* y, int64_t M, cudaStream_t stream) {
  const T* at = static_cast<const T*>(a);
  const T* bt = static_cast<const T*>(bias);
  T* yt = static_cast<T*>(y);
  const int m = static_cast<int>(M);
  if (M <= 1) rows_launch<T, 1>(w, at, bt, yt, m, stream);
  else if (M <= 2) rows_launch<T, 2>(w, at, bt, yt, m, stream);
  else if (M <= 4) rows_launch<T, 4>(w, at, bt, yt, m, stream);
  else rows_launch<T, 8>(w, at, bt, yt, m, stream);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int dequantize_typed(const NBitsArgs& w, void* out, cudaStream_t stream) {
  const int64_t per_row = (w.K + 15) / 16;  // threads per row, 16 values each
  const dim3 grid(static_cast<unsigned>((per_row + 127) / 128), static_cast<unsigned>(w.N < 65535 ? w.N : 65535));
  const int shift = block_shift_of(w.block);
  if (w.K % 16 == 0 && aligned16(out)) nbits_dequantize_kernel<T, true><<<grid, 128, 0, stream>>>(w, shift, static_cast<T*>(out));
  else nbits_dequantize_kernel<T, false><<<grid, 128, 0, stream>>>(w, shift, static_cast<T*>(out));
  return static_cast<int>(cudaGetLastError());
}

bool valid(const NBitsArgs& w) {
  return w.K > 0 && w.N > 0 && w.block >= 16 && (w.block & (w.block - 1)) == 0 && w.b && w.scales &&
         reinterpret_cast<uintptr_t>(w.b) % 8 == 0;
}

}  // namespace

int launch_nbits_rows(const NBitsArgs& w, const void* a, const void* bias, void* y, int64_t M, cudaStream_t stream) {
  if (!valid(w) || M < 1 || M > kNBitsFusedRows) return static_cast<int>(cudaErrorInvalidValue);
  switch (w.elem) {
    case kElemF32: return rows_typed<float>(w, a, bias, y, M, stream);
    case kElemF16: return rows_typed<__half>(w, a, bias, y, M, stream);
    case kElemBF16: return rows_typed<__nv_bfloat16>(w, a, bias, y, M, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

int launch_nbits_dequantize(const NBitsArgs& w, void* out, cudaStream_t stream) {
  if (!valid(w)) return static_cast<int>(cudaErrorInvalidValue);
  switch (w.elem) {
    case kElemF32: return dequantize_typed<float>(w, out, stream);
    case kElemF16: return dequantize_typed<__half>(w, out, stream);
    case kElemBF16: return dequantize_typed<__nv_bfloat16>(w, out, stream);
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace kiln::cuda
