// backends/cuda/cuda_norm_misc.cpp — InstanceNormalization, GroupNormalization, LRN, the window
// functions, DepthToSpace/SpaceToDepth and MatMul for float64 and integer types on the GPU.
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"
#include "ops/params_nn.h"
#include "ops/params_shape.h"

namespace kiln::cuda {
namespace {

bool real_type(DataType t) { return is_float_type(t) || t == DataType::kFloat64; }

std::string check_real_inputs(const ir::Node& n, size_t required) {
  for (size_t i = 0; i < required; ++i)
    if (!n.has_input(static_cast<int>(i))) return "input " + std::to_string(i) + " is required";
  const DataType dt = n.inputs[0]->type.dtype;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) continue;
    if (!n.inputs[i]->type.is_tensor()) return "takes tensors only";
    const DataType t = n.inputs[i]->type.dtype;
    if (t != DataType::kUndefined && !real_type(t)) return std::string(dtype_name(t)) + " does not run on CUDA";
    if (t != DataType::kUndefined && dt != DataType::kUndefined && t != dt) return "inputs must share one dtype";
  }
  return "";
}

struct GroupPlan {
  int64_t n = 0, c = 0, s = 0, groups = 1;
  bool per_channel = true;
};

Expected<KernelPtr> create_group_norm(const ir::Node& n, bool instance) {
  double eps = 0;
  int64_t groups_attr = 0;  // InstanceNormalization: unused, a group per channel
  if (instance) {
    eps = ops::parse_instance_norm(n).epsilon;
  } else {
    const ops::GroupNormParams p = ops::parse_group_norm(n);
    eps = p.epsilon;
    groups_attr = p.num_groups;
  }
  auto reshape = [instance, groups_attr](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() < 2) return rc.error("X must have rank >= 2");
    auto p = std::make_shared<GroupPlan>();
    p->n = x[0];
    p->c = x[1];
    p->s = 1;
    for (size_t i = 2; i < x.size(); ++i) p->s *= x[i];
    p->groups = instance ? x[1] : groups_attr;
    if (p->groups < 1 || p->c % p->groups != 0) return rc.error("channels must be divisible by num_groups");
    int64_t ns = 1, nb = 1;
    for (int64_t d : rc.in[1].shape) ns *= d;
    for (int64_t d : rc.in[2].shape) nb *= d;
    if (ns != nb || (ns != p->c && ns != p->groups)) return rc.error("scale and bias must have C or num_groups entries");
    p->per_channel = ns == p->c;
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [eps](KernelContext& ctx) -> Status {
    const auto& p = shape_state<GroupPlan>(ctx);
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_group_norm(elem_of(x.dtype()), x.raw(), ctx.input(1).raw(), ctx.input(2).raw(), p.per_channel,
                                           ctx.output(0).raw(), p.n, p.c, p.s, p.groups, eps, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

Expected<KernelPtr> create_lrn(const ir::Node& n) {
  const ops::LrnParams p = ops::parse_lrn(n);
  const int64_t size = p.size;
  const double alpha = p.alpha, beta = p.beta, bias = p.bias;
  if (size < 1) return invalid_model(n.describe() + ": size must be positive");
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in[0].shape.size() < 2) return rc.error("X must have rank >= 2");
    rc.out[0] = {rc.in[0].dtype, rc.in[0].shape};
    return Status::Ok();
  };
  auto run = [=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t N = x.dim(0), C = x.dim(1), S = N * C ? x.numel() / (N * C) : 0;
    return launched(ctx, launch_lrn(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), N, C, S, size, alpha, beta, bias,
                                    state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

Expected<KernelPtr> create_window(const ir::Node& n) {
  const int kind = n.op_type == "HannWindow" ? 0 : n.op_type == "HammingWindow" ? 1 : 2;
  const ops::SignalWindowParams wp = ops::parse_signal_window(n);
  const bool periodic = wp.periodic;
  const DataType dt = wp.output_datatype;
  auto reshape = [dt](ReshapeContext& rc) -> Status {
    auto v = host_ints(rc.in[0].value);
    if (!v || v->size() != 1 || (*v)[0] < 0) return rc.error("size must be a non-negative scalar int known on the host");
    if (elem_of(dt) < 0) return rc.error(std::string("output_datatype ") + dtype_name(dt) + " does not run on CUDA");
    rc.out[0] = {dt, Shape{(*v)[0]}};
    return Status::Ok();
  };
  auto run = [kind, periodic](KernelContext& ctx) -> Status {
    Tensor& y = ctx.output(0);
    return launched(ctx, launch_window(kind, elem_of(y.dtype()), y.raw(), y.numel(), periodic, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// DepthToSpace (DCR/CRD) and SpaceToDepth as one strided copy over a 6-D view of X.
Expected<KernelPtr> create_depth_space(const ir::Node& n, bool to_space) {
  KILN_ASSIGN_OR_RETURN(const ops::DepthToSpaceParams dp, ops::parse_depth_to_space(n));
  const int64_t b = dp.blocksize;
  const bool crd = dp.crd;
  auto reshape = [b, crd, to_space](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() != 4) return rc.error("X must be 4-D");
    const int64_t N = x[0], C = x[1], H = x[2], W = x[3];
    int64_t view[6], perm[6];
    Shape out;
    if (to_space) {
      if (C % (b * b)) return rc.error("channels must be divisible by blocksize²");
      const int64_t c = C / (b * b);
      if (crd) {
        const int64_t v[6] = {N, c, b, b, H, W}, p[6] = {0, 1, 4, 2, 5, 3};
        std::copy(v, v + 6, view), std::copy(p, p + 6, perm);
      } else {
        const int64_t v[6] = {N, b, b, c, H, W}, p[6] = {0, 3, 4, 1, 5, 2};
        std::copy(v, v + 6, view), std::copy(p, p + 6, perm);
      }
      out = {N, c, H * b, W * b};
    } else {
      if (H % b || W % b) return rc.error("height and width must be divisible by blocksize");
      const int64_t v[6] = {N, C, H / b, b, W / b, b}, p[6] = {0, 3, 5, 1, 2, 4};
      std::copy(v, v + 6, view), std::copy(p, p + 6, perm);
      out = {N, C * b * b, H / b, W / b};
    }
    int64_t st[6];
    for (int d = 5, s = 1; d >= 0; --d) {
      st[d] = s;
      s *= static_cast<int>(view[d]);
    }
    auto ix = std::make_shared<StridedIndex>();
    ix->rank = 6;
    for (int d = 0; d < 6; ++d) {
      ix->out_dims[d] = view[perm[d]];
      ix->in_strides[d] = st[perm[d]];
    }
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(ix);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_strided_copy(x.raw(), ctx.output(0).raw(), x.numel(), static_cast<int>(dtype_size(x.dtype())),
                                             shape_state<StridedIndex>(ctx), state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

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

void register_norm_misc(KernelRegistry& r) {
  for (bool ql : {false, true}) {
    KernelDef q = kernel_row(ql ? "QLinearMatMul" : "MatMulInteger", 10, [ql](const ir::Node& n) { return check_qmatmul(n, ql); },
                             [ql](const ir::Node&, KernelInit&) { return create_qmatmul(ql); });
    q.half_floats = false;
    r.add(q);
  }
  r.add(kernel_row("InstanceNormalization", 1, [](const ir::Node& n) { return check_real_inputs(n, 3); },
                   [](const ir::Node& n, KernelInit&) { return create_group_norm(n, true); }));
  r.add(kernel_row("GroupNormalization", 18, [](const ir::Node& n) { return check_real_inputs(n, 3); },
                   [](const ir::Node& n, KernelInit&) { return create_group_norm(n, false); }));
  r.add(kernel_row("LRN", 1, [](const ir::Node& n) { return check_real_inputs(n, 1); },
                   [](const ir::Node& n, KernelInit&) { return create_lrn(n); }));
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    KernelDef w = kernel_row(op, 17, [](const ir::Node& n) -> std::string {
      const DataType dt = ops::parse_signal_window(n).output_datatype;
      return elem_of(dt) < 0 ? std::string(dtype_name(dt)) + " output does not run on CUDA" : "";
    }, [](const ir::Node& n, KernelInit&) { return create_window(n); });
    w.host_inputs = 0b1;
    w.half_floats = false;
    r.add(w);
  }
  auto any_4d = [](const ir::Node& n) -> std::string {
    if (!n.has_input(0) || !n.inputs[0]->type.is_tensor()) return "X is required";
    const DataType dt = n.inputs[0]->type.dtype;
    return dt != DataType::kUndefined && elem_of(dt) < 0 ? std::string(dtype_name(dt)) + " does not run on CUDA" : "";
  };
  r.add(kernel_row("DepthToSpace", 1, any_4d, [](const ir::Node& n, KernelInit&) { return create_depth_space(n, true); }));
  r.add(kernel_row("SpaceToDepth", 1, any_4d, [](const ir::Node& n, KernelInit&) { return create_depth_space(n, false); }));
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
