// backends/cpu/shape_index.cpp — index-driven CPU kernels: Gather, GatherElements, GatherND,
// ScatterElements, Scatter, ScatterND, OneHot, NonZero, Compress, ReverseSequence, Col2Im.
// Indices are validated (negative ones wrap) before any element moves; out-of-range indices are
// errors, never out-of-bounds reads.
#include <limits>
#include <type_traits>

#include "backends/cpu/shape_util.h"
#include "backends/staged_kernel.h"
#include "ops/op_table.h"
#include "ops/params_shape.h"

namespace kiln::cpu::shape_detail {
namespace {

// Indices are int32 or int64 (checked at reshape).
Status check_index_dtype(const ReshapeContext& rc, int i) {
  if (rc.in[i].dtype != DataType::kInt64 && rc.in[i].dtype != DataType::kInt32)
    return rc.error("indices must be int32 or int64");
  return Status::Ok();
}

// Checks every index of `t` against an axis of size `dim` (negative ones count from the end), before
// any element moves.
Status check_indices(const KernelContext& ctx, const Tensor& t, int64_t dim) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = index_at(t, i);
    if (v < -dim || v >= dim)
      return ctx.error("index " + std::to_string(v) + " out of range for axis of size " + std::to_string(dim));
  }
  return Status::Ok();
}

// Index i of `t`, a negative one wrapped against `dim` (checked by check_indices).
inline int64_t wrapped_index(const Tensor& t, int64_t i, int64_t dim) {
  const int64_t v = index_at(t, i);
  return v < 0 ? v + dim : v;
}

// ---------------------------------------------------------------- reductions for scatters

using Reduction = ops::ScatterReduction;

template <typename T>
T combine(T a, T b, Reduction r) {
  switch (r) {
    case Reduction::kAdd: return static_cast<T>(a + b);
    case Reduction::kMul: return static_cast<T>(a * b);
    case Reduction::kMax: return a < b ? b : a;
    case Reduction::kMin: return b < a ? b : a;
    case Reduction::kNone: return b;
  }
  return b;
}

// Whether a scatter's reduction takes dtype `dt` (every dtype without one).
bool reduction_takes(Reduction red, DataType dt) {
  return red == Reduction::kNone || dt == DataType::kFloat16 || dt == DataType::kBFloat16 ||
         visit_numeric(dt, [](auto) {});
}

// Applies the scatter's writes in order (later duplicates see earlier ones, as the spec's loop does):
// each(write) calls write(dst, src) for every write, `block` elements of the updates at `src` going to
// the output at `dst`. The reduction takes the dtype (reduction_takes, checked at reshape).
template <typename Each>
void apply_writes(DataType dt, Reduction red, void* out, const void* upd, int64_t block, const Each& each) {
  if (red == Reduction::kNone) {
    visit_elem(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      each([&](int64_t dst, int64_t src) { copy_elems(static_cast<T*>(out) + dst, static_cast<const T*>(upd) + src, block); });
    });
    return;
  }
  auto via_float = [&](float (*load)(uint16_t), uint16_t (*store)(float)) {
    auto* o = static_cast<uint16_t*>(out);
    const auto* u = static_cast<const uint16_t*>(upd);
    each([&](int64_t dst, int64_t src) {
      for (int64_t j = 0; j < block; ++j) o[dst + j] = store(combine(load(o[dst + j]), load(u[src + j]), red));
    });
  };
  if (dt == DataType::kFloat16) return via_float(f16_to_f32, f32_to_f16);
  if (dt == DataType::kBFloat16) return via_float(bf16_to_f32, f32_to_bf16);
  visit_numeric(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* o = static_cast<T*>(out);
    const auto* u = static_cast<const T*>(upd);
    each([&](int64_t dst, int64_t src) {
      for (int64_t j = 0; j < block; ++j) o[dst + j] = combine(o[dst + j], u[src + j], red);
    });
  });
}

// ---------------------------------------------------------------- Gather

// Gather's geometry for one input-shape signature: the output is [outer, nidx, inner] blocks of X's
// [outer, dim, inner].
struct GatherPlan {
  int64_t outer = 0, dim = 0, inner = 0, nidx = 0;
};

Expected<KernelPtr> create_gather(const ir::Node& n, KernelInit&) {
  const int64_t axis_attr = ops::parse_gather(n).axis;
  auto reshape = [axis_attr](ReshapeContext& rc) -> Status {
    KILN_RETURN_IF_ERROR(check_index_dtype(rc, 1));
    const Shape& x = rc.in[0].shape;
    const Shape& ind = rc.in[1].shape;
    int64_t axis = axis_attr;
    if (!ops::normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
    Shape out(x.begin(), x.begin() + axis);
    out.insert(out.end(), ind.begin(), ind.end());
    out.insert(out.end(), x.begin() + axis + 1, x.end());
    auto plan = std::make_shared<GatherPlan>();
    plan->outer = prod(x, 0, axis);
    plan->dim = x[axis];
    plan->inner = prod(x, axis + 1, x.size());
    plan->nidx = shape_numel(ind);
    rc.state = std::move(plan);
    rc.out[0] = {rc.in[0].dtype, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const GatherPlan& p = shape_state<GatherPlan>(ctx);
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    KILN_RETURN_IF_ERROR(check_indices(ctx, ind, p.dim));
    Tensor& y = ctx.output(0);
    const int64_t nidx = p.nidx, inner = p.inner, dim = p.dim;
    visit_elem(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      parallel_for(p.outer * nidx, std::max<int64_t>(1, 8192 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
        for (int64_t q = b; q < e; ++q) {
          const int64_t o = q / nidx, k = q % nidx;
          copy_elems(dst + q * inner, src + (o * dim + wrapped_index(ind, k, dim)) * inner, inner);
        }
      });
    });
    return Status::Ok();
  });
}

// GatherElements/ScatterElements per shape: the axis, and the strides of data (the output of a
// scatter) that index tensor positions map into.
struct ElementsPlan {
  int axis = 0;
  int64_t dim = 0;
  std::vector<int64_t> strides;
};

// Checks that indices have the rank of data and fit inside it away from `axis`; plans the strides.
Status reshape_elements(ReshapeContext& rc, int64_t axis_attr) {
  KILN_RETURN_IF_ERROR(check_index_dtype(rc, 1));
  const Shape& x = rc.in[0].shape;
  const Shape& ind = rc.in[1].shape;
  int64_t axis = axis_attr;
  if (!ops::normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
  if (ind.size() != x.size()) return rc.error("indices must have the rank of data");
  for (size_t d = 0; d < x.size(); ++d)
    if (static_cast<int64_t>(d) != axis && ind[d] > x[d])
      return rc.error("indices shape " + shape_to_string(ind) + " exceeds data shape " + shape_to_string(x));
  auto plan = std::make_shared<ElementsPlan>();
  plan->axis = static_cast<int>(axis);
  plan->dim = x[axis];
  plan->strides = strides_of(x);
  rc.state = std::move(plan);
  return Status::Ok();
}

// Calls fn(e, offset) for each element e of `ind` (row-major) with the offset, in a tensor of the
// plan's strides, of the same position with the axis replaced by the element's (wrapped) index.
template <typename Fn>
void for_each_element_offset(const Tensor& ind, const ElementsPlan& p, Fn&& fn) {
  const int r = ind.rank();
  const int64_t n = ind.numel();
  SmallDims<> pos(static_cast<size_t>(r));
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (int d = 0; d < r; ++d) off += (d == p.axis ? wrapped_index(ind, e, p.dim) : pos[d]) * p.strides[d];
    fn(e, off);
    for (int d = r - 1; d >= 0; --d) {
      if (++pos[d] < ind.dim(d)) break;
      pos[d] = 0;
    }
  }
}

Expected<KernelPtr> create_gather_elements(const ir::Node& n, KernelInit&) {
  const int64_t axis_attr = ops::parse_gather(n).axis;
  auto reshape = [axis_attr](ReshapeContext& rc) -> Status {
    KILN_RETURN_IF_ERROR(reshape_elements(rc, axis_attr));
    rc.out[0] = {rc.in[0].dtype, rc.in[1].shape};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const ElementsPlan& p = shape_state<ElementsPlan>(ctx);
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    KILN_RETURN_IF_ERROR(check_indices(ctx, ind, p.dim));
    Tensor& y = ctx.output(0);
    visit_elem(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      for_each_element_offset(ind, p, [&](int64_t e, int64_t off) { dst[e] = src[off]; });
    });
    return Status::Ok();
  });
}

Expected<KernelPtr> create_scatter_elements(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::ScatterParams p, ops::parse_scatter(n));
  const int64_t axis_attr = p.axis;
  const Reduction red = p.reduction;
  auto reshape = [axis_attr, red](ReshapeContext& rc) -> Status {
    KILN_RETURN_IF_ERROR(reshape_elements(rc, axis_attr));
    if (rc.in[2].shape != rc.in[1].shape) return rc.error("updates must have the shape of indices");
    if (rc.in[2].dtype != rc.in[0].dtype) return rc.error("updates must have the dtype of data");
    if (!reduction_takes(red, rc.in[0].dtype))
      return rc.error(std::string("reduction not supported for dtype ") + dtype_name(rc.in[0].dtype));
    rc.out[0] = {rc.in[0].dtype, rc.in[0].shape};
    return Status::Ok();
  };
  return make_staged(reshape, [red](KernelContext& ctx) -> Status {
    const ElementsPlan& p = shape_state<ElementsPlan>(ctx);
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    KILN_RETURN_IF_ERROR(check_indices(ctx, ind, p.dim));
    Tensor& y = ctx.output(0);
    copy_tensor(x, y);
    apply_writes(x.dtype(), red, y.raw(), upd.raw(), 1,
                 [&](const auto& write) { for_each_element_offset(ind, p, [&](int64_t e, int64_t off) { write(off, e); }); });
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- GatherND / ScatterND

// An [..., k] index tensor selects slices of data, with `b` leading dims shared between data and
// indices: planned per shape (the slice size, how many tuples, data's strides).
struct NdPlan {
  int64_t b = 0, k = 0, block = 0, batch_stride = 0, tuples = 0, per_batch = 0;
  Shape x;
  std::vector<int64_t> strides;
};

Status reshape_nd(ReshapeContext& rc, int64_t b, NdPlan* p) {
  const Shape& x = rc.in[0].shape;
  const Shape& ind = rc.in[1].shape;
  const int64_t xr = static_cast<int64_t>(x.size()), ir = static_cast<int64_t>(ind.size());
  if (ir < 1 || b < 0 || b >= ir || b >= xr) return rc.error("bad indices rank or batch_dims");
  if (rc.in[1].dtype != DataType::kInt64 && rc.in[1].dtype != DataType::kInt32) return rc.error("indices must be int64");
  for (int64_t d = 0; d < b; ++d)
    if (ind[d] != x[d]) return rc.error("batch dims of data and indices differ");
  const int64_t k = ind.back();
  if (k < 1 || b + k > xr) return rc.error("indices' last dim " + std::to_string(k) + " too large for data rank");
  p->b = b;
  p->k = k;
  p->block = prod(x, b + k, xr);
  p->batch_stride = prod(x, b, xr);
  p->tuples = shape_numel(ind) / k;
  const int64_t batches = prod(x, 0, b);
  p->per_batch = batches ? p->tuples / batches : 0;
  p->x = x;
  p->strides = strides_of(x);
  return Status::Ok();
}

// Checks every index tuple against data's dims (before any element moves).
Status check_nd(const KernelContext& ctx, const Tensor& ind, const NdPlan& p) {
  for (int64_t t = 0; t < p.tuples; ++t)
    for (int64_t j = 0; j < p.k; ++j) {
      const int64_t dim = p.x[p.b + j];
      const int64_t v = index_at(ind, t * p.k + j);
      if (v < -dim || v >= dim)
        return ctx.error("index " + std::to_string(v) + " out of range for axis of size " + std::to_string(dim));
    }
  return Status::Ok();
}

// The offset in data of tuple t's slice.
int64_t nd_offset(const Tensor& ind, const NdPlan& p, int64_t t) {
  int64_t off = (p.per_batch ? t / p.per_batch : 0) * p.batch_stride;
  for (int64_t j = 0; j < p.k; ++j) off += wrapped_index(ind, t * p.k + j, p.x[p.b + j]) * p.strides[p.b + j];
  return off;
}

Expected<KernelPtr> create_gather_nd(const ir::Node& n, KernelInit&) {
  const int64_t batch_dims = ops::parse_gather_nd(n).batch_dims;
  auto reshape = [batch_dims](ReshapeContext& rc) -> Status {
    auto plan = std::make_shared<NdPlan>();
    KILN_RETURN_IF_ERROR(reshape_nd(rc, batch_dims, plan.get()));
    const Shape& ind = rc.in[1].shape;
    Shape out(ind.begin(), ind.end() - 1);
    out.insert(out.end(), rc.in[0].shape.begin() + batch_dims + ind.back(), rc.in[0].shape.end());
    rc.state = std::move(plan);
    rc.out[0] = {rc.in[0].dtype, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const NdPlan& p = shape_state<NdPlan>(ctx);
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    KILN_RETURN_IF_ERROR(check_nd(ctx, ind, p));
    Tensor& y = ctx.output(0);
    visit_elem(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t t = 0; t < p.tuples; ++t) copy_elems(y.data<T>() + t * p.block, x.data<T>() + nd_offset(ind, p, t), p.block);
    });
    return Status::Ok();
  });
}

Expected<KernelPtr> create_scatter_nd(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::ScatterParams sp, ops::parse_scatter(n));
  const Reduction red = sp.reduction;
  auto reshape = [red](ReshapeContext& rc) -> Status {
    auto plan = std::make_shared<NdPlan>();
    KILN_RETURN_IF_ERROR(reshape_nd(rc, 0, plan.get()));
    const Shape& x = rc.in[0].shape;
    if (const std::string why = ops::scatter_nd_updates_mismatch(rc.in[0].dtype, x, rc.in[1].shape, rc.in[2].dtype, rc.in[2].shape);
        !why.empty())
      return rc.error(why);
    if (!reduction_takes(red, rc.in[0].dtype))
      return rc.error(std::string("reduction not supported for dtype ") + dtype_name(rc.in[0].dtype));
    rc.state = std::move(plan);
    rc.out[0] = {rc.in[0].dtype, x};
    return Status::Ok();
  };
  return make_staged(reshape, [red](KernelContext& ctx) -> Status {
    const NdPlan& p = shape_state<NdPlan>(ctx);
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    KILN_RETURN_IF_ERROR(check_nd(ctx, ind, p));
    Tensor& y = ctx.output(0);
    copy_tensor(x, y);
    apply_writes(x.dtype(), red, y.raw(), ctx.input(2).raw(), p.block, [&](const auto& write) {
      for (int64_t t = 0; t < p.tuples; ++t) write(nd_offset(ind, p, t), t * p.block);
    });
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- OneHot

// A float index or depth as int64, saturated (NaN: INT64_MIN, an index no depth reaches and a depth
// below 1): casting 1e30 or NaN to int64 is undefined (fuzz_model).
int64_t float_index(double f) {
  if (!(f == f) || f <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
  return f >= 9223372036854775807.0 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(f);
}

// Element i of any numeric tensor as int64 (OneHot takes float indices and depth too); false for
// another dtype.
bool numeric_at(const Tensor& t, int64_t i, int64_t* v) {
  if (t.dtype() == DataType::kFloat16) { *v = float_index(f16_to_f32(t.data<uint16_t>()[i])); return true; }
  if (t.dtype() == DataType::kBFloat16) { *v = float_index(bf16_to_f32(t.data<uint16_t>()[i])); return true; }
  return visit_numeric(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) *v = float_index(static_cast<double>(t.data<T>()[i]));
    else *v = static_cast<int64_t>(t.data<T>()[i]);
  });
}

bool numeric_dtype(DataType dt) {
  return dt == DataType::kFloat16 || dt == DataType::kBFloat16 || visit_numeric(dt, [](auto) {});
}

// OneHot per shape: depth (a host input: it sizes the output) and the [outer, depth, inner] layout.
struct OneHotPlan {
  int64_t depth = 0, outer = 0, inner = 0;
};

Expected<KernelPtr> create_one_hot(const ir::Node& n, KernelInit&) {
  const int64_t axis_attr = ops::parse_one_hot(n).axis;
  auto reshape = [axis_attr](ReshapeContext& rc) -> Status {
    const Tensor* depth_t = rc.in[1].value;
    if (!depth_t) return unsupported("depth is known only when running");
    int64_t depth = 0;
    if (!numeric_dtype(rc.in[0].dtype) || depth_t->numel() != 1 || !numeric_at(*depth_t, 0, &depth))
      return rc.error("indices and depth must be numeric, depth one value");
    if (shape_numel(rc.in[2].shape) != 2) return rc.error("values must have two elements [off, on]");
    if (depth < 1) return rc.error("depth must be positive");
    const Shape& ind = rc.in[0].shape;
    int64_t axis = axis_attr;
    if (!ops::normalize_axis(axis, static_cast<int64_t>(ind.size()) + 1)) return rc.error("axis out of range");
    auto plan = std::make_shared<OneHotPlan>();
    plan->depth = depth;
    plan->outer = prod(ind, 0, axis);
    plan->inner = prod(ind, axis, ind.size());
    Shape out = ind;
    out.insert(out.begin() + axis, depth);
    rc.state = std::move(plan);
    rc.out[0] = {rc.in[2].dtype, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const OneHotPlan& p = shape_state<OneHotPlan>(ctx);
    const Tensor& ind = ctx.input(0);
    const Tensor& vals = ctx.input(2);
    Tensor& y = ctx.output(0);
    const int64_t depth = p.depth, inner = p.inner;
    visit_elem(vals.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T& off = vals.data<T>()[0];
      const T& on = vals.data<T>()[1];
      T* dst = y.data<T>();
      for (int64_t o = 0; o < p.outer; ++o)
        for (int64_t d = 0; d < depth; ++d)
          for (int64_t i = 0; i < inner; ++i) {
            int64_t v = 0;
            numeric_at(ind, o * inner + i, &v);
            if (v < 0) v += depth;
            dst[(o * depth + d) * inner + i] = v == d ? on : off;
          }
    });
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- NonZero / Compress

// Marks which elements are nonzero (non-empty for strings; -0.0 counts as zero).
bool nonzero_mask(const Tensor& t, std::vector<uint8_t>* mask) {
  mask->resize(static_cast<size_t>(t.numel()));
  const int64_t n = t.numel();
  if (t.dtype() == DataType::kString) {
    for (int64_t i = 0; i < n; ++i) (*mask)[i] = !t.data<std::string>()[i].empty();
    return true;
  }
  if (t.dtype() == DataType::kFloat16 || t.dtype() == DataType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) (*mask)[i] = (t.data<uint16_t>()[i] & 0x7fff) != 0;
    return true;
  }
  return visit_numeric(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < n; ++i) (*mask)[i] = t.data<T>()[i] != T(0);
  });
}

Expected<KernelPtr> create_non_zero(const ir::Node&, KernelInit&) {
  return make_kernel([](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    std::vector<uint8_t> mask;
    if (!nonzero_mask(x, &mask)) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
    int64_t nnz = 0;
    for (uint8_t m : mask) nnz += m;
    const int r = x.rank();
    Tensor& y = ctx.output(0, DataType::kInt64, {r, nnz});
    int64_t* out = y.data<int64_t>();
    std::vector<int64_t> pos(r, 0);
    int64_t k = 0;
    for (size_t e = 0; e < mask.size(); ++e) {
      if (mask[e]) {
        for (int d = 0; d < r; ++d) out[d * nnz + k] = pos[d];
        ++k;
      }
      for (int d = r - 1; d >= 0; --d) {
        if (++pos[d] < x.dim(d)) break;
        pos[d] = 0;
      }
    }
    return Status::Ok();
  });
}

Expected<KernelPtr> create_compress(const ir::Node& n, KernelInit&) {
  const ops::CompressParams p = ops::parse_compress(n);
  const bool has_axis = p.has_axis;
  const int64_t axis_attr = p.axis;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& cond = ctx.input(1);
    if (cond.dtype() != DataType::kBool || cond.rank() != 1) return ctx.error("condition must be a 1-D bool tensor");
    int64_t axis = 0;
    Shape in = {x.numel()};
    if (has_axis) {
      axis = axis_attr;
      if (!ops::normalize_axis(axis, x.rank())) return ctx.error("axis out of range");
      in = x.shape();
    }
    const int64_t dim = in[axis];
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < cond.numel(); ++i) {
      if (!cond.data<bool>()[i]) continue;
      if (i >= dim) return ctx.error("condition selects index " + std::to_string(i) + " past the axis size " + std::to_string(dim));
      keep.push_back(i);
    }
    Shape out = in;
    out[axis] = static_cast<int64_t>(keep.size());
    Tensor& y = ctx.output(0, x.dtype(), out);
    const int64_t outer = prod(in, 0, axis), inner = prod(in, axis + 1, in.size());
    const int64_t nk = static_cast<int64_t>(keep.size());
    visit_elem(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < nk; ++k)
          copy_elems(y.data<T>() + (o * nk + k) * inner, x.data<T>() + (o * dim + keep[k]) * inner, inner);
    });
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- ReverseSequence

// ReverseSequence per shape: B and T, the strides of the batch and time axes, the row size.
struct ReverseSequencePlan {
  int64_t B = 0, T = 0, inner = 0, sb = 0, st = 0;
};

Expected<KernelPtr> create_reverse_sequence(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::ReverseSequenceParams p, ops::parse_reverse_sequence(n));
  const int64_t batch_axis = p.batch_axis, time_axis = p.time_axis;
  auto reshape = [batch_axis, time_axis](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() < 2) return rc.error("input must have rank >= 2");
    auto plan = std::make_shared<ReverseSequencePlan>();
    plan->B = x[batch_axis];
    plan->T = x[time_axis];
    const DataType lt = rc.in[1].dtype;
    if ((lt != DataType::kInt64 && lt != DataType::kInt32) || shape_numel(rc.in[1].shape) != plan->B)
      return rc.error("sequence_lens must be int64 with one entry per batch");
    plan->inner = prod(x, 2, x.size());
    const std::vector<int64_t> st = strides_of(x);
    plan->sb = st[batch_axis];
    plan->st = st[time_axis];
    rc.state = std::move(plan);
    rc.out[0] = {rc.in[0].dtype, x};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const ReverseSequencePlan& p = shape_state<ReverseSequencePlan>(ctx);
    const Tensor& x = ctx.input(0);
    const Tensor& lens = ctx.input(1);
    for (int64_t b = 0; b < p.B; ++b) {
      const int64_t l = index_at(lens, b);
      if (l < 0 || l > p.T) return ctx.error("sequence length " + std::to_string(l) + " outside [0, " + std::to_string(p.T) + "]");
    }
    Tensor& y = ctx.output(0);
    visit_elem(x.dtype(), [&](auto tag) {
      using E = typename decltype(tag)::type;
      for (int64_t b = 0; b < p.B; ++b) {
        const int64_t len = index_at(lens, b);
        for (int64_t t = 0; t < p.T; ++t) {
          const int64_t src_t = t < len ? len - 1 - t : t;
          copy_elems(y.data<E>() + b * p.sb + t * p.st, x.data<E>() + b * p.sb + src_t * p.st, p.inner);
        }
      }
    });
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- Col2Im

// Col2Im per shape: image_shape and block_shape (host inputs: they size the output), the attributes
// with their defaults, and the block counts.
struct Col2ImPlan {
  std::vector<int64_t> img, blk, dil, str, pads, nblk;
  int64_t N = 0, C = 0, kprod = 1, L = 1, isz = 1;
};

Expected<KernelPtr> create_col2im(const ir::Node& n, KernelInit&) {
  const ops::Col2ImParams attrs = ops::parse_col2im(n);
  auto reshape = [attrs](ReshapeContext& rc) -> Status {
    if (!rc.in[1].value || !rc.in[2].value) return unsupported("image_shape and block_shape are known only when running");
    auto plan = std::make_shared<Col2ImPlan>();
    Col2ImPlan& p = *plan;
    std::vector<int64_t>& img = p.img;
    std::vector<int64_t>& blk = p.blk;
    if (!read_ints(*rc.in[1].value, &img) || !read_ints(*rc.in[2].value, &blk) || img.size() != blk.size() || img.empty())
      return rc.error("image_shape and block_shape must be int64 of equal length");
    const size_t s = img.size();
    p.dil = attrs.dilations.empty() ? std::vector<int64_t>(s, 1) : attrs.dilations;
    p.str = attrs.strides.empty() ? std::vector<int64_t>(s, 1) : attrs.strides;
    p.pads = attrs.pads.empty() ? std::vector<int64_t>(2 * s, 0) : attrs.pads;
    if (p.dil.size() != s || p.str.size() != s || p.pads.size() != 2 * s) return rc.error("attribute lengths do not match image rank");
    const Shape& x = rc.in[0].shape;
    if (x.size() != 3) return rc.error("input must be [N, C*prod(block), L]");
    int64_t kprod = 1;
    for (size_t d = 0; d < s; ++d)
      if (blk[d] <= 0 || img[d] < 0 || __builtin_mul_overflow(kprod, blk[d], &kprod))
        return rc.error("block_shape entries must be positive, image_shape entries >= 0, and their products fit int64");
    if (x[1] % kprod != 0) return rc.error("input dim 1 not divisible by prod(block_shape)");
    p.kprod = kprod;
    p.N = x[0];
    p.C = x[1] / kprod;
    p.nblk.resize(s);
    int64_t L = 1;
    for (size_t d = 0; d < s; ++d) {
      // Checked: the attributes are >= 1 (pads >= 0, at import) but may be as large as int64 allows.
      int64_t span = 0, reach = 0;
      if (__builtin_add_overflow(img[d], p.pads[d], &span) || __builtin_add_overflow(span, p.pads[d + s], &span) ||
          __builtin_mul_overflow(p.dil[d], blk[d] - 1, &reach) || reach >= span)
        return rc.error("axis " + std::to_string(d) + ": the dilated block does not fit the padded image");
      p.nblk[d] = (span - reach - 1) / p.str[d] + 1;
      if (__builtin_mul_overflow(L, p.nblk[d], &L)) return rc.error("the block count overflows int64");
    }
    if (L != x[2]) return rc.error("input dim 2 is " + std::to_string(x[2]) + ", blocks give " + std::to_string(L));
    p.L = L;
    p.isz = prod(img, 0, s);
    if (!visit_numeric(rc.in[0].dtype, [](auto) {}))
      return rc.error(std::string("unsupported dtype ") + dtype_name(rc.in[0].dtype));
    Shape out = {p.N, p.C};
    out.insert(out.end(), img.begin(), img.end());
    rc.state = std::move(plan);
    rc.out[0] = {rc.in[0].dtype, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const Col2ImPlan& p = shape_state<Col2ImPlan>(ctx);
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const int64_t s = static_cast<int64_t>(p.img.size());
    const int64_t NC = p.N * p.C, kprod = p.kprod, L = p.L, isz = p.isz;
    visit_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = y.data<T>();
      const T* src = x.data<T>();
      std::fill_n(dst, NC * isz, T(0));
      SmallDims<> kpos(static_cast<size_t>(s)), lpos(static_cast<size_t>(s));
      for (int64_t nc = 0; nc < NC; ++nc)
        for (int64_t kk = 0; kk < kprod; ++kk) {
          for (int64_t d = s - 1, r = kk; d >= 0; --d) { kpos[d] = r % p.blk[d]; r /= p.blk[d]; }
          for (int64_t l = 0; l < L; ++l) {
            for (int64_t d = s - 1, r = l; d >= 0; --d) { lpos[d] = r % p.nblk[d]; r /= p.nblk[d]; }
            int64_t off = 0;
            bool inside = true;
            for (int64_t d = 0; d < s && inside; ++d) {
              const int64_t q = lpos[d] * p.str[d] - p.pads[d] + kpos[d] * p.dil[d];
              inside = q >= 0 && q < p.img[d];
              off = off * p.img[d] + q;
            }
            if (inside) dst[nc * isz + off] += src[(nc * kprod + kk) * L + l];
          }
        }
    });
    return Status::Ok();
  });
}

}  // namespace

void register_shape_index(KernelRegistry& r) {
  add_shape_kernel(r, "Gather", 1, 2, create_gather);
  add_shape_kernel(r, "GatherElements", 11, 2, create_gather_elements);
  add_shape_kernel(r, "GatherND", 11, 2, create_gather_nd);
  add_shape_kernel(r, "ScatterElements", 11, 3, create_scatter_elements);
  add_shape_kernel(r, "Scatter", 9, 3, create_scatter_elements, 10);
  add_shape_kernel(r, "ScatterND", 11, 3, create_scatter_nd);
  add_shape_kernel(r, "OneHot", 9, 3, create_one_hot, 1 << 30, 0b10);
  add_shape_kernel(r, "NonZero", 9, 1, create_non_zero);
  add_shape_kernel(r, "Compress", 9, 2, create_compress);
  add_shape_kernel(r, "ReverseSequence", 10, 2, create_reverse_sequence);
  add_shape_kernel(r, "Col2Im", 18, 3, create_col2im, 1 << 30, 0b110);
}

}  // namespace kiln::cpu::shape_detail
