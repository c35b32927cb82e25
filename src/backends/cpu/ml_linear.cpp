// backends/cpu/ml_linear.cpp — the ai.onnx.ml ops of scikit-learn's linear models and preprocessing on
// the CPU: LinearClassifier, LinearRegressor, Scaler, Normalizer, Imputer, OneHotEncoder,
// FeatureVectorizer, CategoryMapper. Each reads its ops::parse_<op> struct once at creation; X is
// [N, F] (or one row [F]) of float, double, int64 or int32 unless its section says otherwise.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "backends/cpu/ml_common.h"
#include "backends/cpu/numeric.h"

namespace kiln::cpu {
namespace {

constexpr const char* kMl = "ai.onnx.ml";
using Post = ops::TreeEnsembleParams::Post;

// out[r, k] = sum_f x[r, f] * w[k, f] + b[k] for k < outs.
void linear_scores(const std::vector<double>& xs, int64_t rows, int64_t feats, const std::vector<double>& w,
                   const std::vector<double>& b, int64_t outs, std::vector<double>& out) {
  out.assign(static_cast<size_t>(rows * outs), 0.0);
  parallel_for(rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t k = 0; k < outs; ++k) {
        double s = b.empty() ? 0.0 : b[k];
        for (int64_t f = 0; f < feats; ++f) s += xs[r * feats + f] * w[k * feats + f];
        out[r * outs + k] = s;
      }
  });
}

// ---------------------------------------------------------------- LinearClassifier
// Y the labels [N], Z float [N, labels]. One coefficient row for two labels gives s, the second label's
// score: Z is [1 - s, s] under NONE, else the post transform of [-s, s]; the label is the second when
// s > 0 (as onnxruntime does).
Expected<KernelPtr> create_linear_classifier(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::LinearClassifierParams p, ops::parse_linear_classifier(n));
  return make_kernel([p = std::move(p)](KernelContext& ctx) -> Status {
    std::vector<double> xs, scores;
    int64_t rows = 0, feats = 0;
    KILN_RETURN_IF_ERROR(rows_of(ctx, xs, &rows, &feats));
    if (static_cast<int64_t>(p.coefficients.size()) != p.classes * feats)
      return ctx.error(std::to_string(p.coefficients.size()) + " coefficients for " + std::to_string(p.classes) +
                       " classes of " + std::to_string(feats) + " features");
    linear_scores(xs, rows, feats, p.coefficients, p.intercepts, p.classes, scores);
    const int64_t labels = static_cast<int64_t>(p.string_labels() ? p.labels_str.size() : p.labels_int.size());
    Tensor& y = ctx.output(0, p.string_labels() ? DataType::kString : DataType::kInt64, {rows});
    Tensor& z = ctx.output(1, DataType::kFloat32, {rows, labels});
    const bool binary = p.classes == 1 && labels == 2;
    for (int64_t r = 0; r < rows; ++r) {
      double* v = scores.data() + r * p.classes;
      if (!binary) {
        post_transform(p.post_transform, v, p.classes);
        write_class_row(p.labels_int, p.labels_str, v, p.classes, r, y, z);
        continue;
      }
      const double s = v[0];
      double two[2];
      binary_scores(s, p.post_transform == Post::kNone, two);
      post_transform(p.post_transform, two, 2);
      const size_t at = s > 0 ? 1 : 0;
      if (p.string_labels()) y.data<std::string>()[r] = p.labels_str[at];
      else y.data<int64_t>()[r] = p.labels_int[at];
      for (int k = 0; k < 2; ++k) z.data<float>()[r * 2 + k] = static_cast<float>(two[k]);
    }
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- LinearRegressor
// Y float [N, targets], then the post transform per row.
Expected<KernelPtr> create_linear_regressor(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::LinearRegressorParams p, ops::parse_linear_regressor(n));
  return make_kernel([p = std::move(p)](KernelContext& ctx) -> Status {
    std::vector<double> xs, out;
    int64_t rows = 0, feats = 0;
    KILN_RETURN_IF_ERROR(rows_of(ctx, xs, &rows, &feats));
    if (static_cast<int64_t>(p.coefficients.size()) != p.targets * feats)
      return ctx.error(std::to_string(p.coefficients.size()) + " coefficients for " + std::to_string(p.targets) +
                       " targets of " + std::to_string(feats) + " features");
    linear_scores(xs, rows, feats, p.coefficients, p.intercepts, p.targets, out);
    write_regression(ctx, p.post_transform, out, rows, p.targets);
    return Status::Ok();
  });
}

// One value for every feature, or one per feature: the value of feature f.
double per_feature(const std::vector<double>& v, int64_t f) { return v.size() == 1 ? v[0] : v[f]; }

bool fits_features(size_t n, int64_t feats) { return n == 1 || static_cast<int64_t>(n) == feats; }

// ---------------------------------------------------------------- Scaler
// Y float = (X - offset) * scale, per feature of the last axis.
Expected<KernelPtr> create_scaler(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::ScalerParams p, ops::parse_scaler(n));
  return make_kernel([p = std::move(p)](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    std::vector<double> xs;
    if (!read_reals(x, xs)) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
    const int64_t feats = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
    if (!fits_features(p.offset.size(), feats) || !fits_features(p.scale.size(), feats))
      return ctx.error("offset and scale must hold one value or one per feature (" + std::to_string(feats) + ")");
    Tensor& y = ctx.output(0, DataType::kFloat32, x.shape());
    for (size_t i = 0; i < xs.size(); ++i) {
      const int64_t f = static_cast<int64_t>(i) % feats;
      y.data<float>()[i] = static_cast<float>((xs[i] - per_feature(p.offset, f)) * per_feature(p.scale, f));
    }
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- Normalizer
// Y float: each row divided by its largest value (MAX), its L1 or its L2 norm; a zero divisor gives a
// row of zeros (as onnxruntime does).
Expected<KernelPtr> create_normalizer(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::NormalizerParams p, ops::parse_normalizer(n));
  return make_kernel([p](KernelContext& ctx) -> Status {
    std::vector<double> xs;
    int64_t rows = 0, feats = 0;
    KILN_RETURN_IF_ERROR(rows_of(ctx, xs, &rows, &feats));
    Tensor& y = ctx.output(0, DataType::kFloat32, ctx.input(0).shape());
    for (int64_t r = 0; r < rows; ++r) {
      const double* v = xs.data() + r * feats;
      double d = 0;
      switch (p.norm) {
        case ops::NormalizerParams::Norm::kMax:
          d = feats > 0 ? *std::max_element(v, v + feats) : 0;
          break;
        case ops::NormalizerParams::Norm::kL1:
          for (int64_t f = 0; f < feats; ++f) d += std::fabs(v[f]);
          break;
        case ops::NormalizerParams::Norm::kL2:
          for (int64_t f = 0; f < feats; ++f) d += v[f] * v[f];
          d = std::sqrt(d);
          break;
      }
      for (int64_t f = 0; f < feats; ++f) y.data<float>()[r * feats + f] = d == 0 ? 0.0f : static_cast<float>(v[f] / d);
    }
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- Imputer
// Y = X (float or int64) with the replaced value (NaN matches NaN) swapped for the feature's imputed value.
Expected<KernelPtr> create_imputer(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::ImputerParams p, ops::parse_imputer(n));
  return make_kernel([p = std::move(p)](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t feats = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
    const size_t values = p.ints ? p.int64s.size() : p.floats.size();
    if (!fits_features(values, feats))
      return ctx.error("the imputed values must be one value or one per feature (" + std::to_string(feats) + ")");
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    if (x.dtype() == DataType::kInt64 && p.ints) {
      const int64_t* a = x.data<int64_t>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t f = i % feats;
        y.data<int64_t>()[i] = a[i] == p.replaced_int ? p.int64s[values == 1 ? 0 : f] : a[i];
      }
      return Status::Ok();
    }
    if (x.dtype() == DataType::kFloat32 && !p.ints) {
      const float* a = x.data<float>();
      const float replaced = static_cast<float>(p.replaced_float);
      const bool nan = std::isnan(replaced);
      for (int64_t i = 0; i < x.numel(); ++i) {
        const bool hit = nan ? std::isnan(a[i]) : a[i] == replaced;
        y.data<float>()[i] = hit ? static_cast<float>(per_feature(p.floats, i % feats)) : a[i];
      }
      return Status::Ok();
    }
    return ctx.error(std::string("X is ") + dtype_name(x.dtype()) +
                     ", but the imputed values are " + (p.ints ? "int64" : "float"));
  });
}

// ---------------------------------------------------------------- OneHotEncoder
// Y float [*X.shape, categories]: 1 at X's category. Numbers match cats_int64s (as int64), strings
// cats_strings; a value of no category gives zeros, or an error where zeros = 0.
Expected<KernelPtr> create_one_hot_encoder(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::OneHotEncoderParams p, ops::parse_one_hot_encoder(n));
  std::unordered_map<int64_t, int64_t> ints;
  std::unordered_map<std::string, int64_t> strings;
  for (size_t i = 0; i < p.cats_int.size(); ++i) ints.emplace(p.cats_int[i], static_cast<int64_t>(i));
  for (size_t i = 0; i < p.cats_str.size(); ++i) strings.emplace(p.cats_str[i], static_cast<int64_t>(i));
  return make_kernel([ints = std::move(ints), strings = std::move(strings), cats = p.size(),
                      zeros = p.zeros](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const bool is_string = x.dtype() == DataType::kString;
    if (is_string == strings.empty())
      return ctx.error(std::string("X is ") + dtype_name(x.dtype()) + ", but the categories are " +
                       (strings.empty() ? "int64s" : "strings"));
    std::vector<double> xs;
    if (!is_string && !read_reals(x, xs)) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
    Shape ys = x.shape();
    ys.push_back(cats);
    Tensor& y = ctx.output(0, DataType::kFloat32, ys);
    float* out = y.data<float>();
    std::fill(out, out + y.numel(), 0.0f);
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t at = -1;
      if (is_string) {
        const auto it = strings.find(x.data<std::string>()[i]);
        if (it != strings.end()) at = it->second;
      } else if (std::isfinite(xs[i])) {
        const auto it = ints.find(static_cast<int64_t>(xs[i]));
        if (it != ints.end()) at = it->second;
      }
      if (at >= 0) out[i * cats + at] = 1.0f;
      else if (!zeros) return ctx.error("value " + std::to_string(i) + " of X is none of the categories (zeros = 0)");
    }
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- FeatureVectorizer
// Y float [N, total]: input i's row r, its numel / N values (N the first axis, 1 for a 1-D input), cut
// or zero-padded to dims[i] values, at the columns after the inputs before it (as onnxruntime does).
Expected<KernelPtr> create_feature_vectorizer(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::FeatureVectorizerParams p, ops::parse_feature_vectorizer(n));
  return make_kernel([p = std::move(p)](KernelContext& ctx) -> Status {
    auto rows_in = [&](int i) { return ctx.input(i).rank() == 1 ? int64_t{1} : ctx.input(i).dim(0); };
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.has_input(i) || ctx.input(i).rank() == 0)
        return ctx.error("input " + std::to_string(i) + " must be a tensor of rank >= 1");
      if (rows_in(i) != rows_in(0))
        return ctx.error("input " + std::to_string(i) + " has " + std::to_string(rows_in(i)) + " rows, input 0 " +
                         std::to_string(rows_in(0)));
    }
    const int64_t rows = rows_in(0);
    int64_t size = 0;
    if (__builtin_mul_overflow(rows, p.total, &size)) return ctx.error("the output's size overflows int64");
    Tensor& y = ctx.output(0, DataType::kFloat32, {rows, p.total});
    float* out = y.data<float>();
    std::fill(out, out + size, 0.0f);
    int64_t column = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      std::vector<double> xs;
      if (!read_reals(ctx.input(i), xs))
        return ctx.error("input " + std::to_string(i) + " is " + dtype_name(ctx.input(i).dtype()) +
                         ", not float, double, int64 or int32");
      const int64_t stride = rows == 0 ? 0 : static_cast<int64_t>(xs.size()) / rows;
      const int64_t take = std::min(stride, p.dims[i]);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < take; ++j) out[r * p.total + column + j] = static_cast<float>(xs[r * stride + j]);
      column += p.dims[i];
    }
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- CategoryMapper
// Y: X's shape, each string its int64 (or each int64 its string), else the default.
Expected<KernelPtr> create_category_mapper(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::CategoryMapperParams p, ops::parse_category_mapper(n));
  std::unordered_map<std::string, int64_t> to_int;
  std::unordered_map<int64_t, std::string> to_string;
  for (size_t i = 0; i < p.ints.size(); ++i) {  // a repeated key keeps its last partner (as onnxruntime does)
    to_int[p.strings[i]] = p.ints[i];
    to_string[p.ints[i]] = p.strings[i];
  }
  return make_kernel([to_int = std::move(to_int), to_string = std::move(to_string),
                      p = std::move(p)](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.dtype() == DataType::kString) {
      Tensor& y = ctx.output(0, DataType::kInt64, x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) {
        const auto it = to_int.find(x.data<std::string>()[i]);
        y.data<int64_t>()[i] = it == to_int.end() ? p.default_int : it->second;
      }
      return Status::Ok();
    }
    if (x.dtype() != DataType::kInt64) return ctx.error(std::string("X is ") + dtype_name(x.dtype()) + ", not string or int64");
    Tensor& y = ctx.output(0, DataType::kString, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const auto it = to_string.find(x.data<int64_t>()[i]);
      y.data<std::string>()[i] = it == to_string.end() ? p.default_string : it->second;
    }
    return Status::Ok();
  });
}

}  // namespace

Status rows_of(KernelContext& ctx, std::vector<double>& xs, int64_t* rows, int64_t* feats) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 1 && x.rank() != 2) return ctx.error("X must be [N, F] or [F]");
  if (!read_reals(x, xs)) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
  *rows = x.rank() == 2 ? x.dim(0) : 1;
  *feats = x.dim(x.rank() - 1);
  return Status::Ok();
}

std::string ml_input(const ir::Node& n) {
  return require_dtypes(n, 0, {DataType::kFloat32, DataType::kFloat64, DataType::kInt64, DataType::kInt32});
}

void register_ml_linear(KernelRegistry& r) {
  r.add({"LinearClassifier", kMl, 1, 1 << 30, "cpu.ml.LinearClassifier.any", ml_input, create_linear_classifier});
  r.add({"LinearRegressor", kMl, 1, 1 << 30, "cpu.ml.LinearRegressor.any", ml_input, create_linear_regressor});
  r.add({"Scaler", kMl, 1, 1 << 30, "cpu.ml.Scaler.any", ml_input, create_scaler});
  r.add({"Normalizer", kMl, 1, 1 << 30, "cpu.ml.Normalizer.any", ml_input, create_normalizer});
  r.add({"Imputer", kMl, 1, 1 << 30, "cpu.ml.Imputer.any",
         [](const ir::Node& n) { return require_dtypes(n, 0, {DataType::kFloat32, DataType::kInt64}); },
         create_imputer});
  r.add({"OneHotEncoder", kMl, 1, 1 << 30, "cpu.ml.OneHotEncoder.any", nullptr, create_one_hot_encoder});
  r.add({"FeatureVectorizer", kMl, 1, 1 << 30, "cpu.ml.FeatureVectorizer.any", ml_input, create_feature_vectorizer});
  r.add({"CategoryMapper", kMl, 1, 1 << 30, "cpu.ml.CategoryMapper.any",
         [](const ir::Node& n) { return require_dtypes(n, 0, {DataType::kString, DataType::kInt64}); },
         create_category_mapper});
}

}  // namespace kiln::cpu
