// bench/cuda_widen_probe.cu — how fast can GPT-2's half logits be widened into float32 rows?
//
// GPT-2's language-model head writes a half product X[M, P] (P = 50264, padded so cuBLASLt's rows are
// 16-byte aligned) and kiln's widen_rows kernel writes its first N = 50257 columns into the model's
// float32 logits Y[M, N] (M = 8192 at batch 64, sequence 128): 0.82 GB read, 1.65 GB written. In the
// session-64 profile that kernel took 0.90-0.93 ms (2.7 TB/s) where a float-to-float copy of the same
// rows ran at 4.2 TB/s. This probe times variants of the kernel side by side (CUDA graphs of 10 calls,
// best of 5 replays, cuda_probe_util.h) and checks that every variant writes exactly the bytes of the
// first one:
//   v0  kiln's kernel as of session 64: one row per block, one float4 piece per thread per iteration
//       (two 8-byte loads, one 16-byte store);
//   u4  the same pieces, four per thread per iteration, all loads issued before the stores;
//   u4s u4 with streaming stores (st.global.cs: the logits are not read again by the engine);
//   w2  16-byte loads: a thread makes two pieces (8 floats) from two aligned 16-byte words, two per
//       iteration;
//   w2s w2 with streaming stores;
//   shfl the next word from the neighbouring lane (one load per piece) — with a known defect, not mended:
//       a row's last piece reads its neighbour word from a lane that loaded none (12,287 wrong floats);
//       its time bounds what fewer loads could buy;
// and two references: a float4 copy of Y's bytes (1.65 GB read and written) and the widening of an
// aligned half matrix (the same bytes as the real case without the unaligned rows). Part two (below)
// runs the head's GEMM and the widening in row chunks on two streams, the GEMM confined to fewer SMs.
//
// Result (H200, 2026-11-30, bench/results/gpu_widen_probe_h200_2026-11-30.log): v0 0.90 ms (2.7 TB/s),
// u2 with 1024-thread blocks 0.69 ms (3.6 TB/s; kiln's kernel since), the aligned widening 0.64 ms; the
// 16-byte-load forms are slower (1.0-1.1 ms: two float4 stores per thread leave each warp's store half
// coalesced), as are persistent grids (0.85-0.89). Overlap: none — GEMM 0.94 + widening 0.69 = 1.65 ms
// one after the other, 1.71-2.08 ms in 2-16 chunks with the GEMM on 84-132 SMs.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -Ibench bench/cuda_widen_probe.cu -lcublasLt -o cuda_widen_probe
// Run:   ./cuda_widen_probe [M N P]   (default 8192 50257 50264)
#include "cuda_probe_util.h"

#include <string>

namespace {

__device__ __forceinline__ float h2f(uint16_t b) { return __half2float(__ushort_as_half(b)); }

__device__ __forceinline__ float4 piece(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3, int head) {
  const uint32_t w[4] = {w0, w1, w2, w3};
  uint16_t h[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int e = head + k;
    h[k] = static_cast<uint16_t>(w[e >> 1] >> ((e & 1) * 16));
  }
  return make_float4(h2f(h[0]), h2f(h[1]), h2f(h[2]), h2f(h[3]));
}

// Row r of X and Y: its head floats before Y's first 16-byte boundary and its tail after the last whole
// piece (written here as scalars), and the body's pieces: uint2 words of X, float4 pieces of Y.
struct Row {
  int head, body;
  const uint2* xv;
  float4* yv;
};

__device__ __forceinline__ Row begin_row(const __half* x, float* y, int r, int cols, int pitch) {
  const __half* xr = x + static_cast<int64_t>(r) * pitch;
  float* yr = y + static_cast<int64_t>(r) * cols;
  Row w;
  w.head = (4 - static_cast<int>((static_cast<int64_t>(r) * cols) % 4)) % 4;
  w.body = w.head < cols ? (cols - w.head) / 4 : 0;
  const int tail = w.head + w.body * 4;
  for (int c = threadIdx.x; c < w.head && c < cols; c += blockDim.x) yr[c] = __half2float(xr[c]);
  for (int c = tail + threadIdx.x; c < cols; c += blockDim.x) yr[c] = __half2float(xr[c]);
  w.xv = reinterpret_cast<const uint2*>(xr);
  w.yv = reinterpret_cast<float4*>(yr + w.head);
  return w;
}

__global__ void v0(const __half* __restrict__ x, float* __restrict__ y, int rows, int cols, int pitch) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const Row s = begin_row(x, y, r, cols, pitch);
    const uint2* xv = s.xv;
    float4* yv = s.yv;
    for (int j = threadIdx.x; j < s.body; j += blockDim.x) {
      const uint2 a = xv[j];
      const uint2 b = s.head ? xv[j + 1] : a;
      yv[j] = piece(a.x, a.y, b.x, b.y, s.head);
    }
  }
}

template <int U, bool kStream>
__global__ void unrolled(const __half* __restrict__ x, float* __restrict__ y, int rows, int cols, int pitch) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const Row s = begin_row(x, y, r, cols, pitch);
    const uint2* xv = s.xv;
    float4* yv = s.yv;
    const int bd = blockDim.x;
    for (int j0 = threadIdx.x; j0 < s.body; j0 += U * bd) {
      uint2 a[U], b[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + u * bd;
        if (j < s.body) {
          a[u] = __ldg(xv + j);
          b[u] = s.head ? __ldg(xv + j + 1) : a[u];
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + u * bd;
        if (j < s.body) {
          const float4 v = piece(a[u].x, a[u].y, b[u].x, b[u].y, s.head);
          if (kStream) __stcs(yv + j, v); else yv[j] = v;
        }
      }
    }
  }
}

// Two pieces (8 floats, halves head + 8q ... head + 8q + 7) per thread from 16-byte words q and q + 1.
template <int U, bool kStream>
__global__ void wide(const __half* __restrict__ x, float* __restrict__ y, int rows, int cols, int pitch) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const Row s = begin_row(x, y, r, cols, pitch);
    // Pairs of pieces; an odd last piece is written as scalars.
    const int pairs = s.body / 2;
    if ((s.body & 1) && threadIdx.x < 4) {
      const int c = s.head + 8 * pairs + static_cast<int>(threadIdx.x);
      y[static_cast<int64_t>(r) * cols + c] = __half2float(x[static_cast<int64_t>(r) * pitch + c]);
    }
    const uint4* xv = reinterpret_cast<const uint4*>(s.xv);
    float4* yv = s.yv;
    const int bd = blockDim.x;
    // Word q + 1 stays inside the padded row when head > 0: 8·pairs + head <= cols - 1 < pitch, and
    // the row's pitch is a multiple of 8 halves.
    for (int q0 = threadIdx.x; q0 < pairs; q0 += U * bd) {
      uint4 a[U], b[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int q = q0 + u * bd;
        if (q < pairs) {
          a[u] = __ldg(xv + q);
          b[u] = s.head ? __ldg(xv + q + 1) : a[u];
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int q = q0 + u * bd;
        if (q < pairs) {
          // Halves head + 0..7 of the 16 in words a, b: piece one from 32-bit words (head>>1)...
          const uint32_t w[8] = {a[u].x, a[u].y, a[u].z, a[u].w, b[u].x, b[u].y, b[u].z, b[u].w};
          float f[8];
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            const int e = s.head + k;
            f[k] = h2f(static_cast<uint16_t>(w[e >> 1] >> ((e & 1) * 16)));
          }
          const float4 p0 = make_float4(f[0], f[1], f[2], f[3]), p1 = make_float4(f[4], f[5], f[6], f[7]);
          if (kStream) {
            __stcs(yv + 2 * q, p0);
            __stcs(yv + 2 * q + 1, p1);
          } else {
            yv[2 * q] = p0;
            yv[2 * q + 1] = p1;
          }
        }
      }
    }
  }
}

// u<U> with word j + 1 taken from the next lane's registers (one load per piece; lane 31 loads its own).
template <int U>
__global__ void shuffled(const __half* __restrict__ x, float* __restrict__ y, int rows, int cols, int pitch) {
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const Row s = begin_row(x, y, r, cols, pitch);
    const uint2* xv = s.xv;
    float4* yv = s.yv;
    const int bd = blockDim.x, lane = threadIdx.x & 31;
    // The loop runs while any lane of the warp has a piece: every lane takes part in the shuffles.
    const int warp0 = threadIdx.x - lane;
    for (int b0 = warp0; b0 < s.body; b0 += U * bd) {
      uint2 a[U], nb[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = b0 + lane + u * bd;
        a[u] = j < s.body ? __ldg(xv + j) : make_uint2(0, 0);
        nb[u] = (lane == 31 && s.head && j < s.body) ? __ldg(xv + j + 1) : make_uint2(0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = b0 + lane + u * bd;
        uint2 b;
        b.x = __shfl_down_sync(0xffffffffu, a[u].x, 1);
        b.y = __shfl_down_sync(0xffffffffu, a[u].y, 1);
        if (lane == 31) b = nb[u];
        if (!s.head) b = a[u];
        if (j < s.body) yv[j] = piece(a[u].x, a[u].y, b.x, b.y, s.head);
      }
    }
  }
}

__global__ void copy4(const float4* __restrict__ x, float4* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[i];
}

__global__ void widen_aligned(const uint2* __restrict__ x, float4* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint2 a = x[i];
    y[i] = piece(a.x, a.y, 0, 0, 0);
  }
}

__global__ void fill_random(__half* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u;
    h ^= h >> 15;
    x[i] = __float2half((static_cast<float>(h & 0xffff) - 32768.0f) / 4096.0f);
  }
}

__global__ void count_diff(const uint32_t* a, const uint32_t* b, int64_t n, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    if (a[i] != b[i]) atomicAdd(bad, 1ull);
}


// Part two: the head's half GEMM X = A · W (A [M, 768], W [768, P]) and the widening of X into Y, with
// the rows in C chunks: chunk c's GEMM on the main stream confined to T SMs (cuBLASLt's SM count
// target), chunk c's widening on a second stream once that GEMM is done, so it can run on the SMs the
// GEMMs leave free. C = 1 and T = all is today's form.
void overlap(int M, int N, int P, __half* x, float* y, const float* ref_unused, unsigned long long* bad, int sms) {
  (void)ref_unused;
  const int K = 768;
  const LtBench b = lt_bench(M, K, N);
  std::vector<__half> ha, hw;
  random_a_w(M, K, N, P, ha, hw);
  const __half *a = to_device(ha), *w = to_device(hw);
  float* want;
  CK(cudaMalloc(&want, int64_t(M) * N * 4 + 16));
  cudaStream_t s2;
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> ev(18);
  for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  auto widen = [&](const __half* xs, float* ys, int rows, cudaStream_t st) {
    unrolled<2, false><<<rows, 1024, 0, st>>>(xs, ys, rows, N, P);
  };
  Gemm whole = plan(b.lt, M, P, K, b.ws_bytes, CUDA_R_16F);
  const double g_ms = pick_fastest(b, whole, w, a, x);
  const double w_ms = time_graph(b.s, [&] { widen(x, want, M, b.s); });
  const double serial = time_graph(b.s, [&] { run(b, whole, w, a, x); widen(x, want, M, b.s); });
  CK(cudaStreamSynchronize(b.s));
  std::printf("half GEMM %.4f ms + widening %.4f ms; one after the other %.4f ms\n", g_ms, w_ms, serial);
  const int64_t ny = int64_t(M) * N;
  for (int C : {2, 4, 8, 16}) {
    const int rows = M / C;
    for (int T : {sms, sms - 8, sms - 16, sms - 24, sms - 32, sms - 48}) {
      Gemm g = plan(b.lt, rows, P, K, b.ws_bytes, CUDA_R_16F, T == sms ? 0 : T);
      const double gm = pick_fastest(b, g, w, a, x);
      auto form = [&] {
        CK(cudaEventRecord(ev[17], b.s));
        CK(cudaStreamWaitEvent(s2, ev[17], 0));
        for (int c = 0; c < C; ++c) {
          run(b, g, w, a + int64_t(c) * rows * K, x + int64_t(c) * rows * P);
          CK(cudaEventRecord(ev[c], b.s));
          CK(cudaStreamWaitEvent(s2, ev[c], 0));
          widen(x + int64_t(c) * rows * P, y + int64_t(c) * rows * N, rows, s2);
        }
        CK(cudaEventRecord(ev[16], s2));
        CK(cudaStreamWaitEvent(b.s, ev[16], 0));
      };
      const double ms = time_graph(b.s, form);
      CK(cudaMemsetAsync(y, 0xff, ny * 4, b.s));
      form();
      unsigned long long n_bad = 0;
      CK(cudaMemsetAsync(bad, 0, sizeof(*bad), b.s));
      count_diff<<<1024, 256, 0, b.s>>>(reinterpret_cast<const uint32_t*>(want), reinterpret_cast<const uint32_t*>(y), ny, bad);
      CK(cudaMemcpyAsync(&n_bad, bad, sizeof(n_bad), cudaMemcpyDeviceToHost, b.s));
      CK(cudaStreamSynchronize(b.s));
      std::printf("chunks %2d, GEMM on %3d SMs (chunk GEMM %.4f ms): %.4f ms, %.2fx of serial%s\n", C, T, gm, ms,
                  serial / ms, n_bad ? "  MISMATCH" : "  same bytes");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int M = argc > 1 ? std::atoi(argv[1]) : 8192, N = argc > 2 ? std::atoi(argv[2]) : 50257,
            P = argc > 3 ? std::atoi(argv[3]) : 50264;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; X[%d, %d] half -> Y[%d, %d] float\n", prop.name, prop.multiProcessorCount, M, P, M, N);
  const int64_t nx = int64_t(M) * P, ny = int64_t(M) * N;
  __half* x;
  float *y, *ref, *y2;
  unsigned long long* bad;
  CK(cudaMalloc(&x, nx * 2));
  CK(cudaMalloc(&y, ny * 4 + 16));
  CK(cudaMalloc(&ref, ny * 4 + 16));
  CK(cudaMalloc(&y2, ny * 4 + 16));
  CK(cudaMalloc(&bad, sizeof(*bad)));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  fill_random<<<1024, 256, 0, s>>>(x, nx);
  const unsigned blocks = static_cast<unsigned>(std::min(M, 65536));
  v0<<<blocks, 256, 0, s>>>(x, ref, M, N, P);
  CK(cudaStreamSynchronize(s));
  const double moved = (nx * 2.0 * N / P + ny * 4.0) / 1e9;  // GB the widening must move
  auto report = [&](const char* name, double ms, bool check, double gb) {
    unsigned long long b = 0;
    if (check) {
      CK(cudaMemsetAsync(bad, 0, sizeof(*bad), s));
      count_diff<<<1024, 256, 0, s>>>(reinterpret_cast<const uint32_t*>(ref), reinterpret_cast<const uint32_t*>(y), ny, bad);
      CK(cudaMemcpyAsync(&b, bad, sizeof(b), cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
    }
    std::printf("%-28s %7.3f ms  %5.2f TB/s%s%s\n", name, ms, gb / ms, check ? (b ? "  MISMATCH " : "  same bytes") : "",
                check && b ? std::to_string(b).c_str() : "");
  };
  auto run = [&](const char* name, auto kern, int threads, unsigned grid = 0) {
    CK(cudaMemsetAsync(y, 0xff, ny * 4, s));
    const unsigned g = grid ? grid : blocks;
    const double ms = time_graph(s, [&] { kern<<<g, threads, 0, s>>>(x, y, M, N, P); });
    report(name, ms, true, moved);
  };
  for (int rep = 0; rep < 2; ++rep) {
    run("v0 (session 64)", v0, 256);
    run("u2", unrolled<2, false>, 256);
    run("u4", unrolled<4, false>, 256);
    run("u4 512 threads", unrolled<4, false>, 512);
    run("u4s (streaming stores)", unrolled<4, true>, 256);
    run("u1 512 threads", unrolled<1, false>, 512);
    run("u2 512 threads", unrolled<2, false>, 512);
    run("u2 1024 threads", unrolled<2, false>, 1024);
    run("u8 256 threads", unrolled<8, false>, 256);
    run("u2 512, grid 4/SM", unrolled<2, false>, 512, prop.multiProcessorCount * 4);
    run("u4 256, grid 8/SM", unrolled<4, false>, 256, prop.multiProcessorCount * 8);
    run("shfl u2 256", shuffled<2>, 256);
    run("shfl u2 512", shuffled<2>, 512);
    run("shfl u4 256", shuffled<4>, 256);
    run("w1 (16-byte loads)", wide<1, false>, 256);
    const int64_t n4 = ny / 4;
    report("ref: float4 copy of Y", time_graph(s, [&] { copy4<<<132 * 16, 256, 0, s>>>(reinterpret_cast<const float4*>(ref), reinterpret_cast<float4*>(y2), n4); }), false, ny * 8.0 / 1e9);
    report("ref: aligned widening", time_graph(s, [&] { widen_aligned<<<132 * 16, 256, 0, s>>>(reinterpret_cast<const uint2*>(x), reinterpret_cast<float4*>(y2), n4); }), false, ny * 6.0 / 1e9);
  }
  if (argc > 4 || M % 16 || std::getenv("WIDEN_NO_GEMM")) return 0;
  overlap(M, N, P, x, y, ref, bad, prop.multiProcessorCount);
  return 0;
}
