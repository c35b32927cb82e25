// ops/einsum.cpp — Einsum's equation parser and contraction plan (ops/einsum.h).
#include "ops/einsum.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace kiln::ops {
namespace {

constexpr int kEllipsisBase = 256;  // label of broadcast dim k of "..." is kEllipsisBase + k

bool parse_term(const std::string& s, EinsumTerm& t) {
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

// Expands "..." of a term into labels for `rank` dims, given the widest ellipsis `e_max`.
bool expand(const EinsumTerm& t, int64_t rank, int64_t e_max, std::vector<int>& out) {
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

}  // namespace

bool parse_einsum(const std::string& eq, EinsumSpec& spec) {
  std::string lhs = eq;
  const size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    spec.explicit_output = true;
    if (!parse_term(eq.substr(arrow + 2), spec.output)) return false;
  }
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    EinsumTerm t;
    if (!parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start), t)) return false;
    spec.inputs.push_back(t);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return true;
}

Expected<EinsumPlan> plan_einsum(const EinsumSpec& spec, const std::vector<Shape>& shapes) {
  const int n = static_cast<int>(shapes.size());
  if (n != static_cast<int>(spec.inputs.size()))
    return invalid_argument("equation has " + std::to_string(spec.inputs.size()) + " inputs, node has " + std::to_string(n));
  int64_t e_max = 0;
  for (int k = 0; k < n; ++k) {
    const EinsumTerm& t = spec.inputs[k];
    const int64_t letters = static_cast<int64_t>(t.labels.size()) - (t.has_ellipsis ? 1 : 0);
    if (t.has_ellipsis) e_max = std::max<int64_t>(e_max, static_cast<int64_t>(shapes[k].size()) - letters);
  }
  std::vector<std::vector<int>> labels(n);
  std::map<int, int64_t> size;
  std::map<int, int> count;
  for (int k = 0; k < n; ++k) {
    const Shape& x = shapes[k];
    if (!expand(spec.inputs[k], static_cast<int64_t>(x.size()), e_max, labels[k]))
      return invalid_argument("term " + std::to_string(k) + " does not match the input's rank");
    for (size_t d = 0; d < labels[k].size(); ++d) {
      const int l = labels[k][d];
      ++count[l];
      auto it = size.find(l);
      if (it == size.end() || it->second == 1) size[l] = x[d];
      else if (x[d] != 1 && x[d] != it->second) return invalid_argument("dimension mismatch for an einsum label");
    }
  }
  std::vector<int> out_labels;
  if (spec.explicit_output) {
    const int64_t letters = static_cast<int64_t>(spec.output.labels.size()) - (spec.output.has_ellipsis ? 1 : 0);
    if (!expand(spec.output, e_max + letters, e_max, out_labels)) return invalid_argument("bad output term");
    for (int l : out_labels)
      if (!size.count(l)) return invalid_argument("output label not found in the inputs");
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
      const Shape& x = shapes[k];
      std::vector<int64_t> xs(x.size(), 1);
      for (int d = static_cast<int>(x.size()) - 2; d >= 0; --d) xs[d] = xs[d + 1] * x[d + 1];
      for (size_t j = 0; j < ls.size(); ++j)
        for (size_t d = 0; d < labels[k].size(); ++d)
          if (labels[k][d] == ls[j] && x[d] != 1) st[k][j] += xs[d];
    }
  };
  EinsumPlan p;
  strides_for(out_labels, p.out_strides);
  strides_for(red_labels, p.red_strides);
  for (int l : out_labels) p.out_shape.push_back(size[l]);
  for (int l : red_labels) p.red_sizes.push_back(size[l]);
  return p;
}

}  // namespace kiln::ops
