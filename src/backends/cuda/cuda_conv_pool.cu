// backends/cuda/cuda_conv_pool.cu — kiln.ConvPool: an image network's stem (a convolution of a few
// input channels, its bias and ReLU, a max pool, and the quantization after it) in one kernel.
//
// Why: ResNet-50's stem at batch 256 ran as five steps — Cast and Transpose of the float32 input,
// cuDNN's convolution on a copy padded to 4 channels (0.68-0.77 ms, H200), the max pool, and
// QuantizeLinear — writing and reading the 411 MB float16 convolution output in between. Here the
// input is read once (float32, channels-first, as the model takes it) and only the pooled int8
// (51 MB) or float16 result is written.
//
// One block takes a tile of 8x7 pooled outputs of one image and all 64 output channels, persistent
// over tiles (the packed weights stay in shared memory):
// 1. the input patch under the tile's convolution outputs goes to shared memory as float16, columns
//    of cs channels (zeros outside the image: the convolution's padding) — a channels-first float32
//    input (the model's own) copied asynchronously in 16-byte chunks one tile ahead, then converted;
// 2. the convolution outputs under the pool windows ((7-1)·stride + window by (8-1)·stride + window,
//    15x17 for ResNet) are a GEMM of M = those pixels, N = 64, K = kh rows of lp taps: mma.sync
//    m16n8k16 (float16 in, float32 sums), units of 16 pixels x 64 channels; a pixel's K row is read
//    straight from the patch (a kernel row's taps are contiguous there: (column, channel) pairs,
//    32-bit loads at an offset table; when a row's taps are odd in number the last pair's second
//    value is the next column's, under a zero weight — an infinite input there would make a NaN);
// 3. bias, ReLU, then the value as the output type into a shared tile — quantized first when the
//    output is int8 (quantization is monotone, so the max of quantized values is the quantized max;
//    from the float32 sum, rne(v · (1 / y_scale)) + zero point saturated, as kiln's int8 epilogues
//    do: the unfused engine rounded v to float16 first, which this skips);
//    convolution outputs outside the image get the type's lowest value, which no max keeps;
// 4. the max pool over the shared tile, 16 bytes per thread, to Y [N, poh, pow, 64].
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cuda_mma.cuh"
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

// A block's tile: 8 x 7 pooled outputs — for a 3x3/2 pool, 17 x 15 = 255 convolution outputs, 16
// GEMM row blocks of 16, two for each of the 8 warps.
constexpr int kThreads = 256, kTileH = 8, kTileW = 7, kM = 64;
constexpr size_t kMaxSmem = 200 * 1024;

// Where everything sits in shared memory, and the tile's sizes.
struct Geo {
  int ch, cw, rows, mtiles;  // convolution outputs under one tile of pooled outputs
  int ih, iw, xpitch;        // the input patch (xpitch: float16 elements a row)
  int wpitch, ctpitch;       // packed weight row (float16 elements), shared output tile row (bytes)
  int srows, nk;             // channels-first float32 input: the patch's rows, 16-byte chunks a row (staged)
  int off_koff, off_pix, off_x, off_ct, off_stage, bytes;
};

inline int up(int v, int a) { return (v + a - 1) / a * a; }

Geo geometry(const ConvPoolArgs& a) {
  Geo g{};
  g.ch = (kTileH - 1) * a.psh + a.pkh;
  g.cw = (kTileW - 1) * a.psw + a.pkw;
  g.rows = g.ch * g.cw;
  g.mtiles = (g.rows + 15) / 16;
  g.ih = (g.ch - 1) * a.sh + a.kh;
  g.iw = (g.cw - 1) * a.sw + a.kw;
  // + 2: a K pair may reach one element past the last column (a zero weight's partner).
  g.xpitch = up(g.iw * a.cs + 2, 2);
  // 16 bytes more than K: rows 8 apart start in different 16-byte bank groups for ldmatrix.
  g.wpitch = a.kp + 8;
  // Output tile rows: 64 channels + 16 bytes, so the epilogue's 8 rows a warp writes at once fall in
  // different banks.
  g.ctpitch = a.int8_out ? kM + 16 : kM * 2 + 16;
  int at = kM * g.wpitch * 2;
  g.off_koff = at;
  at += up(a.kp / 2 * 4, 16);
  g.off_pix = at;
  at += g.mtiles * 16 * 4;
  g.off_x = at;
  at += up(g.ih * g.xpitch * 2, 16);
  g.off_ct = at;
  at += up(g.rows * g.ctpitch, 16);
  // Channels-first float32 input is copied asynchronously, one tile ahead, in aligned 16-byte chunks:
  // nk of them cover a row's iw values from any start (the row's first value rounded down to 4).
  g.srows = a.c * g.ih;
  g.nk = (g.iw + 3 + 3) / 4;
  g.off_stage = at;
  if (a.x_f32 && a.x_nchw) at += g.srows * g.nk * 16;
  g.bytes = at;
  return g;
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// rne(t) saturated to int8, in the low byte.
__device__ __forceinline__ uint32_t to_s8(float t) {
  uint32_t r;
  asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(r) : "f"(t));
  return r;
}

__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// The GEMM of one tile: units of 16 convolution outputs x 64 channels, two per warp (K in kSteps
// steps of 16 when given, else a.kp / 16), each then through bias, ReLU and the output type into the
// shared output tile; outputs outside the image get the type's lowest value.
template <bool kI8, int kSteps>
__device__ __forceinline__ void gemm_units(const ConvPoolArgs& a, const Geo& g, const int* koff, const int* pix, uint32_t xs_s,
                                           uint32_t ws_lane, unsigned char* ct, const float (&bias)[16], float inv_scale,
                                           float zero, int cy0, int cx0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
  const int steps = kSteps ? kSteps : a.kp / 16;
  const uint32_t pair_bytes = 16 * g.wpitch * 2;
  for (int u = warp; u < g.mtiles; u += kThreads / 32) {
    const int r0 = u * 16 + gq;
    const uint32_t x0 = xs_s + pix[r0] * 2, x1 = xs_s + pix[r0 + 8] * 2;
    float acc[8][4] = {};
#pragma unroll(kSteps ? kSteps : 1)
    for (int ks = 0; ks < steps; ++ks) {
      const uint32_t o0 = koff[ks * 8 + tq] * 2, o1 = koff[ks * 8 + tq + 4] * 2;
      const uint32_t af[4] = {lds32(x0 + o0), lds32(x1 + o0), lds32(x0 + o1), lds32(x1 + o1)};
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        uint32_t b0, b1, b2, b3;
        ldmatrix_x4(ws_lane + p * pair_bytes + ks * 32, b0, b1, b2, b3);
        mma_f16(acc[2 * p], af, b0, b1);
        mma_f16(acc[2 * p + 1], af, b2, b3);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + h * 8;
      if (row >= g.rows) continue;
      const int ly = row / g.cw, cy = cy0 + ly, cx = cx0 + (row - ly * g.cw);
      const bool valid = cy >= 0 && cy < a.oh && cx >= 0 && cx < a.ow;
      unsigned char* dst = ct + row * g.ctpitch + 2 * tq * (kI8 ? 1 : 2);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        if (kI8) {
          // bias[] holds bias / y_scale + zero (epi): relu(acc + b) / s + z = max(acc / s + b / s + z, z).
          // The ReLUs keep NaN (fmaxf would make it z or 0), as the unfused Relu does.
          float t0 = fmaf(acc[nt][2 * h], inv_scale, bias[2 * nt]), t1 = fmaf(acc[nt][2 * h + 1], inv_scale, bias[2 * nt + 1]);
          if (a.relu) {
            t0 = t0 < zero ? zero : t0;
            t1 = t1 < zero ? zero : t1;
          }
          const uint32_t q = valid ? __byte_perm(to_s8(t0), to_s8(t1), 0x0040) : 0x8080u;
          *reinterpret_cast<unsigned short*>(dst + nt * 8) = static_cast<unsigned short>(q);
        } else {
          float v0 = acc[nt][2 * h] + bias[2 * nt], v1 = acc[nt][2 * h + 1] + bias[2 * nt + 1];
          if (a.relu) {
            v0 = v0 < 0.f ? 0.f : v0;
            v1 = v1 < 0.f ? 0.f : v1;
          }
          const __half lowest = __ushort_as_half(0xfc00);  // -inf
          *reinterpret_cast<__half2*>(dst + nt * 16) = valid ? __floats2half2_rn(v0, v1) : __halves2half2(lowest, lowest);
        }
      }
    }
  }
}

__device__ __forceinline__ uint4 max16(uint4 a, uint4 b, bool i8) {
  if (i8) return make_uint4(__vmaxs4(a.x, b.x), __vmaxs4(a.y, b.y), __vmaxs4(a.z, b.z), __vmaxs4(a.w, b.w));
  uint4 r;
  const __half2* p = reinterpret_cast<const __half2*>(&a);
  const __half2* q = reinterpret_cast<const __half2*>(&b);
  __half2* o = reinterpret_cast<__half2*>(&r);
  for (int i = 0; i < 4; ++i) o[i] = __hmax2(p[i], q[i]);
  return r;
}

// A warp's rows of the patch, warp, warp + 8, ...: row = c·ih + ly (channels-first; channels-last has
// one channel of rows), followed without a division per row.
struct RowWalk {
  int c = 0, ly;
  __device__ __forceinline__ RowWalk(int row, int ih) : ly(row) {
    while (ly >= ih) ly -= ih, ++c;
  }
  __device__ __forceinline__ void next(int ih) {
    ly += kThreads / 32;
    while (ly >= ih) ly -= ih, ++c;
  }
};

// The staged chunks a thread handles, i = threadIdx.x + 256·j over (row, chunk k) of the patch, with
// row = c·ih + ly; followed without a division per item.
struct ChunkWalk {
  int row, k, c, ly;
  __device__ __forceinline__ ChunkWalk(int i, const Geo& g) {
    row = i / g.nk;
    k = i - row * g.nk;
    c = row / g.ih;
    ly = row - c * g.ih;
  }
  // sq, sr: kThreads = sq·nk + sr.
  __device__ __forceinline__ void next(int sq, int sr, const Geo& g) {
    k += sr;
    int dr = sq;
    if (k >= g.nk) k -= g.nk, ++dr;
    row += dr;
    ly += dr;
    while (ly >= g.ih) ly -= g.ih, ++c;
  }
};

// The first input column of tile t's patch, and that column rounded down to a multiple of 4.
__device__ __forceinline__ int patch_x0(const ConvPoolArgs& a, int rem, int tiles_x) {
  return ((rem % tiles_x) * kTileW * a.psw - a.ppw) * a.sw - a.pw;
}

// Tile t's channels-first float32 patch to shared memory at `dst`, asynchronously, in 16-byte chunks
// of each row from the patch's first column rounded down to 4 (zeros outside the image: W % 4 == 0,
// so a chunk is wholly inside or outside); one commit group.
__device__ __forceinline__ void stage_patch(const ConvPoolArgs& a, const Geo& g, uint32_t dst, int64_t t, int tiles_x,
                                            int per_image, int sq, int sr) {
  const int img = static_cast<int>(t / per_image), rem = static_cast<int>(t % per_image);
  const int iy0 = ((rem / tiles_x) * kTileH * a.psh - a.pph) * a.sh - a.ph;
  const int xa = patch_x0(a, rem, tiles_x) & ~3;
  const float* x = static_cast<const float*>(a.x);
  const float* image = x + static_cast<int64_t>(img) * a.c * a.h * a.w_in;
  const int items = g.srows * g.nk;
  ChunkWalk w(threadIdx.x, g);
  for (int i = threadIdx.x; i < items; i += kThreads, w.next(sq, sr, g)) {
    const int iy = iy0 + w.ly, ix = xa + 4 * w.k;
    const bool valid = iy >= 0 && iy < a.h && ix >= 0 && ix < a.w_in;
    cp_async16(dst + i * 16, valid ? image + (static_cast<int64_t>(w.c) * a.h + iy) * a.w_in + ix : x, valid);
  }
  cp_commit();
}

template <typename XT, bool kNchw, bool kI8>
__global__ void __launch_bounds__(kThreads, 3) conv_pool_kernel(ConvPoolArgs a, Geo g) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t* ws = reinterpret_cast<uint16_t*>(smem);
  int* koff = reinterpret_cast<int*>(smem + g.off_koff);
  int* pix = reinterpret_cast<int*>(smem + g.off_pix);
  __half* xs = reinterpret_cast<__half*>(smem + g.off_x);
  unsigned char* ct = smem + g.off_ct;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const XT* x = static_cast<const XT*>(a.x);

  // Once per block: the weights, the K pairs' offsets in the patch, each GEMM row's pixel in the
  // patch, and a zero patch (padding channels and row tails stay zero; tiles write the rest).
  const int kc = a.kp / 8;  // 16-byte chunks of a weight row
  for (int i = tid; i < kM * kc; i += kThreads)
    *reinterpret_cast<uint4*>(ws + (i / kc) * g.wpitch + (i % kc) * 8) =
        *reinterpret_cast<const uint4*>(a.w + static_cast<int64_t>(i / kc) * a.kp + (i % kc) * 8);
  for (int i = tid; i < a.kp / 2; i += kThreads) {
    const int k = 2 * i, r = k / a.lp;
    koff[i] = r < a.kh ? r * g.xpitch + (k - r * a.lp) : 0;
  }
  for (int i = tid; i < g.mtiles * 16; i += kThreads)
    pix[i] = i < g.rows ? (i / g.cw) * a.sh * g.xpitch + (i % g.cw) * a.sw * a.cs : 0;
  for (int i = tid; i < g.ih * g.xpitch; i += kThreads) xs[i] = __ushort_as_half(0);
  __syncthreads();

  const int tiles_x = (a.pow + kTileW - 1) / kTileW, per_image = ((a.poh + kTileH - 1) / kTileH) * tiles_x;
  const int64_t tiles = static_cast<int64_t>(a.n) * per_image;
  // Channels-first float32 rows of a multiple of 4 values (16-byte aligned): copied asynchronously.
  const bool async = sizeof(XT) == 4 && kNchw && a.x_vec;
  const int sq = kThreads / g.nk, sr = kThreads % g.nk;
  if (async && blockIdx.x < tiles) stage_patch(a, g, smem_addr(smem + g.off_stage), blockIdx.x, tiles_x, per_image, sq, sr);
  const int es = kI8 ? 1 : 2;
  const uint32_t xs_s = smem_addr(xs);
  // This lane's ldmatrix row in the weights: n-tile pair 0, k 0 (cuda_mma.cuh's x4 layout).
  const uint32_t ws_lane = smem_addr(ws) + (((((lane >> 4) << 3) + (lane & 7)) * g.wpitch + ((lane >> 3) & 1) * 8) * 2);
  // The bias of channels nt·8 + 2·(lane % 4) + {0, 1}, nt 0..7; for int8 output in the quantized
  // domain, bias / y_scale + zero point (the epilogue is then one fma, a max and a conversion).
  const float inv_scale = 1.f / a.y_scale, zero = static_cast<float>(a.y_zero);
  float bias[16];
  for (int nt = 0; nt < 8; ++nt)
    for (int e = 0; e < 2; ++e) {
      const float b = a.bias[nt * 8 + 2 * (lane & 3) + e];
      bias[2 * nt + e] = kI8 ? fmaf(b, inv_scale, zero) : b;
    }
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int img = static_cast<int>(t / per_image), rem = static_cast<int>(t % per_image);
    const int py0 = rem / tiles_x * kTileH, px0 = rem % tiles_x * kTileW;
    const int cy0 = py0 * a.psh - a.pph, cx0 = px0 * a.psw - a.ppw;
    const int iy0 = cy0 * a.sh - a.ph, ix0 = cx0 * a.sw - a.pw;

    // 1. The input patch, as float16: float32 from the staged copy (then the next tile's copy starts,
    //    to land while this tile computes), float16 read here.
    if (async) {
      cp_wait<0>();
      __syncthreads();
      const float4* stage = reinterpret_cast<const float4*>(smem + g.off_stage);
      const int d = ix0 - (ix0 & ~3);  // the patch's first column within the first chunk
      const int items = g.srows * g.nk;
      ChunkWalk w(tid, g);
      for (int i = tid; i < items; i += kThreads, w.next(sq, sr, g)) {
        const float4 v = stage[i];
        const float f[4] = {v.x, v.y, v.z, v.w};
        __half* row = xs + w.ly * g.xpitch + w.c;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int lx = 4 * w.k + q - d;
          if (lx >= 0 && lx < g.iw) row[lx * a.cs] = __float2half_rn(f[q]);
        }
      }
      __syncthreads();
      if (t + gridDim.x < tiles) stage_patch(a, g, smem_addr(smem + g.off_stage), t + gridDim.x, tiles_x, per_image, sq, sr);
    } else {
      if (kNchw) {
        RowWalk w(warp, g.ih);
        for (int row = warp; row < a.c * g.ih; row += kThreads / 32, w.next(g.ih)) {
          const int c = w.c, ly = w.ly, iy = iy0 + ly;
          const bool y_in = iy >= 0 && iy < a.h;
          const XT* src = x + ((static_cast<int64_t>(img) * a.c + c) * a.h + (y_in ? iy : 0)) * a.w_in;
          for (int lx = lane; lx < g.iw; lx += 32) {
            const int ix = ix0 + lx;
            const float v = y_in && ix >= 0 && ix < a.w_in ? to_float(src[ix]) : 0.f;
            xs[ly * g.xpitch + lx * a.cs + c] = __float2half_rn(v);
          }
        }
      } else {
        for (int ly = warp; ly < g.ih; ly += kThreads / 32) {
          const int iy = iy0 + ly;
          const bool y_in = iy >= 0 && iy < a.h;
          const XT* src = x + (static_cast<int64_t>(img) * a.h + (y_in ? iy : 0)) * a.w_in * a.c;
          for (int e = lane; e < g.iw * a.c; e += 32) {
            const int lx = e / a.c, c = e - lx * a.c, ix = ix0 + lx;
            const float v = y_in && ix >= 0 && ix < a.w_in ? to_float(src[static_cast<int64_t>(ix) * a.c + c]) : 0.f;
            xs[ly * g.xpitch + lx * a.cs + c] = __float2half_rn(v);
          }
        }
      }
      __syncthreads();
    }

    // 2-3. GEMM units of 16 pixels x 64 channels, then bias, ReLU and the output type to the tile.
    if (a.kp == 160)  // ResNet's stem (7x7 taps of 3 channels): K known here, the loop unrolled
      gemm_units<kI8, 10>(a, g, koff, pix, xs_s, ws_lane, ct, bias, inv_scale, zero, cy0, cx0);
    else
      gemm_units<kI8, 0>(a, g, koff, pix, xs_s, ws_lane, ct, bias, inv_scale, zero, cy0, cx0);
    __syncthreads();

    // 4. The max pool: each thread 16 bytes of one pooled pixel's channels.
    const int chunks = kM * es / 16;
    for (int i = tid; i < kTileH * kTileW * chunks; i += kThreads) {
      const int q = i % chunks, p = i / chunks, ly = p / kTileW, lx = p % kTileW;
      const int py = py0 + ly, px = px0 + lx;
      if (py >= a.poh || px >= a.pow) continue;
      const unsigned char* base = ct + (ly * a.psh * g.cw + lx * a.psw) * g.ctpitch + q * 16;
      uint4 m = *reinterpret_cast<const uint4*>(base);
      for (int dy = 0; dy < a.pkh; ++dy)
        for (int dx = 0; dx < a.pkw; ++dx)
          if (dy || dx) m = max16(m, *reinterpret_cast<const uint4*>(base + (dy * g.cw + dx) * g.ctpitch), kI8);
      unsigned char* y = static_cast<unsigned char*>(a.y);
      *reinterpret_cast<uint4*>(y + ((static_cast<int64_t>(img) * a.poh + py) * a.pow + px) * kM * es + q * 16) = m;
    }
    // The next tile's patch may be written now (the pool reads only the output tile); its GEMM
    // writes the output tile only after the barrier that follows the patch.
  }
}

template <typename XT, bool kNchw, bool kI8>
int launch_one(const ConvPoolArgs& a, const Geo& g, cudaStream_t stream) {
  auto* kernel = conv_pool_kernel<XT, kNchw, kI8>;
  // Above 48 KiB of dynamic shared memory a kernel must opt in; once per instance, for the most any
  // geometry here takes.
  static const cudaError_t opted = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem);
  if (opted != cudaSuccess) return static_cast<int>(opted);
  int per_sm = 0, device = 0, sms = 0;
  cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, static_cast<size_t>(g.bytes));
  if (e == cudaSuccess) e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return static_cast<int>(e);
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  const int64_t tiles = static_cast<int64_t>(a.n) * ((a.poh + kTileH - 1) / kTileH) * ((a.pow + kTileW - 1) / kTileW);
  const int64_t grid = tiles < static_cast<int64_t>(per_sm) * sms ? tiles : static_cast<int64_t>(per_sm) * sms;
  kernel<<<static_cast<unsigned>(grid), kThreads, static_cast<size_t>(g.bytes), stream>>>(a, g);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

void conv_pool_pack_k(int c, int kh, int kw, int sw, int* cs, int* lp, int* kp) {
  // A column's first element must sit at an even float16 offset in the patch (32-bit loads of K
  // pairs): column x starts at x·sw·cs.
  *cs = (sw * c) % 2 == 0 ? c : c + 1;
  *lp = (kw * *cs + 1) / 2 * 2;
  *kp = (kh * *lp + 15) / 16 * 16;
}

size_t conv_pool_smem(const ConvPoolArgs& a) {
  if (a.c < 1 || a.c > 4 || a.kp <= 0 || a.kp % 16 != 0 || a.lp <= 0 || a.cs < a.c || a.pkh < 1 || a.pkw < 1 ||
      a.psh < 1 || a.psw < 1 || a.sh < 1 || a.sw < 1 || a.kh < 1 || a.kw < 1 || a.kh > 16 || a.kw > 16 || a.pkh > 8 ||
      a.pkw > 8 || a.psh > 8 || a.psw > 8 || a.sh > 8 || a.sw > 8)
    return 0;
  ConvPoolArgs f32 = a;  // the most it can take: a float32 input's staged copy included
  f32.x_f32 = true;
  const Geo g = geometry(f32);
  return static_cast<size_t>(g.bytes) <= kMaxSmem ? static_cast<size_t>(g.bytes) : 0;
}

int launch_conv_pool(const ConvPoolArgs& a, cudaStream_t stream) {
  if (a.n <= 0 || a.poh <= 0 || a.pow <= 0) return cudaSuccess;
  if (conv_pool_smem(a) == 0) return cudaErrorInvalidValue;
  ConvPoolArgs v = a;
  v.x_vec = a.x_f32 && a.x_nchw && a.w_in % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const Geo g = geometry(v);
  if (v.x_f32) {
    if (v.x_nchw) return v.int8_out ? launch_one<float, true, true>(v, g, stream) : launch_one<float, true, false>(v, g, stream);
    return v.int8_out ? launch_one<float, false, true>(v, g, stream) : launch_one<float, false, false>(v, g, stream);
  }
  if (v.x_nchw) return v.int8_out ? launch_one<__half, true, true>(v, g, stream) : launch_one<__half, true, false>(v, g, stream);
  return v.int8_out ? launch_one<__half, false, true>(v, g, stream) : launch_one<__half, false, false>(v, g, stream);
}

}  // namespace kiln::cuda
