// backends/cpu/ml_svm.cpp — the ai.onnx.ml support vector machines on the CPU: SVMRegressor and
// SVMClassifier, as scikit-learn's SVR, NuSVR, OneClassSVM and SVC export them (skl2onnx). The
// attributes are read and checked once at creation (ops::parse_svm_*); a run computes the kernel of
// every row of X against every support vector in double, then the pairwise decision values, votes,
// and (with prob_a / prob_b) Platt's probabilities coupled into one probability per class.
//
// The output layouts follow onnxruntime, which the ONNX spec leaves open; each surprising case is
// named where it is handled.
#include <algorithm>
#include <cmath>

#include "backends/cpu/ml_common.h"

namespace kiln::cpu {
namespace {

constexpr const char* kMl = "ai.onnx.ml";
using Post = ops::TreeEnsembleParams::Post;
using SvmKernel = ops::SvmKernel;

// K(x, v) over `features` values.
double kernel_value(const SvmKernel& k, const double* x, const double* v, int64_t features) {
  if (k.type == SvmKernel::Type::kRbf) {
    double d2 = 0;
    for (int64_t f = 0; f < features; ++f) d2 += (x[f] - v[f]) * (x[f] - v[f]);
    return std::exp(-k.gamma * d2);
  }
  double dot = 0;
  for (int64_t f = 0; f < features; ++f) dot += x[f] * v[f];
  switch (k.type) {
    case SvmKernel::Type::kPoly: return std::pow(k.gamma * dot + k.coef0, k.degree);
    case SvmKernel::Type::kSigmoid: return std::tanh(k.gamma * dot + k.coef0);
    default: return dot;
  }
}

// out[r, v] = K(X[r], V[v]) for the rows of X and the `count` rows of V: [rows, count].
void kernel_matrix(const SvmKernel& k, const std::vector<double>& xs, int64_t rows, const std::vector<double>& vs,
                   int64_t count, int64_t features, std::vector<double>& out) {
  out.assign(static_cast<size_t>(rows * count), 0.0);
  parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t v = 0; v < count; ++v)
        out[r * count + v] = kernel_value(k, xs.data() + r * features, vs.data() + v * features, features);
  });
}

// X's rows, checked against the model's feature count.
Status svm_rows(KernelContext& ctx, int64_t features, std::vector<double>& xs, int64_t* rows) {
  int64_t feats = 0;
  KILN_RETURN_IF_ERROR(rows_of(ctx, xs, rows, &feats));
  if (feats != features)
    return ctx.error("X has " + std::to_string(feats) + " features, the model " + std::to_string(features));
  return Status::Ok();
}

// ---------------------------------------------------------------- SVMRegressor
// Y float [N, 1]. post_transform is not applied: onnxruntime returns the raw value whatever it says.
Expected<KernelPtr> create_svm_regressor(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::SvmRegressorParams p, ops::parse_svm_regressor(n));
  return make_kernel([p = std::move(p)](KernelContext& ctx) -> Status {
    std::vector<double> xs, k;
    int64_t rows = 0;
    KILN_RETURN_IF_ERROR(svm_rows(ctx, p.features, xs, &rows));
    std::vector<double> out(static_cast<size_t>(rows), p.rho);
    if (p.n_supports == 0) {  // linear: x·coefficients, the kernel unused
      kernel_matrix(SvmKernel{}, xs, rows, p.coefficients, 1, p.features, k);
      for (int64_t r = 0; r < rows; ++r) out[r] += k[r];
    } else {
      kernel_matrix(p.kernel, xs, rows, p.support_vectors, p.n_supports, p.features, k);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t v = 0; v < p.n_supports; ++v) out[r] += p.coefficients[v] * k[r * p.n_supports + v];
    }
    if (p.one_class)
      for (double& v : out) v = v > 0 ? 1.0 : -1.0;
    write_regression(ctx, Post::kNone, out, rows, 1);
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- SVMClassifier

// Platt's estimate that a pair's first class wins, from its decision value d: 1 / (1 + exp(A d + B)),
// written so that exp never overflows, and kept inside [1e-7, 1 - 1e-7] as libsvm does.
double platt(double d, double a, double b) {
  const double f = d * a + b;
  const double p = f >= 0 ? std::exp(-f) / (1 + std::exp(-f)) : 1 / (1 + std::exp(f));
  return std::min(std::max(p, 1e-7), 1 - 1e-7);
}

// Pairwise coupling (Wu, Lin and Weng 2004, their second method, which libsvm and onnxruntime use):
// the class probabilities p (summing to 1) that minimize sum_i sum_{j != i} (r[j][i] p_i - r[i][j] p_j)^2,
// where r[i][j] estimates P(i | i or j). Fixed-point sweeps over the classes until the optimality
// conditions hold to 0.005 / c, at most max(100, c) sweeps. r is [c, c]; p gets c values.
// Where a sweep's error lands within rounding of that bound (1 row in 15,000 random ones, 6 classes),
// onnxruntime's float32 sums may stop one sweep apart from these double ones, and the probabilities
// then differ by up to ~5e-4; the label, from the votes, does not change.
void couple(const std::vector<double>& r, int64_t c, double* p) {
  std::vector<double> q(static_cast<size_t>(c * c)), qp(static_cast<size_t>(c));
  for (int64_t t = 0; t < c; ++t) {
    p[t] = 1.0 / static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j) {
      if (j == t) continue;
      q[t * c + t] += r[j * c + t] * r[j * c + t];
      q[t * c + j] = -r[j * c + t] * r[t * c + j];
    }
  }
  const int64_t sweeps = std::max<int64_t>(100, c);
  const double eps = 0.005 / static_cast<double>(c);
  for (int64_t it = 0; it < sweeps; ++it) {
    double pqp = 0;
    for (int64_t t = 0; t < c; ++t) {
      qp[t] = 0;
      for (int64_t j = 0; j < c; ++j) qp[t] += q[t * c + j] * p[j];
      pqp += p[t] * qp[t];
    }
    double worst = 0;
    for (int64_t t = 0; t < c; ++t) worst = std::max(worst, std::fabs(qp[t] - pqp));
    if (worst < eps) break;
    for (int64_t t = 0; t < c; ++t) {
      const double qtt = q[t * c + t], diff = (pqp - qp[t]) / qtt;
      p[t] += diff;
      pqp = (pqp + diff * (diff * qtt + 2 * qp[t])) / ((1 + diff) * (1 + diff));
      for (int64_t j = 0; j < c; ++j) {
        qp[j] = (qp[j] + diff * q[t * c + j]) / (1 + diff);
        p[j] /= 1 + diff;
      }
    }
  }
}

void set_label(const ops::SvmClassifierParams& p, int64_t r, int64_t cls, Tensor& y) {
  if (p.string_labels()) y.data<std::string>()[r] = p.labels_str[cls];
  else y.data<int64_t>()[r] = p.labels_int[cls];
}

// One row of the one-vs-one (SVC) form: `kr` the row's kernel values against every support vector;
// writes the label and Z's score_count() floats.
void svc_row(const ops::SvmClassifierParams& p, const double* kr, int64_t r, Tensor& y, float* z) {
  const int64_t c = p.classes(), nv = p.vectors;
  std::vector<double> dec, votes(static_cast<size_t>(c), 0.0);
  // The pair (i, j): class i's vectors weighted by coefficient row j - 1, class j's by row i.
  auto part = [&](int64_t row, int64_t cls) {
    double s = 0;
    for (int64_t v = p.class_start[cls]; v < p.class_start[cls] + p.vectors_per_class[cls]; ++v)
      s += p.coefficients[row * nv + v] * kr[v];
    return s;
  };
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = i + 1; j < c; ++j) {
      const double d = part(j - 1, i) + part(i, j) + p.rho[dec.size()];
      dec.push_back(d);
      ++votes[d > 0 ? i : j];
    }
  set_label(p, r, std::max_element(votes.begin(), votes.end()) - votes.begin(), y);  // the first most voted
  std::vector<double> scores;
  if (p.probabilities()) {
    std::vector<double> pair(static_cast<size_t>(c * c), 0.0);
    size_t k = 0;
    for (int64_t i = 0; i < c; ++i)
      for (int64_t j = i + 1; j < c; ++j, ++k) {
        pair[i * c + j] = platt(dec[k], p.prob_a[k], p.prob_b[k]);
        pair[j * c + i] = 1 - pair[i * c + j];
      }
    scores.resize(static_cast<size_t>(c));
    couple(pair, c, scores.data());  // even for two classes (so not exactly Platt's [p, 1 - p])
    post_transform(p.post_transform, scores.data(), c);
  } else if (c == 2) {
    // onnxruntime writes the one decision value d as [-d, d], or as [1 - d, d] under any post_transform
    // (which it then does not apply; PROBIT is refused at creation, onnxruntime leaving a score unset).
    scores.resize(2);
    binary_scores(dec[0], p.post_transform != Post::kNone, scores.data());
  } else {
    scores = dec;
    post_transform(p.post_transform, scores.data(), static_cast<int64_t>(scores.size()));
  }
  for (size_t s = 0; s < scores.size(); ++s) z[s] = static_cast<float>(scores[s]);
}

// One row of the linear form: the scores x·w_j + rho[0]. The label is the first highest score's, except
// that for two classes where that is the first, onnxruntime picks the second class when the first's
// score is >= 0.5 (every coefficient >= 0) or > 0 (otherwise); the scores are then post-transformed.
void linear_row(const ops::SvmClassifierParams& p, const double* scores_in, int64_t r, Tensor& y, float* z) {
  const int64_t c = p.classes();
  std::vector<double> scores(scores_in, scores_in + c);
  for (double& s : scores) s += p.rho[0];
  int64_t best = std::max_element(scores.begin(), scores.end()) - scores.begin();
  if (c == 2 && best == 0 && (p.all_positive ? scores[0] >= 0.5 : scores[0] > 0)) best = 1;
  set_label(p, r, best, y);
  post_transform(p.post_transform, scores.data(), c);
  for (int64_t s = 0; s < c; ++s) z[s] = static_cast<float>(scores[s]);
}

// Y the labels [N]; Z float [N, score_count()]: the class probabilities, the pairwise decision values
// (two classes: the binary form of svc_row), or the linear scores.
Expected<KernelPtr> create_svm_classifier(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::SvmClassifierParams p, ops::parse_svm_classifier(n));
  if (p.svc() && !p.probabilities() && p.classes() == 2 && p.post_transform == Post::kProbit)
    return unsupported(n.describe() + ": post_transform PROBIT on a two-class SVM without prob_a / prob_b " +
                       "(onnxruntime leaves its second score undefined); use NONE");
  return make_kernel([p = std::move(p)](KernelContext& ctx) -> Status {
    std::vector<double> xs, k;
    int64_t rows = 0;
    KILN_RETURN_IF_ERROR(svm_rows(ctx, p.features, xs, &rows));
    const int64_t width = p.score_count();
    Tensor& y = ctx.output(0, p.string_labels() ? DataType::kString : DataType::kInt64, {rows});
    Tensor& z = ctx.output(1, DataType::kFloat32, {rows, width});
    if (p.svc()) kernel_matrix(p.kernel, xs, rows, p.support_vectors, p.vectors, p.features, k);
    else kernel_matrix(SvmKernel{}, xs, rows, p.coefficients, p.classes(), p.features, k);
    const int64_t per_row = p.svc() ? p.vectors : p.classes();
    parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        if (p.svc()) svc_row(p, k.data() + r * per_row, r, y, z.data<float>() + r * width);
        else linear_row(p, k.data() + r * per_row, r, y, z.data<float>() + r * width);
      }
    });
    return Status::Ok();
  });
}

}  // namespace

void register_ml_svm(KernelRegistry& r) {
  r.add({"SVMClassifier", kMl, 1, 1 << 30, "cpu.ml.SVMClassifier.any", ml_input, create_svm_classifier});
  r.add({"SVMRegressor", kMl, 1, 1 << 30, "cpu.ml.SVMRegressor.any", ml_input, create_svm_regressor});
}

}  // namespace kiln::cpu
