// backends/cpu/ml.cpp — ai.onnx.ml ops on the CPU: ArrayFeatureExtractor, Binarizer, LabelEncoder
// (1, 2, 4) and TreeEnsemble (5).
//
// LabelEncoder keeps its keys in a hash map built once at creation; float keys compare by value,
// with every NaN key matching every NaN input. TreeEnsemble validates the node arrays at creation
// (ids in range, membership sets complete) and bounds each walk by the node count, so a cyclic
// tree gives an error instead of a hang.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "backends/cpu/numeric.h"

namespace kiln::cpu {
namespace {

constexpr const char* kMl = "ai.onnx.ml";

// ---------------------------------------------------------------- ArrayFeatureExtractor
// Y = X[..., indices] with shape [*X.shape[:-1], numel(indices)]; a 1-D X gives [1, numel].
Status array_feature_extractor(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  if (x.rank() < 1) return ctx.error("X must have rank >= 1");
  std::vector<int64_t> idx;
  if (!read_ints(ind, idx)) return ctx.error("indices must be int64");
  const int64_t last = x.shape().back();
  for (int64_t i : idx)
    if (i < 0 || i >= last)
      return ctx.error("index " + std::to_string(i) + " is out of range for the last dim " + std::to_string(last));
  Shape ys = x.rank() == 1 ? Shape{1} : Shape(x.shape().begin(), x.shape().end() - 1);
  ys.push_back(static_cast<int64_t>(idx.size()));
  Tensor& y = ctx.output(0, x.dtype(), ys);
  const int64_t rows = last == 0 ? 0 : x.numel() / last, k = static_cast<int64_t>(idx.size());
  if (x.dtype() == DataType::kString) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < k; ++j) y.data<std::string>()[r * k + j] = x.data<std::string>()[r * last + idx[j]];
    return Status::Ok();
  }
  const size_t esz = dtype_size(x.dtype());
  const auto* src = static_cast<const char*>(x.raw());
  auto* dst = static_cast<char*>(y.raw());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) std::memcpy(dst + (r * k + j) * esz, src + (r * last + idx[j]) * esz, esz);
  return Status::Ok();
}

// ---------------------------------------------------------------- Binarizer
Expected<KernelPtr> create_binarizer(const ir::Node& n, KernelInit&) {
  const double threshold = n.attr_float("threshold", 0.0f);
  return make_kernel([threshold](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    const bool ok = visit_numeric_f16(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = x.data<T>();
      T* q = y.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) q[i] = from_double<T>(to_double(p[i]) > threshold ? 1.0 : 0.0);
    });
    if (!ok) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- LabelEncoder
enum class KeyKind { kString, kInt, kFloat };

bool key_kind(DataType dt, KeyKind* k) {
  switch (dt) {
    case DataType::kString: *k = KeyKind::kString; return true;
    case DataType::kInt64: case DataType::kInt32: case DataType::kInt16: *k = KeyKind::kInt; return true;
    case DataType::kFloat32: case DataType::kFloat64: *k = KeyKind::kFloat; return true;
    default: return false;
  }
}

int64_t int_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kInt64: return t.data<int64_t>()[i];
    case DataType::kInt32: return t.data<int32_t>()[i];
    case DataType::kInt16: return t.data<int16_t>()[i];
    default: return 0;
  }
}

double float_at(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kFloat64 ? t.data<double>()[i] : t.data<float>()[i];
}

Tensor strings_tensor(const std::vector<std::string>& v) {
  Tensor t = Tensor::empty(DataType::kString, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
  return t;
}

Tensor ints_tensor(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(DataType::kInt64, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

Tensor floats_tensor(const std::vector<float>& v) {
  Tensor t = Tensor::empty(DataType::kFloat32, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return t;
}

// A one-element tensor of `dt` holding the spec's default: "_Unused", -1 or -0.0.
Tensor spec_default(DataType dt) {
  Tensor t = Tensor::empty(dt, {1});
  switch (dt) {
    case DataType::kString: t.data<std::string>()[0] = "_Unused"; break;
    case DataType::kInt64: t.data<int64_t>()[0] = -1; break;
    case DataType::kInt32: t.data<int32_t>()[0] = -1; break;
    case DataType::kInt16: t.data<int16_t>()[0] = -1; break;
    case DataType::kFloat32: t.data<float>()[0] = -0.0f; break;
    case DataType::kFloat64: t.data<double>()[0] = -0.0; break;
    default: break;
  }
  return t;
}

// The key → position table; values[pos] (or the default) is what a key maps to.
struct LabelMap {
  KeyKind kind = KeyKind::kString;
  std::unordered_map<std::string, int64_t> strings;
  std::unordered_map<int64_t, int64_t> ints;
  std::unordered_map<double, int64_t> floats;  // NaN keys are kept apart in nan_pos
  int64_t nan_pos = -1;
  Tensor values;       // 1-D, the output dtype
  Tensor default_val;  // one element of the output dtype

  int64_t find(const Tensor& x, int64_t i) const {
    switch (kind) {
      case KeyKind::kString: {
        auto it = strings.find(x.data<std::string>()[i]);
        return it == strings.end() ? -1 : it->second;
      }
      case KeyKind::kInt: {
        auto it = ints.find(int_at(x, i));
        return it == ints.end() ? -1 : it->second;
      }
      case KeyKind::kFloat: {
        const double v = float_at(x, i);
        if (std::isnan(v)) return nan_pos;
        auto it = floats.find(v == 0 ? 0.0 : v);  // -0 and +0 are one key
        return it == floats.end() ? -1 : it->second;
      }
    }
    return -1;
  }
};

// Builds the map from the node's keys_* / values_* / default_* attributes (opset 2 and 4), or from
// classes_strings (opset 1: string ↔ int64 by position, direction chosen by the input's dtype).
Expected<LabelMap> make_label_map(const ir::Node& n, DataType in_dtype) {
  LabelMap m;
  Tensor keys, values;
  if (const ir::Attribute* c = n.attr("classes_strings"); c && n.opset < 2) {
    std::vector<int64_t> pos(c->strings.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int64_t>(i);
    if (in_dtype == DataType::kString) {
      keys = strings_tensor(c->strings);
      values = ints_tensor(pos);
      m.default_val = ints_tensor({n.attr_int("default_int64", -1)});
    } else {
      keys = ints_tensor(pos);
      values = strings_tensor(c->strings);
      m.default_val = strings_tensor({n.attr_string("default_string", "_Unused")});
    }
  } else {
    if (const ir::Attribute* a = n.attr("keys_strings")) keys = strings_tensor(a->strings);
    else if (const ir::Attribute* a = n.attr("keys_int64s")) keys = ints_tensor(a->ints);
    else if (const ir::Attribute* a = n.attr("keys_floats")) keys = floats_tensor(a->floats);
    else if (const ir::Attribute* a = n.attr("keys_tensor")) keys = a->t;
    if (const ir::Attribute* a = n.attr("values_strings")) {
      values = strings_tensor(a->strings);
      m.default_val = strings_tensor({n.attr_string("default_string", "_Unused")});
    } else if (const ir::Attribute* a = n.attr("values_int64s")) {
      values = ints_tensor(a->ints);
      m.default_val = ints_tensor({n.attr_int("default_int64", -1)});
    } else if (const ir::Attribute* a = n.attr("values_floats")) {
      values = floats_tensor(a->floats);
      m.default_val = floats_tensor({n.attr_float("default_float", -0.0f)});
    } else if (const ir::Attribute* a = n.attr("values_tensor")) {
      values = a->t;
      const ir::Attribute* d = n.attr("default_tensor");
      m.default_val = d ? d->t : spec_default(values.dtype());
      if (m.default_val.dtype() != values.dtype() || m.default_val.numel() != 1)
        return invalid_model(n.describe() + ": default_tensor must hold one value of the values' dtype");
    }
  }
  if (!keys.defined() || !values.defined()) return invalid_model(n.describe() + ": needs one keys_* and one values_* attribute");
  if (keys.numel() != values.numel())
    return invalid_model(n.describe() + ": " + std::to_string(keys.numel()) + " keys but " +
                         std::to_string(values.numel()) + " values");
  KeyKind vk;
  if (!key_kind(keys.dtype(), &m.kind) || !key_kind(values.dtype(), &vk))
    return invalid_model(n.describe() + ": keys and values must be string, int64/32/16, float or double");
  m.values = values;
  for (int64_t i = 0; i < keys.numel(); ++i) {  // a repeated key: the last one wins
    switch (m.kind) {
      case KeyKind::kString: m.strings[keys.data<std::string>()[i]] = i; break;
      case KeyKind::kInt: m.ints[int_at(keys, i)] = i; break;
      case KeyKind::kFloat: {
        const double v = float_at(keys, i);
        if (std::isnan(v)) m.nan_pos = i;
        else m.floats[v == 0 ? 0.0 : v] = i;
        break;
      }
    }
  }
  return m;
}

Expected<KernelPtr> create_label_encoder(const ir::Node& n, KernelInit&) {
  const DataType in_dtype = n.inputs.empty() || !n.inputs[0] ? DataType::kUndefined : n.inputs[0]->type.dtype;
  KILN_ASSIGN_OR_RETURN(LabelMap m, make_label_map(n, in_dtype));
  return make_kernel([m = std::move(m)](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    KeyKind k;
    if (!key_kind(x.dtype(), &k) || k != m.kind)
      return ctx.error(std::string("input dtype ") + dtype_name(x.dtype()) + " does not match the keys' type");
    const DataType out = m.values.dtype();
    Tensor& y = ctx.output(0, out, x.shape());
    const int64_t total = x.numel();
    if (out == DataType::kString) {
      for (int64_t i = 0; i < total; ++i) {
        const int64_t p = m.find(x, i);
        y.data<std::string>()[i] = p < 0 ? m.default_val.data<std::string>()[0] : m.values.data<std::string>()[p];
      }
      return Status::Ok();
    }
    const size_t esz = dtype_size(out);
    const auto* vals = static_cast<const char*>(m.values.raw());
    const auto* dflt = static_cast<const char*>(m.default_val.raw());
    auto* dst = static_cast<char*>(y.raw());
    for (int64_t i = 0; i < total; ++i) {
      const int64_t p = m.find(x, i);
      std::memcpy(dst + i * esz, p < 0 ? dflt : vals + p * esz, esz);
    }
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- TreeEnsemble
enum class Branch : uint8_t { kLeq, kLt, kGte, kGt, kEq, kNeq, kMember };
enum class Aggregate { kAverage, kSum, kMin, kMax };
enum class Post { kNone, kSoftmax, kLogistic, kSoftmaxZero, kProbit };

struct TreeNode {
  Branch mode;
  int64_t feature;
  double split;
  bool missing_true;
  std::vector<double> members;  // sorted, for kMember
  int64_t child[2];             // [false, true]
  bool leaf[2];
};

struct Ensemble {
  std::vector<TreeNode> nodes;
  std::vector<int64_t> roots;
  std::vector<double> leaf_weights;
  std::vector<int64_t> leaf_targets;
  int64_t n_targets = 0;
  Aggregate agg = Aggregate::kSum;
  Post post = Post::kNone;
};

Expected<std::vector<double>> reals_attr(const ir::Node& n, const char* name, bool required) {
  std::vector<double> v;
  const ir::Attribute* a = n.attr(name);
  if (!a) {
    if (required) return invalid_model(n.describe() + ": needs the '" + std::string(name) + "' attribute");
    return v;
  }
  if (a->kind == ir::Attribute::Kind::kFloats) return std::vector<double>(a->floats.begin(), a->floats.end());
  if (a->kind != ir::Attribute::Kind::kTensor || !read_reals(a->t, v))
    return invalid_model(n.describe() + ": '" + std::string(name) + "' must be a float, double or float16 tensor");
  return v;
}

bool branch_true(const TreeNode& t, double x) {
  if (std::isnan(x) && t.missing_true) return true;
  switch (t.mode) {
    case Branch::kLeq: return x <= t.split;
    case Branch::kLt: return x < t.split;
    case Branch::kGte: return x >= t.split;
    case Branch::kGt: return x > t.split;
    case Branch::kEq: return x == t.split;
    case Branch::kNeq: return x != t.split;
    case Branch::kMember: return !std::isnan(x) && std::binary_search(t.members.begin(), t.members.end(), x);
  }
  return false;
}

Expected<Ensemble> make_ensemble(const ir::Node& n) {
  Ensemble e;
  auto bad = [&](const std::string& why) { return invalid_model(n.describe() + ": " + why); };
  KILN_ASSIGN_OR_RETURN(std::vector<double> splits, reals_attr(n, "nodes_splits", true));
  KILN_ASSIGN_OR_RETURN(e.leaf_weights, reals_attr(n, "leaf_weights", true));
  KILN_ASSIGN_OR_RETURN(std::vector<double> members, reals_attr(n, "membership_values", false));
  const ir::Attribute* modes_attr = n.attr("nodes_modes");
  if (!modes_attr || modes_attr->kind != ir::Attribute::Kind::kTensor || modes_attr->t.dtype() != DataType::kUInt8)
    return bad("nodes_modes must be a uint8 tensor");
  const Tensor& modes = modes_attr->t;
  const auto features = n.attr_ints("nodes_featureids"), true_ids = n.attr_ints("nodes_truenodeids"),
             false_ids = n.attr_ints("nodes_falsenodeids"), true_leafs = n.attr_ints("nodes_trueleafs"),
             false_leafs = n.attr_ints("nodes_falseleafs"), missing = n.attr_ints("nodes_missing_value_tracks_true");
  e.leaf_targets = n.attr_ints("leaf_targetids");
  e.roots = n.attr_ints("tree_roots");
  e.n_targets = n.attr_int("n_targets", 0);
  const size_t count = splits.size();
  if (modes.numel() != static_cast<int64_t>(count) || features.size() != count || true_ids.size() != count ||
      false_ids.size() != count || true_leafs.size() != count || false_leafs.size() != count ||
      (!missing.empty() && missing.size() != count))
    return bad("the nodes_* attributes must all have the same length");
  if (e.leaf_targets.size() != e.leaf_weights.size()) return bad("leaf_targetids and leaf_weights differ in length");
  if (e.n_targets <= 0) return bad("n_targets must be positive");
  for (int64_t t : e.leaf_targets)
    if (t < 0 || t >= e.n_targets) return bad("leaf target id " + std::to_string(t) + " is outside [0, n_targets)");
  for (int64_t r : e.roots)
    if (r < 0 || r >= static_cast<int64_t>(count)) return bad("tree root " + std::to_string(r) + " is not a node");
  const int64_t agg = n.attr_int("aggregate_function", 1), post = n.attr_int("post_transform", 0);
  if (agg < 0 || agg > 3) return bad("aggregate_function must be 0..3");
  if (post < 0 || post > 4) return bad("post_transform must be 0..4");
  e.agg = static_cast<Aggregate>(agg);
  e.post = static_cast<Post>(post);
  size_t next_member = 0;
  for (size_t i = 0; i < count; ++i) {
    TreeNode t;
    const uint8_t mode = modes.data<uint8_t>()[i];
    if (mode > 6) return bad("node mode " + std::to_string(mode) + " is not 0..6");
    t.mode = static_cast<Branch>(mode);
    t.feature = features[i];
    if (t.feature < 0) return bad("negative feature id");
    t.split = splits[i];
    t.missing_true = !missing.empty() && missing[i] != 0;
    t.child[0] = false_ids[i];
    t.child[1] = true_ids[i];
    t.leaf[0] = false_leafs[i] != 0;
    t.leaf[1] = true_leafs[i] != 0;
    for (int b = 0; b < 2; ++b) {
      const int64_t limit = t.leaf[b] ? static_cast<int64_t>(e.leaf_weights.size()) : static_cast<int64_t>(count);
      if (t.child[b] < 0 || t.child[b] >= limit)
        return bad("node " + std::to_string(i) + " points to " + (t.leaf[b] ? "leaf " : "node ") +
                   std::to_string(t.child[b]) + ", which does not exist");
    }
    if (t.mode == Branch::kMember) {  // the next NaN-terminated run of membership_values
      if (next_member >= members.size()) return bad("membership_values has too few sets for the BRANCH_MEMBER nodes");
      while (next_member < members.size() && !std::isnan(members[next_member])) t.members.push_back(members[next_member++]);
      ++next_member;  // the NaN
      std::sort(t.members.begin(), t.members.end());
    }
    e.nodes.push_back(std::move(t));
  }
  return e;
}

// Inverse of the standard normal CDF at p: sqrt(2) * erfinv(2p - 1), refined by Newton steps.
double probit(double p) {
  if (p <= 0) return -std::numeric_limits<double>::infinity();
  if (p >= 1) return std::numeric_limits<double>::infinity();
  const double y = 2 * p - 1;
  // Initial guess (Winitzki's approximation of erfinv), then Newton on erf(x) = y.
  const double a = 0.147, l = std::log(1 - y * y), t = 2 / (M_PI * a) + l / 2;
  double x = std::copysign(std::sqrt(std::sqrt(t * t - l / a) - t), y);
  for (int i = 0; i < 3; ++i) x -= (std::erf(x) - y) / (2 / std::sqrt(M_PI) * std::exp(-x * x));
  return M_SQRT2 * x;
}

void post_transform(Post post, double* v, int64_t n) {
  switch (post) {
    case Post::kNone: break;
    case Post::kLogistic:
      for (int64_t i = 0; i < n; ++i) v[i] = 1 / (1 + std::exp(-v[i]));
      break;
    case Post::kProbit:
      for (int64_t i = 0; i < n; ++i) v[i] = probit(v[i]);
      break;
    case Post::kSoftmax:
    case Post::kSoftmaxZero: {  // SOFTMAX_ZERO: zero scores stay zero and take no share
      const bool zero = post == Post::kSoftmaxZero;
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, v[i]);
      for (int64_t i = 0; i < n; ++i) sum += (v[i] = zero && v[i] == 0 ? 0 : std::exp(v[i] - mx));
      for (int64_t i = 0; i < n; ++i) v[i] = sum > 0 ? v[i] / sum : 0;
      break;
    }
  }
}

Status run_ensemble(KernelContext& ctx, const Ensemble& e) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 2) return ctx.error("X must be [N, F]");
  const int64_t rows = x.dim(0), feats = x.dim(1), nt = e.n_targets;
  for (const TreeNode& t : e.nodes)
    if (t.feature >= feats)
      return ctx.error("a node reads feature " + std::to_string(t.feature) + " of " + std::to_string(feats));
  std::vector<double> xs;
  if (!read_reals(x, xs)) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
  Tensor& y = ctx.output(0, x.dtype(), {rows, nt});
  const double start = e.agg == Aggregate::kMin ? std::numeric_limits<double>::max()
                       : e.agg == Aggregate::kMax ? std::numeric_limits<double>::lowest() : 0.0;
  const int64_t max_steps = static_cast<int64_t>(e.nodes.size());
  std::vector<double> out(static_cast<size_t>(rows * nt), start);
  std::atomic<bool> cyclic{false};
  parallel_for(rows, 16, [&](int64_t b, int64_t end) {
    for (int64_t r = b; r < end; ++r) {
      const double* row = xs.data() + r * feats;
      double* acc = out.data() + r * nt;
      for (int64_t root : e.roots) {
        int64_t at = root, steps = 0;
        bool leaf = false;
        while (!leaf) {
          if (++steps > max_steps) {
            cyclic.store(true, std::memory_order_relaxed);
            break;
          }
          const TreeNode& t = e.nodes[at];
          const int b2 = branch_true(t, row[t.feature]) ? 1 : 0;
          leaf = t.leaf[b2];
          at = t.child[b2];
        }
        if (!leaf) break;
        const double w = e.leaf_weights[at];
        double& a = acc[e.leaf_targets[at]];
        switch (e.agg) {
          case Aggregate::kSum: case Aggregate::kAverage: a += w; break;
          case Aggregate::kMin: a = std::min(a, w); break;
          case Aggregate::kMax: a = std::max(a, w); break;
        }
      }
      if (e.agg == Aggregate::kAverage && !e.roots.empty())
        for (int64_t k = 0; k < nt; ++k) acc[k] /= static_cast<double>(e.roots.size());
      post_transform(e.post, acc, nt);
    }
  });
  if (cyclic.load()) return ctx.error("a tree does not end in a leaf (its nodes form a cycle)");
  visit_numeric_f16(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) y.data<T>()[i] = from_double<T>(out[i]);
  });
  return Status::Ok();
}

Expected<KernelPtr> create_tree_ensemble(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(Ensemble e, make_ensemble(n));
  return make_kernel([e = std::move(e)](KernelContext& ctx) { return run_ensemble(ctx, e); });
}

std::string real_input(const ir::Node& n) {
  return require_dtypes(n, 0, {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16});
}

}  // namespace

void register_ml(KernelRegistry& r) {
  r.add({"ArrayFeatureExtractor", kMl, 1, 1 << 30, "cpu.ml.ArrayFeatureExtractor.any", nullptr,
         [](const ir::Node&, KernelInit&) { return make_kernel(array_feature_extractor); }});
  r.add({"Binarizer", kMl, 1, 1 << 30, "cpu.ml.Binarizer.any", nullptr, create_binarizer});
  r.add({"LabelEncoder", kMl, 1, 1 << 30, "cpu.ml.LabelEncoder.any", nullptr, create_label_encoder});
  r.add({"TreeEnsemble", kMl, 5, 1 << 30, "cpu.ml.TreeEnsemble.any", real_input, create_tree_ensemble});
}

}  // namespace kiln::cpu
