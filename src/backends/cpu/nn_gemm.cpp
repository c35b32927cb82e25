// backends/cpu/nn_gemm.cpp — MatMul, Gemm, MatMulInteger, QLinearMatMul on the CPU.
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/conv_shapes.h"
#include "backends/cpu/nn_common.h"
#include "backends/cpu/gemv.h"
#include "backends/cpu/packed_gemm.h"
#include "backends/staged_kernel.h"
#include "ops/op_table.h"
#include "ops/params_nn.h"

namespace kiln::cpu::nn {
namespace {

struct DnnlMatMul;

// A tactic's form of the constant B, made once per kernel by `Pack` (shared by every shape signature).
template <typename B, Expected<std::shared_ptr<B>> (*Pack)(const float*, int64_t, int64_t, bool)>
struct ConstantBCache {
  std::mutex mu;
  std::shared_ptr<B> b;
  Expected<std::shared_ptr<B>> get(const Tensor& t, int64_t K, int64_t N, bool transposed) {
    std::lock_guard<std::mutex> lock(mu);
    if (!b) {
      KILN_ASSIGN_OR_RETURN(b, Pack(t.data<float>(), K, N, transposed));
    }
    return b;
  }
};
using PackCache = ConstantBCache<PackedB, pack_b>;      // the "packed" tactic's panels
using GemvCache = ConstantBCache<GemvB, pack_gemv_b>;   // the "gemv" tactic's rows

// The tactics of a product with a constant 2-D B: oneDNN's matmul, sgemm, and kiln's packed kernel
// where this CPU runs it (and `packed_ok`: Gemm's transA rules it out).
std::vector<std::string> constant_b_tactics(bool packed_ok) {
  if (packed_ok && packed_gemm_available()) return {"onednn", "sgemm", "packed"};
  return {"onednn", "sgemm"};
}

// Whether reshape plans the "packed" tactic: the tuner asked for it, or nothing was asked and it is
// this machine's better default.
bool wants_packed(const std::string& tactic) {
  return packed_gemm_available() && (tactic == "packed" || (tactic.empty() && packed_gemm_preferred()));
}

// numpy matmul over broadcast batch dims: one [M,K] x [K,N] product per output batch entry.
struct MatMulPlan {
  std::shared_ptr<DnnlMatMul> dnnl;  // the "onednn" tactic (B constant and 2-D: A's rows folded into M)
  std::shared_ptr<PackedB> packed;   // the "packed" tactic (same conditions)
  Shape out;
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> a_batch, b_batch;  // per output batch: batch index into A and into B
  bool fold_batch_into_m = false;         // B has no batch and A's batches are contiguous rows
};

// Index of each entry of `out` (a broadcast of `in`) into `in`.
std::vector<int64_t> broadcast_index(const Shape& in, const Shape& out) {
  const int64_t n = shape_numel(out);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  const size_t r = out.size(), off = r - in.size();
  std::vector<int64_t> coord(r, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = 0;
    for (size_t d = off; d < r; ++d) j = j * in[d - off] + (in[d - off] == 1 ? 0 : coord[d]);
    idx[i] = j;
    for (size_t d = r; d-- > 0;) {
      if (++coord[d] < out[d]) break;
      coord[d] = 0;
    }
  }
  return idx;
}

template <typename Ctx>
Status plan_matmul(const Ctx& ctx, const Shape& a0, const Shape& b0, MatMulPlan& p) {
  if (a0.empty() || b0.empty()) return ctx.error("MatMul operands must have rank >= 1");
  Shape a = a0, b = b0;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  p.M = a[a.size() - 2];
  p.K = a.back();
  p.N = b.back();
  if (b[b.size() - 2] != p.K)
    return ctx.error("inner dimensions differ: " + shape_to_string(a0) + " x " + shape_to_string(b0));
  const Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape batch;
  if (!ops::broadcast_shapes(ba, bb, &batch))
    return ctx.error("batch dims do not broadcast: " + shape_to_string(a0) + " x " + shape_to_string(b0));
  p.a_batch = broadcast_index(ba, batch);
  p.b_batch = broadcast_index(bb, batch);
  p.fold_batch_into_m = shape_numel(bb) == 1 && shape_numel(ba) == shape_numel(batch);
  p.out = batch;
  if (a0.size() > 1) p.out.push_back(p.M);
  if (b0.size() > 1) p.out.push_back(p.N);
  return Status::Ok();
}

template <typename T>
void run_matmul(const MatMulPlan& p, const T* A, const T* B, T* C) {
  const int64_t batches = static_cast<int64_t>(p.a_batch.size());
  if (batches == 0 || p.M == 0 || p.N == 0) return;
  if (p.fold_batch_into_m) {
    gemm<T>(false, false, batches * p.M, p.N, p.K, T(1), A, p.K, B, p.N, T(0), C, p.N);
    return;
  }
  auto one = [&](int64_t i) {
    gemm<T>(false, false, p.M, p.N, p.K, T(1), A + p.a_batch[i] * p.M * p.K, p.K, B + p.b_batch[i] * p.K * p.N, p.N,
            T(0), C + i * p.M * p.N, p.N);
  };
  // Batch entries split among the threads (each product single-threaded inside the team) when each is
  // small, or when there are enough of them to keep every thread busy and each is at most 4M
  // multiply-adds: Swin-T's window attention, 192 products of 49x32x49 at its first stage, had gone
  // one after the other through sgemm's own threading (QK^T 818 us at 2 threads, ORT 280).
  const int64_t macs = p.M * p.N * p.K;
  if (macs < (1 << 16) || (batches >= 2 * omp_get_max_threads() && macs <= (1 << 22))) {
    parallel_for(batches, 1, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) one(i); });
  } else {
    for (int64_t i = 0; i < batches; ++i) one(i);
  }
}

// ---- The "onednn" tactic: float32 products with a constant 2-D B run as oneDNN's matmul primitive
// with B reordered once into the primitive's packed layout (sgemm packs B again on every call).
// Planned at reshape; a run points the memory objects at its buffers and executes through the C API.
struct DnnlMatMul {
  dnnl::matmul prim;
  dnnl::memory src, dst, weights, bias, scratch;
  dnnl::stream strm;
  std::vector<dnnl_exec_arg_t> args;
};

// y[M,N] = op(A)[M,K] · op(B)[K,N] (+ bias row [N]); B constant (its user layout [K,N], or [N,K]
// transposed).
Expected<std::shared_ptr<DnnlMatMul>> make_dnnl_matmul(const ReshapeContext& rc, int64_t M, int64_t N, int64_t K, bool ta,
                                                       bool tb, const Tensor& b, const Tensor* bias, size_t* workspace) {
  using dnnl::memory;
  using tag = memory::format_tag;
  const auto f32 = memory::data_type::f32;
  auto d = std::make_shared<DnnlMatMul>();
  try {
    const memory::desc src_md({M, K}, f32, ta ? tag::ba : tag::ab), dst_md({M, N}, f32, tag::ab);
    const memory::desc w_user({K, N}, f32, tb ? tag::ba : tag::ab), w_any({K, N}, f32, tag::any);
    const memory::desc bias_md({1, N}, f32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto desc = bias ? dnnl::matmul::desc(src_md, w_any, bias_md, dst_md) : dnnl::matmul::desc(src_md, w_any, dst_md);
    const dnnl::matmul::primitive_desc pd(desc, attr, dnnl_cpu());
    d->prim = dnnl::matmul(pd);
    d->strm = dnnl::stream(dnnl_cpu());
    d->weights = memory(pd.weights_desc(), dnnl_cpu());
    memory w_src(w_user, dnnl_cpu(), const_cast<void*>(b.raw()));
    dnnl::reorder(w_src, d->weights).execute(d->strm, w_src, d->weights);
    d->strm.wait();
    d->src = memory(src_md, dnnl_cpu(), DNNL_MEMORY_NONE);
    d->dst = memory(dst_md, dnnl_cpu(), DNNL_MEMORY_NONE);
    d->scratch = memory(pd.scratchpad_desc(), dnnl_cpu(), DNNL_MEMORY_NONE);
    *workspace = align64(pd.scratchpad_desc().get_size());
    d->args = {{DNNL_ARG_SRC, d->src.get()}, {DNNL_ARG_WEIGHTS, d->weights.get()}, {DNNL_ARG_DST, d->dst.get()},
               {DNNL_ARG_SCRATCHPAD, d->scratch.get()}};
    if (bias) {
      d->bias = memory(bias_md, dnnl_cpu(), const_cast<void*>(bias->raw()));
      d->args.push_back({DNNL_ARG_BIAS, d->bias.get()});
    }
  } catch (const dnnl::error& e) {
    return unsupported(rc.node.describe() + ": oneDNN has no matmul for this (" + e.what() + ")");
  }
  return d;
}

Status run_dnnl_matmul(const DnnlMatMul& d, const void* a, void* y, void* workspace) {
  auto ok = [](dnnl_status_t st) { return st == dnnl_success; };
  const bool good = ok(dnnl_memory_set_data_handle(d.src.get(), const_cast<void*>(a))) &&
                    ok(dnnl_memory_set_data_handle(d.dst.get(), y)) &&
                    ok(dnnl_memory_set_data_handle(d.scratch.get(), workspace)) &&
                    ok(dnnl_primitive_execute(d.prim.get(), d.strm.get(), static_cast<int>(d.args.size()), d.args.data())) &&
                    ok(dnnl_stream_wait(d.strm.get()));
  return good ? Status::Ok() : runtime_error("the oneDNN matmul failed");
}

// Whether a product may take the "onednn" tactic: float32 A, a constant float32 2-D B, something to
// compute.
bool dnnl_matmul_eligible(const ReshapeContext& rc, int64_t M, int64_t N, int64_t K) {
  return rc.in[0].dtype == DataType::kFloat32 && rc.in[1].dtype == DataType::kFloat32 && rc.in[1].value &&
         rc.in[1].shape.size() == 2 && M > 0 && N > 0 && K > 0;
}

// Runs f(Tag<C>) for the dtypes MatMul/Gemm take: float-like (computed in float/double) and the
// 32/64-bit integers.
template <typename F>
bool visit_matmul_type(DataType dt, F&& f) {
  if (visit_real(dt, f)) return true;
  switch (dt) {
    case DataType::kInt32: f(Tag<int32_t>{}); return true;
    case DataType::kInt64: f(Tag<int64_t>{}); return true;
    case DataType::kUInt32: f(Tag<uint32_t>{}); return true;
    case DataType::kUInt64: f(Tag<uint64_t>{}); return true;
    default: return false;
  }
}

// The elements of `t` as C (float-like dtypes converted when they differ; no copy when equal).
template <typename C>
const C* as_ptr(const Tensor& t, std::optional<ReadAs<C>>& hold) {
  if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) {
    hold.emplace(t);
    return hold->data();
  } else {
    return t.data<C>();
  }
}

std::vector<std::string> matmul_tactics(const ReshapeContext& rc);

Status matmul_reshape(ReshapeContext& rc, PackCache& cache) {
  own_choice_unless_offered(rc, matmul_tactics(rc));
  if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("A and B are required");
  if (rc.in[0].dtype != rc.in[1].dtype) return rc.error("A and B must have the same dtype");
  auto p = std::make_shared<MatMulPlan>();
  KILN_RETURN_IF_ERROR(plan_matmul(rc, rc.in[0].shape, rc.in[1].shape, *p));
  rc.out[0] = {rc.in[0].dtype, p->out};
  const int64_t rows = p->M * static_cast<int64_t>(p->a_batch.size());
  const bool constant_b = p->fold_batch_into_m && dnnl_matmul_eligible(rc, rows, p->N, p->K);
  if (constant_b && wants_packed(rc.tactic)) {
    auto b = cache.get(*rc.in[1].value, p->K, p->N, false);
    if (b.ok()) p->packed = std::move(b).value();
    else if (rc.tactic == "packed") return b.status();
  }
  if (constant_b && !p->packed && rc.tactic != "sgemm" && rc.tactic != "packed") {
    auto d = make_dnnl_matmul(rc, rows, p->N, p->K, false, false, *rc.in[1].value, nullptr, &rc.workspace_bytes);
    if (d.ok()) p->dnnl = std::move(d).value();
    else if (rc.tactic == "onednn") return d.status();
  }
  rc.planned_tactic = p->packed ? "packed" : p->dnnl ? "onednn" : "sgemm";
  rc.state = std::move(p);
  return Status::Ok();
}

std::vector<std::string> matmul_tactics(const ReshapeContext& rc) {
  if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return {};
  MatMulPlan p;
  if (!plan_matmul(rc, rc.in[0].shape, rc.in[1].shape, p).ok() || !p.fold_batch_into_m) return {};
  if (!dnnl_matmul_eligible(rc, p.M * static_cast<int64_t>(p.a_batch.size()), p.N, p.K)) return {};
  return constant_b_tactics(true);
}

Status matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const MatMulPlan& p = shape_state<MatMulPlan>(ctx);
  Tensor& y = ctx.output(0);
  if (p.packed) {
    packed_gemm(p.M * static_cast<int64_t>(p.a_batch.size()), a.data<float>(), p.K, *p.packed, nullptr, y.data<float>(), p.N);
    return Status::Ok();
  }
  if (p.dnnl) {
    const Status r = run_dnnl_matmul(*p.dnnl, a.raw(), y.raw(), ctx.workspace());
    return r.ok() ? r : ctx.error(r.message());
  }
  bool ok = visit_matmul_type(a.dtype(), [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::optional<ReadAs<C>> ha, hb;
    const C* pa = as_ptr<C>(a, ha);
    const C* pb = as_ptr<C>(b, hb);
    if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) {
      WriteAs<C> out(y);
      run_matmul<C>(p, pa, pb, out.data());
      out.commit();
    } else {
      run_matmul<C>(p, pa, pb, y.data<C>());
    }
  });
  return ok ? Status::Ok() : ctx.error(std::string("unsupported dtype ") + dtype_name(a.dtype()));
}

// ---- Gemm

struct GemmAttrs {
  bool ta = false, tb = false;
  double alpha = 1, beta = 1;
};

struct GemmShape {
  std::shared_ptr<DnnlMatMul> dnnl;  // the "onednn" tactic
  std::shared_ptr<PackedB> packed;   // the "packed" tactic (alpha 1, A not transposed)
  std::shared_ptr<GemvB> gemv;       // the "gemv" tactic (one row of A)
  std::optional<Tensor> bias_row;    // C as the primitive's bias row (beta·C), when it is one
  int64_t M = 0, N = 0, K = 0;
  int64_t cm = 0, cn = 0;  // strides of C over (m, n) after unidirectional broadcasting
};

struct GemmCaches {
  PackCache packed;
  GemvCache gemv;
};

std::vector<std::string> gemm_tactics(const ReshapeContext& rc, const GemmAttrs& g);

Status gemm_reshape(ReshapeContext& rc, const GemmAttrs& g, GemmCaches& caches) {
  own_choice_unless_offered(rc, gemm_tactics(rc, g));
  PackCache& cache = caches.packed;
  if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("A and B are required");
  const Shape& a = rc.in[0].shape;
  const Shape& b = rc.in[1].shape;
  if (a.size() != 2 || b.size() != 2) return rc.error("A and B must be 2-D");
  if (rc.in[0].dtype != rc.in[1].dtype) return rc.error("A and B must have the same dtype");
  auto st = std::make_shared<GemmShape>();
  const int64_t M = g.ta ? a[1] : a[0], K = g.ta ? a[0] : a[1];
  const int64_t N = g.tb ? b[0] : b[1], Kb = g.tb ? b[1] : b[0];
  if (K != Kb) return rc.error("inner dimensions differ: " + shape_to_string(a) + " x " + shape_to_string(b));
  if (rc.in.size() > 2 && rc.in[2].present) {
    const Shape& cs = rc.in[2].shape;
    Shape bc;
    if (cs.size() > 2 || !ops::broadcast_shapes(Shape{M, N}, cs, &bc) || bc != Shape{M, N})
      return rc.error("C of shape " + shape_to_string(cs) + " does not broadcast to " + shape_to_string({M, N}));
    const int64_t cr = cs.size() == 2 ? cs[0] : 1, cc = cs.empty() ? 1 : cs.back();
    st->cm = cr == 1 ? 0 : cc;
    st->cn = cc == 1 ? 0 : 1;
  }
  st->M = M;
  st->N = N;
  st->K = K;
  rc.out[0] = {rc.in[0].dtype, Shape{M, N}};
  // oneDNN's primitive for alpha = 1 and C absent (or beta = 0) or a constant row (or scalar) of N.
  const bool has_c = rc.in.size() > 2 && rc.in[2].present && g.beta != 0;
  const bool c_row = has_c && rc.in[2].value && rc.in[2].dtype == DataType::kFloat32 && st->cm == 0;
  const bool planned = rc.tactic != "sgemm" && g.alpha == 1 && (!has_c || c_row) && dnnl_matmul_eligible(rc, M, N, K);
  if (planned && c_row) {
    Tensor row = Tensor::empty(DataType::kFloat32, {N});
    const Tensor& c = *rc.in[2].value;
    for (int64_t n = 0; n < N; ++n) row.data<float>()[n] = static_cast<float>(g.beta) * c.data<float>()[n * st->cn];
    st->bias_row = std::move(row);
  }
  // One row of A (a batch-1 classifier head): kiln's GEMV, which streams Bᵀ's rows in order (gemv.h),
  // untuned too.
  if (planned && M == 1 && !g.ta && (rc.tactic == "gemv" || (rc.tactic.empty() && has_avx2_fma()))) {
    auto gb = caches.gemv.get(*rc.in[1].value, K, N, g.tb);
    if (!gb.ok()) return gb.status();
    st->gemv = std::move(gb).value();
    rc.state = std::move(st);
    rc.planned_tactic = "gemv";
    return Status::Ok();
  }
  // "gemv" chosen at a profile's opt shape and run at another batch of it: the kernel's own choice.
  const std::string tactic = rc.tactic == "gemv" ? std::string() : rc.tactic;
  if (planned && !g.ta && wants_packed(tactic)) {
    auto pb = cache.get(*rc.in[1].value, K, N, g.tb);
    if (pb.ok()) st->packed = std::move(pb).value();
    else if (tactic == "packed") return pb.status();
  }
  if (planned && !st->packed && tactic != "packed") {
    auto d = make_dnnl_matmul(rc, M, N, K, g.ta, g.tb, *rc.in[1].value, st->bias_row ? &*st->bias_row : nullptr,
                              &rc.workspace_bytes);
    if (d.ok()) st->dnnl = std::move(d).value();
    else if (rc.tactic == "onednn") return d.status();
  }
  rc.planned_tactic = st->packed ? "packed" : st->dnnl ? "onednn" : "sgemm";
  rc.state = std::move(st);
  return Status::Ok();
}

std::vector<std::string> gemm_tactics(const ReshapeContext& rc, const GemmAttrs& g) {
  if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present || rc.in[0].shape.size() != 2 || rc.in[1].shape.size() != 2)
    return {};
  const int64_t M = g.ta ? rc.in[0].shape[1] : rc.in[0].shape[0], K = g.ta ? rc.in[0].shape[0] : rc.in[0].shape[1];
  const int64_t N = g.tb ? rc.in[1].shape[0] : rc.in[1].shape[1];
  const bool has_c = rc.in.size() > 2 && rc.in[2].present && g.beta != 0;
  if (g.alpha != 1 || !dnnl_matmul_eligible(rc, M, N, K)) return {};
  if (has_c && (!rc.in[2].value || rc.in[2].dtype != DataType::kFloat32 || (rc.in[2].shape.size() == 2 && rc.in[2].shape[0] != 1)))
    return {};
  std::vector<std::string> r = constant_b_tactics(!g.ta);
  if (M == 1 && !g.ta) r.insert(r.begin(), "gemv");  // the untuned choice first
  return r;
}

Status gemm_kernel(KernelContext& ctx, const GemmAttrs& g) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  const GemmShape& sh = shape_state<GemmShape>(ctx);
  const int64_t M = sh.M, N = sh.N, K = sh.K, cm = sh.cm, cn = sh.cn;
  const bool has_c = ctx.has_input(2) && g.beta != 0;
  Tensor& y = ctx.output(0);
  if (sh.gemv) {
    gemv(a.data<float>(), *sh.gemv, sh.bias_row ? sh.bias_row->data<float>() : nullptr, y.data<float>());
    return Status::Ok();
  }
  if (sh.packed) {
    packed_gemm(M, a.data<float>(), K, *sh.packed, sh.bias_row ? sh.bias_row->data<float>() : nullptr, y.data<float>(), N);
    return Status::Ok();
  }
  if (sh.dnnl) {
    const Status r = run_dnnl_matmul(*sh.dnnl, a.raw(), y.raw(), ctx.workspace());
    return r.ok() ? r : ctx.error(r.message());
  }
  bool ok = visit_matmul_type(a.dtype(), [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::optional<ReadAs<C>> ha, hb;
    const C* pa = as_ptr<C>(a, ha);
    const C* pb = as_ptr<C>(b, hb);
    auto compute = [&](C* out) {
      if (has_c) {
        const Tensor& c = ctx.input(2);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) out[m * N + n] = static_cast<C>(g.beta) * load_as<C>(c, m * cm + n * cn);
      }
      if (K == 0 && !has_c) std::fill(out, out + M * N, C(0));
      gemm<C>(g.ta, g.tb, M, N, K, static_cast<C>(g.alpha), pa, a.dim(1), pb, b.dim(1), has_c ? C(1) : C(0), out, N);
    };
    if constexpr (std::is_same_v<C, float> || std::is_same_v<C, double>) {
      WriteAs<C> out(y);
      compute(out.data());
      out.commit();
    } else {
      compute(y.data<C>());
    }
  });
  return ok ? Status::Ok() : ctx.error(std::string("unsupported dtype ") + dtype_name(a.dtype()));
}

// ---- Quantized matmuls

// A quantization parameter (zero point or scale) that is a scalar or given per row of a matrix
// (numel == rows), or per row of every batch entry (numel == batches * rows).
template <typename C>
C quant_param(const Tensor* t, int64_t batch, int64_t row, int64_t rows, C dflt) {
  if (!t || t->numel() == 0) return dflt;
  const int64_t n = t->numel();
  if (n == 1) return load_as<C>(*t, 0);
  if (n == rows) return load_as<C>(*t, row);
  return load_as<C>(*t, (batch * rows + row) % n);
}

Status check_quant_param(KernelContext& ctx, int i, int64_t rows, int64_t batches) {
  if (!ctx.has_input(i)) return Status::Ok();
  const int64_t n = ctx.input(i).numel();
  if (n == 1 || n == rows || n == rows * batches) return Status::Ok();
  return ctx.error("input " + std::to_string(i) + " must be a scalar or have one entry per row/column, got shape " +
                   shape_to_string(ctx.input(i).shape()));
}

// int32 product of (A - a_zp) and (B - b_zp); A/B are int8 or uint8.
Status integer_matmul(KernelContext& ctx, int ia, int iaz, int ib, int ibz, MatMulPlan& p, std::vector<int32_t>& acc) {
  const Tensor& a = ctx.input(ia);
  const Tensor& b = ctx.input(ib);
  for (const Tensor* t : {&a, &b})
    if (t->dtype() != DataType::kInt8 && t->dtype() != DataType::kUInt8) return ctx.error("A and B must be int8 or uint8");
  KILN_RETURN_IF_ERROR(plan_matmul(ctx, a.shape(), b.shape(), p));
  const Tensor* az = ctx.has_input(iaz) ? &ctx.input(iaz) : nullptr;
  const Tensor* bz = ctx.has_input(ibz) ? &ctx.input(ibz) : nullptr;
  const int64_t a_batches = p.M ? a.numel() / (p.M * std::max<int64_t>(p.K, 1)) : 0;
  const int64_t b_batches = p.N ? b.numel() / (p.N * std::max<int64_t>(p.K, 1)) : 0;
  KILN_RETURN_IF_ERROR(check_quant_param(ctx, iaz, p.M, a_batches));
  KILN_RETURN_IF_ERROR(check_quant_param(ctx, ibz, p.N, b_batches));
  std::vector<int32_t> av(static_cast<size_t>(a.numel())), bv(static_cast<size_t>(b.numel()));
  for (int64_t i = 0; i < a.numel(); ++i) {
    const int64_t row = p.K ? i / p.K : 0;
    av[i] = load_as<int32_t>(a, i) - quant_param<int32_t>(az, row / std::max<int64_t>(p.M, 1), row % std::max<int64_t>(p.M, 1), p.M, 0);
  }
  for (int64_t i = 0; i < b.numel(); ++i) {
    const int64_t col = i % p.N, bi = i / (p.N * std::max<int64_t>(p.K, 1));
    bv[i] = load_as<int32_t>(b, i) - quant_param<int32_t>(bz, bi, col, p.N, 0);
  }
  acc.resize(static_cast<size_t>(shape_numel(p.out)));
  run_matmul<int32_t>(p, av.data(), bv.data(), acc.data());
  return Status::Ok();
}

Status matmul_integer_kernel(KernelContext& ctx) {
  MatMulPlan p;
  std::vector<int32_t> acc;
  KILN_RETURN_IF_ERROR(integer_matmul(ctx, 0, 2, 1, 3, p, acc));
  Tensor& y = ctx.output(0, DataType::kInt32, p.out);
  if (!acc.empty()) std::memcpy(y.raw(), acc.data(), acc.size() * sizeof(int32_t));
  return Status::Ok();
}

// NaN (a NaN scale or input) is 0, as onnxruntime's requantization gives; ±inf saturate. Casting NaN
// to an integer is undefined behaviour, and min/max pass NaN through.
template <typename Q>
Q saturate_round(double v) {
  if (std::isnan(v)) return Q(0);
  v = std::nearbyint(v);
  v = std::min<double>(std::max<double>(v, std::numeric_limits<Q>::min()), std::numeric_limits<Q>::max());
  return static_cast<Q>(v);
}

Status qlinear_matmul_kernel(KernelContext& ctx) {
  for (int i : {1, 2, 4, 5, 6, 7})
    if (!ctx.has_input(i)) return ctx.error("scales and zero points are required");
  MatMulPlan p;
  std::vector<int32_t> acc;
  KILN_RETURN_IF_ERROR(integer_matmul(ctx, 0, 2, 3, 5, p, acc));
  const Tensor& ys = ctx.input(6);
  const Tensor& yz = ctx.input(7);
  const int64_t a_batches = p.M ? ctx.input(0).numel() / (p.M * std::max<int64_t>(p.K, 1)) : 0;
  KILN_RETURN_IF_ERROR(check_quant_param(ctx, 1, p.M, a_batches));
  const int64_t b_batches = p.N ? ctx.input(3).numel() / (p.N * std::max<int64_t>(p.K, 1)) : 0;
  KILN_RETURN_IF_ERROR(check_quant_param(ctx, 4, p.N, b_batches));
  Tensor& y = ctx.output(0, yz.dtype(), p.out);
  const float y_scale = load_as<float>(ys, 0);
  const int32_t y_zp = load_as<int32_t>(yz, 0);
  const int64_t batches = static_cast<int64_t>(p.a_batch.size());
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t m = 0; m < p.M; ++m) {
      const float sa = quant_param<float>(&ctx.input(1), p.a_batch[bi], m, p.M, 1.f);
      for (int64_t n = 0; n < p.N; ++n) {
        const float sb = quant_param<float>(&ctx.input(4), p.b_batch[bi], n, p.N, 1.f);
        const int64_t i = (bi * p.M + m) * p.N + n;
        const double v = static_cast<double>(acc[i]) * (sa * sb / y_scale) + y_zp;
        if (yz.dtype() == DataType::kUInt8) y.data<uint8_t>()[i] = saturate_round<uint8_t>(v);
        else y.data<int8_t>()[i] = saturate_round<int8_t>(v);
      }
    }
  return Status::Ok();
}

std::string check_matmul_dtype(const ir::Node& n) {
  return require_dtypes(n, 0, {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                               DataType::kInt32, DataType::kInt64, DataType::kUInt32, DataType::kUInt64});
}

}  // namespace

void register_gemm(KernelRegistry& r) {
  r.add({"MatMul", "", 1, 1 << 30, "cpu.MatMul.any.sgemm", check_matmul_dtype,
         [](const ir::Node&, KernelInit&) {
           auto cache = std::make_shared<PackCache>();
           return make_staged([cache](ReshapeContext& rc) { return matmul_reshape(rc, *cache); }, matmul_kernel,
                              matmul_tactics);
         }});
  // Before opset 7 Gemm had a `broadcast` attribute; C broadcasting always is a superset of it.
  r.add({"Gemm", "", 1, 1 << 30, "cpu.Gemm.any.sgemm", check_matmul_dtype, [](const ir::Node& n, KernelInit&) {
           const ops::GemmParams p = ops::parse_gemm(n);
           GemmAttrs g;
           g.ta = p.trans_a;
           g.tb = p.trans_b;
           g.alpha = p.alpha;
           g.beta = p.beta;
           auto cache = std::make_shared<GemmCaches>();
           return make_staged([g, cache](ReshapeContext& rc) { return gemm_reshape(rc, g, *cache); },
                              [g](KernelContext& ctx) { return gemm_kernel(ctx, g); },
                              [g](const ReshapeContext& rc) { return gemm_tactics(rc, g); });
         }});
  r.add({"MatMulInteger", "", 10, 1 << 30, "cpu.MatMulInteger.i8", nullptr,
         [](const ir::Node&, KernelInit&) { return make_kernel(matmul_integer_kernel); }});
  r.add({"QLinearMatMul", "", 10, 1 << 30, "cpu.QLinearMatMul.i8", nullptr,
         [](const ir::Node&, KernelInit&) { return make_kernel(qlinear_matmul_kernel); }});
}

}  // namespace kiln::cpu::nn
