// backends/cpu/reduce.cpp — CPU kernels of the reduce family: Reduce* (ten kinds), ArgMax/ArgMin,
// TopK and CumSum, for every numeric dtype (2-byte floats accumulate in float).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backends/cpu/numeric.h"
#include "backends/staged_kernel.h"
#include "ops/params_nn.h"

namespace kiln::cpu {
namespace {

enum class RK { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

struct ReduceAttrs {
  RK kind;
  bool axes_input;               // axes come from input 1 (ReduceSum ≥ 13, others ≥ 18)
  std::vector<int64_t> axes;     // the attribute (older opsets)
  bool has_axes_attr = false;
  bool keepdims = true;
  bool noop_with_empty_axes = false;
};

// Which input elements feed each output element: out[o] reduces x[base[o] + roff[r]] over r. Made
// by reshape() once per input shape.
struct ReducePlan {
  Shape out_shape;
  std::vector<int64_t> base, roff;
  bool identity = false;  // noop_with_empty_axes with empty axes: copy the input
};

Status make_plan(ReshapeContext& ctx, const ReduceAttrs& a, const Shape& in, ReducePlan& p) {
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes = a.axes;
  bool have_axes = a.has_axes_attr;
  if (a.axes_input && ctx.in.size() > 1 && ctx.in[1].present) {
    if (!ctx.in[1].value) return unsupported("axes are known only when running");
    if (!read_ints(*ctx.in[1].value, axes)) return ctx.error("axes must be int64");
    have_axes = true;
  }
  if (have_axes && axes.empty()) have_axes = false;
  if (!have_axes && a.noop_with_empty_axes) {
    p.identity = true;
    p.out_shape = in;
    return Status::Ok();
  }
  std::vector<bool> reduced(in.size(), !have_axes);
  for (int64_t ax : axes) {
    if (!ops_normalize_axis(ax, rank)) return ctx.error("axis " + std::to_string(ax) + " out of range for rank " + std::to_string(rank));
    reduced[ax] = true;
  }
  const std::vector<int64_t> st = strides_of(in);
  Shape kept_dims, kept_strides, red_dims, red_strides;
  for (size_t i = 0; i < in.size(); ++i) {
    if (reduced[i]) {
      red_dims.push_back(in[i]);
      red_strides.push_back(st[i]);
      if (a.keepdims) p.out_shape.push_back(1);
    } else {
      kept_dims.push_back(in[i]);
      kept_strides.push_back(st[i]);
      p.out_shape.push_back(in[i]);
    }
  }
  auto offsets = [](const Shape& dims, const Shape& strides, std::vector<int64_t>& out) {
    const int64_t n = shape_numel(dims);
    out.resize(static_cast<size_t>(n));
    std::vector<int64_t> idx(dims.size(), 0);
    int64_t off = 0;
    for (int64_t k = 0; k < n; ++k) {
      out[k] = off;
      for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
        if (++idx[d] < dims[d]) { off += strides[d]; break; }
        off -= strides[d] * (dims[d] - 1);
        idx[d] = 0;
      }
    }
  };
  // Nothing to compute for an empty output, however long the reduced axes (a [0, 2^40] input holds no
  // element but its block of reduced offsets would be 2^40 long). Else the offsets are checked as int64
  // tensors of their sizes would be, before they are allocated.
  if (shape_numel(kept_dims) == 0) return Status::Ok();
  for (const Shape* dims : {&kept_dims, &red_dims})
    if (std::string why = check_tensor_size(DataType::kInt64, *dims); !why.empty())
      return ctx.error("the reduction's offsets: " + why);
  offsets(kept_dims, kept_strides, p.base);
  offsets(red_dims, red_strides, p.roff);
  return Status::Ok();
}

template <typename T, RK K>
void reduce_typed(const T* x, T* y, const ReducePlan& p) {
  using N = Num<T>;
  using A = typename N::acc;
  const int64_t R = static_cast<int64_t>(p.roff.size());
  const int64_t* roff = p.roff.data();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(R, 1));
  parallel_for(static_cast<int64_t>(p.base.size()), grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const T* xp = x + p.base[o];
      if constexpr (K == RK::kMax || K == RK::kMin) {
        A m = K == RK::kMax ? acc_lowest<T>() : acc_highest<T>();
        for (int64_t r = 0; r < R; ++r) {
          const A v = N::load(xp[roff[r]]);
          if (K == RK::kMax ? (v > m) : (v < m)) m = v;
          if constexpr (N::is_float) if (v != v) { m = v; break; }  // NaN propagates
        }
        y[o] = N::store(m);
      } else if constexpr (K == RK::kSum || K == RK::kProd || K == RK::kL1 || K == RK::kSumSquare) {
        A s = K == RK::kProd ? A(1) : A(0);
        for (int64_t r = 0; r < R; ++r) {
          const A v = N::load(xp[roff[r]]);
          if constexpr (K == RK::kSum) s += v;
          else if constexpr (K == RK::kProd) s *= v;
          else if constexpr (K == RK::kSumSquare) s += v * v;
          else if constexpr (std::is_unsigned_v<A>) s += v;
          else s += v < 0 ? A(-v) : v;
        }
        y[o] = N::store(s);
      } else if constexpr (K == RK::kLogSumExp) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t r = 0; r < R; ++r) m = std::max(m, to_double(xp[roff[r]]));
        if (!std::isfinite(m)) {
          y[o] = from_double<T>(m);
          continue;
        }
        double s = 0;
        for (int64_t r = 0; r < R; ++r) s += std::exp(to_double(xp[roff[r]]) - m);
        y[o] = from_double<T>(std::log(s) + m);
      } else {  // mean, L2, log-sum: a sum finished in double
        A s = 0;
        for (int64_t r = 0; r < R; ++r) {
          const A v = N::load(xp[roff[r]]);
          s += K == RK::kL2 ? v * v : v;
        }
        const double d = static_cast<double>(s);
        if constexpr (K == RK::kMean) y[o] = from_double<T>(d / static_cast<double>(R));
        else if constexpr (K == RK::kL2) y[o] = from_double<T>(std::sqrt(d));
        else y[o] = from_double<T>(std::log(d));
      }
    }
  });
}

template <typename T>
void reduce_dispatch(RK k, const T* x, T* y, const ReducePlan& p) {
  switch (k) {
    case RK::kSum: return reduce_typed<T, RK::kSum>(x, y, p);
    case RK::kMean: return reduce_typed<T, RK::kMean>(x, y, p);
    case RK::kMax: return reduce_typed<T, RK::kMax>(x, y, p);
    case RK::kMin: return reduce_typed<T, RK::kMin>(x, y, p);
    case RK::kProd: return reduce_typed<T, RK::kProd>(x, y, p);
    case RK::kL1: return reduce_typed<T, RK::kL1>(x, y, p);
    case RK::kL2: return reduce_typed<T, RK::kL2>(x, y, p);
    case RK::kLogSum: return reduce_typed<T, RK::kLogSum>(x, y, p);
    case RK::kLogSumExp: return reduce_typed<T, RK::kLogSumExp>(x, y, p);
    case RK::kSumSquare: return reduce_typed<T, RK::kSumSquare>(x, y, p);
  }
}

Status reshape_reduce(ReshapeContext& rc, const ReduceAttrs& a) {
  if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
  const DataType dt = rc.in[0].dtype;
  auto plan = std::make_shared<ReducePlan>();
  KILN_RETURN_IF_ERROR(make_plan(rc, a, rc.in[0].shape, *plan));
  if (!plan->identity) {
    if (dt == DataType::kBool && a.kind != RK::kMax && a.kind != RK::kMin)
      return rc.error("bool input is only allowed for ReduceMax/ReduceMin");
    if (!visit_numeric_f16(dt, [](auto) {})) return rc.error(std::string("unsupported dtype ") + dtype_name(dt));
  }
  rc.out[0] = {dt, plan->out_shape};
  rc.state = std::move(plan);
  return Status::Ok();
}

Status run_reduce(KernelContext& ctx, const ReduceAttrs& a) {
  const Tensor& x = ctx.input(0);
  const ReducePlan& p = shape_state<ReducePlan>(ctx);
  Tensor& y = ctx.output(0);
  if (p.identity) {
    if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
    return Status::Ok();
  }
  visit_numeric_f16(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_dispatch<T>(a.kind, x.data<T>(), y.data<T>(), p);
  });
  return Status::Ok();
}

std::string numeric_check(const ir::Node& n) {
  using D = DataType;
  return require_dtypes(n, 0, {D::kFloat32, D::kFloat64, D::kFloat16, D::kBFloat16, D::kInt8, D::kInt16, D::kInt32,
                               D::kInt64, D::kUInt8, D::kUInt16, D::kUInt32, D::kUInt64, D::kBool});
}

void add_reduce(KernelRegistry& r, const std::string& op, RK kind) {
  auto create = [kind](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
    const ops::ReduceParams p = ops::parse_reduce(n);
    ReduceAttrs a{kind, p.axes_input, {}, false, p.keepdims, p.noop_with_empty_axes};
    if (!a.axes_input && p.has_axes_attr) {
      a.axes = p.axes;
      a.has_axes_attr = true;
    }
    if (!a.axes_input) a.noop_with_empty_axes = false;
    return make_staged([a](ReshapeContext& rc) { return reshape_reduce(rc, a); },
                       [a](KernelContext& ctx) { return run_reduce(ctx, a); });
  };
  KernelDef d{op, "", 1, 1 << 30, "cpu." + op + ".any", numeric_check, create};
  d.host_inputs = 0b10;  // axes (opset 13/18 on): they shape the output
  r.add(std::move(d));
}

// ---- ArgMax / ArgMin

// A tensor viewed around one axis as (outer, n, inner), planned per shape.
struct AxisPlan {
  int64_t outer = 1, n = 0, inner = 1;
  int64_t k = 0;  // TopK: how many
};

// Views `s` around `axis` as (outer, n, inner).
void split_at(const Shape& s, int64_t axis, int64_t& outer, int64_t& n, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= s[i];
  for (size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  n = s[axis];
}

template <typename T>
void arg_typed(const T* x, int64_t* y, int64_t outer, int64_t n, int64_t inner, bool is_max, bool last) {
  using N = Num<T>;
  parallel_for(outer * inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t oi = b; oi < e; ++oi) {
      const int64_t o = oi / inner, i = oi % inner;
      const T* xp = x + o * n * inner + i;
      auto best = N::load(xp[0]);
      int64_t bi = 0;
      for (int64_t k = 1; k < n; ++k) {
        const auto v = N::load(xp[k * inner]);
        if constexpr (N::is_float) {
          if (best != best) break;  // first NaN wins, as numpy does
          if (v != v) { best = v; bi = k; break; }
        }
        const bool better = is_max ? (last ? v >= best : v > best) : (last ? v <= best : v < best);
        if (better) { best = v; bi = k; }
      }
      y[oi] = bi;
    }
  });
}

void add_arg(KernelRegistry& r, const std::string& op, bool is_max) {
  auto create = [is_max](const ir::Node& nd, KernelInit&) -> Expected<KernelPtr> {
    const ops::ArgReduceParams p = ops::parse_arg_reduce(nd);
    const int64_t axis_attr = p.axis;
    const bool keepdims = p.keepdims;
    const bool last = p.select_last_index;
    auto reshape = [=](ReshapeContext& rc) -> Status {
      const Shape& x = rc.in[0].shape;
      int64_t axis = axis_attr;
      if (!ops_normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
      auto plan = std::make_shared<AxisPlan>();
      split_at(x, axis, plan->outer, plan->n, plan->inner);
      if (plan->n == 0) return rc.error("cannot take an arg-reduction over a zero-sized axis");
      if (!visit_numeric_f16(rc.in[0].dtype, [](auto) {})) return rc.error("unsupported dtype");
      Shape os = x;
      if (keepdims) os[axis] = 1;
      else os.erase(os.begin() + axis);
      rc.state = std::move(plan);
      rc.out[0] = {DataType::kInt64, std::move(os)};
      return Status::Ok();
    };
    return make_staged(reshape, [=](KernelContext& ctx) -> Status {
      const AxisPlan& p = shape_state<AxisPlan>(ctx);
      const Tensor& x = ctx.input(0);
      Tensor& y = ctx.output(0);
      visit_numeric_f16(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        arg_typed<T>(x.data<T>(), y.data<int64_t>(), p.outer, p.n, p.inner, is_max, last);
      });
      return Status::Ok();
    });
  };
  r.add({op, "", 1, 1 << 30, "cpu." + op + ".any", numeric_check, create});
}

// ---- TopK

// TopK's scratch: one (value, index) pair per element of X, for rows sorted in place.
template <typename T>
using TopKPair = std::pair<typename Num<T>::acc, int64_t>;

template <typename T>
void topk_typed(const T* x, T* vals, int64_t* idx, int64_t outer, int64_t n, int64_t inner, int64_t k,
                bool largest, TopKPair<T>* scratch) {
  using N = Num<T>;
  using A = typename N::acc;
  parallel_for(outer * inner, 1, [&](int64_t b, int64_t e) {
    for (int64_t oi = b; oi < e; ++oi) {
      TopKPair<T>* row = scratch + oi * n;
      const int64_t o = oi / inner, i = oi % inner;
      const T* xp = x + o * n * inner + i;
      for (int64_t j = 0; j < n; ++j) row[j] = {N::load(xp[j * inner]), j};
      // Ties keep the lower index first. NaN sorts as the largest value.
      auto greater = [](const std::pair<A, int64_t>& a, const std::pair<A, int64_t>& c) {
        const bool an = a.first != a.first, cn = c.first != c.first;
        if (an || cn) return an && !cn ? true : (an && cn ? a.second < c.second : false);
        return a.first > c.first || (a.first == c.first && a.second < c.second);
      };
      auto less = [](const std::pair<A, int64_t>& a, const std::pair<A, int64_t>& c) {
        const bool an = a.first != a.first, cn = c.first != c.first;
        if (an || cn) return !an && cn ? true : (an && cn ? a.second < c.second : false);
        return a.first < c.first || (a.first == c.first && a.second < c.second);
      };
      if (largest) std::partial_sort(row, row + k, row + n, greater);
      else std::partial_sort(row, row + k, row + n, less);
      T* vp = vals + o * k * inner + i;
      int64_t* ip = idx + o * k * inner + i;
      for (int64_t j = 0; j < k; ++j) {
        vp[j * inner] = xp[row[j].second * inner];
        ip[j * inner] = row[j].second;
      }
    }
  });
}

Expected<KernelPtr> create_topk(const ir::Node& nd, KernelInit&) {
  const ops::TopKParams p = ops::parse_topk(nd);
  const int64_t axis_attr = p.axis;
  const bool largest = p.largest;
  const bool k_input = p.k_input;
  const int64_t k_attr = p.k;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    int64_t axis = axis_attr;
    if (!ops_normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
    int64_t k = k_attr;
    if (k_input) {
      if (rc.in.size() < 2 || !rc.in[1].present) return rc.error("K must be a 1-element int64 tensor");
      if (!rc.in[1].value) return unsupported("K is known only when running");
      std::vector<int64_t> kv;
      if (!read_ints(*rc.in[1].value, kv) || kv.size() != 1) return rc.error("K must be a 1-element int64 tensor");
      k = kv[0];
    }
    auto plan = std::make_shared<AxisPlan>();
    split_at(x, axis, plan->outer, plan->n, plan->inner);
    if (k < 0 || k > plan->n) return rc.error("k=" + std::to_string(k) + " out of range for axis of size " + std::to_string(plan->n));
    plan->k = k;
    const DataType dt = rc.in[0].dtype;
    if (!visit_numeric_f16(dt, [&](auto tag) {
          using T = typename decltype(tag)::type;
          if (k > 0) rc.workspace_bytes = static_cast<size_t>(shape_numel(x)) * sizeof(TopKPair<T>);
        }))
      return rc.error("unsupported dtype");
    Shape os = x;
    os[axis] = k;
    rc.state = std::move(plan);
    rc.out[0] = {dt, os};
    rc.out[1] = {DataType::kInt64, std::move(os)};
    return Status::Ok();
  };
  return make_staged(reshape, [largest](KernelContext& ctx) -> Status {
    const AxisPlan& p = shape_state<AxisPlan>(ctx);
    const Tensor& x = ctx.input(0);
    Tensor& v = ctx.output(0);
    Tensor& ix = ctx.output(1);
    if (p.k == 0 || p.outer * p.inner == 0) return Status::Ok();
    visit_numeric_f16(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      topk_typed<T>(x.data<T>(), v.data<T>(), ix.data<int64_t>(), p.outer, p.n, p.inner, p.k, largest,
                    static_cast<TopKPair<T>*>(ctx.workspace()));
    });
    return Status::Ok();
  });
}

// ---- CumSum

template <typename T>
void cumsum_typed(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool exclusive, bool reverse) {
  using N = Num<T>;
  using A = typename N::acc;
  parallel_for(outer * inner, 64, [&](int64_t b, int64_t e) {
    for (int64_t oi = b; oi < e; ++oi) {
      const int64_t o = oi / inner, i = oi % inner;
      const int64_t base = o * n * inner + i;
      A s = 0;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t jj = reverse ? n - 1 - j : j;
        const A v = N::load(x[base + jj * inner]);
        if (exclusive) {
          y[base + jj * inner] = N::store(s);
          s += v;
        } else {
          s += v;
          y[base + jj * inner] = N::store(s);
        }
      }
    }
  });
}

Expected<KernelPtr> create_cumsum(const ir::Node& nd, KernelInit&) {
  const ops::CumulativeParams p = ops::parse_cumulative(nd);
  const bool exclusive = p.exclusive, reverse = p.reverse;
  auto reshape = [](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (rc.in.size() < 2 || !rc.in[1].present) return rc.error("axis must be a scalar int tensor");
    if (!rc.in[1].value) return unsupported("axis is known only when running");
    std::vector<int64_t> av;
    if (!read_ints(*rc.in[1].value, av) || av.size() != 1) return rc.error("axis must be a scalar int tensor");
    int64_t axis = av[0];
    if (!ops_normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
    if (rc.in[0].dtype == DataType::kBool || !visit_numeric_f16(rc.in[0].dtype, [](auto) {}))
      return rc.error("unsupported dtype");
    auto plan = std::make_shared<AxisPlan>();
    split_at(x, axis, plan->outer, plan->n, plan->inner);
    rc.state = std::move(plan);
    rc.out[0] = {rc.in[0].dtype, x};
    return Status::Ok();
  };
  return make_staged(reshape, [=](KernelContext& ctx) -> Status {
    const AxisPlan& p = shape_state<AxisPlan>(ctx);
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    visit_numeric_f16(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) cumsum_typed<T>(x.data<T>(), y.data<T>(), p.outer, p.n, p.inner, exclusive, reverse);
    });
    return Status::Ok();
  });
}

}  // namespace

void register_reduce(KernelRegistry& r) {
  add_reduce(r, "ReduceSum", RK::kSum);
  add_reduce(r, "ReduceMean", RK::kMean);
  add_reduce(r, "ReduceMax", RK::kMax);
  add_reduce(r, "ReduceMin", RK::kMin);
  add_reduce(r, "ReduceProd", RK::kProd);
  add_reduce(r, "ReduceL1", RK::kL1);
  add_reduce(r, "ReduceL2", RK::kL2);
  add_reduce(r, "ReduceLogSum", RK::kLogSum);
  add_reduce(r, "ReduceLogSumExp", RK::kLogSumExp);
  add_reduce(r, "ReduceSumSquare", RK::kSumSquare);
  add_arg(r, "ArgMax", true);
  add_arg(r, "ArgMin", false);
  KernelDef topk{"TopK", "", 1, 1 << 30, "cpu.TopK.any", numeric_check, create_topk};
  topk.host_inputs = 0b10;  // K (opset 10 on) sizes the outputs
  r.add(std::move(topk));
  KernelDef cumsum{"CumSum", "", 11, 1 << 30, "cpu.CumSum.any", numeric_check, create_cumsum};
  cumsum.host_inputs = 0b10;  // axis
  r.add(std::move(cumsum));
}

}  // namespace kiln::cpu
