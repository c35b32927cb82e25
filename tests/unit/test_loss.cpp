// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss against naive references.
#include "test_rq_util.h"

using namespace rqtest;

namespace {

struct LossCase {
  Shape shape;  // [N, C, d...]
  std::string reduction = "mean";
  bool weights = false;
  bool has_ii = false;
  int64_t ii = 0;
  DataType dt = DataType::kFloat32;
  DataType label_dt = DataType::kInt64;
};

// Returns (loss, log_prob); log_prob is the input itself for NLL.
std::pair<std::vector<double>, std::vector<double>> reference(const LossCase& k, bool softmax, const std::vector<double>& x,
                                                              const std::vector<double>& labels, const std::vector<double>& w) {
  const int64_t N = k.shape[0], C = k.shape[1];
  int64_t D = 1;
  for (size_t i = 2; i < k.shape.size(); ++i) D *= k.shape[i];
  std::vector<double> lp = x;
  if (softmax)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += std::exp(x[(n * C + c) * D + d]);
        for (int64_t c = 0; c < C; ++c) lp[(n * C + c) * D + d] = x[(n * C + c) * D + d] - std::log(s);
      }
  std::vector<double> loss;
  double total = 0, wsum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t t = static_cast<int64_t>(labels[n * D + d]);
      if (k.has_ii && t == k.ii) { loss.push_back(0); continue; }
      const double wt = w.empty() ? 1 : w[t];
      loss.push_back(-lp[(n * C + t) * D + d] * wt);
      total += loss.back();
      wsum += wt;
    }
  if (k.reduction == "sum") return {{total}, lp};
  if (k.reduction == "mean") return {{total / wsum}, lp};
  return {loss, lp};
}

void check(const LossCase& k, bool softmax) {
  SCOPED_TRACE(std::string(softmax ? "SCE " : "NLL ") + shape_to_string(k.shape) + " " + k.reduction);
  const int64_t C = k.shape[1];
  Tensor x = random(k.dt, k.shape, -3, 2);
  Shape ls = k.shape;
  ls.erase(ls.begin() + 1);
  Tensor labels = random(k.label_dt, ls, 0, static_cast<double>(C - 1));
  // About a quarter of the positions carry the ignore index (which may be out of [0, C)).
  if (k.has_ii)
    for (int64_t i = 0; i < labels.numel(); i += 4) set(labels, i, static_cast<double>(k.ii));
  Tensor w = k.weights ? random(k.dt, {C}, 0.2, 2) : Tensor();
  auto [want, lp] = reference(k, softmax, values(x), values(labels), w.defined() ? values(w) : std::vector<double>{});
  Attrs attrs = {{"reduction", attr_str(k.reduction)}};
  if (k.has_ii) attrs["ignore_index"] = attr_int(k.ii);
  std::vector<Tensor> ins = {x, labels};
  if (w.defined()) ins.push_back(w);
  const bool half = k.dt == DataType::kFloat16;
  const double tol = half ? 3e-3 : 1e-5;
  auto out = run(softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss", 13, ins, attrs, softmax ? 2 : 1);
  expect_close(out[0], k.reduction == "none" ? ls : Shape{}, want, tol, tol);
  if (softmax) expect_close(out[1], k.shape, lp, tol, tol);
}

}  // namespace

TEST(Loss, ReductionsWeightsIgnoreIndex) {
  for (bool softmax : {true, false})
    for (const char* red : {"none", "sum", "mean"})
      for (bool weights : {false, true})
        for (bool ii : {false, true}) {
          LossCase k;
          k.shape = {4, 5};
          k.reduction = red;
          k.weights = weights;
          k.has_ii = ii;
          k.ii = 2;
          check(k, softmax);
        }
}

TEST(Loss, HigherRankAndNegativeIgnoreIndex) {
  for (bool softmax : {true, false}) {
    LossCase k;
    k.shape = {2, 3, 4, 2, 3};
    k.weights = true;
    k.has_ii = true;
    k.ii = -1;
    k.label_dt = DataType::kInt32;
    check(k, softmax);
    k.reduction = "none";
    k.ii = 10;  // beyond C
    check(k, softmax);
  }
}

TEST(Loss, Float16AndDouble) {
  for (DataType dt : {DataType::kFloat16, DataType::kFloat64}) {
    LossCase k;
    k.shape = {3, 4, 5};
    k.dt = dt;
    k.weights = true;
    check(k, true);
    check(k, false);
  }
}

TEST(Loss, OnnxExampleNllNCd1Ii) {
  // NLL, reduction mean, ignore_index 1: position with label 1 is skipped.
  Tensor x = from(DataType::kFloat32, {1, 3, 2}, {-1, -2, -3, -4, -5, -6});
  Tensor t = from(DataType::kInt64, {1, 2}, {1, 2});
  auto y = run("NegativeLogLikelihoodLoss", 13, {x, t}, {{"ignore_index", attr_int(1)}});
  expect_close(y[0], {}, {6});
}

TEST(Loss, ErrorsOnBadLabels) {
  Tensor x = random(DataType::kFloat32, {2, 3});
  EXPECT_FALSE(try_run("NegativeLogLikelihoodLoss", 13, {x, from(DataType::kInt64, {2}, {0, 3})}, {}).ok());
  EXPECT_FALSE(try_run("SoftmaxCrossEntropyLoss", 13, {x, from(DataType::kInt64, {3}, {0, 1, 2})}, {}).ok());
  EXPECT_FALSE(try_run("SoftmaxCrossEntropyLoss", 13, {x, from(DataType::kInt64, {2}, {0, 1}), random(DataType::kFloat32, {2})}, {}).ok());
}
