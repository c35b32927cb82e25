// backends/cpu/contrib_quant.cpp — ONNX Runtime's com.microsoft MatMulNBits on the CPU: Y = A · Wᵀ (+ bias)
// with W [N, K] stored 4-bit in blocks along K (ops/contrib_quant.cpp has the layout).
//
// The weights stay 4-bit in the engine (an eighth of float32's memory, which is why models ship so).
// Each run splits W's N rows into one part per thread; a part dequantizes `cols` rows at a time into its
// slice of the workspace (W's rows as floats, (q − zero point) · scale: ONNX Runtime's dequantization)
// and multiplies them with sgemm, so the float product is kiln's GEMM and the dequantized rows stay in
// the core's cache. The dequantization is one pass over the 4-bit weights per run, as ONNX Runtime's.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/nn_common.h"
#include "backends/staged_kernel.h"

namespace kiln::cpu {
namespace {

enum : int { kA = 0, kB = 1, kScales = 2, kZeroPoints = 3, kGIdx = 4, kBias = 5 };

struct NBits {
  int64_t K = 0, N = 0, block = 0;
  int64_t blocks() const { return (K + block - 1) / block; }
  int64_t blob() const { return block / 2; }             // bytes of one block of 4-bit values
  int64_t zp_row() const { return (blocks() + 1) / 2; }  // bytes of one row's packed zero points
};

// Per input shape: rows of A, the parts (one per thread) and the rows of W dequantized at a time.
struct NBitsShape {
  int64_t M = 0, parts = 1, cols = 16;
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
  KILN_RETURN_IF_ERROR(check(kB, "B", {DataType::kUInt8}, p.N * p.blocks() * p.blob()));
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
  st->M = shape_numel(a.shape) / std::max<int64_t>(p.K, 1);
  // About 128 KiB of floats per part's slice (a core's L2 holds it beside A's rows), in rows of 16.
  st->cols = std::clamp<int64_t>((32768 / std::max<int64_t>(p.K, 1)) / 16 * 16, 16, 256);
  const int64_t chunks = (p.N + st->cols - 1) / st->cols;
  st->parts = std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), chunks));
  rc.workspace_bytes = static_cast<size_t>(st->parts * st->cols * p.K) * sizeof(float);
  rc.state = st;
  return Status::Ok();
}

// W's rows n0 .. n0 + rows - 1 as floats, [rows, K].
template <bool kFloatZp>
void dequantize_rows(const NBits& p, const uint8_t* b, const float* scales, const void* zp, int64_t n0, int64_t rows,
                     float* w) {
  const int64_t blocks = p.blocks(), blob = p.blob();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = n0 + r;
    float* out = w + r * p.K;
    for (int64_t k0 = 0, blk = 0; k0 < p.K; k0 += p.block, ++blk) {
      const float s = scales[n * blocks + blk];
      float z = 8.0f;
      if constexpr (kFloatZp) {
        z = static_cast<const float*>(zp)[n * blocks + blk];
      } else if (zp) {
        const uint8_t packed = static_cast<const uint8_t*>(zp)[n * p.zp_row() + blk / 2];
        z = static_cast<float>((blk & 1) ? packed >> 4 : packed & 15);
      }
      const uint8_t* q = b + (n * blocks + blk) * blob;
      const int64_t len = std::min(p.block, p.K - k0);
      float* o = out + k0;
      for (int64_t j = 0; j < len / 2; ++j) {
        o[2 * j] = (static_cast<float>(q[j] & 15) - z) * s;
        o[2 * j + 1] = (static_cast<float>(q[j] >> 4) - z) * s;
      }
      if (len & 1) o[len - 1] = (static_cast<float>(q[len / 2] & 15) - z) * s;
    }
  }
}

Status run_nbits(KernelContext& ctx, const NBits& p) {
  const auto& st = *static_cast<const NBitsShape*>(ctx.shape_state());
  const float* a = ctx.input(kA).data<float>();
  const uint8_t* b = ctx.input(kB).data<uint8_t>();
  const float* scales = ctx.input(kScales).data<float>();
  const bool has_zp = ctx.has_input(kZeroPoints);
  const bool float_zp = has_zp && ctx.input(kZeroPoints).dtype() == DataType::kFloat32;
  const void* zp = has_zp ? ctx.input(kZeroPoints).raw() : nullptr;
  const float* bias = ctx.has_input(kBias) ? ctx.input(kBias).data<float>() : nullptr;
  float* y = ctx.output(0).data<float>();
  float* ws = static_cast<float*>(ctx.workspace());
  const int64_t M = st.M, N = p.N, K = p.K;
  if (M == 0) return Status::Ok();
  // Part t takes the chunks of `cols` rows t, t + parts, ... (balanced when N is not a multiple).
  const int64_t chunks = (N + st.cols - 1) / st.cols;
  parallel_for(st.parts, 1, [&](int64_t t0, int64_t t1) {
    float* w = ws + t0 * st.cols * K;  // parts t0 .. t1 - 1 run here one after another: t0's slice
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t c = t; c < chunks; c += st.parts) {
        const int64_t n0 = c * st.cols, rows = std::min(st.cols, N - n0);
        if (float_zp) dequantize_rows<true>(p, b, scales, zp, n0, rows, w);
        else dequantize_rows<false>(p, b, scales, zp, n0, rows, w);
        if (K == 0) {
          for (int64_t m = 0; m < M; ++m) std::fill(y + m * N + n0, y + m * N + n0 + rows, 0.0f);
        } else {
          nn::gemm<float>(false, true, M, rows, K, 1.0f, a, K, w, K, 0.0f, y + n0, N);
        }
        if (bias)
          for (int64_t m = 0; m < M; ++m)
            for (int64_t j = 0; j < rows; ++j) y[m * N + n0 + j] += bias[n0 + j];
      }
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
           if (p.K < 1 || p.N < 1 || p.block < 16 || n.attr_int("bits", 4) != 4)
             return invalid_model(n.describe() + ": K, N, bits and block_size must be valid");
           return make_staged([p](ReshapeContext& rc) { return reshape_nbits(rc, p); },
                              [p](KernelContext& ctx) { return run_nbits(ctx, p); });
         }});
}

}  // namespace kiln::cpu
