// backends/cpu/misc_einsum.cpp — Einsum on the CPU: a general contraction loop.
//
// Every label (letter, or one per broadcast dim of "...") gets a size; each input gets a stride per
// label (repeated labels add up, so "ii" walks the diagonal; broadcast size-1 dims get stride 0).
// Each output element then sums, over the contracted labels, the product of the inputs.
#include <algorithm>
#include <map>

#include "backends/cpu/misc_kernels.h"
#include "backends/cpu/numeric.h"

namespace kiln::cpu {
namespace {

constexpr int kEllipsisBase = 256;  // label of broadcast dim k of "..." is kEllipsisBase + k

struct Term {
  std::vector<int> labels;  // letters as chars; -1 marks where "..." stood
  bool has_ellipsis = false;
};

bool parse_term(const std::string& s, Term& t) {
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == ' ') continue;
    if (c == '.') {
      if (s.compare(i, 3, "...") != 0 || t.has_ellipsis) return false;
      t.has_ellipsis = true;
      t.labels.push_back(-1);
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      t.labels.push_back(c);
    } else {
      return false;
    }
  }
  return true;
}

struct EinsumSpec {
  std::vector<Term> inputs;
  Term output;
  bool explicit_output = false;
};

bool parse_equation(const std::string& eq, EinsumSpec& spec) {
  std::string lhs = eq, rhs;
  const size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    rhs = eq.substr(arrow + 2);
    spec.explicit_output = true;
    if (!parse_term(rhs, spec.output)) return false;
  }
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    Term t;
    if (!parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), t)) return false;
    spec.inputs.push_back(t);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

// Expands "..." of a term into labels for `rank` dims, given the widest ellipsis `e_max`.
bool expand(const Term& t, int64_t rank, int64_t e_max, std::vector<int>& out) {
  const int64_t letters = static_cast<int64_t>(t.labels.size()) - (t.has_ellipsis ? 1 : 0);
  const int64_t e = rank - letters;
  if (e < 0 || (!t.has_ellipsis && e != 0)) return false;
  out.clear();
  for (int l : t.labels) {
    if (l != -1) out.push_back(l);
    else
      for (int64_t k = 0; k < e; ++k) out.push_back(kEllipsisBase + static_cast<int>(e_max - e + k));
  }
  return true;
}

template <typename T>
void contract(const std::vector<const T*>& in, T* y, const std::vector<int64_t>& out_sizes,
              const std::vector<std::vector<int64_t>>& out_strides, const std::vector<int64_t>& red_sizes,
              const std::vector<std::vector<int64_t>>& red_strides) {
  using A = typename Num<T>::acc;
  const size_t ni = in.size();
  const int64_t on = shape_numel(out_sizes), rn = shape_numel(red_sizes);
  parallel_for(on, std::max<int64_t>(1, 8192 / std::max<int64_t>(rn, 1)), [&](int64_t b, int64_t e) {
    std::vector<int64_t> base(ni), off(ni), ridx(red_sizes.size());
    for (int64_t o = b; o < e; ++o) {
      std::fill(base.begin(), base.end(), 0);
      int64_t rem = o;
      for (int d = static_cast<int>(out_sizes.size()) - 1; d >= 0; --d) {
        const int64_t i = rem % out_sizes[d];
        rem /= out_sizes[d];
        for (size_t k = 0; k < ni; ++k) base[k] += i * out_strides[k][d];
      }
      A acc = 0;
      off = base;
      std::fill(ridx.begin(), ridx.end(), 0);
      for (int64_t r = 0; r < rn; ++r) {
        A p = 1;
        for (size_t k = 0; k < ni; ++k) p *= Num<T>::load(in[k][off[k]]);
        acc += p;
        for (int d = static_cast<int>(red_sizes.size()) - 1; d >= 0; --d) {
          if (++ridx[d] < red_sizes[d]) {
            for (size_t k = 0; k < ni; ++k) off[k] += red_strides[k][d];
            break;
          }
          for (size_t k = 0; k < ni; ++k) off[k] -= red_strides[k][d] * (red_sizes[d] - 1);
          ridx[d] = 0;
        }
      }
      y[o] = Num<T>::store(acc);
    }
  });
}

Status run_einsum(KernelContext& ctx, const EinsumSpec& spec) {
  const int n = ctx.num_inputs();
  if (n != static_cast<int>(spec.inputs.size())) return ctx.error("equation has " + std::to_string(spec.inputs.size()) + " inputs, node has " + std::to_string(n));
  int64_t e_max = 0;
  for (int k = 0; k < n; ++k) {
    const Term& t = spec.inputs[k];
    const int64_t letters = static_cast<int64_t>(t.labels.size()) - (t.has_ellipsis ? 1 : 0);
    if (t.has_ellipsis) e_max = std::max<int64_t>(e_max, ctx.input(k).rank() - letters);
  }
  std::vector<std::vector<int>> labels(n);
  std::map<int, int64_t> size;
  std::map<int, int> count;
  for (int k = 0; k < n; ++k) {
    const Tensor& x = ctx.input(k);
    if (x.dtype() != ctx.input(0).dtype()) return ctx.error("all inputs must have the same dtype");
    if (!expand(spec.inputs[k], x.rank(), e_max, labels[k])) return ctx.error("term " + std::to_string(k) + " does not match the input's rank");
    for (size_t d = 0; d < labels[k].size(); ++d) {
      const int l = labels[k][d];
      ++count[l];
      auto it = size.find(l);
      if (it == size.end() || it->second == 1) size[l] = x.shape()[d];
      else if (x.shape()[d] != 1 && x.shape()[d] != it->second) return ctx.error("dimension mismatch for an einsum label");
    }
  }
  std::vector<int> out_labels;
  if (spec.explicit_output) {
    if (!expand(spec.output, e_max + static_cast<int64_t>(spec.output.labels.size()) - (spec.output.has_ellipsis ? 1 : 0), e_max, out_labels))
      return ctx.error("bad output term");
    for (int l : out_labels)
      if (!size.count(l)) return ctx.error("output label not found in the inputs");
  } else {
    for (int64_t k = 0; k < e_max; ++k) out_labels.push_back(kEllipsisBase + static_cast<int>(k));
    for (auto& [l, c] : count)
      if (l < kEllipsisBase && c == 1) out_labels.push_back(l);
  }
  std::vector<int> red_labels;
  for (auto& [l, s] : size)
    if (std::find(out_labels.begin(), out_labels.end(), l) == out_labels.end()) red_labels.push_back(l);

  auto strides_for = [&](const std::vector<int>& ls, std::vector<std::vector<int64_t>>& st) {
    st.assign(n, std::vector<int64_t>(ls.size(), 0));
    for (int k = 0; k < n; ++k) {
      const Tensor& x = ctx.input(k);
      const auto xs = strides_of(x.shape());
      for (size_t j = 0; j < ls.size(); ++j)
        for (size_t d = 0; d < labels[k].size(); ++d)
          if (labels[k][d] == ls[j] && x.shape()[d] != 1) st[k][j] += xs[d];
    }
  };
  std::vector<std::vector<int64_t>> out_st, red_st;
  strides_for(out_labels, out_st);
  strides_for(red_labels, red_st);
  Shape out_shape, red_sizes;
  for (int l : out_labels) out_shape.push_back(size[l]);
  for (int l : red_labels) red_sizes.push_back(size[l]);
  Tensor& y = ctx.output(0, ctx.input(0).dtype(), out_shape);
  const bool ok = visit_numeric_f16(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<const T*> ptrs;
    for (int k = 0; k < n; ++k) ptrs.push_back(ctx.input(k).template data<T>());
    contract<T>(ptrs, y.data<T>(), out_shape, out_st, red_sizes, red_st);
  });
  return ok ? Status::Ok() : ctx.error("unsupported dtype");
}

Expected<KernelPtr> create_einsum(const ir::Node& n, KernelInit&) {
  EinsumSpec spec;
  const std::string eq = n.attr_string("equation", "");
  if (!parse_equation(eq, spec)) return invalid_model(n.describe() + ": cannot parse equation '" + eq + "'");
  return make_kernel([spec](KernelContext& ctx) { return run_einsum(ctx, spec); });
}

}  // namespace

void register_einsum(KernelRegistry& r) {
  r.add({"Einsum", "", 12, 1 << 30, "cpu.Einsum.any", nullptr, create_einsum});
}

}  // namespace kiln::cpu
