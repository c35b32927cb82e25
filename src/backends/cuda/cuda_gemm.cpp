// backends/cuda/cuda_gemm.cpp — MatMul and Gemm (float32, float16, bfloat16), kiln.F8MatMul (FP8
// E4M3 operands) and com.microsoft.MatMulNBits (4-bit weights), through cuBLASLt.
//
// reshape() builds the descriptors and asks cuBLASLt's heuristic once per input shape; run() only
// launches. kiln's tensors are row-major; cuBLASLt is column-major. A row-major [M,N] matrix is the same
// memory as a column-major [N,M] one, so C = A·B is computed as Cᵀ = Bᵀ·Aᵀ: the operands swap and
// m/n swap, with no data movement. Compute is CUBLAS_COMPUTE_32F for every type (no TF32 for float32,
// so results match the CPU; float32 accumulation on tensor cores for float16/bfloat16), or
// CUBLAS_COMPUTE_32F_FAST_TF32 for float32 nodes of TF32 engines.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "backends/cuda/cuda_nbits.h"
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ir/epilogue.h"
#include "ops/params_nn.h"
#include "ops/shape_infer_util.h"

namespace kiln::cuda {
namespace {

// Owns the cuBLASLt descriptors of one call.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Row-major problem: Y[M,N] (+)= alpha · op(A)[M,K] · op(B)[K,N] (+ beta · Y), `batch` times at the
// given element offsets. `trans_a`: A is stored [K,M]; `trans_b`: B is stored [N,K].
struct GemmProblem {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1, beta = 0;
  DataType dtype = DataType::kFloat32;  // of Y (and of A and B unless ab_dtype says otherwise)
  DataType ab_dtype = DataType::kUndefined;  // A's and B's when they differ from Y's (float8e4m3fn; int8 with an int32 Y; half with a float32 Y)
  const void* a = nullptr;
  const void* b = nullptr;
  void* y = nullptr;
  // One entry per matrix product: element offsets into a, b and y.
  std::vector<int64_t> off_a, off_b, off_y;
  // cuBLASLt's epilogue: DEFAULT, BIAS (+ bias[n] along Y's last dim), RELU_BIAS or GELU_BIAS
  // (kiln.FusedMatMul's bias or FusedGemm's C row, and their ReLU or tanh GELU, applied by the GEMM: no
  // pass over Y after it).
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool tf32 = false;  // float32 on TF32 tensor cores (TF32 engines, passes::allow_tf32)
  int heur_index = 0;  // the tactic: which of cuBLASLt's heuristic results ("heur<i>"; past the end: the last)
  // FP8 only: FP8 fast accumulation (partial sums never promoted to float32 inside the kernel; tactics
  // "fast<i>"), faster at the cost of accumulation bits far below FP8's own rounding.
  bool fast_accum = false;
  // Split-K partial sums only in float32 (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE), never in Y's half type
  // (in place or in the output type): those rounded partial sums of a float16 product to 1e-3 of its
  // scale (MatMulNBits' dequantized GEMM at M 17, K 600 on an H200).
  bool fp32_reduction = false;
};

// cuBLASLt's heuristic results a GEMM may choose among (its tactics).
constexpr int kMaxHeuristics = 8;

// The epilogue a fused product's kBiasEpilogueAttr asks for: 1 the bias, 2 and a ReLU, 3 and a tanh
// GELU (cuBLASLt's GELU is the tanh form: exact-erf GELU stays a pass after the GEMM).
cublasLtEpilogue_t bias_epilogue(int64_t want) {
  return want == 2 ? CUBLASLT_EPILOGUE_RELU_BIAS : want == 3 ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
}

// The largest power of two (≤ 256) dividing every byte address used.
uint32_t alignment_of(const GemmProblem& p) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p.a) | reinterpret_cast<uintptr_t>(p.b) | reinterpret_cast<uintptr_t>(p.y);
  const uint64_t es = p.ab_dtype == DataType::kUndefined ? dtype_size(p.dtype) : std::min(dtype_size(p.dtype), dtype_size(p.ab_dtype));
  for (size_t i = 0; i < p.off_a.size(); ++i) bits |= (p.off_a[i] | p.off_b[i] | p.off_y[i]) * es;
  uint32_t align = 256;
  while (align > es && (bits & (align - 1))) align >>= 1;
  return align;
}

Status lt_ok(const ir::Node& node, cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return runtime_error(node.describe() + ": cuBLASLt " + what + " failed (status " + std::to_string(int(s)) + ")");
}

// A GEMM problem made ready to launch: descriptors and the heuristic's algorithm (reshape makes it
// once per input shape; the pointers come at run time).
struct GemmPlan {
  GemmProblem p;           // shape, transposes, alpha/beta, offsets (pointers unset)
  LtDescs d;
  cublasLtMatmulHeuristicResult_t heur{};
  int candidates = 0;      // how many algorithms the heuristic returned
  bool strided = false;
  uint32_t align = 4;      // byte alignment the algorithm was chosen for
  bool empty = false;      // nothing to compute (m, n or count is 0)
  // Gemm's C, broadcast into Y before the product (beta != 0).
  bool has_c = false;
  BroadcastIndex c_index{};
  // kiln.FusedMatMul's output_columns (passes::products_write_float): the half product goes to the
  // workspace, [rows, p.n], and its first `columns` columns are widened into the float32 Y.
  int64_t columns = 0;
  int64_t rows = 0;
};

// Descriptors and algorithm for `p` (its pointers are ignored; every buffer is assumed 256-byte
// aligned, which planned and allocated device memory is; launch_gemm checks).
Status plan_gemm(const ir::Node& node, CudaState& st, GemmPlan& g) {
  GemmProblem& p = g.p;
  const size_t count = p.off_a.size();
  if (p.m == 0 || p.n == 0 || count == 0) {
    g.empty = true;
    return Status::Ok();
  }
  if (p.k == 0) return Status::Ok();
  // Equal steps between consecutive products → one strided-batched call; otherwise one call each.
  bool strided = count > 1;
  for (size_t i = 1; i < count && strided; ++i)
    strided = p.off_a[i] - p.off_a[i - 1] == p.off_a[1] - p.off_a[0] && p.off_b[i] - p.off_b[i - 1] == p.off_b[1] - p.off_b[0] &&
              p.off_y[i] - p.off_y[i - 1] == p.off_y[1] - p.off_y[0] && p.off_a[1] != p.off_a[0] &&
              p.off_b[1] != p.off_b[0];
  g.strided = strided;
  const int32_t batch = strided ? static_cast<int32_t>(count) : 1;
  LtDescs& d = g.d;
  // int8 operands: integer tensor-core products summed exactly in int32 (alpha and beta are int32).
  const bool integer = p.ab_dtype == DataType::kInt8;
  const cublasComputeType_t compute = integer ? CUBLAS_COMPUTE_32I
                                      : p.tf32 && p.dtype == DataType::kFloat32 && p.ab_dtype == DataType::kUndefined
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                : CUBLAS_COMPUTE_32F;
  KILN_RETURN_IF_ERROR(lt_ok(node, cublasLtMatmulDescCreate(&d.op, compute, integer ? CUDA_R_32I : CUDA_R_32F), "desc"));
  // Column-major view: Yᵀ[N,M] = op(B)ᵀ[N,K] · op(A)ᵀ[K,M]; cuBLASLt's "A" is our B, its "B" our A.
  const cublasOperation_t op_lt_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_lt_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a, sizeof(op_lt_a));
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b, sizeof(op_lt_b));
  if (p.ab_dtype == DataType::kFloat8E4M3FN) {
    const int8_t fast = p.fast_accum ? 1 : 0;
    cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast));
  }
  // Stored (pre-op) column-major shapes: B is [N,K] (ld N) or, transposed, [K,N] (ld K).
  const uint64_t a_rows = p.trans_b ? p.k : p.n, a_cols = p.trans_b ? p.n : p.k;
  const uint64_t b_rows = p.trans_a ? p.m : p.k, b_cols = p.trans_a ? p.k : p.m;
  auto cuda_type = [](DataType dt) {
    switch (dt) {
      case DataType::kFloat16: return CUDA_R_16F;
      case DataType::kBFloat16: return CUDA_R_16BF;
      case DataType::kFloat8E4M3FN: return CUDA_R_8F_E4M3;
      case DataType::kInt8: return CUDA_R_8I;
      case DataType::kInt32: return CUDA_R_32I;
      default: return CUDA_R_32F;
    }
  };
  const cudaDataType_t t = cuda_type(p.dtype);
  const cudaDataType_t tab = p.ab_dtype == DataType::kUndefined ? t : cuda_type(p.ab_dtype);
  KILN_RETURN_IF_ERROR(lt_ok(node, cublasLtMatrixLayoutCreate(&d.a, tab, a_rows, a_cols, a_rows), "layout"));
  KILN_RETURN_IF_ERROR(lt_ok(node, cublasLtMatrixLayoutCreate(&d.b, tab, b_rows, b_cols, b_rows), "layout"));
  KILN_RETURN_IF_ERROR(lt_ok(node, cublasLtMatrixLayoutCreate(&d.c, t, p.n, p.m, p.n), "layout"));
  if (batch > 1) {
    const int64_t sa = p.off_b[1] - p.off_b[0], sb = p.off_a[1] - p.off_a[0], sc = p.off_y[1] - p.off_y[0];
    for (auto [layout, stride] : {std::pair{d.a, sa}, std::pair{d.b, sb}, std::pair{d.c, sc}}) {
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch));
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
    }
  }
  KILN_RETURN_IF_ERROR(lt_ok(node, cublasLtMatmulPreferenceCreate(&d.pref), "preference"));
  const uint64_t ws = st.workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  if (p.fp32_reduction) {
    const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask));
  }
  g.align = alignment_of(p);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(d.pref, attr, &g.align, sizeof(g.align));
  int found = 0;
  cublasLtMatmulHeuristicResult_t results[kMaxHeuristics];
  // cuBLASLt's candidates, keeping only results whose state is SUCCESS (the other fields of the rest
  // are undefined: FP8 problems get such results, and launching one fails with INVALID_VALUE).
  auto heuristic = [&]() -> cublasStatus_t {
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(st.lt, d.op, d.a, d.b, d.c, d.c, d.pref, kMaxHeuristics, results, &found);
    int usable = 0;
    for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) results[usable++] = results[i];
    found = s == CUBLAS_STATUS_SUCCESS ? usable : 0;
    return s;
  };
  if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    // The bias pointer is set at launch (the plan does not know it yet); any 16-byte-aligned one here.
    static const float kAnyBias alignas(256)[4] = {};
    const void* any = kAnyBias;
    cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof(p.epilogue));
    cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &any, sizeof(any));
    // FP8 products with a float16/bfloat16 Y: the bias has Y's type. (With a float32 Y there is no FP8
    // bias epilogue: the heuristic finds nothing, and the caller adds the bias.)
    if (tab != t && t != CUDA_R_32F) cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof(t));
    if ((heuristic() != CUBLAS_STATUS_SUCCESS || found == 0) && p.epilogue != CUBLASLT_EPILOGUE_BIAS) {
      p.epilogue = CUBLASLT_EPILOGUE_BIAS;  // no algorithm with the activation: the bias alone, the caller the rest
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof(p.epilogue));
      found = 0;
      heuristic();
    }
    if (found == 0) {
      p.epilogue = CUBLASLT_EPILOGUE_DEFAULT;  // no algorithm with it: the caller applies the bias itself
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue, sizeof(p.epilogue));
      found = 0;
    }
  }
  if (found == 0) KILN_RETURN_IF_ERROR(lt_ok(node, heuristic(), "heuristic"));
  if (found == 0) return runtime_error(node.describe() + ": cuBLASLt found no algorithm for this GEMM");
  g.candidates = found;
  g.heur = results[std::clamp(p.heur_index, 0, found - 1)];
  return Status::Ok();
}

// The index of the tactic named in `rc` ("<prefix><i>": "heur<i>", or FP8's "fast<i>"), or 0.
int heuristic_index(const ReshapeContext& rc, const std::string& prefix = "heur") {
  if (rc.tactic.size() <= prefix.size() || rc.tactic.compare(0, prefix.size(), prefix) != 0) return 0;
  int i = 0;
  for (size_t k = prefix.size(); k < rc.tactic.size(); ++k) {
    if (rc.tactic[k] < '0' || rc.tactic[k] > '9' || i > kMaxHeuristics) return 0;
    i = i * 10 + (rc.tactic[k] - '0');
  }
  return i < kMaxHeuristics ? i : 0;
}

// A GEMM's tactics: one per algorithm of cuBLASLt's heuristic for these shapes ("heur0" is its first
// choice, the kernel's own).
// `prefix`<i> for each of cuBLASLt's candidates of a plan made with tactic `probe_tactic` (none when
// the probe plans nothing).
void add_tactics(const ReshapeContext& rc, const std::function<Status(ReshapeContext&)>& reshape, const std::string& probe_tactic,
                 const std::string& prefix, std::vector<std::string>* names) {
  ReshapeContext probe = rc;
  probe.tactic = probe_tactic;
  probe.out.assign(rc.out.size() ? rc.out.size() : 1, {});
  if (!reshape(probe).ok() || !probe.state) return;
  const int n = static_cast<const GemmPlan*>(probe.state.get())->candidates;
  for (int i = 0; i < n; ++i) names->push_back(prefix + std::to_string(i));
}

std::vector<std::string> gemm_tactics(const ReshapeContext& rc, const std::function<Status(ReshapeContext&)>& reshape) {
  std::vector<std::string> names;
  add_tactics(rc, reshape, "", "heur", &names);
  return names;
}

// Launches a planned GEMM on a, b → y (C, when the plan has one, was broadcast into y by the caller;
// `bias` feeds the plan's epilogue, when it has one).
Status launch_gemm(const KernelContext& ctx, const GemmPlan& g, const void* a, const void* b, void* y,
                   const void* bias = nullptr) {
  CudaState& st = state_of(ctx);
  const GemmProblem& p = g.p;
  const size_t count = p.off_a.size();
  const int64_t es = static_cast<int64_t>(dtype_size(p.dtype));  // Y's elements
  const int64_t es_ab = p.ab_dtype == DataType::kUndefined ? es : static_cast<int64_t>(dtype_size(p.ab_dtype));
  if (g.empty) return Status::Ok();
  if (p.k == 0) {  // an empty sum: Y = beta·Y (0 when beta is 0; Y was prepared by the caller otherwise)
    if (p.beta != 0) {
      if (p.beta == 1) return Status::Ok();
      for (size_t i = 0; i < count; ++i)
        KILN_RETURN_IF_ERROR(launched(ctx, launch_scale(elem_of(p.dtype), static_cast<char*>(y) + p.off_y[i] * es, p.m * p.n,
                                                        p.beta, st.stream)));
      return Status::Ok();
    }
    for (size_t i = 0; i < count; ++i)
      KILN_RETURN_IF_ERROR(launched(ctx, cudaMemsetAsync(static_cast<char*>(y) + p.off_y[i] * es, 0, p.m * p.n * es, st.stream)));
    return Status::Ok();
  }
  if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    if (!bias || reinterpret_cast<uintptr_t>(bias) % 16 != 0) return ctx.error("the GEMM's bias epilogue needs an aligned bias");
    // The descriptor belongs to this context's plan: setting its bias pointer races with nothing.
    KILN_RETURN_IF_ERROR(lt_ok(ctx.node(), cublasLtMatmulDescSetAttribute(g.d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                                          sizeof(bias)),
                               "bias pointer"));
  }
  if ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(y)) % g.align != 0) {
    // Buffers less aligned than planned (a caller's view): plan for these pointers, this once.
    GemmPlan here;
    here.p = g.p;
    here.p.a = a;
    here.p.b = b;
    here.p.y = y;
    KILN_RETURN_IF_ERROR(plan_gemm(ctx.node(), st, here));
    if (here.p.epilogue != p.epilogue) return ctx.error("the GEMM's epilogue has no algorithm for these buffers");
    return launch_gemm(ctx, here, a, b, y, bias);
  }
  const size_t calls = g.strided ? 1 : count;
  for (size_t i = 0; i < calls; ++i) {
    const void* ai = static_cast<const char*>(a) + p.off_a[i] * es_ab;
    const void* bi = static_cast<const char*>(b) + p.off_b[i] * es_ab;
    void* yi = static_cast<char*>(y) + p.off_y[i] * es;
    static const int32_t kOne = 1, kZero = 0;  // an int8 product's alpha and beta (its scale type is int32)
    const bool integer = p.ab_dtype == DataType::kInt8;
    const void* alpha = integer ? static_cast<const void*>(&kOne) : &p.alpha;
    const void* beta = integer ? static_cast<const void*>(&kZero) : &p.beta;
    KILN_RETURN_IF_ERROR(lt_ok(ctx.node(), cublasLtMatmul(st.lt, g.d.op, alpha, bi, g.d.a, ai, g.d.b, beta, yi, g.d.c, yi, g.d.c,
                                                          &g.heur.algo, st.workspace, st.workspace_bytes, st.stream),
                               "matmul"));
  }
  return Status::Ok();
}

// ---- MatMul: numpy semantics (1-D operands promoted, batch dims broadcast).
Status reshape_matmul(ReshapeContext& rc) {
  if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("A and B are required");
  if (!is_float_type(rc.in[0].dtype) || rc.in[1].dtype != rc.in[0].dtype)
    return rc.error("A and B must have one float dtype");
  if (!reshape_state(rc)) return unsupported("no device state to plan with");
  // kiln.FusedMatMul's output_dtype (passes::products_write_float): float16/bfloat16 operands may write
  // a float32 Y (cuBLASLt's float32 C/D with half A/B), instead of a Cast pass after the product.
  const DataType y_dtype = static_cast<DataType>(rc.node.attr_int(kOutputDtypeAttr, static_cast<int64_t>(rc.in[0].dtype)));
  if (y_dtype != rc.in[0].dtype && y_dtype != DataType::kFloat32)
    return rc.error("output_dtype: float products may write float32, nothing else");
  const Shape& a0 = rc.in[0].shape;
  const Shape& b0 = rc.in[1].shape;
  if (a0.empty() || b0.empty()) return rc.error("MatMul operands must have rank >= 1");
  Shape sa = a0, sb = b0;
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);
  if (b_vec) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  if (sb[sb.size() - 2] != k) return rc.error("shapes " + shape_to_string(a0) + " and " + shape_to_string(b0) + " do not multiply");
  const Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  Shape batch;
  if (!broadcast_shape(batch_a, batch_b, batch)) return rc.error("batch dims do not broadcast");
  Shape out = batch;
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(n);
  auto g = std::make_shared<GemmPlan>();
  GemmProblem& p = g->p;
  // output_columns: Y is the product's first columns, widened to float32 after a half GEMM (cheaper
  // than a GEMM writing float32 rows and a copy that realigns them: half the bytes written twice).
  const int64_t columns = rc.node.attr_int(kOutputColumnsAttr, 0);
  if (columns) {
    if (y_dtype != DataType::kFloat32 || (rc.in[0].dtype != DataType::kFloat16 && rc.in[0].dtype != DataType::kBFloat16))
      return rc.error("output_columns: a float16/bfloat16 product writing float32 only");
    if (b_vec || columns < 0 || columns > n || n % 8 != 0)
      return rc.error("output_columns " + std::to_string(columns) + " of a product of " + std::to_string(n) +
                      " columns (a matrix B with a multiple of 8 columns)");
    if (rc.in.size() > 2 && rc.in[2].present) return rc.error("output_columns: no bias");
    out.back() = columns;
    g->columns = columns;
    g->rows = shape_numel(out) / std::max<int64_t>(columns, 1);
    rc.workspace_bytes = static_cast<size_t>((g->rows * n * 2 + 255) / 256 * 256);
    p.dtype = rc.in[0].dtype;
  } else {
    p.dtype = y_dtype;
    if (y_dtype != rc.in[0].dtype) p.ab_dtype = rc.in[0].dtype;
  }
  rc.out[0] = {y_dtype, out};
  p.tf32 = ops::allows_tf32(rc.node);
  p.heur_index = heuristic_index(rc);
  p.k = k;
  p.n = n;
  const int64_t nb = shape_numel(batch);
  if (shape_numel(batch_b) == 1 && shape_numel(batch_a) == nb) {
    p.m = m * nb;  // B is one matrix: fold A's batch into its rows
    p.off_a = p.off_b = p.off_y = {0};
  } else {
    p.m = m;
    BroadcastIndex idx;
    if (!make_broadcast_index(batch, batch_a, batch_b, idx)) return rc.error("too many batch dims for CUDA");
    for (int64_t i = 0; i < nb; ++i) {
      int64_t ia, ib;
      broadcast_offsets(idx, i, ia, ib);
      p.off_a.push_back(ia * m * k);
      p.off_b.push_back(ib * k * n);
      p.off_y.push_back(i * m * n);
    }
  }
  // kiln.FusedMatMul's inner MatMul (cuda_fused.cpp) asks for its bias [N] (input 2), and a ReLU or
  // tanh GELU, in the GEMM's epilogue; it gets them when cuBLASLt has an algorithm with it.
  const int64_t want = rc.node.attr_int(kBiasEpilogueAttr, 0);
  if (want && rc.in.size() > 2 && rc.in[2].present && rc.in[2].dtype == p.dtype && p.ab_dtype == DataType::kUndefined &&
      shape_numel(rc.in[2].shape) == n && !b_vec)
    p.epilogue = bias_epilogue(want);
  KILN_RETURN_IF_ERROR(plan_gemm(rc.node, *reshape_state(rc), *g));
  rc.state = std::move(g);
  return Status::Ok();
}

Status run_matmul(KernelContext& ctx) {
  const auto& g = *static_cast<const GemmPlan*>(ctx.shape_state());
  Tensor& y = ctx.output(0);
  const void* bias = g.p.epilogue != CUBLASLT_EPILOGUE_DEFAULT ? ctx.input(2).raw() : nullptr;
  if (!g.columns) return launch_gemm(ctx, g, ctx.input(0).raw(), ctx.input(1).raw(), y.raw(), bias);
  void* half = ctx.workspace();
  KILN_RETURN_IF_ERROR(launch_gemm(ctx, g, ctx.input(0).raw(), ctx.input(1).raw(), half, nullptr));
  return launched(ctx, launch_widen_rows(elem_of(g.p.dtype), half, y.data<float>(), g.rows, g.columns, g.p.n,
                                         state_of(ctx).stream));
}

// ---- MatMul: numpy semantics (1-D operands promoted, batch dims broadcast).
// ---- Gemm: Y = alpha·op(A)·op(B) + beta·C, C broadcast to [M,N].
Expected<KernelPtr> create_gemm(const ir::Node& node) {
  const ops::GemmParams gp = ops::parse_gemm(node);
  const bool trans_a = gp.trans_a, trans_b = gp.trans_b;
  const float alpha = gp.alpha, beta = gp.beta;
  const bool tf32 = ops::allows_tf32(node);
  auto reshape = [=](ReshapeContext& rc) -> Status {
    if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("A and B are required");
    if (!reshape_state(rc)) return unsupported("no device state to plan with");
    const Shape& a = rc.in[0].shape;
    const Shape& b = rc.in[1].shape;
    if (a.size() != 2 || b.size() != 2) return rc.error("A and B must be 2-D");
    const int64_t m = trans_a ? a[1] : a[0], k = trans_a ? a[0] : a[1];
    const int64_t n = trans_b ? b[0] : b[1], kb = trans_b ? b[1] : b[0];
    if (k != kb) return rc.error("inner dims differ: " + std::to_string(k) + " vs " + std::to_string(kb));
    const DataType dt = rc.in[0].dtype;
    if (!is_float_type(dt) || rc.in[1].dtype != dt || (rc.in.size() > 2 && rc.in[2].present && rc.in[2].dtype != dt))
      return rc.error("A, B and C must have one float dtype");
    rc.out[0] = {dt, Shape{m, n}};
    auto g = std::make_shared<GemmPlan>();
    GemmProblem& p = g->p;
    p.dtype = dt;
    p.trans_a = trans_a;
    p.trans_b = trans_b;
    p.m = m;
    p.n = n;
    p.k = k;
    p.alpha = alpha;
    p.tf32 = tf32;
    p.heur_index = heuristic_index(rc);
    p.off_a = p.off_b = p.off_y = {0};
    if (rc.in.size() > 2 && rc.in[2].present && beta != 0.f) {
      const Shape& c = rc.in[2].shape;
      Shape bs;
      if (c.size() > 2 || !broadcast_shape(c, {m, n}, bs) || bs != Shape{m, n})
        return rc.error("C of shape " + shape_to_string(c) + " does not broadcast to [M,N]");
      if (!make_broadcast_index({m, n}, c, {m, n}, g->c_index)) return rc.error("C cannot be broadcast on CUDA");
      // A bias row (C of N values, beta 1: a Linear layer's) goes in cuBLASLt's epilogue when it has
      // an algorithm with it; otherwise C is broadcast into Y first and the GEMM adds beta·Y (a pass
      // over Y: GPT-2's 48 Gemms spent 5.3 of 16.7 ms of a float16 batch-64 run on those, H200).
      if (beta == 1.f && k > 0 && shape_numel(c) == n && (c.size() == 1 || c[0] == 1)) {
        // kiln.FusedGemm's inner Gemm may ask for its ReLU or tanh GELU there too (cuda_fused.cpp).
        p.epilogue = bias_epilogue(rc.node.attr_int(kBiasEpilogueAttr, 1));
      } else {
        g->has_c = true;
        p.beta = beta;
      }
    }
    KILN_RETURN_IF_ERROR(plan_gemm(rc.node, *reshape_state(rc), *g));
    if (rc.in.size() > 2 && rc.in[2].present && beta != 0.f && !g->has_c && p.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
      // No algorithm with the bias epilogue (plan_gemm then chose one without it): broadcast C and
      // add it as beta·Y. beta is a launch argument, so the plan stands.
      g->has_c = true;
      p.beta = beta;
    }
    rc.state = std::move(g);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const auto& g = *static_cast<const GemmPlan*>(ctx.shape_state());
    Tensor& y = ctx.output(0);
    if (g.has_c)
      KILN_RETURN_IF_ERROR(launched(ctx, launch_binary(BinaryOp::kFirst, elem_of(y.dtype()), ctx.input(2).raw(), nullptr,
                                                       y.raw(), g.p.m * g.p.n, g.c_index, state_of(ctx).stream)));
    const void* bias = g.p.epilogue != CUBLASLT_EPILOGUE_DEFAULT ? ctx.input(2).raw() : nullptr;
    return launch_gemm(ctx, g, ctx.input(0).raw(), ctx.input(1).raw(), y.raw(), bias);
  };
  return make_staged(reshape, run, [reshape](const ReshapeContext& rc) { return gemm_tactics(rc, reshape); });
}

// ---- kiln.F8MatMul (builder/calibrate.cpp's FP8 products, Hopper): A [..., K] (float32/16/bf16) is
// quantized to E4M3 into the workspace, then one cuBLASLt FP8 GEMM against the constant B8 [N, K]
// (stored transposed: cuBLASLt's FP8 kernels take only the "TN" layout) with alpha = a_scale ·
// b_scale and the bias [N] in the epilogue (float16/bfloat16 Y), the activation (and a float32 Y's
// bias) in one pass after it; Y has A's dtype. The plan is a GemmPlan, so the tuner times cuBLASLt's
// candidates as for any GEMM, with and without fast accumulation.
std::string f8_check(const ir::Node& n) {
  if (!n.has_input(0) || !n.has_input(1)) return "A and B8 are required";
  const DataType a = n.inputs[0]->type.dtype;
  if (a != DataType::kFloat32 && a != DataType::kFloat16 && a != DataType::kBFloat16) return "A must be float32, float16 or bfloat16";
  if (n.inputs[1]->type.dtype != DataType::kFloat8E4M3FN) return "B8 must be float8e4m3fn";
  return "";
}

Status reshape_f8(ReshapeContext& rc, float alpha) {
  if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("A and B8 are required");
  if (!reshape_state(rc)) return unsupported("no device state to plan with");
  const DataType dt = rc.in[0].dtype;
  const Shape& as = rc.in[0].shape;
  const Shape& bs = rc.in[1].shape;
  if (rc.in[1].dtype != DataType::kFloat8E4M3FN || bs.size() != 2) return rc.error("B8 must be float8e4m3fn [N, K]");
  const int64_t n = bs[0], k = bs[1];
  if (as.size() < 2 || as.back() != k) return rc.error("A's last dim must be B8's K (" + std::to_string(k) + ")");
  if (k <= 0 || n <= 0 || k % 16 != 0 || n % 16 != 0) return rc.error("FP8 products need K and N positive and divisible by 16");
  const bool bias = rc.in.size() > 2 && rc.in[2].present;
  if (bias && (rc.in[2].dtype != dt || shape_numel(rc.in[2].shape) != n)) return rc.error("the bias must be [N] of A's dtype");
  Shape ys = as;
  ys.back() = n;
  rc.out[0] = {dt, ys};
  auto g = std::make_shared<GemmPlan>();
  GemmProblem& p = g->p;
  p.dtype = dt;
  p.ab_dtype = DataType::kFloat8E4M3FN;
  p.trans_b = true;
  p.m = shape_numel(as) / k;
  p.n = n;
  p.k = k;
  p.alpha = alpha;
  p.fast_accum = rc.tactic.rfind("fast", 0) == 0;
  p.heur_index = heuristic_index(rc, p.fast_accum ? "fast" : "heur");
  p.off_a = p.off_b = p.off_y = {0};
  // cuBLASLt's FP8 bias epilogue takes a float16/bfloat16 bias; a float32 Y gets the bias from run_f8.
  if (bias && dt != DataType::kFloat32) p.epilogue = CUBLASLT_EPILOGUE_BIAS;
  KILN_RETURN_IF_ERROR(plan_gemm(rc.node, *reshape_state(rc), *g));
  rc.workspace_bytes = static_cast<size_t>((p.m * p.k + 255) / 256 * 256);
  rc.state = std::move(g);
  return Status::Ok();
}

Status run_f8(KernelContext& ctx, const ops::F8MatMulParams& params) {
  const auto& g = *static_cast<const GemmPlan*>(ctx.shape_state());
  Tensor& y = ctx.output(0);
  if (g.empty) return Status::Ok();
  CudaState& st = state_of(ctx);
  const Tensor& a = ctx.input(0);
  auto* a8 = static_cast<uint8_t*>(ctx.workspace());
  KILN_RETURN_IF_ERROR(launched(ctx, launch_quantize_e4m3(elem_of(a.dtype()), a.raw(), a8, g.p.m * g.p.k, 1.0f / params.a_scale, st.stream)));
  const bool bias = ctx.has_input(2);
  const bool in_epilogue = g.p.epilogue != CUBLASLT_EPILOGUE_DEFAULT;
  KILN_RETURN_IF_ERROR(launch_gemm(ctx, g, a8, ctx.input(1).raw(), y.raw(), in_epilogue ? ctx.input(2).raw() : nullptr));
  // The bias when the GEMM did not take it, and the activation: one pass over Y.
  const bool apply_act = params.act.kind != ActKind::kNone;
  if ((bias && !in_epilogue) || apply_act)
    return launched(ctx, launch_bias_act(elem_of(y.dtype()), y.raw(), bias && !in_epilogue ? ctx.input(2).raw() : nullptr, nullptr,
                                         y.numel(), g.p.n, 1, apply_act, unary_of(params.act.kind), params.act.a, params.act.b, st.stream));
  return Status::Ok();
}

// FP8's tactics: cuBLASLt's candidates with float32 promotion of the partial sums ("heur<i>", the
// kernel's own choice is heur0) and with fast accumulation ("fast<i>").
std::vector<std::string> f8_tactics(const ReshapeContext& rc, const std::function<Status(ReshapeContext&)>& reshape) {
  std::vector<std::string> names = gemm_tactics(rc, reshape);
  add_tactics(rc, reshape, "fast0", "fast", &names);
  return names;
}

Expected<KernelPtr> create_f8(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(ops::F8MatMulParams params, ops::parse_f8_matmul(n));
  auto reshape = [alpha = params.a_scale * params.b_scale](ReshapeContext& rc) { return reshape_f8(rc, alpha); };
  return make_staged(reshape, [params](KernelContext& ctx) { return run_f8(ctx, params); },
                     [reshape](const ReshapeContext& rc) { return f8_tactics(rc, reshape); });
}

// ---- kiln.QMatMul (passes/fuse_qdq.cpp's 8-bit products): A [..., K] uint8/int8 times a constant
// B [K, N] int8 (zero point 0; scale per tensor or per column), through cuBLASLt's int8 tensor-core
// kernels (exact int32 sums), then one pass over the sums:
//   y = act(xs·ws[j] · (Σ_k a'[i,k]·b[k,j] − z'·Σ_k b[k,j]) + bias[j]), requantized to y_scale /
//   y_zero_point's type when given (saturate(rne(y / ys) + yz)), else float32.
// a' is A as int8 (uint8 values shifted by −128, so z' = xz − 128): cuBLASLt's integer kernels take
// signed operands only. The column sums, scales and bias fold into one scale and one offset per column
// at prepare, when B is also stored transposed ([N, K], the "TN" layout those kernels take) with rows
// padded to 16 bytes; prepare uploads all three once. Run: A to int8 rows (skipped when A is int8 and
// K % 16 == 0), the product into int32 sums in the workspace, the epilogue.
enum QIn { kQX = 0, kQXScale, kQXZero, kQW, kQWScale, kQWZero, kQYScale, kQYZero, kQBias };

struct QMatMulConsts {
  Activation act;
  bool a_uint8 = false;
  int64_t k = 0, n = 0, kp = 0, np = 0;  // kp: K rounded up to 16; np: N rounded up to 4 (the sums' row)
  int out_type = 0;                       // launch_int8_epilogue's: 0 float32, 1 uint8, 2 int8, 3 float16
  float ys = 1;
  int32_t yz = 0;
  Tensor bt, scale, offset;               // device: int8 [np, kp], float32 [n], float32 [n]
};

const Tensor* q_const(const ir::Node& n, int i) {
  return n.has_input(static_cast<size_t>(i)) && n.inputs[i]->is_constant() ? &*n.inputs[i]->constant : nullptr;
}

std::string qmatmul_check(const ir::Node& n) {
  if (!n.has_input(kQX) || !n.has_input(kQW)) return "A and B are required";
  const DataType a = n.inputs[kQX]->type.dtype;
  if (a != DataType::kUInt8 && a != DataType::kInt8) return "A must be uint8 or int8";
  const Tensor* w = q_const(n, kQW);
  if (!w || w->dtype() != DataType::kInt8 || w->shape().size() != 2) return "B must be a constant int8 [K, N]";
  for (int i : {kQXScale, kQXZero, kQWScale, kQWZero, kQYScale, kQYZero, kQBias})
    if (n.has_input(static_cast<size_t>(i)) && !q_const(n, i)) return "scales, zero points and the bias must be constants";
  if (!q_const(n, kQXScale) || !q_const(n, kQWScale)) return "x_scale and w_scale are required";
  if (n.has_input(kQYScale) != n.has_input(kQYZero)) return "y_scale and y_zero_point come together";
  if (n.has_input(kQYZero) && n.inputs[kQYZero]->type.dtype != DataType::kUInt8 && n.inputs[kQYZero]->type.dtype != DataType::kInt8)
    return "y must be uint8 or int8";
  const int64_t out = n.attr_int("output_dtype", static_cast<int64_t>(DataType::kFloat32));
  if (out != static_cast<int64_t>(DataType::kFloat32) && (out != static_cast<int64_t>(DataType::kFloat16) || n.has_input(kQYScale)))
    return "a float output is float32 or float16";
  return "";
}

// Reads, checks and uploads what every run of the node uses (the CPU kernel's rules and messages).
Expected<std::shared_ptr<const QMatMulConsts>> prepare_qmatmul(const ir::Node& n) {
  auto c = std::make_shared<QMatMulConsts>();
  std::string why;
  if (!read_activation(n, &c->act, &why)) return invalid_argument(n.describe() + ": " + why);
  const Tensor& w = *q_const(n, kQW);
  c->k = w.shape()[0];
  c->n = w.shape()[1];
  c->kp = (c->k + 15) / 16 * 16;
  c->np = (c->n + 3) / 4 * 4;
  c->a_uint8 = n.inputs[kQX]->type.dtype == DataType::kUInt8;
  if (n.attr_int("output_dtype", 0) == static_cast<int64_t>(DataType::kFloat16)) c->out_type = 3;
  auto values = [&](int i, std::vector<double>& v) -> Status {
    const Tensor* t = q_const(n, i);
    if (t && !ops::read_doubles(*t, v)) return invalid_argument(n.describe() + ": input " + std::to_string(i) + " is not numeric");
    if (!t) v.clear();
    return Status::Ok();
  };
  std::vector<double> xs, xz, ws, wz, ys, yz, bias;
  for (auto [i, v] : {std::pair{int(kQXScale), &xs}, std::pair{int(kQXZero), &xz}, std::pair{int(kQWScale), &ws},
                      std::pair{int(kQWZero), &wz}, std::pair{int(kQYScale), &ys}, std::pair{int(kQYZero), &yz},
                      std::pair{int(kQBias), &bias}})
    KILN_RETURN_IF_ERROR(values(i, *v));
  if (xs.size() != 1 || !(xs[0] > 0) || !std::isfinite(xs[0])) return invalid_argument(n.describe() + ": x_scale must be one positive finite value");
  if (xz.size() > 1) return invalid_argument(n.describe() + ": x_zero_point must be one value of X's type");
  if (ws.size() != 1 && static_cast<int64_t>(ws.size()) != c->n)
    return invalid_argument(n.describe() + ": w_scale must have 1 or " + std::to_string(c->n) + " values");
  for (double z : wz)
    if (z != 0) return invalid_argument(n.describe() + ": w_zero_point must be 0 (symmetric weights)");
  if (!ys.empty()) {
    const DataType yt = n.inputs[kQYZero]->type.dtype;
    if (ys.size() != 1 || yz.size() != 1 || (yt != DataType::kUInt8 && yt != DataType::kInt8))
      return invalid_argument(n.describe() + ": y_scale and y_zero_point must be one value each, y_zero_point uint8 or int8");
    if (!(ys[0] > 0) || !std::isfinite(ys[0])) return invalid_argument(n.describe() + ": y_scale must be positive and finite");
    c->ys = static_cast<float>(ys[0]);
    c->yz = static_cast<int32_t>(yz[0]);
    c->out_type = yt == DataType::kUInt8 ? 1 : 2;
  }
  const Tensor* b = q_const(n, kQBias);
  if (b && (static_cast<int64_t>(bias.size()) != c->n || (b->dtype() != DataType::kFloat32 && b->dtype() != DataType::kInt32)))
    return invalid_argument(n.describe() + ": B must be float32 or int32 with " + std::to_string(c->n) + " values");
  // The product runs on a' = a − 128 for uint8 A, so its zero point moves by as much.
  const int64_t zp = (xz.empty() ? 0 : static_cast<int64_t>(xz[0])) - (c->a_uint8 ? 128 : 0);
  const int8_t* wq = w.data<int8_t>();
  Tensor bt = Tensor::empty(DataType::kInt8, {c->np, c->kp});  // zeroed: padding adds nothing to the sums
  Tensor scale = Tensor::empty(DataType::kFloat32, {c->n});
  Tensor offset = Tensor::empty(DataType::kFloat32, {c->n});
  int8_t* btq = bt.data<int8_t>();
  for (int64_t j = 0; j < c->n; ++j) {
    int64_t colsum = 0;
    for (int64_t kk = 0; kk < c->k; ++kk) {
      btq[j * c->kp + kk] = wq[kk * c->n + j];
      colsum += wq[kk * c->n + j];
    }
    const double sj = xs[0] * ws[ws.size() == 1 ? 0 : j];
    const double bj = quantized_bias(b, bias, j, sj);
    scale.data<float>()[j] = static_cast<float>(sj);
    offset.data<float>()[j] = static_cast<float>(bj - sj * static_cast<double>(zp * colsum));
  }
  for (auto [host, dev] : {std::pair{&bt, &c->bt}, std::pair{&scale, &c->scale}, std::pair{&offset, &c->offset}}) {
    KILN_ASSIGN_OR_RETURN(*dev, upload(*host));
  }
  return std::shared_ptr<const QMatMulConsts>(std::move(c));
}

// The workspace bytes A's int8 rows take ahead of the int32 sums: 0 when A is read as it is (int8,
// rows a multiple of 16 bytes), else m rows of kp bytes through launch_int8_rows, 256-byte aligned.
size_t qmatmul_a_bytes(const QMatMulConsts& c, int64_t m) {
  return c.a_uint8 || c.kp != c.k ? static_cast<size_t>((m * c.kp + 255) / 256 * 256) : 0;
}

Status reshape_qmatmul(ReshapeContext& rc, const QMatMulConsts& c) {
  if (rc.in.size() <= kQW || !rc.in[kQX].present) return rc.error("A and B are required");
  if (!reshape_state(rc)) return unsupported("no device state to plan with");
  const Shape& as = rc.in[kQX].shape;
  if (as.empty() || as.back() != c.k)
    return rc.error("A's last dim must be B's K (" + std::to_string(c.k) + "), A is " + shape_to_string(as));
  Shape ys = as;
  if (as.size() == 1) ys = {c.n};
  else ys.back() = c.n;
  static constexpr DataType kOut[] = {DataType::kFloat32, DataType::kUInt8, DataType::kInt8, DataType::kFloat16};
  rc.out[0] = {kOut[c.out_type], ys};
  const int64_t m = shape_numel(as) / std::max<int64_t>(c.k, 1);
  auto g = std::make_shared<GemmPlan>();
  GemmProblem& p = g->p;
  p.dtype = DataType::kInt32;
  p.ab_dtype = DataType::kInt8;
  p.trans_b = true;
  p.m = m;
  p.n = c.np;
  p.k = c.kp;
  p.heur_index = heuristic_index(rc);
  p.off_a = p.off_b = p.off_y = {0};
  if (c.k == 0 && m * c.n != 0) return rc.error("K = 0 is not supported by the int8 product");
  KILN_RETURN_IF_ERROR(plan_gemm(rc.node, *reshape_state(rc), *g));
  rc.workspace_bytes = qmatmul_a_bytes(c, m) + static_cast<size_t>(m * c.np) * sizeof(int32_t);
  rc.state = std::move(g);
  return Status::Ok();
}

Status run_qmatmul(KernelContext& ctx, const QMatMulConsts& c) {
  const auto& g = *static_cast<const GemmPlan*>(ctx.shape_state());
  Tensor& y = ctx.output(0);
  if (g.empty) return Status::Ok();
  CudaState& st = state_of(ctx);
  const Tensor& a = ctx.input(kQX);
  const int64_t m = g.p.m;
  auto* ws = static_cast<char*>(ctx.workspace());
  const void* a8 = a.raw();
  const size_t a_bytes = qmatmul_a_bytes(c, m);
  if (a_bytes) {
    KILN_RETURN_IF_ERROR(launched(ctx, launch_int8_rows(static_cast<const uint8_t*>(a.raw()), c.a_uint8,
                                                        reinterpret_cast<int8_t*>(ws), m, c.k, c.kp, st.stream)));
    a8 = ws;
  }
  auto* acc = reinterpret_cast<int32_t*>(ws + a_bytes);
  KILN_RETURN_IF_ERROR(launch_gemm(ctx, g, a8, c.bt.raw(), acc));
  const bool act = c.act.kind != ActKind::kNone;
  return launched(ctx, launch_int8_epilogue(acc, c.np, c.scale.data<float>(), c.offset.data<float>(), y.raw(), m, c.n, act,
                                            act ? unary_of(c.act.kind) : UnaryOp::kRelu, c.act.a, c.act.b, c.out_type, c.ys, c.yz,
                                            st.stream));
}

Expected<KernelPtr> create_qmatmul(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<const QMatMulConsts> c, prepare_qmatmul(n));
  auto reshape = [c](ReshapeContext& rc) { return reshape_qmatmul(rc, *c); };
  return make_staged(reshape, [c](KernelContext& ctx) { return run_qmatmul(ctx, *c); },
                     [reshape](const ReshapeContext& rc) { return gemm_tactics(rc, reshape); });
}

// ---- com.microsoft MatMulNBits: Y = A · Wᵀ (+ bias) with W [N, K] 4-bit (layout and kernels in
// cuda_nbits.h). Up to kNBitsFusedRows rows of A (decoding) one kernel reads the 4-bit weights once and
// never writes W; more rows, W is dequantized into the workspace ([N, K] in A's type) and multiplied by
// cuBLASLt, the bias in its epilogue (or broadcast into Y first where no algorithm has one), the
// heuristic's candidates as tactics. Float tensors share A's type (float32, float16, bfloat16: a
// reduced-precision build converts the scales, float zero points and bias with A); g_idx is refused.
enum : int { kNbA = 0, kNbB = 1, kNbScales = 2, kNbZp = 3, kNbGIdx = 4, kNbBias = 5 };

struct NBitsParams {
  int64_t K = 0, N = 0, block = 0, blocks = 0;
};

// A GemmPlan (the GEMM path's; no candidates on the fused path), so gemm_tactics lists its tactics as
// for any GEMM. The shape state points at the GemmPlan part.
struct NBitsPlan : GemmPlan {
  int64_t m = 0;
  bool fused = false;
  bool bias_into_y = false;  // the GEMM path's bias broadcast into Y (beta 1), no epilogue having it
  BroadcastIndex bias_index{};
};

std::string nbits_check(const ir::Node& n) {
  if (n.has_input(kNbGIdx)) return "g_idx (act-order weights) is not supported";
  if (n.attr_int("bits", 4) != 4) return "only 4-bit weights are supported";
  if (std::string r = require_input_types(n, kNbA, {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}); !r.empty())
    return r;
  return require_input_types(n, kNbB, {DataType::kUInt8});
}

Status reshape_nbits(ReshapeContext& rc, const NBitsParams& p) {
  auto present = [&rc](int i) { return i < static_cast<int>(rc.in.size()) && rc.in[i].present; };
  if (!present(kNbA) || !present(kNbB) || !present(kNbScales)) return rc.error("A, B and scales are required");
  if (!reshape_state(rc)) return unsupported("no device state to plan with");
  const auto& a = rc.in[kNbA];
  const DataType dt = a.dtype;
  if (!is_float_type(dt) || dt == DataType::kFloat64) return rc.error("A must be float32, float16 or bfloat16");
  if (a.shape.empty() || a.shape.back() != p.K)
    return rc.error("A's last dimension must be K = " + std::to_string(p.K) + ", got shape " + shape_to_string(a.shape));
  auto check = [&](int i, const char* what, DataType want_type, int64_t want) -> Status {
    const auto& t = rc.in[i];
    if (t.dtype != want_type)
      return rc.error(std::string(what) + " has dtype " + dtype_name(t.dtype) + ", expected " + dtype_name(want_type));
    if (shape_numel(t.shape) != want)
      return rc.error(std::string(what) + " must have " + std::to_string(want) + " elements (K " + std::to_string(p.K) + ", N " +
                      std::to_string(p.N) + ", block_size " + std::to_string(p.block) + "), got shape " + shape_to_string(t.shape));
    return Status::Ok();
  };
  int64_t b_size = 0;
  if (__builtin_mul_overflow(p.N, p.blocks, &b_size) || __builtin_mul_overflow(b_size, p.block / 2, &b_size))
    return rc.error("K, N and block_size are too large");
  KILN_RETURN_IF_ERROR(check(kNbB, "B", DataType::kUInt8, b_size));
  KILN_RETURN_IF_ERROR(check(kNbScales, "scales", dt, p.N * p.blocks));
  if (present(kNbZp)) {
    const bool packed = rc.in[kNbZp].dtype == DataType::kUInt8;
    KILN_RETURN_IF_ERROR(check(kNbZp, "zero_points", packed ? DataType::kUInt8 : dt, packed ? p.N * ((p.blocks + 1) / 2) : p.N * p.blocks));
  }
  if (present(kNbBias)) KILN_RETURN_IF_ERROR(check(kNbBias, "bias", dt, p.N));
  Shape out = a.shape;
  out.back() = p.N;
  rc.out.assign(1, {dt, out});
  auto plan = std::make_shared<NBitsPlan>();
  plan->m = shape_numel(a.shape) / p.K;
  plan->fused = plan->m <= kNBitsFusedRows;
  if (!plan->fused) {
    GemmProblem& g = plan->p;
    g.dtype = dt;
    g.trans_b = true;
    g.m = plan->m;
    g.n = p.N;
    g.k = p.K;
    g.heur_index = heuristic_index(rc);
    g.fp32_reduction = true;
    g.off_a = g.off_b = g.off_y = {0};
    if (present(kNbBias)) g.epilogue = CUBLASLT_EPILOGUE_BIAS;
    KILN_RETURN_IF_ERROR(plan_gemm(rc.node, *reshape_state(rc), *plan));
    if (present(kNbBias) && g.epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
      if (!make_broadcast_index({plan->m, p.N}, {p.N}, {plan->m, p.N}, plan->bias_index))
        return rc.error("the bias cannot be broadcast on CUDA");
      plan->bias_into_y = true;
      g.beta = 1;
    }
    int64_t w_bytes = 0;
    if (__builtin_mul_overflow(p.N * static_cast<int64_t>(dtype_size(dt)), p.K, &w_bytes)) return rc.error("W is too large");
    rc.workspace_bytes = static_cast<size_t>((w_bytes + 255) / 256 * 256);
  }
  rc.state = std::shared_ptr<GemmPlan>(std::move(plan));
  return Status::Ok();
}

Status run_nbits(KernelContext& ctx, const NBitsParams& p) {
  const auto& plan = static_cast<const NBitsPlan&>(*static_cast<const GemmPlan*>(ctx.shape_state()));
  Tensor& y = ctx.output(0);
  if (plan.m == 0) return Status::Ok();
  CudaState& st = state_of(ctx);
  NBitsArgs w;
  w.elem = elem_of(ctx.input(kNbA).dtype());
  w.K = p.K, w.N = p.N, w.block = p.block;
  w.b = ctx.input(kNbB).data<uint8_t>();
  // The kernels read B 8 bytes at a time (planned and uploaded tensors are 256-byte aligned; a caller's
  // view of device memory may not be).
  if (reinterpret_cast<uintptr_t>(w.b) % 8 != 0) return ctx.error("B must be 8-byte aligned in device memory");
  w.scales = ctx.input(kNbScales).raw();
  if (ctx.has_input(kNbZp)) {
    const Tensor& zp = ctx.input(kNbZp);
    if (zp.dtype() == DataType::kUInt8) w.zp_packed = zp.data<uint8_t>();
    else w.zp_float = zp.raw();
  }
  const void* bias = ctx.has_input(kNbBias) ? ctx.input(kNbBias).raw() : nullptr;
  if (plan.fused) return launched(ctx, launch_nbits_rows(w, ctx.input(kNbA).raw(), bias, y.raw(), plan.m, st.stream));
  void* wt = ctx.workspace();
  KILN_RETURN_IF_ERROR(launched(ctx, launch_nbits_dequantize(w, wt, st.stream)));
  if (plan.bias_into_y)
    KILN_RETURN_IF_ERROR(launched(ctx, launch_binary(BinaryOp::kFirst, w.elem, bias, nullptr, y.raw(), plan.m * p.N, plan.bias_index,
                                                     st.stream)));
  return launch_gemm(ctx, plan, ctx.input(kNbA).raw(), wt, y.raw(), plan.bias_into_y ? nullptr : bias);
}

Expected<KernelPtr> create_nbits(const ir::Node& n) {
  NBitsParams p;
  p.K = n.attr_int("K", 0);
  p.N = n.attr_int("N", 0);
  p.block = n.attr_int("block_size", 0);
  // The op's declaration checked these (ops/contrib_quant.cpp); a hand-made engine file did not.
  if (p.K < 1 || p.N < 1 || p.K > (int64_t{1} << 40) || p.N > (int64_t{1} << 40) || p.block < 16 || p.block > (int64_t{1} << 20) ||
      (p.block & (p.block - 1)) != 0)
    return invalid_model(n.describe() + ": K, N and block_size must be valid");
  p.blocks = (p.K + p.block - 1) / p.block;
  // The GEMM path's cuBLASLt candidates; the fused kernel has no alternatives (its plan has none).
  auto reshape = [p](ReshapeContext& rc) { return reshape_nbits(rc, p); };
  return make_staged(reshape, [p](KernelContext& ctx) { return run_nbits(ctx, p); },
                     [reshape](const ReshapeContext& rc) { return gemm_tactics(rc, reshape); });
}

}  // namespace

int matmul_epilogue_applied(const void* shape_state) {
  const auto* g = static_cast<const GemmPlan*>(shape_state);
  if (!g) return 0;
  const cublasLtEpilogue_t e = g->p.epilogue;
  return e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ? 2 : e == CUBLASLT_EPILOGUE_BIAS ? 1 : 0;
}

void register_gemm(KernelRegistry& r) {
  KernelDef mm;
  mm.op = "MatMul";
  mm.since = 1;
  mm.name = "cuda.MatMul.cublaslt";
  mm.half_floats = true;
  mm.check = require_float;
  mm.create = [](const ir::Node&, KernelInit&) {
    return make_staged(reshape_matmul, run_matmul, [](const ReshapeContext& rc) { return gemm_tactics(rc, reshape_matmul); });
  };
  r.add(mm);

  KernelDef g;
  g.op = "Gemm";
  g.since = 7;
  g.name = "cuda.Gemm.cublaslt";
  g.half_floats = true;
  g.check = require_float;
  g.create = [](const ir::Node& n, KernelInit&) { return create_gemm(n); };
  r.add(g);

  KernelDef f8;
  f8.op = "F8MatMul";
  f8.domain = "kiln";
  f8.name = "cuda.F8MatMul.e4m3.cublaslt";
  f8.half_floats = true;
  f8.check = f8_check;
  f8.quantizes = {{"MatMul", "Gemm"}, {DataType::kFloat8E4M3FN}, fp8_product_check};
  f8.create = [](const ir::Node& n, KernelInit&) { return create_f8(n); };
  r.add(f8);

  KernelDef nb;
  nb.op = "MatMulNBits";
  nb.domain = "com.microsoft";
  nb.name = "cuda.MatMulNBits.q4";
  nb.half_floats = true;
  nb.check = nbits_check;
  nb.create = [](const ir::Node& n, KernelInit&) { return create_nbits(n); };
  r.add(nb);

  KernelDef q;
  q.op = "QMatMul";
  q.domain = "kiln";
  q.name = "cuda.QMatMul.i8.cublaslt";
  q.check = qmatmul_check;
  q.quantizes = {{"MatMul", "Gemm"}, {DataType::kInt8}, nullptr};
  q.create = [](const ir::Node& n, KernelInit&) { return create_qmatmul(n); };
  r.add(q);
}

}  // namespace kiln::cuda
