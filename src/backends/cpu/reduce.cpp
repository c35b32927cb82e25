// backends/cpu/reduce.cpp — CPU kernels of the reduce family: Reduce* (ten kinds), ArgMax/ArgMin,
// TopK and CumSum, for every numeric dtype (2-byte floats accumulate in float).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backends/cpu/numeric.h"
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

// Which input elements feed each output element: out[o] reduces x[base[o] + roff[r]] over r.
struct ReducePlan {
  Shape out_shape;
  std::vector<int64_t> base, roff;
  bool identity = false;  // noop_with_empty_axes with empty axes: copy the input
};

Status make_plan(KernelContext& ctx, const ReduceAttrs& a, const Shape& in, ReducePlan& p) {
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes = a.axes;
  bool have_axes = a.has_axes_attr;
  if (a.axes_input && ctx.has_input(1)) {
    if (!read_ints(ctx.input(1), axes)) return ctx.error("axes must be int64");
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

Status run_reduce(KernelContext& ctx, const ReduceAttrs& a) {
  const Tensor& x = ctx.input(0);
  ReducePlan p;
  KILN_RETURN_IF_ERROR(make_plan(ctx, a, x.shape(), p));
  Tensor& y = ctx.output(0, x.dtype(), p.out_shape);
  if (p.identity) {
    if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
    return Status::Ok();
  }
  if (x.dtype() == DataType::kBool && a.kind != RK::kMax && a.kind != RK::kMin)
    return ctx.error("bool input is only allowed for ReduceMax/ReduceMin");
  const bool ok = visit_numeric_f16(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_dispatch<T>(a.kind, x.data<T>(), y.data<T>(), p);
  });
  return ok ? Status::Ok() : ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
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
    return make_kernel([a](KernelContext& ctx) { return run_reduce(ctx, a); });
  };
  r.add({op, "", 1, 1 << 30, "cpu." + op + ".any", numeric_check, create});
}

// ---- ArgMax / ArgMin

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
    return make_kernel([=](KernelContext& ctx) -> Status {
      const Tensor& x = ctx.input(0);
      int64_t axis = axis_attr;
      if (!ops_normalize_axis(axis, x.rank())) return ctx.error("axis out of range");
      int64_t outer, n, inner;
      split_at(x.shape(), axis, outer, n, inner);
      if (n == 0) return ctx.error("cannot take an arg-reduction over a zero-sized axis");
      Shape os = x.shape();
      if (keepdims) os[axis] = 1;
      else os.erase(os.begin() + axis);
      Tensor& y = ctx.output(0, DataType::kInt64, os);
      const bool ok = visit_numeric_f16(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        arg_typed<T>(x.data<T>(), y.data<int64_t>(), outer, n, inner, is_max, last);
      });
      return ok ? Status::Ok() : ctx.error("unsupported dtype");
    });
  };
  r.add({op, "", 1, 1 << 30, "cpu." + op + ".any", numeric_check, create});
}

// ---- TopK

template <typename T>
void topk_typed(const T* x, T* vals, int64_t* idx, int64_t outer, int64_t n, int64_t inner, int64_t k,
                bool largest) {
  using N = Num<T>;
  using A = typename N::acc;
  parallel_for(outer * inner, 1, [&](int64_t b, int64_t e) {
    std::vector<std::pair<A, int64_t>> row(static_cast<size_t>(n));
    for (int64_t oi = b; oi < e; ++oi) {
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
      if (largest) std::partial_sort(row.begin(), row.begin() + k, row.end(), greater);
      else std::partial_sort(row.begin(), row.begin() + k, row.end(), less);
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
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    int64_t axis = axis_attr;
    if (!ops_normalize_axis(axis, x.rank())) return ctx.error("axis out of range");
    int64_t k = k_attr;
    if (k_input) {
      std::vector<int64_t> kv;
      if (!ctx.has_input(1) || !read_ints(ctx.input(1), kv) || kv.size() != 1) return ctx.error("K must be a 1-element int64 tensor");
      k = kv[0];
    }
    int64_t outer, n, inner;
    split_at(x.shape(), axis, outer, n, inner);
    if (k < 0 || k > n) return ctx.error("k=" + std::to_string(k) + " out of range for axis of size " + std::to_string(n));
    Shape os = x.shape();
    os[axis] = k;
    Tensor& v = ctx.output(0, x.dtype(), os);
    Tensor& ix = ctx.output(1, DataType::kInt64, os);
    if (k == 0 || outer * inner == 0) return Status::Ok();
    const bool ok = visit_numeric_f16(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      topk_typed<T>(x.data<T>(), v.data<T>(), ix.data<int64_t>(), outer, n, inner, k, largest);
    });
    return ok ? Status::Ok() : ctx.error("unsupported dtype");
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
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> av;
    if (!ctx.has_input(1) || !read_ints(ctx.input(1), av) || av.size() != 1) return ctx.error("axis must be a scalar int tensor");
    int64_t axis = av[0];
    if (!ops_normalize_axis(axis, x.rank())) return ctx.error("axis out of range");
    int64_t outer, n, inner;
    split_at(x.shape(), axis, outer, n, inner);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const bool ok = visit_numeric_f16(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) return;
      else cumsum_typed<T>(x.data<T>(), y.data<T>(), outer, n, inner, exclusive, reverse);
    });
    return ok && x.dtype() != DataType::kBool ? Status::Ok() : ctx.error("unsupported dtype");
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
  r.add({"TopK", "", 1, 1 << 30, "cpu.TopK.any", numeric_check, create_topk});
  r.add({"CumSum", "", 11, 1 << 30, "cpu.CumSum.any", numeric_check, create_cumsum});
}

}  // namespace kiln::cpu
