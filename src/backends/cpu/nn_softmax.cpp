// backends/cpu/nn_softmax.cpp — Softmax, LogSoftmax, Hardmax and Dropout on the CPU.
//
// Opset < 13 treats the input as 2-D [prod(dims[:axis]), prod(dims[axis:])] and normalizes rows;
// opset >= 13 normalizes along `axis` only.
// float32 rows along the last axis (attention's softmax) take a vectorized path: the branch-free exp
// of elementwise_math.h, compiled for AVX2+FMA where the CPU has it; others compute in double.
// Lets GCC if-convert and vectorize that exp (see unary.cpp); kiln never reads FP exception flags.
#pragma GCC optimize("no-trapping-math")

#include <cmath>
#include <limits>
#include <random>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/elementwise_math.h"
#include "backends/cpu/nn_common.h"
#include "backends/staged_kernel.h"
#include "ops/op_table.h"
#include "ops/params_nn.h"

namespace kiln::cpu::nn {
namespace {

enum class SoftKind { kSoftmax, kLogSoftmax, kHardmax };

struct SoftAttrs {
  SoftKind kind = SoftKind::kSoftmax;
  int64_t axis = -1;
  bool coerce_2d = false;
};

template <typename T>
void soft_rows(SoftKind kind, const T* x, T* y, int64_t outer, int64_t len, int64_t inner) {
  parallel_for(outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / inner, in = t % inner;
      const T* xp = x + o * len * inner + in;
      T* yp = y + o * len * inner + in;
      T mx = -std::numeric_limits<T>::infinity();
      int64_t arg = 0;
      for (int64_t k = 0; k < len; ++k)
        if (xp[k * inner] > mx) { mx = xp[k * inner]; arg = k; }
      if (kind == SoftKind::kHardmax) {
        for (int64_t k = 0; k < len; ++k) yp[k * inner] = k == arg ? T(1) : T(0);
        continue;
      }
      double sum = 0;
      for (int64_t k = 0; k < len; ++k) sum += std::exp(static_cast<double>(xp[k * inner] - mx));
      if (kind == SoftKind::kSoftmax) {
        const double inv = 1.0 / sum;
        for (int64_t k = 0; k < len; ++k) yp[k * inner] = static_cast<T>(std::exp(static_cast<double>(xp[k * inner] - mx)) * inv);
      } else {
        const double lse = std::log(sum);
        for (int64_t k = 0; k < len; ++k) yp[k * inner] = static_cast<T>(static_cast<double>(xp[k * inner] - mx) - lse);
      }
    }
  });
}

// Softmax / LogSoftmax of contiguous float32 rows [r0, r1) of `len`, in float: max, exp into the
// output (vectorized), sum, scale. Matches the double path to a few ulp per element.
inline void soft_rows_f32_body(bool log, const float* x, float* y, int64_t r0, int64_t r1, int64_t len) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xp = x + r * len;
    float* yp = y + r * len;
    // Vector reductions (ViT's [12,197,197] softmax took 1.47 ms with scalar ones, ORT 0.34).
    float mx = 0;
    const float sum = math::exp_row_f32(xp, yp, len, &mx);
    if (log) {
      const float lse = std::log(sum);
      for (int64_t k = 0; k < len; ++k) yp[k] = (xp[k] - mx) - lse;
    } else {
      const float inv = 1.0f / sum;
      for (int64_t k = 0; k < len; ++k) yp[k] *= inv;
    }
  }
}
[[gnu::target("avx2,fma")]] void soft_rows_f32_avx2(bool log, const float* x, float* y, int64_t r0, int64_t r1, int64_t len) {
  soft_rows_f32_body(log, x, y, r0, r1, len);
}
[[gnu::target(KILN_TARGET_AVX512)]] void soft_rows_f32_avx512(bool log, const float* x, float* y, int64_t r0, int64_t r1, int64_t len) {
  soft_rows_f32_body(log, x, y, r0, r1, len);
}
void soft_rows_f32(bool log, const float* x, float* y, int64_t rows, int64_t len) {
  parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
    if (has_avx512()) soft_rows_f32_avx512(log, x, y, b, e, len);
    else if (has_avx2_fma()) soft_rows_f32_avx2(log, x, y, b, e, len);
    else soft_rows_f32_body(log, x, y, b, e, len);
  });
}

// The rows a softmax normalizes, planned per shape: X viewed as [outer, len, inner].
struct SoftPlan {
  int64_t outer = 1, len = 1, inner = 1;
};

Status soft_reshape(ReshapeContext& rc, const SoftAttrs& a) {
  const Shape& x = rc.in[0].shape;
  const DataType dt = rc.in[0].dtype;
  int64_t axis = a.axis;
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank == 0) return rc.error("input must have rank >= 1");
  if (!ops::normalize_axis(axis, rank)) return rc.error("axis " + std::to_string(a.axis) + " out of range");
  auto plan = std::make_shared<SoftPlan>();
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t n = x[d];
    if (d < axis) plan->outer *= n;
    else if (d == axis || a.coerce_2d) plan->len *= n;
    else plan->inner *= n;
  }
  // Float types other than float32/float64 are computed in float through copies in the workspace.
  if (!real_copies_bytes(dt, shape_numel(x), &rc.workspace_bytes))
    return rc.error(std::string("unsupported dtype ") + dtype_name(dt));
  rc.state = std::move(plan);
  rc.out[0] = {dt, x};
  return Status::Ok();
}

Status soft_kernel(KernelContext& ctx, const SoftAttrs& a) {
  const Tensor& x = ctx.input(0);
  const SoftPlan& p = shape_state<SoftPlan>(ctx);
  Tensor& y = ctx.output(0);
  if (x.dtype() == DataType::kFloat32 && p.inner == 1 && p.len > 0 && a.kind != SoftKind::kHardmax) {
    soft_rows_f32(a.kind == SoftKind::kLogSoftmax, x.data<float>(), y.data<float>(), p.outer, p.len);
    return Status::Ok();
  }
  visit_real(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    Scratch ws(ctx.workspace());
    const RealCopies<T> copies(ws, x.dtype(), x.numel());
    ReadAs<T> xv(x, copies.x);
    WriteAs<T> out(y, copies.y);
    soft_rows<T>(a.kind, xv.data(), out.data(), p.outer, p.len, p.inner);
    out.commit();
  });
  return Status::Ok();
}

// ---- Dropout: identity (mask all true) unless training; then elements are dropped with
// probability `ratio` and the rest scaled by 1/(1-ratio).

Status dropout_kernel(KernelContext& ctx, const ops::DropoutParams& a) {
  const Tensor& x = ctx.input(0);
  if (!is_real(x.dtype())) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
  double ratio = a.ratio;
  bool training = false;
  if (a.ratio_inputs) {
    if (ctx.has_input(1) && ctx.input(1).numel()) ratio = load_as<double>(ctx.input(1), 0);
    // Read as a byte: a bool tensor from a file may hold any byte (nonzero is true); loading it as
    // `bool` is undefined behaviour unless it is 0 or 1.
    if (ctx.has_input(2) && ctx.input(2).numel()) training = *static_cast<const uint8_t*>(ctx.input(2).raw()) != 0;
  }
  if (training && (ratio < 0 || ratio >= 1)) return ctx.error("ratio must be in [0, 1)");
  if (!training) ratio = 0;
  const int64_t n = x.numel();
  Tensor& y = ctx.output(0);
  const bool bool_mask = a.bool_mask;
  Tensor* mask = ctx.has_output(1) ? &ctx.output(1) : nullptr;
  if (ratio == 0) {
    if (n) std::memcpy(y.raw(), x.raw(), x.nbytes());
    if (mask)
      for (int64_t i = 0; i < n; ++i) bool_mask ? void(mask->data<bool>()[i] = true) : store_as<double>(*mask, i, 1.0);
    return Status::Ok();
  }
  std::mt19937_64 rng(a.has_seed ? static_cast<uint64_t>(a.seed) : unseeded_random_seed());
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double scale = 1.0 / (1.0 - ratio);
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = u(rng) >= ratio;
    store_as<double>(y, i, keep ? load_as<double>(x, i) * scale : 0.0);
    if (mask) bool_mask ? void(mask->data<bool>()[i] = keep) : store_as<double>(*mask, i, keep ? 1.0 : 0.0);
  }
  return Status::Ok();
}

}  // namespace

void register_softmax(KernelRegistry& r) {
  auto real = [](const ir::Node& n) { return require_real(n, 0); };
  const std::pair<const char*, SoftKind> ops[] = {
      {"Softmax", SoftKind::kSoftmax}, {"LogSoftmax", SoftKind::kLogSoftmax}, {"Hardmax", SoftKind::kHardmax}};
  for (const auto& [name, kind] : ops) {
    r.add({name, "", 1, 1 << 30, std::string("cpu.") + name + ".any", real, [kind = kind](const ir::Node& n, KernelInit&) {
             const ops::SoftmaxParams p = ops::parse_softmax(n);
             SoftAttrs a;
             a.kind = kind;
             a.coerce_2d = p.coerce_2d;
             a.axis = p.axis;
             return make_staged([a](ReshapeContext& rc) { return soft_reshape(rc, a); },
                                [a](KernelContext& ctx) { return soft_kernel(ctx, a); });
           }});
  }
  // Before opset 7 Dropout trains unless `is_test` is set; only test mode (identity) is run.
  auto dropout_check = [real](const ir::Node& n) -> std::string {
    if (ops::parse_dropout(n).legacy_training)
      return "training-mode Dropout (is_test=0) of opset < 7 is not supported";
    return real(n);
  };
  r.add({"Dropout", "", 1, 1 << 30, "cpu.Dropout.any", dropout_check, [](const ir::Node& n, KernelInit&) {
           const ops::DropoutParams p = ops::parse_dropout(n);
           auto reshape = [p](ReshapeContext& rc) -> Status {
             const DataType dt = rc.in[0].dtype;
             if (!is_real(dt)) return rc.error(std::string("unsupported dtype ") + dtype_name(dt));
             rc.out[0] = {dt, rc.in[0].shape};
             if (rc.out.size() > 1) rc.out[1] = {p.bool_mask ? DataType::kBool : dt, rc.in[0].shape};
             return Status::Ok();
           };
           return make_staged(reshape, [p](KernelContext& ctx) { return dropout_kernel(ctx, p); });
         }});
}

}  // namespace kiln::cpu::nn
