// backends/cpu/ml.cpp — ai.onnx.ml ops on the CPU: ArrayFeatureExtractor, Binarizer, LabelEncoder
// (1, 2, 4), TreeEnsemble (5) and the legacy TreeEnsembleClassifier/Regressor (1, 3), which
// ops::parse_tree_ensemble_classifier/regressor rebuild as the same checked node list.
//
// LabelEncoder keeps its keys in a hash map built once at creation; float keys compare by value,
// with every NaN key matching every NaN input. TreeEnsemble's node arrays are checked at creation
// (ops::parse_tree_ensemble: ids in range, membership sets complete) and each walk is bounded by the
// node count, so a cyclic tree gives an error instead of a hang.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <unordered_map>

#include "backends/cpu/numeric.h"
#include "backends/cpu/ml_common.h"
#include "backends/cpu/ml_forest.h"
#include "ops/params_ml.h"

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
  const double threshold = ops::parse_binarizer(n).threshold;
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

// The key → position table of the node's checked keys and values (ops::parse_label_encoder).
LabelMap make_label_map(const ops::LabelEncoderParams& p) {
  LabelMap m;
  const Tensor& keys = p.keys;
  key_kind(keys.dtype(), &m.kind);  // parse_label_encoder checked the keys' dtype
  m.default_val = p.default_value;
  m.values = p.values;
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
  KILN_ASSIGN_OR_RETURN(const ops::LabelEncoderParams params, ops::parse_label_encoder(n));
  LabelMap m = make_label_map(params);
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
using Ensemble = ops::TreeEnsembleParams;
using TreeNode = Ensemble::Node;
using Branch = Ensemble::Branch;
using Aggregate = Ensemble::Aggregate;
using Post = Ensemble::Post;

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

}  // namespace

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

namespace {

// Each row's aggregated scores plus the base values, [rows, n_targets], before the post transform.
// X is [N, F] (or one row [F]).
// `fast`: the ensemble compiled (CompiledForest), or null for the generic walk below.
Status ensemble_scores(KernelContext& ctx, const Ensemble& e, const CompiledForest* fast, int64_t* rows_out,
                       std::vector<double>& out) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 2 && x.rank() != 1) return ctx.error("X must be [N, F]");
  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, feats = x.dim(x.rank() - 1), nt = e.n_targets;
  int64_t max_feature = -1;
  if (fast) max_feature = fast->max_feature();
  else
    for (const TreeNode& t : e.nodes) max_feature = std::max(max_feature, t.feature);
  if (max_feature >= feats)
    return ctx.error("a node reads feature " + std::to_string(max_feature) + " of " + std::to_string(feats));
  // n_targets sizes the scratch: checked against the tensor limit before it is allocated (INT64_MAX
  // overflowed rows * nt; 2^31 asked for 16 GiB of doubles per row).
  int64_t cells = 0;
  if (__builtin_mul_overflow(rows, nt, &cells) || static_cast<uint64_t>(cells) > max_tensor_bytes() / sizeof(double))
    return ctx.error("[" + std::to_string(rows) + ", n_targets " + std::to_string(nt) +
                     "] scores exceed the tensor size limit (--max-tensor-bytes)");
  auto bad_dtype = [&] { return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype())); };
  if (!visit_numeric_f16(x.dtype(), [](auto) {})) return bad_dtype();  // what read_reals reads
  *rows_out = rows;
  if (fast) {
    out.assign(static_cast<size_t>(cells), 0.0);
    return fast->scores(x, rows, feats, out.data()) ? Status::Ok() : bad_dtype();
  }
  std::vector<double> xs;
  if (!read_reals(x, xs)) return bad_dtype();
  const double start = e.aggregate == Aggregate::kMin ? std::numeric_limits<double>::max()
                       : e.aggregate == Aggregate::kMax ? std::numeric_limits<double>::lowest() : 0.0;
  const int64_t max_steps = static_cast<int64_t>(e.nodes.size());
  out.assign(static_cast<size_t>(cells), start);
  std::atomic<bool> cyclic{false};
  parallel_for(rows, 16, [&](int64_t b, int64_t end) {
    for (int64_t r = b; r < end; ++r) {
      const double* row = xs.data() + r * feats;
      double* acc = out.data() + r * nt;
      std::vector<bool> voted(e.unvoted_zero ? static_cast<size_t>(nt) : 0);
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
        const int64_t first = e.votes.empty() ? at : e.votes[at], last = e.votes.empty() ? at + 1 : e.votes[at + 1];
        for (int64_t v = first; v < last; ++v) {
          const double w = e.leaf_weights[v];
          double& a = acc[e.leaf_targets[v]];
          if (e.unvoted_zero) voted[e.leaf_targets[v]] = true;
          switch (e.aggregate) {
            case Aggregate::kSum: case Aggregate::kAverage: a += w; break;
            case Aggregate::kMin: a = std::min(a, w); break;
            case Aggregate::kMax: a = std::max(a, w); break;
          }
        }
      }
      if (e.aggregate == Aggregate::kAverage && !e.roots.empty())
        for (int64_t k = 0; k < nt; ++k) acc[k] /= static_cast<double>(e.roots.size());
      const bool min_max = e.aggregate == Aggregate::kMin || e.aggregate == Aggregate::kMax;
      for (int64_t k = 0; k < nt; ++k) {
        if (min_max && e.unvoted_zero && !voted[k]) acc[k] = 0;
        else if (!e.base_values.empty()) acc[k] += e.base_values[k];
      }
    }
  });
  if (cyclic.load()) return ctx.error("a tree does not end in a leaf (its nodes form a cycle)");
  return Status::Ok();
}

// TreeEnsemble 5: Y in X's dtype.
Status run_ensemble(KernelContext& ctx, const Ensemble& e, const CompiledForest* fast) {
  if (ctx.input(0).rank() != 2) return ctx.error("X must be [N, F]");
  int64_t rows = 0;
  std::vector<double> out;
  KILN_RETURN_IF_ERROR(ensemble_scores(ctx, e, fast, &rows, out));
  for (int64_t r = 0; r < rows; ++r) post_transform(e.post_transform, out.data() + r * e.n_targets, e.n_targets);
  Tensor& y = ctx.output(0, ctx.input(0).dtype(), {rows, e.n_targets});
  visit_numeric_f16(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t i = 0; i < out.size(); ++i) y.data<T>()[i] = from_double<T>(out[i]);
  });
  return Status::Ok();
}

Expected<KernelPtr> create_tree_ensemble(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(Ensemble e, ops::parse_tree_ensemble(n));
  std::shared_ptr<const CompiledForest> fast = CompiledForest::compile(e);
  return make_kernel([e = std::move(e), fast](KernelContext& ctx) { return run_ensemble(ctx, e, fast.get()); });
}

// TreeEnsembleRegressor 1/3: Y float [N, n_targets].
Expected<KernelPtr> create_tree_regressor(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(Ensemble e, ops::parse_tree_ensemble_regressor(n));
  std::shared_ptr<const CompiledForest> fast = CompiledForest::compile(e);
  return make_kernel([e = std::move(e), fast](KernelContext& ctx) -> Status {
    int64_t rows = 0;
    std::vector<double> out;
    KILN_RETURN_IF_ERROR(ensemble_scores(ctx, e, fast.get(), &rows, out));
    write_regression(ctx, e.post_transform, out, rows, e.n_targets);
    return Status::Ok();
  });
}

}  // namespace

void write_class_row(const std::vector<int64_t>& labels_int, const std::vector<std::string>& labels_str,
                     const double* scores, int64_t n, int64_t r, Tensor& y, Tensor& z) {
  int64_t best = 0;
  for (int64_t k = 1; k < n; ++k)
    if (scores[k] > scores[best]) best = k;
  if (!labels_str.empty()) y.data<std::string>()[r] = best < static_cast<int64_t>(labels_str.size()) ? labels_str[best] : "";
  else y.data<int64_t>()[r] = best < static_cast<int64_t>(labels_int.size()) ? labels_int[best] : 0;
  for (int64_t k = 0; k < n; ++k) z.data<float>()[r * n + k] = static_cast<float>(scores[k]);
}

Tensor& write_regression(KernelContext& ctx, ops::TreeEnsembleParams::Post post, std::vector<double>& scores,
                         int64_t rows, int64_t n) {
  Tensor& y = ctx.output(0, DataType::kFloat32, {rows, n});
  float* out = y.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double* v = scores.data() + r * n;
    post_transform(post, v, n);
    for (int64_t k = 0; k < n; ++k) out[r * n + k] = static_cast<float>(v[k]);
  }
  return y;
}

void binary_scores(double s, bool one_minus, double* two) {
  two[0] = one_minus ? 1 - s : -s;
  two[1] = s;
}

namespace {

// TreeEnsembleClassifier 1/3: Y the labels [N], Z float [N, classes].
Expected<KernelPtr> create_tree_classifier(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::TreeEnsembleClassifierParams p, ops::parse_tree_ensemble_classifier(n));
  std::shared_ptr<const CompiledForest> fast = CompiledForest::compile(p.ensemble);
  return make_kernel([p = std::move(p), fast](KernelContext& ctx) -> Status {
    const Ensemble& e = p.ensemble;
    const int64_t nt = e.n_targets;
    int64_t rows = 0;
    std::vector<double> out;
    KILN_RETURN_IF_ERROR(ensemble_scores(ctx, e, fast.get(), &rows, out));
    Tensor& y = ctx.output(0, p.string_labels() ? DataType::kString : DataType::kInt64, {rows});
    Tensor& z = ctx.output(1, DataType::kFloat32, {rows, nt});
    for (int64_t r = 0; r < rows; ++r) {
      double* v = out.data() + r * nt;
      if (p.binary) binary_scores(v[0], p.one_minus, v);
      post_transform(e.post_transform, v, nt);
      write_class_row(p.labels_int, p.labels_str, v, nt, r, y, z);
    }
    return Status::Ok();
  });
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
  r.add({"TreeEnsembleClassifier", kMl, 1, 1 << 30, "cpu.ml.TreeEnsembleClassifier.any", ml_input,
         create_tree_classifier});
  r.add({"TreeEnsembleRegressor", kMl, 1, 1 << 30, "cpu.ml.TreeEnsembleRegressor.any", ml_input,
         create_tree_regressor});
  register_ml_linear(r);
  register_ml_svm(r);
}

}  // namespace kiln::cpu
