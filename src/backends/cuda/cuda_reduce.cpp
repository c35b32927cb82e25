// backends/cuda/cuda_reduce.cpp — the table of reductions (Reduce*, ArgMax/ArgMin), Softmax and
// LogSoftmax, and normalizations over the last axes (LayerNormalization, RMSNormalization, kiln's
// SkipLayerNorm). Float types compute in float32; reductions also take int32/int64.
#include <algorithm>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_nn.h"

namespace kiln::cuda {
namespace {

const std::vector<DataType> kFloats = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16};
// The float-only reductions (SumSquare, L1, L2, LogSum, LogSumExp) also take float64 (accumulated in double).
const std::vector<DataType> kReduceFloats = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFloat64};
const std::vector<DataType> kReduceTypes = {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                                            DataType::kFloat64, DataType::kInt32, DataType::kInt64};

std::string rank_ok(const ir::Node& n) {
  if (n.has_input(0) && n.inputs[0]->type.shape.known && n.inputs[0]->type.shape.rank() > kMaxRank) return "rank above 8";
  return "";
}

// ---- Reduce*
struct ReduceRow {
  const char* op;
  ReduceOp fn;
  bool ints;  // takes int32/int64
};

constexpr ReduceRow kReduce[] = {
    {"ReduceSum", ReduceOp::kSum, true},        {"ReduceMean", ReduceOp::kMean, true},
    {"ReduceMax", ReduceOp::kMax, true},        {"ReduceMin", ReduceOp::kMin, true},
    {"ReduceProd", ReduceOp::kProd, true},      {"ReduceSumSquare", ReduceOp::kSumSquare, false},
    {"ReduceL1", ReduceOp::kL1, false},         {"ReduceL2", ReduceOp::kL2, false},
    {"ReduceLogSum", ReduceOp::kLogSum, false}, {"ReduceLogSumExp", ReduceOp::kLogSumExp, false},
};

struct ReducePlan {
  int64_t n_out = 0;
  ReduceIndex index;
};

// Builds the index for reducing `x` over `reduce[k]` dims; false when the kept or reduced dims exceed
// kMaxRank (size-1 dims are left out of both).
bool make_reduce_index(const Shape& x, const std::vector<bool>& reduce, ReduceIndex& idx) {
  std::vector<int64_t> strides(x.size(), 1);
  for (int k = static_cast<int>(x.size()) - 2; k >= 0; --k) strides[k] = strides[k + 1] * x[k + 1];
  idx = {};
  for (size_t k = 0; k < x.size(); ++k) {
    if (x[k] == 1) continue;
    if (reduce[k]) {
      if (idx.red_rank == kMaxRank) return false;
      idx.red_dims[idx.red_rank] = x[k];
      idx.red_strides[idx.red_rank++] = strides[k];
      idx.red_count *= x[k];
    } else {
      if (idx.out_rank == kMaxRank) return false;
      idx.out_dims[idx.out_rank] = x[k];
      idx.out_strides[idx.out_rank++] = strides[k];
    }
  }
  for (size_t k = 0; k < x.size(); ++k)
    if (reduce[k] && x[k] == 0) idx.red_count = 0;
  return true;
}

Expected<KernelPtr> create_reduce(const ir::Node& n, const ReduceRow& row) {
  const ops::ReduceParams rp = ops::parse_reduce(n);
  // A node without an opset (0: made in code) takes axes from input 1 here, as the newest opsets do;
  // the shape function and the CPU kernel read the attribute for it.
  const bool axes_input = rp.axes_input || n.opset == 0;
  const std::vector<int64_t> axes_attr = rp.axes;
  const bool keepdims = rp.keepdims;
  const bool noop_empty = rp.noop_with_empty_axes;
  const ReduceOp fn = row.fn;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("data is required");
    const Shape& x = rc.in[0].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    std::vector<int64_t> axes = axes_attr;
    if (axes_input && rc.in.size() > 1 && rc.in[1].present) {
      auto v = host_ints(rc.in[1].value);
      if (!v) return rc.error("axes must be known on the host");
      axes = *v;
    }
    std::vector<bool> reduce(x.size(), axes.empty() && !noop_empty);
    for (int64_t a : axes) {
      if (!normalize_axis(a, r)) return rc.error("axis out of range");
      reduce[a] = true;
    }
    auto p = std::make_shared<ReducePlan>();
    if (!make_reduce_index(x, reduce, p->index)) return rc.error("too many dims for CUDA");
    Shape out;
    for (int64_t k = 0; k < r; ++k) {
      if (!reduce[k]) out.push_back(x[k]);
      else if (keepdims) out.push_back(1);
    }
    p->n_out = shape_numel(out);
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [fn](KernelContext& ctx) -> Status {
    const auto& p = shape_state<ReducePlan>(ctx);
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    return launched(ctx, launch_reduce(fn, elem_of(x.dtype()), x.raw(), y.raw(), p.n_out, p.index, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// ---- ArgMax / ArgMin
Expected<KernelPtr> create_arg(const ir::Node& n, bool max) {
  const ops::ArgReduceParams p = ops::parse_arg_reduce(n);
  const int64_t axis_attr = p.axis;
  const bool keepdims = p.keepdims;
  const bool last = p.select_last_index;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("data is required");
    const Shape& x = rc.in[0].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    int64_t axis = axis_attr;
    if (!normalize_axis(axis, r)) return rc.error("axis out of range");
    if (x[axis] == 0) return rc.error("cannot take the arg-extreme of an empty axis");
    std::vector<bool> reduce(x.size(), false);
    reduce[axis] = true;
    auto p = std::make_shared<ReducePlan>();
    if (!make_reduce_index(x, reduce, p->index)) return rc.error("too many dims for CUDA");
    if (p->index.red_rank == 0) {  // an axis of size 1: one element, index 0
      p->index.red_rank = 1;
      p->index.red_dims[0] = 1;
      p->index.red_strides[0] = 0;
    }
    Shape out;
    for (int64_t k = 0; k < r; ++k) {
      if (k != axis) out.push_back(x[k]);
      else if (keepdims) out.push_back(1);
    }
    p->n_out = shape_numel(out);
    rc.out[0] = {DataType::kInt64, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [max, last](KernelContext& ctx) -> Status {
    const auto& p = shape_state<ReducePlan>(ctx);
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_arg_reduce(max, last, elem_of(x.dtype()), x.raw(), ctx.output(0).data<int64_t>(), p.n_out,
                                           p.index, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// ---- Softmax / LogSoftmax
struct SoftmaxPlan {
  int64_t outer = 1, dim = 1, inner = 1;
};

Expected<KernelPtr> create_softmax(const ir::Node& n, bool log) {
  const ops::SoftmaxParams p = ops::parse_softmax(n);
  const bool coerce_2d = p.coerce_2d;  // before 13: flatten to [prod(<axis), prod(>=axis)]
  const int64_t axis_attr = p.axis;
  auto reshape = [axis_attr, coerce_2d](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input is required");
    const Shape& x = rc.in[0].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    if (r == 0) return rc.error("input must have rank >= 1");
    int64_t axis = axis_attr;
    if (!normalize_axis(axis, r)) return rc.error("axis out of range");
    auto p = std::make_shared<SoftmaxPlan>();
    for (int64_t k = 0; k < axis; ++k) p->outer *= x[k];
    if (coerce_2d) {
      for (int64_t k = axis; k < r; ++k) p->dim *= x[k];
    } else {
      p->dim = x[axis];
      for (int64_t k = axis + 1; k < r; ++k) p->inner *= x[k];
    }
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [log](KernelContext& ctx) -> Status {
    const auto& p = shape_state<SoftmaxPlan>(ctx);
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_softmax(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), p.outer, p.dim, p.inner, log,
                                        state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// ---- LayerNormalization(X, Scale[, B]) → Y[, Mean, InvStdDev], RMSNormalization(X, Scale) → Y,
//      SkipLayerNorm(A, B, gamma[, beta]) → Y[, A + B]
enum class Norm { kLayer, kRms, kSkip };

struct NormPlan {
  int64_t rows = 0, n = 0;
  int64_t skip_rows = 0;  // SkipLayerNorm: rows of the smaller operand (0: both are full)
  bool swap = false;      // SkipLayerNorm: B is the full operand and A the repeated one
};

// SkipLayerNorm's operands: the full one (the sum's shape) and the other, which must be rows of the
// last dim repeated over the leading dims ([n], [1, S, n] against [B, S, n], ...). Rows of the
// smaller one, or -1 when it does not broadcast that way.
int64_t repeated_rows(const Shape& full, const Shape& small, int64_t n) {
  if (small.size() > full.size() || n == 0) return -1;
  const size_t lead = full.size() - small.size();
  size_t k = 0;
  while (k < small.size() && small[k] == 1 && full[lead + k] != 1) ++k;  // leading ones broadcast
  for (size_t i = k; i < small.size(); ++i)
    if (small[i] != full[lead + i]) return -1;
  return shape_numel(small) / n;
}

Expected<KernelPtr> create_norm(const ir::Node& node, Norm kind) {
  int64_t axis_attr = -1;  // SkipLayerNorm: the last dim
  float eps = 0;
  bool rms = kind == Norm::kRms;
  if (kind == Norm::kSkip) {
    const ops::SkipLayerNormParams sp = ops::parse_skip_layer_norm(node);
    eps = sp.epsilon;
    rms = sp.simplified;
  } else {
    const ops::LayerNormParams p = ops::parse_layer_norm(node);
    axis_attr = p.axis;
    eps = p.epsilon;
  }
  const int gamma_at = kind == Norm::kSkip ? 2 : 1;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    for (int i = 0; i <= gamma_at; ++i)
      if (static_cast<size_t>(i) >= rc.in.size() || !rc.in[i].present) return rc.error("missing a required input");
    Shape x = rc.in[0].shape;
    if (kind == Norm::kSkip && !broadcast_shape(rc.in[0].shape, rc.in[1].shape, x))
      return rc.error("A " + shape_to_string(rc.in[0].shape) + " and B " + shape_to_string(rc.in[1].shape) +
                      " do not broadcast");
    const int64_t r = static_cast<int64_t>(x.size());
    int64_t axis = axis_attr;
    if (!normalize_axis(axis, r)) return rc.error("axis out of range");
    auto p = std::make_shared<NormPlan>();
    p->rows = 1;
    p->n = 1;
    for (int64_t k = 0; k < axis; ++k) p->rows *= x[k];
    for (int64_t k = axis; k < r; ++k) p->n *= x[k];
    for (size_t i = 1; i < rc.in.size(); ++i) {
      if (!rc.in[i].present) continue;
      if (rc.in[i].dtype != rc.in[0].dtype) return rc.error("inputs differ in dtype");
      const int64_t numel = shape_numel(rc.in[i].shape);
      if (kind == Norm::kSkip && i == 1) {
        p->swap = rc.in[0].shape != x;
        const Shape& small = p->swap ? rc.in[0].shape : rc.in[1].shape;
        if (p->swap && rc.in[1].shape != x) return rc.error("A or B must have the shape of their sum");
        const int64_t rows = repeated_rows(x, small, p->n);
        if (rows < 0) return rc.error("the smaller of A and B must repeat rows of the last dim");
        p->skip_rows = rows == p->rows ? 0 : rows;
      } else if (numel != p->n) {
        return rc.error("scale and bias must have one element per normalized element");
      }
    }
    rc.out[0] = {rc.in[0].dtype, x};
    if (kind == Norm::kSkip && rc.out.size() > 1) rc.out[1] = {rc.in[0].dtype, x};
    if (kind == Norm::kLayer) {
      Shape stat = x;
      for (int64_t k = axis; k < r; ++k) stat[k] = 1;
      for (size_t o = 1; o < rc.out.size() && o < 3; ++o) rc.out[o] = {DataType::kFloat32, stat};
    }
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [=](KernelContext& ctx) -> Status {
    const auto& p = shape_state<NormPlan>(ctx);
    LayerNormArgs a;
    const Tensor& x = ctx.input(kind == Norm::kSkip && p.swap ? 1 : 0);
    a.elem = elem_of(x.dtype());
    a.x = x.raw();
    a.rows = p.rows;
    a.n = p.n;
    a.epsilon = eps;
    a.rms = rms;
    if (kind == Norm::kSkip) {
      a.skip = ctx.input(p.swap ? 0 : 1).raw();
      a.skip_rows = p.skip_rows;
      if (ctx.has_output(1)) a.sum = ctx.output(1).raw();
    }
    a.gamma = ctx.input(gamma_at).raw();
    if (!rms && ctx.has_input(gamma_at + 1)) a.beta = ctx.input(gamma_at + 1).raw();
    a.y = ctx.output(0).raw();
    if (kind == Norm::kLayer) {
      if (ctx.has_output(1)) a.mean = ctx.output(1).data<float>();
      if (ctx.has_output(2)) a.inv_std = ctx.output(2).data<float>();
    }
    return launched(ctx, launch_layer_norm(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

std::string norm_check(const ir::Node& n, int inputs_typed) {
  if (ops::parse_layer_norm(n).stash_type != 1) return "stash_type other than float32";
  for (int i = 0; i < inputs_typed; ++i)
    if (std::string r = require_input_types(n, i, kFloats); !r.empty()) return r;
  return rank_ok(n);
}

}  // namespace

void register_reduce(KernelRegistry& r) {
  for (const ReduceRow& row : kReduce) {
    const ReduceRow* rp = &row;
    KernelDef d = kernel_row(row.op, 1,
                      [rp](const ir::Node& n) -> std::string {
                        if (std::string w = require_input_types(n, 0, rp->ints ? kReduceTypes : kReduceFloats); !w.empty()) return w;
                        return rank_ok(n);
                      },
                      [rp](const ir::Node& n, KernelInit&) { return create_reduce(n, *rp); });
    d.host_inputs = 0b10;
    r.add(std::move(d));
  }
  for (bool max : {true, false}) {
    r.add(kernel_row(max ? "ArgMax" : "ArgMin", 1,
              [](const ir::Node& n) -> std::string {
                if (std::string w = require_input_types(n, 0, kReduceTypes); !w.empty()) return w;
                return rank_ok(n);
              },
              [max](const ir::Node& n, KernelInit&) { return create_arg(n, max); }));
  }
  for (bool log : {false, true}) {
    r.add(kernel_row(log ? "LogSoftmax" : "Softmax", 1,
              [](const ir::Node& n) -> std::string {
                if (std::string w = require_input_types(n, 0, {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                                                               DataType::kFloat64});
                    !w.empty())
                  return w;
                return rank_ok(n);
              },
              [log](const ir::Node& n, KernelInit&) { return create_softmax(n, log); }));
  }
  r.add(kernel_row("LayerNormalization", 17, [](const ir::Node& n) { return norm_check(n, 3); },
            [](const ir::Node& n, KernelInit&) { return create_norm(n, Norm::kLayer); }));
  r.add(kernel_row("RMSNormalization", 23, [](const ir::Node& n) { return norm_check(n, 2); },
            [](const ir::Node& n, KernelInit&) { return create_norm(n, Norm::kRms); }));
  r.add(kernel_row("SkipLayerNorm", 1, [](const ir::Node& n) { return norm_check(n, 4); },
                   [](const ir::Node& n, KernelInit&) { return create_norm(n, Norm::kSkip); }, "kiln"));
}

}  // namespace kiln::cuda
