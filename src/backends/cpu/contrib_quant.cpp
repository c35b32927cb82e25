// backends/cpu/contrib_quant.cpp — ONNX Runtime's com.microsoft MatMulNBits on the CPU: Y = A · Wᵀ (+ bias)
// with W [N, K] stored 4-bit in blocks along K (ops/contrib_quant.cpp has the layout).
//
// The weights stay 4-bit in the engine (an eighth of float32's memory, which is why models ship so), and
// each weight is (q − zero point) · scale, ONNX Runtime's dequantization. A block's bytes hold its values
// interleaved (byte j: value 2j in the lower nibble, 2j + 1 in the upper), so each run first copies A's
// columns into the same order per block — the block's even columns, then its odd ones — and a byte's two
// nibbles then meet two contiguous runs of A (A' below, zero past K). Then:
//   * a few rows of A (decoding: M <= kFusedRows): one pass over the 4-bit weights; per block, Σ q · a'
//     over its values 16 (AVX-512) or 8 (AVX2) at a time in registers, several rows of W at once (their
//     loads of A' shared; or a portable loop), less the zero point times the block's sum of A', times the
//     scale: no float copy of W exists anywhere;
//   * more rows, with AVX-512: the wide GEMM below (W dequantized 32 rows and a chunk of K' at a time,
//     transposed, by the thread that multiplies it; A' broadcast against its rows);
//   * more rows, with AVX2 only: W is dequantized a panel of rows at a time (about 128 KiB of floats, in
//     L2) by the thread that multiplies it, with a register tile of rows of A' × rows of the panel
//     vectorized along K' (the panel GEMM below). Either way each weight is dequantized once per run;
//   * more rows without AVX2: W is dequantized `cols` rows at a time (about 4 MiB of floats) into the
//     workspace and multiplied with A' by sgemm, so the float product is kiln's GEMM.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/nn_common.h"
#include "backends/staged_kernel.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a variable initialized with itself), which
// its -Wmaybe-uninitialized reports once they are inlined into the loops below.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kiln::cpu {
namespace {

enum : int { kA = 0, kB = 1, kScales = 2, kZeroPoints = 3, kGIdx = 4, kBias = 5 };

// Rows of A up to which the fused pass runs (it dequantizes W once per row of A).
constexpr int64_t kFusedRows = 4;
// The panel GEMM's register tile's rows of W (its rows of A: kTileM below) and its chunk of K'.
constexpr int kTileN = 4;
constexpr int64_t kChunk = 1024;
// The wide GEMM's (AVX-512) panel of rows of W, its register tile's rows of A', and its chunk of K'.
constexpr int kWideN = 32, kWideM = 12;

struct NBits {
  int64_t K = 0, N = 0, block = 0;
  int64_t nblocks = 0;  // (K + block - 1) / block, divided once (the hot loops ask for it per block)
  int64_t blocks() const { return nblocks; }
  int64_t padded() const { return blocks() * block; }  // K' of A' and of W's dequantized rows
  // Their rows' stride: 64 bytes past K' (a power of two, as K' often is, would put the rows a tile reads
  // at once in the same L1 cache sets).
  int64_t ld() const { return padded() + 16; }
  int64_t blob() const { return block / 2; }           // bytes of one block of 4-bit values
  int64_t zp_row() const { return (blocks() + 1) / 2; }  // bytes of one row's packed zero points
};

// The wide GEMM's chunk of K': whole blocks, about 512 values.
int64_t wide_chunk(const NBits& p) { return std::max<int64_t>(p.block, 512 / p.block * p.block); }

// Per input shape: rows of A, and for more than kFusedRows of them the rows of W dequantized at a time
// (`cols`) and the threads that each dequantize their own (`parts`; 0: the sgemm path without AVX2, its
// chunks dequantized by all threads). The workspace holds A' [M, ld], the sums of A's values per block
// [M, blocks] and the buffers of the dequantized weights (per part: the wide GEMM's chunk, the panel
// GEMM's `cols` rows; the sgemm path's one chunk).
struct NBitsShape {
  int64_t M = 0, cols = 16, parts = 0;
};

Status reshape_nbits(ReshapeContext& rc, const NBits& p) {
  auto present = [&rc](int i) { return i < static_cast<int>(rc.in.size()) && rc.in[i].present; };
  const auto& a = rc.in[kA];
  if (a.dtype != DataType::kFloat32) return rc.error("A must be float32, got " + std::string(dtype_name(a.dtype)));
  if (a.shape.empty() || a.shape.back() != p.K)
    return rc.error("A's last dimension must be K = " + std::to_string(p.K) + ", got shape " + shape_to_string(a.shape));
  if (present(kGIdx)) return rc.error("g_idx (act-order weights) is not supported");
  auto check = [&](int i, const char* what, std::initializer_list<DataType> types, int64_t want) -> Status {
    const auto& t = rc.in[i];
    if (std::find(types.begin(), types.end(), t.dtype) == types.end())
      return rc.error(std::string(what) + " has dtype " + dtype_name(t.dtype) + ", which it cannot have");
    if (shape_numel(t.shape) != want)
      return rc.error(std::string(what) + " must have " + std::to_string(want) + " elements (K " + std::to_string(p.K) +
                      ", N " + std::to_string(p.N) + ", block_size " + std::to_string(p.block) + "), got shape " +
                      shape_to_string(t.shape));
    return Status::Ok();
  };
  // Hostile K, N or block_size must not overflow the sizes below: B's size bounds them all.
  int64_t b_size = 0;
  if (__builtin_mul_overflow(p.N, p.blocks(), &b_size) || __builtin_mul_overflow(b_size, p.blob(), &b_size) ||
      p.K > (int64_t{1} << 40) || p.block > (int64_t{1} << 40))
    return rc.error("K, N and block_size are too large");
  KILN_RETURN_IF_ERROR(check(kB, "B", {DataType::kUInt8}, b_size));
  KILN_RETURN_IF_ERROR(check(kScales, "scales", {DataType::kFloat32}, p.N * p.blocks()));
  if (present(kZeroPoints)) {
    const bool packed = rc.in[kZeroPoints].dtype == DataType::kUInt8;
    KILN_RETURN_IF_ERROR(check(kZeroPoints, "zero_points", {DataType::kUInt8, DataType::kFloat32},
                               packed ? p.N * p.zp_row() : p.N * p.blocks()));
  }
  if (present(kBias)) KILN_RETURN_IF_ERROR(check(kBias, "bias", {DataType::kFloat32}, p.N));
  Shape out = a.shape;
  out.back() = p.N;
  rc.out.assign(1, {DataType::kFloat32, out});
  auto st = std::make_shared<NBitsShape>();
  st->M = shape_numel(a.shape) / p.K;
  int64_t extra = 0;  // floats past A' and the sums
  if (st->M > kFusedRows && has_avx512()) {
    // Panels of kWideN rows, each thread with its buffer of one chunk of K' (wide_gemm below).
    st->cols = kWideN;
    st->parts = std::max<int64_t>(1, std::min<int64_t>((p.N + kWideN - 1) / kWideN, omp_get_max_threads()));
    extra = st->parts * wide_chunk(p) * kWideN;
  } else if (st->M > kFusedRows && has_avx2_fma()) {
    // Panels of about 128 KiB (L2), in whole tiles: K 1024 gives 32 rows.
    st->cols = std::min(std::clamp<int64_t>((32768 / p.padded()) / kTileN * kTileN, kTileN, 256), p.N);
    st->parts = std::max<int64_t>(1, std::min<int64_t>((p.N + st->cols - 1) / st->cols, omp_get_max_threads()));
    extra = st->parts * st->cols * p.ld();
  } else if (st->M > kFusedRows) {
    // About 4 MiB of dequantized rows per chunk, in rows of 16 (1 MiB measured 8% slower at M 32-128,
    // 256 KiB twice as slow: sgemm calls on narrow chunks cost more than the cache saves).
    st->cols = std::min(std::clamp<int64_t>((1048576 / p.padded()) / 16 * 16, 16, 4096), p.N);
    extra = st->cols * p.ld();
  }
  rc.workspace_bytes = static_cast<size_t>(st->M * p.ld() + st->M * p.blocks() + extra) * sizeof(float);
  rc.state = st;
  return Status::Ok();
}

// The zero point of W's row n, block blk (8 when none is given).
float zero_point(const NBits& p, const void* zp, bool float_zp, int64_t n, int64_t blk) {
  if (!zp) return 8.0f;
  if (float_zp) return static_cast<const float*>(zp)[n * p.blocks() + blk];
  const uint8_t packed = static_cast<const uint8_t*>(zp)[n * p.zp_row() + (blk >> 1)];
  return static_cast<float>((packed >> ((blk & 1) * 4)) & 15);
}

// A' [M, K']: per block, A's even columns then its odd ones (zero past K); and each block's sum [M, blocks].
void reorder_a(const NBits& p, int64_t M, const float* a, float* ap, float* sums) {
  const int64_t Kp = p.padded(), half = p.blob();
  parallel_for(M, 1, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* row = a + m * p.K;
      float* out = ap + m * p.ld();
      for (int64_t k0 = 0, blk = 0; k0 < Kp; k0 += p.block, ++blk) {
        float sum = 0.0f;
        for (int64_t j = 0; j < half; ++j) {
          const int64_t k = k0 + 2 * j;
          out[k0 + j] = k < p.K ? row[k] : 0.0f;
          out[k0 + half + j] = k + 1 < p.K ? row[k + 1] : 0.0f;
          sum += out[k0 + j] + out[k0 + half + j];
        }
        sums[m * p.blocks() + blk] = sum;
      }
    }
  });
}

// W's rows n0 .. n0 + rows - 1 as floats in A's order, [rows, K'].
void dequantize_rows(const NBits& p, const uint8_t* b, const float* scales, const void* zp, bool float_zp, int64_t n0,
                     int64_t rows, float* w) {
  const int64_t blocks = p.blocks(), half = p.blob();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = n0 + r;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float s = scales[n * blocks + blk], z = zero_point(p, zp, float_zp, n, blk);
      const uint8_t* q = b + (n * blocks + blk) * half;
      float* lo = w + r * p.ld() + blk * p.block;
      float* hi = lo + half;
      for (int64_t j = 0; j < half; ++j) lo[j] = (static_cast<float>(q[j] & 15) - z) * s;
      for (int64_t j = 0; j < half; ++j) hi[j] = (static_cast<float>(q[j] >> 4) - z) * s;
    }
  }
}

// y[m, n] for the MR rows of A' (row stride ld) and n in [n0, n1) (the fused pass): Σ over blocks of
// scale · (Σ q · a' − z · Σ a'), the block sums of A' precomputed (`sums`, [MR, blocks]). Y's row stride
// is N.
template <int MR>
void fused_rows_portable(const NBits& p, const uint8_t* b, const float* scales, const void* zp, bool float_zp,
                         const float* ap, const float* sums, int64_t n0, int64_t n1, float* y) {
  const int64_t blocks = p.blocks(), half = p.blob(), ld = p.ld();
  for (int64_t n = n0; n < n1; ++n) {
    float acc[MR] = {};
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float z = zero_point(p, zp, float_zp, n, blk), s = scales[n * blocks + blk];
      const uint8_t* q = b + (n * blocks + blk) * half;
      for (int r = 0; r < MR; ++r) {
        const float* lo = ap + r * ld + blk * p.block;
        const float* hi = lo + half;
        float part = 0.0f;
        for (int64_t j = 0; j < half; ++j)
          part += static_cast<float>(q[j] & 15) * lo[j] + static_cast<float>(q[j] >> 4) * hi[j];
        acc[r] += (part - z * sums[r * blocks + blk]) * s;
      }
    }
    for (int r = 0; r < MR; ++r) y[r * p.N + n] = acc[r];
  }
}

[[gnu::target("avx2,fma"), gnu::always_inline]] inline float hsum_avx2(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// The fused pass with eight weights at a time in registers, each converted once for the MR rows, on NB
// rows of W at once (their A' loads shared). Every row of A and W keeps two partial sums per block, one
// for the even and one for the odd columns: 2 · MR · NB independent FMA chains.
template <int MR, int NB>
[[gnu::target("avx2,fma"), gnu::always_inline]] inline void fused_cols_avx2(const NBits& p, const uint8_t* b,
                                                                          const float* scales, const void* zp,
                                                                          bool float_zp, const float* ap,
                                                                          const float* sums, int64_t n, float* y) {
  const int64_t blocks = p.blocks(), half = p.blob(), ld = p.ld();  // half: a multiple of 8
  const __m256i nibble = _mm256_set1_epi32(15);
  __m256 acc[NB][MR];
  float corr[NB][MR] = {};
  for (int c = 0; c < NB; ++c)
    for (int r = 0; r < MR; ++r) acc[c][r] = _mm256_setzero_ps();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const uint8_t* q[NB];
    __m256 lo[NB][MR], hi[NB][MR];
    for (int c = 0; c < NB; ++c) {
      q[c] = b + ((n + c) * blocks + blk) * half;
      for (int r = 0; r < MR; ++r) lo[c][r] = hi[c][r] = _mm256_setzero_ps();
    }
    const float* a = ap + blk * p.block;
    for (int64_t j = 0; j < half; j += 8) {
      for (int c = 0; c < NB; ++c) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q[c] + j)));
        const __m256 ql = _mm256_cvtepi32_ps(_mm256_and_si256(v, nibble));
        const __m256 qh = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
        for (int r = 0; r < MR; ++r) {
          lo[c][r] = _mm256_fmadd_ps(ql, _mm256_loadu_ps(a + r * ld + j), lo[c][r]);
          hi[c][r] = _mm256_fmadd_ps(qh, _mm256_loadu_ps(a + r * ld + half + j), hi[c][r]);
        }
      }
    }
    for (int c = 0; c < NB; ++c) {
      const float s = scales[(n + c) * blocks + blk], zs = zero_point(p, zp, float_zp, n + c, blk) * s;
      const __m256 vs = _mm256_set1_ps(s);
      for (int r = 0; r < MR; ++r) {
        acc[c][r] = _mm256_fmadd_ps(_mm256_add_ps(lo[c][r], hi[c][r]), vs, acc[c][r]);
        corr[c][r] += zs * sums[r * blocks + blk];
      }
    }
  }
  for (int c = 0; c < NB; ++c)
    for (int r = 0; r < MR; ++r) y[r * p.N + n + c] = hsum_avx2(acc[c][r]) - corr[c][r];
}

// The same with sixteen weights at a time (blocks of 32 values or more).
template <int MR, int NB>
[[gnu::target(KILN_TARGET_AVX512), gnu::always_inline]] inline void fused_cols_avx512(
    const NBits& p, const uint8_t* b, const float* scales, const void* zp, bool float_zp, const float* ap,
    const float* sums, int64_t n, float* y) {
  const int64_t blocks = p.blocks(), half = p.blob(), ld = p.ld();  // half: a multiple of 16
  const __m512i nibble = _mm512_set1_epi32(15);
  __m512 acc[NB][MR];
  float corr[NB][MR] = {};
  for (int c = 0; c < NB; ++c)
    for (int r = 0; r < MR; ++r) acc[c][r] = _mm512_setzero_ps();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const uint8_t* q[NB];
    __m512 lo[NB][MR], hi[NB][MR];
    for (int c = 0; c < NB; ++c) {
      q[c] = b + ((n + c) * blocks + blk) * half;
      for (int r = 0; r < MR; ++r) lo[c][r] = hi[c][r] = _mm512_setzero_ps();
    }
    const float* a = ap + blk * p.block;
    for (int64_t j = 0; j < half; j += 16) {
      for (int c = 0; c < NB; ++c) {
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q[c] + j)));
        const __m512 ql = _mm512_cvtepi32_ps(_mm512_and_si512(v, nibble));
        const __m512 qh = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
        for (int r = 0; r < MR; ++r) {
          lo[c][r] = _mm512_fmadd_ps(ql, _mm512_loadu_ps(a + r * ld + j), lo[c][r]);
          hi[c][r] = _mm512_fmadd_ps(qh, _mm512_loadu_ps(a + r * ld + half + j), hi[c][r]);
        }
      }
    }
    for (int c = 0; c < NB; ++c) {
      const float s = scales[(n + c) * blocks + blk], zs = zero_point(p, zp, float_zp, n + c, blk) * s;
      const __m512 vs = _mm512_set1_ps(s);
      for (int r = 0; r < MR; ++r) {
        acc[c][r] = _mm512_fmadd_ps(_mm512_add_ps(lo[c][r], hi[c][r]), vs, acc[c][r]);
        corr[c][r] += zs * sums[r * blocks + blk];
      }
    }
  }
  for (int c = 0; c < NB; ++c)
    for (int r = 0; r < MR; ++r) y[r * p.N + n + c] = _mm512_reduce_add_ps(acc[c][r]) - corr[c][r];
}

// Rows of W at a time in the fused pass: as many as keep the partial sums in registers.
template <int MR>
constexpr int kFusedCols = MR == 1 ? 4 : MR == 2 ? 2 : 1;

template <int MR>
[[gnu::target("avx2,fma")]] void fused_rows_avx2(const NBits& p, const uint8_t* b, const float* scales, const void* zp,
                                                bool float_zp, const float* ap, const float* sums, int64_t n0,
                                                int64_t n1, float* y) {
  constexpr int NB = kFusedCols<MR>;
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) fused_cols_avx2<MR, NB>(p, b, scales, zp, float_zp, ap, sums, n, y);
  for (; n < n1; ++n) fused_cols_avx2<MR, 1>(p, b, scales, zp, float_zp, ap, sums, n, y);
}

template <int MR>
[[gnu::target(KILN_TARGET_AVX512)]] void fused_rows_avx512(const NBits& p, const uint8_t* b, const float* scales,
                                                          const void* zp, bool float_zp, const float* ap,
                                                          const float* sums, int64_t n0, int64_t n1, float* y) {
  constexpr int NB = kFusedCols<MR>;
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) fused_cols_avx512<MR, NB>(p, b, scales, zp, float_zp, ap, sums, n, y);
  for (; n < n1; ++n) fused_cols_avx512<MR, 1>(p, b, scales, zp, float_zp, ap, sums, n, y);
}

using FusedRowsFn = void (*)(const NBits&, const uint8_t*, const float*, const void*, bool, const float*,
                             const float*, int64_t, int64_t, float*);

// The fused pass for MR rows of A (1 <= MR <= kFusedRows), on this machine's copy (AVX-512's takes
// blocks of 32 values or more).
FusedRowsFn fused_rows(const NBits& p, int64_t rows) {
  static const FusedRowsFn avx512[] = {fused_rows_avx512<1>, fused_rows_avx512<2>, fused_rows_avx512<3>,
                                       fused_rows_avx512<4>};
  if (has_avx512() && p.blob() % 16 == 0) return avx512[rows - 1];
  static const FusedRowsFn avx2[] = {fused_rows_avx2<1>, fused_rows_avx2<2>, fused_rows_avx2<3>, fused_rows_avx2<4>};
  static const FusedRowsFn portable[] = {fused_rows_portable<1>, fused_rows_portable<2>, fused_rows_portable<3>,
                                         fused_rows_portable<4>};
  static_assert(kFusedRows == 4);
  return (has_avx2_fma() ? avx2 : portable)[rows - 1];
}

// ---- The panel GEMM (more rows of A, AVX2 without AVX-512): W dequantized kPanel rows at a time into a float panel
// [rows, K'] that stays in L2, multiplied with A' by a register tile of kTileM rows of A' × kTileN rows
// of the panel, vectorized along K' (K' is a multiple of 8: blocks are at least 16 values), over K' in
// chunks of kChunk so that the tile's rows of A' stay in L1. Each weight is dequantized once per run.

// W's rows n0 .. n0 + rows - 1 as floats in A's order, [rows, K'] (dequantize_rows with AVX2).
[[gnu::target("avx2,fma")]] void dequantize_rows_avx2(const NBits& p, const uint8_t* b, const float* scales,
                                                     const void* zp, bool float_zp, int64_t n0, int64_t rows,
                                                     float* w) {
  const int64_t blocks = p.blocks(), half = p.blob();
  const __m256i nibble = _mm256_set1_epi32(15);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = n0 + r;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const __m256 s = _mm256_set1_ps(scales[n * blocks + blk]);
      const __m256 z = _mm256_set1_ps(zero_point(p, zp, float_zp, n, blk));
      const uint8_t* q = b + (n * blocks + blk) * half;
      float* lo = w + r * p.ld() + blk * p.block;
      for (int64_t j = 0; j < half; j += 8) {
        const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + j)));
        const __m256 ql = _mm256_cvtepi32_ps(_mm256_and_si256(v, nibble));
        const __m256 qh = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
        _mm256_storeu_ps(lo + j, _mm256_mul_ps(_mm256_sub_ps(ql, z), s));
        _mm256_storeu_ps(lo + half + j, _mm256_mul_ps(_mm256_sub_ps(qh, z), s));
      }
    }
  }
}

// y[r, c] (+)= Σ_k a[r, k] · w[c, k] for r < TM, c < TN, k < kc (a multiple of 8); rows of a, w and y
// lda, ldw and ldy apart. `add`: accumulate into y (a later chunk of K').
template <int TM, int TN>
[[gnu::target("avx2,fma")]] void panel_tile_avx2(const float* a, int64_t lda, const float* w, int64_t ldw, int64_t kc,
                                                float* y, int64_t ldy, bool add) {
  __m256 acc[TM][TN];
  for (int r = 0; r < TM; ++r)
    for (int c = 0; c < TN; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; k += 8) {
    __m256 av[TM];
    for (int r = 0; r < TM; ++r) av[r] = _mm256_loadu_ps(a + r * lda + k);
    for (int c = 0; c < TN; ++c) {
      const __m256 wv = _mm256_loadu_ps(w + c * ldw + k);
      for (int r = 0; r < TM; ++r) acc[r][c] = _mm256_fmadd_ps(av[r], wv, acc[r][c]);
    }
  }
  for (int r = 0; r < TM; ++r) {
    float* out = y + r * ldy;
    if constexpr (TN == 4) {  // the four sums of a row at once
      const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc[r][0], acc[r][1]), _mm256_hadd_ps(acc[r][2], acc[r][3]));
      __m128 v = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
      if (add) v = _mm_add_ps(v, _mm_loadu_ps(out));
      _mm_storeu_ps(out, v);
    } else {
      for (int c = 0; c < TN; ++c) out[c] = (add ? out[c] : 0.0f) + hsum_avx2(acc[r][c]);
    }
  }
}

using PanelTileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t, bool);

constexpr int kTileM = 3;
constexpr PanelTileFn kTiles[kTileM][kTileN] = {
    {panel_tile_avx2<1, 1>, panel_tile_avx2<1, 2>, panel_tile_avx2<1, 3>, panel_tile_avx2<1, 4>},
    {panel_tile_avx2<2, 1>, panel_tile_avx2<2, 2>, panel_tile_avx2<2, 3>, panel_tile_avx2<2, 4>},
    {panel_tile_avx2<3, 1>, panel_tile_avx2<3, 2>, panel_tile_avx2<3, 3>, panel_tile_avx2<3, 4>}};

// Y's columns n0 .. n0 + rows - 1 (rows <= the panel's) for all M rows of A', w the panel's buffer.
void panel_gemm(const NBits& p, int64_t M, const uint8_t* b, const float* scales, const void* zp, bool float_zp,
                const float* ap, int64_t n0, int64_t rows, float* w, float* y) {
  const int64_t Kp = p.padded(), ld = p.ld();
  dequantize_rows_avx2(p, b, scales, zp, float_zp, n0, rows, w);
  for (int64_t k0 = 0; k0 < Kp; k0 += kChunk) {
    const int64_t kc = std::min(kChunk, Kp - k0);
    for (int64_t m0 = 0; m0 < M; m0 += kTileM) {
      const int64_t tm = std::min<int64_t>(kTileM, M - m0);
      for (int64_t c0 = 0; c0 < rows; c0 += kTileN) {
        const int64_t tn = std::min<int64_t>(kTileN, rows - c0);
        kTiles[tm - 1][tn - 1](ap + m0 * ld + k0, ld, w + c0 * ld + k0, ld, kc, y + m0 * p.N + n0 + c0, p.N,
                                   k0 > 0);
      }
    }
  }
}

// ---- The wide GEMM (more rows of A, AVX-512): W dequantized kWideN rows at a time, one chunk of K'
// (wide_chunk: whole blocks) at a time, transposed — P [k', kWideN], each k' a row of two vectors — and
// multiplied with A' by a register tile of kWideM rows of A' × the kWideN columns, each value of A'
// broadcast against P's row: no sums across a vector, Y's tile stays in registers for the chunk.

// P for W's rows n0 .. n0 + cols - 1 (cols <= kWideN; the others zero) and blocks blk0 .. blk1 - 1.
// Sixteen rows' next 16 bytes at a time are transposed in registers — four bytes of each row per vector
// (row 4L + i in register i's 128-bit lane L, then the 4x4 transposes of 32-bit values within the lanes
// leave vector t holding bytes 4t .. 4t + 3 of rows 0 .. 15 in order) — then each byte's two nibbles
// become the 16 rows' values at two k'.
[[gnu::target(KILN_TARGET_AVX512)]] void wide_dequantize(const NBits& p, const uint8_t* b, const float* scales,
                                                        const void* zp, bool float_zp, int64_t n0, int64_t cols,
                                                        int64_t blk0, int64_t blk1, float* P) {
  const int64_t blocks = p.blocks(), half = p.blob(), row = blocks * half;
  const __m512i nibble = _mm512_set1_epi32(15);
  alignas(64) float s[kWideN] = {}, z[kWideN];  // scale and zero point per column (scale 0 past `cols`)
  std::fill(z, z + kWideN, zp ? 0.0f : 8.0f);
  const float* srow = scales + n0 * blocks;
  const float* zf = float_zp ? static_cast<const float*>(zp) + n0 * blocks : nullptr;
  const uint8_t* zb = zp && !float_zp ? static_cast<const uint8_t*>(zp) + n0 * p.zp_row() : nullptr;
  for (int64_t blk = blk0; blk < blk1; ++blk) {
    for (int64_t c = 0; c < cols; ++c) s[c] = srow[c * blocks + blk];
    if (zf) {
      for (int64_t c = 0; c < cols; ++c) z[c] = zf[c * blocks + blk];
    } else if (zb) {
      const int shift = (blk & 1) * 4;
      const uint8_t* zc = zb + blk / 2;
      for (int64_t c = 0; c < cols; ++c) z[c] = static_cast<float>((zc[c * p.zp_row()] >> shift) & 15);
    }
    float* lo = P + (blk - blk0) * p.block * kWideN;
    float* hi = lo + half * kWideN;
    for (int h = 0; h < 2; ++h) {
      const __m512 vs = _mm512_load_ps(s + 16 * h);
      const __m512 vz = _mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_load_ps(z + 16 * h)), vs);
      const uint8_t* rows[16];  // rows past `cols` read the last one (scaled by 0)
      for (int c = 0; c < 16; ++c) rows[c] = b + std::min<int64_t>(n0 + 16 * h + c, n0 + cols - 1) * row + blk * half;
      // 32 rows read side by side are more streams than the hardware prefetches: each row's cache line
      // four lines ahead is asked for as the block starts a line (a hint; past B's end it loads nothing).
      if ((blk * half) % 64 == 0)
        for (int c = 0; c < 16; ++c) _mm_prefetch(reinterpret_cast<const char*>(rows[c] + 256), _MM_HINT_T0);
      for (int64_t j = 0; j + 16 <= half; j += 16) {
        __m512i zr[4];
        for (int i = 0; i < 4; ++i) {
          zr[i] = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + j)));
          zr[i] = _mm512_inserti32x4(zr[i], _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[4 + i] + j)), 1);
          zr[i] = _mm512_inserti32x4(zr[i], _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[8 + i] + j)), 2);
          zr[i] = _mm512_inserti32x4(zr[i], _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[12 + i] + j)), 3);
        }
        const __m512i a0 = _mm512_unpacklo_epi32(zr[0], zr[1]), a1 = _mm512_unpackhi_epi32(zr[0], zr[1]);
        const __m512i a2 = _mm512_unpacklo_epi32(zr[2], zr[3]), a3 = _mm512_unpackhi_epi32(zr[2], zr[3]);
        const __m512i t4[4] = {_mm512_unpacklo_epi64(a0, a2), _mm512_unpackhi_epi64(a0, a2),
                               _mm512_unpacklo_epi64(a1, a3), _mm512_unpackhi_epi64(a1, a3)};
        for (int t = 0; t < 4; ++t)
          for (int u = 0; u < 4; ++u) {  // byte j + 4t + u of each row
            const int64_t k = j + 4 * t + u;
            const __m512i ql = _mm512_and_si512(_mm512_srli_epi32(t4[t], 8 * u), nibble);
            const __m512i qh = _mm512_and_si512(_mm512_srli_epi32(t4[t], 8 * u + 4), nibble);
            _mm512_storeu_ps(lo + k * kWideN + 16 * h, _mm512_fmadd_ps(_mm512_cvtepi32_ps(ql), vs, vz));
            _mm512_storeu_ps(hi + k * kWideN + 16 * h, _mm512_fmadd_ps(_mm512_cvtepi32_ps(qh), vs, vz));
          }
      }
      if (half % 16) {  // blocks of 16 values: 8 bytes of each row
        alignas(64) uint8_t tail[16][16] = {};
        for (int c = 0; c < 16; ++c) std::memcpy(tail[c], rows[c] + half - 8, 8);
        for (int64_t jj = 0; jj < 8; ++jj)
          for (int c = 0; c < 16; ++c) {
            const uint8_t v = tail[c][jj];
            const int64_t k = half - 8 + jj;
            lo[k * kWideN + 16 * h + c] = static_cast<float>(v & 15) * s[16 * h + c] - z[16 * h + c] * s[16 * h + c];
            hi[k * kWideN + 16 * h + c] = static_cast<float>(v >> 4) * s[16 * h + c] - z[16 * h + c] * s[16 * h + c];
          }
      }
    }
  }
}

// y[r, 0 .. cols) (+)= Σ_k a[r, k] · P[k, ·] for r < TM, k < kc; rows of a and y lda and ldy apart.
template <int TM>
[[gnu::target(KILN_TARGET_AVX512)]] void wide_tile(const float* a, int64_t lda, const float* P, int64_t kc, float* y,
                                                  int64_t ldy, int64_t cols, bool add) {
  __m512 acc[TM][2];
  for (int r = 0; r < TM; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 w0 = _mm512_loadu_ps(P + k * kWideN), w1 = _mm512_loadu_ps(P + k * kWideN + 16);
    for (int r = 0; r < TM; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + k]);
      acc[r][0] = _mm512_fmadd_ps(av, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, w1, acc[r][1]);
    }
  }
  const __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
  for (int r = 0; r < TM; ++r) {
    float* out = y + r * ldy;
    if (add) {
      acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, out));
      acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, out + 16));
    }
    _mm512_mask_storeu_ps(out, m0, acc[r][0]);
    _mm512_mask_storeu_ps(out + 16, m1, acc[r][1]);
  }
}

using WideTileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t, bool);
constexpr WideTileFn kWideTiles[kWideM] = {wide_tile<1>, wide_tile<2>, wide_tile<3>,  wide_tile<4>,
                                           wide_tile<5>, wide_tile<6>, wide_tile<7>,  wide_tile<8>,
                                           wide_tile<9>, wide_tile<10>, wide_tile<11>, wide_tile<12>};

// Y's columns n0 .. n0 + cols - 1 (cols <= kWideN) for all M rows of A', P the thread's buffer.
void wide_gemm(const NBits& p, int64_t M, const uint8_t* b, const float* scales, const void* zp, bool float_zp,
               const float* ap, int64_t n0, int64_t cols, float* P, float* y) {
  const int64_t step = wide_chunk(p) / p.block, ld = p.ld();
  for (int64_t blk0 = 0; blk0 < p.blocks(); blk0 += step) {
    const int64_t blk1 = std::min(p.blocks(), blk0 + step), k0 = blk0 * p.block, kc = (blk1 - blk0) * p.block;
    wide_dequantize(p, b, scales, zp, float_zp, n0, cols, blk0, blk1, P);
    for (int64_t m0 = 0; m0 < M; m0 += kWideM) {
      const int64_t tm = std::min<int64_t>(kWideM, M - m0);
      kWideTiles[tm - 1](ap + m0 * ld + k0, ld, P, kc, y + m0 * p.N + n0, p.N, cols, blk0 > 0);
    }
  }
}

Status run_nbits(KernelContext& ctx, const NBits& p) {
  const auto& st = *static_cast<const NBitsShape*>(ctx.shape_state());
  const uint8_t* b = ctx.input(kB).data<uint8_t>();
  const float* scales = ctx.input(kScales).data<float>();
  const bool has_zp = ctx.has_input(kZeroPoints);
  const bool float_zp = has_zp && ctx.input(kZeroPoints).dtype() == DataType::kFloat32;
  const void* zp = has_zp ? ctx.input(kZeroPoints).raw() : nullptr;
  const float* bias = ctx.has_input(kBias) ? ctx.input(kBias).data<float>() : nullptr;
  float* y = ctx.output(0).data<float>();
  const int64_t M = st.M, N = p.N, Kp = p.padded(), ld = p.ld();
  if (M == 0) return Status::Ok();
  float* ap = static_cast<float*>(ctx.workspace());
  float* sums = ap + M * ld;
  float* w = sums + M * p.blocks();
  reorder_a(p, M, ctx.input(kA).data<float>(), ap, sums);
  if (M <= kFusedRows) {
    const FusedRowsFn rows = fused_rows(p, M);
    parallel_for(N, std::max<int64_t>(1, 16384 / Kp), [&](int64_t n0, int64_t n1) {
      rows(p, b, scales, zp, float_zp, ap, sums, n0, n1, y);
    });
  } else if (st.parts > 0) {
    // Panels of `cols` rows of W: `parts` workers, each with its own buffer, claim them one at a time (a
    // worker slowed by anything else on its core takes fewer instead of holding the others back).
    const bool wide = has_avx512();
    const int64_t panels = (N + st.cols - 1) / st.cols, buffer = wide ? wide_chunk(p) * kWideN : st.cols * ld;
    std::atomic<int64_t> next{0};
    parallel_for(st.parts, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t i = next.fetch_add(1); i < panels; i = next.fetch_add(1)) {
          const int64_t n0 = i * st.cols, cols = std::min(st.cols, N - n0);
          if (wide) wide_gemm(p, M, b, scales, zp, float_zp, ap, n0, cols, w + t * buffer, y);
          else panel_gemm(p, M, b, scales, zp, float_zp, ap, n0, cols, w + t * buffer, y);
        }
    });
  } else {
    // Without AVX2: chunks of `cols` rows of W, one after another: dequantized by all threads, then one
    // sgemm (threaded by oneDNN; called from inside a parallel region it measured 5x slower at M = 32).
    for (int64_t n0 = 0; n0 < N; n0 += st.cols) {
      const int64_t rows = std::min(st.cols, N - n0);
      parallel_for(rows, std::max<int64_t>(1, 16384 / Kp), [&](int64_t r0, int64_t r1) {
        dequantize_rows(p, b, scales, zp, float_zp, n0 + r0, r1 - r0, w + r0 * ld);
      });
      nn::gemm<float>(false, true, M, rows, Kp, 1.0f, ap, ld, w, ld, 0.0f, y + n0, N);
    }
  }
  if (bias)
    parallel_for(M, 1, [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m)
        for (int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
    });
  return Status::Ok();
}

}  // namespace

void register_contrib_quant(KernelRegistry& r) {
  r.add({"MatMulNBits", "com.microsoft", 1, 1 << 30, "cpu.MatMulNBits.f32.q4_sgemm",
         [](const ir::Node& n) { return require_dtypes(n, kA, {DataType::kFloat32}); },
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           NBits p;
           p.K = n.attr_int("K", 0);
           p.N = n.attr_int("N", 0);
           p.block = n.attr_int("block_size", 0);
           // The op's declaration checked K, N >= 1, bits 4 and block_size (ops/contrib_quant.cpp).
           if (p.K < 1 || p.N < 1 || p.block < 16 || (p.block & (p.block - 1)) != 0 || n.attr_int("bits", 4) != 4)
             return invalid_model(n.describe() + ": K, N, bits and block_size must be valid");
           p.nblocks = (p.K + p.block - 1) / p.block;
           return make_staged([p](ReshapeContext& rc) { return reshape_nbits(rc, p); },
                              [p](KernelContext& ctx) { return run_nbits(ctx, p); });
         }});
}

}  // namespace kiln::cpu
