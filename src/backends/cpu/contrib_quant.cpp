// backends/cpu/contrib_quant.cpp — ONNX Runtime's com.microsoft MatMulNBits on the CPU: Y = A · Wᵀ (+ bias)
// with W [N, K] stored 4-bit in blocks along K (ops/contrib_quant.cpp has the layout).
//
// The weights stay 4-bit in the engine (an eighth of float32's memory, which is why models ship so), and
// each weight is (q − zero point) · scale, ONNX Runtime's dequantization. A block's bytes hold its values
// interleaved (byte j: value 2j in the lower nibble, 2j + 1 in the upper), so each run first copies A's
// columns into the same order per block — the block's even columns, then its odd ones — and a byte's two
// nibbles then meet two contiguous runs of A (A' below, zero past K). Then:
//   * a few rows of A (decoding: M <= kFusedRows): one pass over the 4-bit weights; per block, Σ q · a'
//     over its values eight at a time in registers (AVX2/FMA, or a portable loop), less the zero point
//     times the block's sum of A', times the scale: no float copy of W exists anywhere;
//   * more rows: W is dequantized `cols` rows at a time (about 4 MiB of floats) into the workspace and
//     multiplied with A' by sgemm, so the float product is kiln's GEMM.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/nn_common.h"
#include "backends/staged_kernel.h"

namespace kiln::cpu {
namespace {

enum : int { kA = 0, kB = 1, kScales = 2, kZeroPoints = 3, kGIdx = 4, kBias = 5 };

// Rows of A up to which the fused pass runs (it dequantizes W once per row of A).
constexpr int64_t kFusedRows = 4;

struct NBits {
  int64_t K = 0, N = 0, block = 0;
  int64_t blocks() const { return (K + block - 1) / block; }
  int64_t padded() const { return blocks() * block; }  // K' of A' and of W's dequantized rows
  int64_t blob() const { return block / 2; }           // bytes of one block of 4-bit values
  int64_t zp_row() const { return (blocks() + 1) / 2; }  // bytes of one row's packed zero points
};

// Per input shape: rows of A and the rows of W the GEMM path dequantizes at a time; the workspace holds
// A' [M, K'], those rows [cols, K'] and the sums of A's values per block [M, blocks].
struct NBitsShape {
  int64_t M = 0, cols = 16;
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
  int64_t slices = 0;
  if (st->M > kFusedRows) {
    // About 4 MiB of dequantized rows per chunk, in rows of 16 (1 MiB measured 8% slower at M 32-128,
    // 256 KiB twice as slow: sgemm calls on narrow chunks cost more than the cache saves).
    st->cols = std::min(std::clamp<int64_t>((1048576 / p.padded()) / 16 * 16, 16, 4096), p.N);
    slices = st->cols;
  }
  rc.workspace_bytes = static_cast<size_t>((st->M + slices) * p.padded() + st->M * p.blocks()) * sizeof(float);
  rc.state = st;
  return Status::Ok();
}

// The zero point of W's row n, block blk (8 when none is given).
float zero_point(const NBits& p, const void* zp, bool float_zp, int64_t n, int64_t blk) {
  if (!zp) return 8.0f;
  if (float_zp) return static_cast<const float*>(zp)[n * p.blocks() + blk];
  const uint8_t packed = static_cast<const uint8_t*>(zp)[n * p.zp_row() + blk / 2];
  return static_cast<float>((blk & 1) ? packed >> 4 : packed & 15);
}

// A' [M, K']: per block, A's even columns then its odd ones (zero past K); and each block's sum [M, blocks].
void reorder_a(const NBits& p, int64_t M, const float* a, float* ap, float* sums) {
  const int64_t Kp = p.padded(), half = p.blob();
  parallel_for(M, 1, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* row = a + m * p.K;
      float* out = ap + m * Kp;
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
      float* lo = w + r * p.padded() + blk * p.block;
      float* hi = lo + half;
      for (int64_t j = 0; j < half; ++j) lo[j] = (static_cast<float>(q[j] & 15) - z) * s;
      for (int64_t j = 0; j < half; ++j) hi[j] = (static_cast<float>(q[j] >> 4) - z) * s;
    }
  }
}

// y[m, n] for the MR rows of A' (row stride Kp) and n in [n0, n1) (the fused pass): Σ over blocks of
// scale · (Σ q · a' − z · Σ a'), the block sums of A' precomputed (`sums`, [MR, blocks]). Y's row stride
// is N.
template <int MR>
void fused_rows_portable(const NBits& p, const uint8_t* b, const float* scales, const void* zp, bool float_zp,
                         const float* ap, const float* sums, int64_t n0, int64_t n1, float* y) {
  const int64_t blocks = p.blocks(), half = p.blob(), Kp = p.padded();
  for (int64_t n = n0; n < n1; ++n) {
    float acc[MR] = {};
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float z = zero_point(p, zp, float_zp, n, blk), s = scales[n * blocks + blk];
      const uint8_t* q = b + (n * blocks + blk) * half;
      for (int r = 0; r < MR; ++r) {
        const float* lo = ap + r * Kp + blk * p.block;
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

// The same with eight weights at a time in registers, each converted once for the MR rows.
template <int MR>
[[gnu::target("avx2,fma")]] void fused_rows_avx2(const NBits& p, const uint8_t* b, const float* scales, const void* zp,
                                                bool float_zp, const float* ap, const float* sums, int64_t n0,
                                                int64_t n1, float* y) {
  const int64_t blocks = p.blocks(), half = p.blob(), Kp = p.padded();  // half: a multiple of 8
  const __m256i nibble = _mm256_set1_epi32(15);
  for (int64_t n = n0; n < n1; ++n) {
    __m256 acc[MR];
    float corr[MR] = {};
    for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float z = zero_point(p, zp, float_zp, n, blk), s = scales[n * blocks + blk];
      const uint8_t* q = b + (n * blocks + blk) * half;
      const float* lo = ap + blk * p.block;
      __m256 part[MR];
      for (int r = 0; r < MR; ++r) part[r] = _mm256_setzero_ps();
      for (int64_t j = 0; j < half; j += 8) {
        uint64_t eight;
        std::memcpy(&eight, q + j, 8);
        const __m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(eight)));
        const __m256 ql = _mm256_cvtepi32_ps(_mm256_and_si256(v, nibble));
        const __m256 qh = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
        for (int r = 0; r < MR; ++r) {
          part[r] = _mm256_fmadd_ps(ql, _mm256_loadu_ps(lo + r * Kp + j), part[r]);
          part[r] = _mm256_fmadd_ps(qh, _mm256_loadu_ps(lo + r * Kp + half + j), part[r]);
        }
      }
      const __m256 vs = _mm256_set1_ps(s);
      for (int r = 0; r < MR; ++r) {
        acc[r] = _mm256_fmadd_ps(part[r], vs, acc[r]);
        corr[r] += z * sums[r * blocks + blk] * s;
      }
    }
    for (int r = 0; r < MR; ++r) y[r * p.N + n] = hsum_avx2(acc[r]) - corr[r];
  }
}

using FusedRowsFn = void (*)(const NBits&, const uint8_t*, const float*, const void*, bool, const float*,
                             const float*, int64_t, int64_t, float*);

// The fused pass for MR rows of A (1 <= MR <= kFusedRows), on this machine's copy.
FusedRowsFn fused_rows(int64_t rows) {
  static const FusedRowsFn avx2[] = {fused_rows_avx2<1>, fused_rows_avx2<2>, fused_rows_avx2<3>, fused_rows_avx2<4>};
  static const FusedRowsFn portable[] = {fused_rows_portable<1>, fused_rows_portable<2>, fused_rows_portable<3>,
                                         fused_rows_portable<4>};
  static_assert(kFusedRows == 4);
  return (has_avx2_fma() ? avx2 : portable)[rows - 1];
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
  const int64_t M = st.M, N = p.N, Kp = p.padded();
  if (M == 0) return Status::Ok();
  float* ap = static_cast<float*>(ctx.workspace());
  float* sums = ap + (M + (M > kFusedRows ? st.cols : 0)) * Kp;
  reorder_a(p, M, ctx.input(kA).data<float>(), ap, sums);
  if (M <= kFusedRows) {
    const FusedRowsFn rows = fused_rows(M);
    parallel_for(N, std::max<int64_t>(1, 16384 / Kp), [&](int64_t n0, int64_t n1) {
      rows(p, b, scales, zp, float_zp, ap, sums, n0, n1, y);
    });
  } else {
    // Chunks of `cols` rows of W, one after another: dequantized by all threads, then one sgemm (threaded
    // by oneDNN; called from inside a parallel region it measured 5x slower at M = 32).
    float* w = ap + M * Kp;
    for (int64_t n0 = 0; n0 < N; n0 += st.cols) {
      const int64_t rows = std::min(st.cols, N - n0);
      parallel_for(rows, std::max<int64_t>(1, 16384 / Kp), [&](int64_t r0, int64_t r1) {
        dequantize_rows(p, b, scales, zp, float_zp, n0 + r0, r1 - r0, w + r0 * Kp);
      });
      nn::gemm<float>(false, true, M, rows, Kp, 1.0f, ap, Kp, w, Kp, 0.0f, y + n0, N);
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
           return make_staged([p](ReshapeContext& rc) { return reshape_nbits(rc, p); },
                              [p](KernelContext& ctx) { return run_nbits(ctx, p); });
         }});
}

}  // namespace kiln::cpu
