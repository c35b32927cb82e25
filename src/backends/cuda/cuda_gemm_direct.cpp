// backends/cuda/cuda_gemm_direct.cpp — the direct batched products on the GPU: MatMul for float64 and
// integer types (cuBLASLt takes the float types: cuda_gemm.cpp), MatMulInteger and QLinearMatMul
// (launchers in cuda_gemm_direct.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"

namespace kiln::cuda {
namespace {

// numpy matmul shapes: 1-D operands gain a dim that the output drops; batch dims broadcast.
Status matmul_index(const ReshapeContext& rc, Shape a, Shape b, MatMulIndex& ix, Shape& out) {
  if (a.empty() || b.empty()) return rc.error("MatMul operands must have rank >= 1");
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  const int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
  if (b[b.size() - 2] != K) return rc.error("inner dimensions differ: " + shape_to_string(a) + " x " + shape_to_string(b));
  const Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape batch;
  if (!broadcast_shape(ab, bb, batch)) return rc.error("batch dims do not broadcast");
  if (batch.size() > static_cast<size_t>(kMaxRank)) return rc.error("rank above 8");
  ix = MatMulIndex{};
  ix.rank = static_cast<int>(batch.size());
  ix.m = M;
  ix.n = N;
  ix.k = K;
  auto strides = [&](const Shape& s, int64_t mat, int64_t* st) {
    int64_t stride = mat;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int sd = d - (ix.rank - static_cast<int>(s.size()));
      const int64_t dim = sd >= 0 ? s[sd] : 1;
      st[d] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
  };
  for (int d = 0; d < ix.rank; ++d) ix.dims[d] = batch[d];
  strides(ab, M * K, ix.a_strides);
  strides(bb, K * N, ix.b_strides);
  out = batch;
  if (!a1) out.push_back(M);
  if (!b1) out.push_back(N);
  return Status::Ok();
}

Expected<KernelPtr> create_matmul_direct() {
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in[1].dtype != rc.in[0].dtype) return rc.error("operands must share one dtype");
    auto ix = std::make_shared<MatMulIndex>();
    Shape out;
    KILN_RETURN_IF_ERROR(matmul_index(rc, rc.in[0].shape, rc.in[1].shape, *ix, out));
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(ix);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const Tensor& a = ctx.input(0);
    return launched(ctx, launch_matmul_direct(elem_of(a.dtype()), a.raw(), ctx.input(1).raw(), ctx.output(0).raw(),
                                              shape_state<MatMulIndex>(ctx), state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// MatMulInteger (A, B, a_zero_point, b_zero_point) and QLinearMatMul (A, a_scale, a_zp, B, b_scale,
// b_zp, y_scale, y_zp): int8/uint8 operands; zero points and scales must be scalars (per-row ones stay
// on the CPU).
bool is_q8(DataType t) { return t == DataType::kInt8 || t == DataType::kUInt8; }
bool scalar_value(const ir::Value* v) {
  if (!v || !v->type.is_tensor() || !v->type.shape.known || !v->type.shape.is_static()) return false;
  return shape_numel(v->type.shape.to_static()) == 1;
}

std::string check_qmatmul(const ir::Node& n, bool qlinear) {
  const int ia = 0, ib = qlinear ? 3 : 1;
  for (int i : {ia, ib}) {
    if (!n.has_input(i) || !n.inputs[i]->type.is_tensor()) return "A and B are required";
    if (!is_q8(n.inputs[i]->type.dtype)) return "A and B must be int8 or uint8";
  }
  const std::vector<int> params = qlinear ? std::vector<int>{1, 2, 4, 5, 6, 7} : std::vector<int>{2, 3};
  for (int i : params) {
    if (!n.has_input(i)) {
      if (qlinear) return "scales and zero points are required";
      continue;
    }
    if (!scalar_value(n.inputs[i])) return "per-row zero points or scales run on the CPU";
  }
  if (qlinear) {
    const DataType s = n.inputs[1]->type.dtype;
    if (s != DataType::kFloat32 && s != DataType::kFloat16) return "scales must be float or float16";
    for (int i : {4, 6})
      if (n.inputs[i]->type.dtype != s) return "scales must share one dtype";
    if (!is_q8(n.inputs[7]->type.dtype)) return "y_zero_point must be int8 or uint8";
  }
  return "";
}

Expected<KernelPtr> create_qmatmul(bool qlinear) {
  auto reshape = [qlinear](ReshapeContext& rc) -> Status {
    const int ia = 0, ib = qlinear ? 3 : 1;
    auto q = std::make_shared<QMatMulArgs>();
    Shape out;
    KILN_RETURN_IF_ERROR(matmul_index(rc, rc.in[ia].shape, rc.in[ib].shape, q->index, out));
    q->a_signed = rc.in[ia].dtype == DataType::kInt8;
    q->b_signed = rc.in[ib].dtype == DataType::kInt8;
    q->qlinear = qlinear;
    if (qlinear) {
      q->scale_f16 = rc.in[1].dtype == DataType::kFloat16;
      q->y_signed = rc.in[7].dtype == DataType::kInt8;
    }
    rc.out[0] = {qlinear ? rc.in[7].dtype : DataType::kInt32, out};
    rc.state = std::move(q);
    return Status::Ok();
  };
  auto run = [qlinear](KernelContext& ctx) -> Status {
    QMatMulArgs q = shape_state<QMatMulArgs>(ctx);
    auto ptr = [&](int i) -> const void* { return ctx.has_input(i) ? ctx.input(i).raw() : nullptr; };
    if (qlinear) {
      q.a = ptr(0), q.sa = ptr(1), q.za = ptr(2), q.b = ptr(3), q.sb = ptr(4), q.zb = ptr(5), q.sy = ptr(6), q.zy = ptr(7);
    } else {
      q.a = ptr(0), q.b = ptr(1), q.za = ptr(2), q.zb = ptr(3);
    }
    q.y = ctx.output(0).raw();
    return launched(ctx, launch_qmatmul(q, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_gemm_direct(KernelRegistry& r) {
  for (bool ql : {false, true}) {
    KernelDef q = kernel_row(ql ? "QLinearMatMul" : "MatMulInteger", 10, [ql](const ir::Node& n) { return check_qmatmul(n, ql); },
                             [ql](const ir::Node&, KernelInit&) { return create_qmatmul(ql); });
    q.half_floats = false;
    r.add(q);
  }
  KernelDef mm = kernel_row("MatMul", 1, [](const ir::Node& n) -> std::string {
    for (int i = 0; i < 2; ++i) {
      if (!n.has_input(i) || !n.inputs[i]->type.is_tensor()) return "A and B are required";
      const DataType t = n.inputs[i]->type.dtype;
      if (t == DataType::kBool || (t != DataType::kUndefined && elem_of(t) < 0)) return std::string(dtype_name(t)) + " operands";
    }
    return "";
  }, [](const ir::Node&, KernelInit&) { return create_matmul_direct(); });
  mm.name = "cuda.MatMul.direct";
  mm.priority = -1;  // cuBLASLt for the float types
  mm.half_floats = false;
  r.add(mm);
}

}  // namespace kiln::cuda
