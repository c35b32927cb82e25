// backends/cpu/string.cpp — string ops on the CPU: StringNormalizer, StringConcat, StringSplit,
// RegexFullMatch (std::regex, ECMAScript grammar, which covers the RE2 subset models use).
#include <algorithm>
#include <cctype>
#include <regex>
#include <set>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/numeric.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

std::string to_case(std::string s, bool upper) {
  for (char& c : s) c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Expected<KernelPtr> create_normalizer(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::StringNormalizerParams p, ops::parse_string_normalizer(n));
  using CaseChange = ops::StringNormalizerParams::CaseChange;
  const CaseChange action = p.case_change;
  const bool sensitive = p.case_sensitive;
  std::set<std::string> stop;
  for (const auto& w : p.stopwords) stop.insert(sensitive ? w : to_case(w, false));
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DataType::kString) return ctx.error("input must be strings");
    if (!(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1))) return ctx.error("input must be [C] or [1, C]");
    std::vector<std::string> kept;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const std::string& s = x.data<std::string>()[i];
      if (stop.count(sensitive ? s : to_case(s, false))) continue;
      kept.push_back(action == CaseChange::kNone ? s : to_case(s, action == CaseChange::kUpper));
    }
    if (kept.empty()) kept.emplace_back();  // all filtered: one empty string
    const int64_t c = static_cast<int64_t>(kept.size());
    Tensor& y = ctx.output(0, DataType::kString, x.rank() == 1 ? Shape{c} : Shape{1, c});
    for (int64_t i = 0; i < c; ++i) y.data<std::string>()[i] = kept[i];
    return Status::Ok();
  });
}

// Input offsets of each output element of a numpy broadcast.
std::vector<int64_t> broadcast_offsets(const Shape& in, const Shape& out) {
  const size_t r = out.size();
  std::vector<int64_t> st(r, 0);
  const auto ist = strides_of(in);
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != 1) st[r - in.size() + i] = ist[i];
  const int64_t n = shape_numel(out);
  std::vector<int64_t> offs(static_cast<size_t>(n));
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  for (int64_t k = 0; k < n; ++k) {
    offs[k] = off;
    for (int d = static_cast<int>(r) - 1; d >= 0; --d) {
      if (++idx[d] < out[d]) { off += st[d]; break; }
      off -= st[d] * (out[d] - 1);
      idx[d] = 0;
    }
  }
  return offs;
}

Expected<KernelPtr> create_concat(const ir::Node&, KernelInit&) {
  return make_kernel([](KernelContext& ctx) -> Status {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (a.dtype() != DataType::kString || b.dtype() != DataType::kString) return ctx.error("inputs must be strings");
    Shape os;
    if (!ops::broadcast_shapes(a.shape(), b.shape(), &os)) return ctx.error("shapes do not broadcast");
    const auto oa = broadcast_offsets(a.shape(), os), ob = broadcast_offsets(b.shape(), os);
    Tensor& y = ctx.output(0, DataType::kString, os);
    for (size_t i = 0; i < oa.size(); ++i) y.data<std::string>()[i] = a.data<std::string>()[oa[i]] + b.data<std::string>()[ob[i]];
    return Status::Ok();
  });
}

// Python's str.split(delimiter, maxsplit); an empty delimiter splits on runs of whitespace.
std::vector<std::string> split(const std::string& s, const std::string& delim, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (delim.empty()) {
    size_t i = 0;
    auto ws = [&](size_t k) { return std::isspace(static_cast<unsigned char>(s[k])) != 0; };
    while (true) {
      while (i < s.size() && ws(i)) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = s.size();
        while (end > i && ws(end - 1)) --end;
        parts.push_back(s.substr(i, end - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !ws(j)) ++j;
      parts.push_back(s.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  size_t start = 0;
  while (true) {
    const size_t p = s.find(delim, start);
    if (p == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit)) {
      parts.push_back(s.substr(start));
      break;
    }
    parts.push_back(s.substr(start, p - start));
    start = p + delim.size();
  }
  return parts;
}

Expected<KernelPtr> create_split(const ir::Node& n, KernelInit&) {
  const ops::StringSplitParams p = ops::parse_string_split(n);
  const std::string delim = p.delimiter;
  const int64_t maxsplit = p.maxsplit;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DataType::kString) return ctx.error("input must be strings");
    std::vector<std::vector<std::string>> parts(static_cast<size_t>(x.numel()));
    int64_t width = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      parts[i] = split(x.data<std::string>()[i], delim, maxsplit);
      width = std::max<int64_t>(width, static_cast<int64_t>(parts[i].size()));
    }
    Shape ys = x.shape();
    ys.push_back(width);
    Tensor& y = ctx.output(0, DataType::kString, ys);
    Tensor& z = ctx.output(1, DataType::kInt64, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      for (int64_t k = 0; k < width; ++k)
        y.data<std::string>()[i * width + k] = k < static_cast<int64_t>(parts[i].size()) ? parts[i][k] : std::string();
      z.data<int64_t>()[i] = static_cast<int64_t>(parts[i].size());
    }
    return Status::Ok();
  });
}

Expected<KernelPtr> create_regex(const ir::Node& n, KernelInit&) {
  const std::string pattern = ops::parse_regex_full_match(n).pattern;
  std::shared_ptr<const std::regex> re;
  try {
    re = std::make_shared<const std::regex>(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return invalid_model(n.describe() + ": cannot compile pattern '" + pattern + "': " + e.what());
  }
  return make_kernel([re](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != DataType::kString) return ctx.error("input must be strings");
    Tensor& y = ctx.output(0, DataType::kBool, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) y.data<bool>()[i] = std::regex_match(x.data<std::string>()[i], *re);
    return Status::Ok();
  });
}

}  // namespace

void register_string(KernelRegistry& r) {
  r.add({"StringNormalizer", "", 10, 1 << 30, "cpu.StringNormalizer.string", nullptr, create_normalizer});
  r.add({"StringConcat", "", 20, 1 << 30, "cpu.StringConcat.string", nullptr, create_concat});
  r.add({"StringSplit", "", 20, 1 << 30, "cpu.StringSplit.string", nullptr, create_split});
  r.add({"RegexFullMatch", "", 20, 1 << 30, "cpu.RegexFullMatch.string", nullptr, create_regex});
}

}  // namespace kiln::cpu
