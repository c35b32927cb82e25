// backends/cpu/unique.cpp — Unique on the CPU (numpy.unique semantics, sorted or in order of
// first occurrence, over the flattened tensor or over slices along an axis).
#include <algorithm>
#include <numeric>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/numeric.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

template <typename T>
auto key_of(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) return std::string_view(v);
  else return Num<T>::load(v);
}

template <typename T>
Status unique_typed(KernelContext& ctx, const Tensor& x, bool has_axis, int64_t axis, bool sorted) {
  int64_t outer = 1, n = x.numel(), inner = 1;
  if (has_axis) {
    outer = 1;
    inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[d];
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.shape()[d];
    n = x.shape()[axis];
  }
  const T* xp = x.data<T>();
  auto at = [&](int64_t j, int64_t o, int64_t i) { return key_of(xp[(o * n + j) * inner + i]); };
  // Lexicographic order of slices j (elements in (outer, inner) order).
  auto cmp = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const auto va = at(a, o, i), vb = at(b, o, i);
        if (va < vb) return -1;
        if (vb < va) return 1;
      }
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
  // Groups of equal slices: first occurrence, count, and each slice's group.
  std::vector<int64_t> first, counts, group_of(static_cast<size_t>(n));
  for (size_t k = 0; k < order.size(); ++k) {
    if (k == 0 || cmp(order[k - 1], order[k]) != 0) {
      first.push_back(order[k]);
      counts.push_back(0);
    }
    ++counts.back();
    group_of[order[k]] = static_cast<int64_t>(first.size()) - 1;
  }
  const int64_t u = static_cast<int64_t>(first.size());
  std::vector<int64_t> rank(u);  // output position of each group
  std::iota(rank.begin(), rank.end(), 0);
  if (!sorted) {
    std::vector<int64_t> by_first(u);
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return first[a] < first[b]; });
    for (int64_t p = 0; p < u; ++p) rank[by_first[p]] = p;
  }
  Shape ys = has_axis ? x.shape() : Shape{u};
  if (has_axis) ys[axis] = u;
  Tensor& y = ctx.output(0, x.dtype(), ys);
  T* yp = y.data<T>();
  std::vector<int64_t> idx(u), cnt(u);
  for (int64_t g = 0; g < u; ++g) {
    const int64_t p = rank[g];
    idx[p] = first[g];
    cnt[p] = counts[g];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) yp[(o * u + p) * inner + i] = xp[(o * n + first[g]) * inner + i];
  }
  if (ctx.has_output(1)) std::copy(idx.begin(), idx.end(), ctx.output(1, DataType::kInt64, {u}).data<int64_t>());
  if (ctx.has_output(2)) {
    int64_t* inv = ctx.output(2, DataType::kInt64, {n}).data<int64_t>();
    for (int64_t j = 0; j < n; ++j) inv[j] = rank[group_of[j]];
  }
  if (ctx.has_output(3)) std::copy(cnt.begin(), cnt.end(), ctx.output(3, DataType::kInt64, {u}).data<int64_t>());
  return Status::Ok();
}

Expected<KernelPtr> create_unique(const ir::Node& nd, KernelInit&) {
  const ops::UniqueParams p = ops::parse_unique(nd);
  const bool has_axis = p.has_axis, sorted = p.sorted;
  const int64_t axis_attr = p.axis;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    int64_t axis = axis_attr;
    if (has_axis && !ops_normalize_axis(axis, x.rank())) return ctx.error("axis out of range");
    if (x.dtype() == DataType::kString) return unique_typed<std::string>(ctx, x, has_axis, axis, sorted);
    Status st = ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
    visit_numeric_f16(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      st = unique_typed<T>(ctx, x, has_axis, axis, sorted);
    });
    return st;
  });
}

}  // namespace

void register_unique(KernelRegistry& r) {
  r.add({"Unique", "", 11, 1 << 30, "cpu.Unique.any", nullptr, create_unique});
}

}  // namespace kiln::cpu
