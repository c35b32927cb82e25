// Unit tests of the ai.onnx.ml support vector machines (SVMRegressor, SVMClassifier) against naive
// references; tests/python/test_ml_svm.py compares scikit-learn's exported models with onnxruntime.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "ops/op_table.h"
#include "test_reduce_helpers.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

struct SvmNode : OneNode {
  SvmNode(const std::string& op, const std::vector<float>& x, int64_t features)
      : OneNode(op, 1, {f32({static_cast<int64_t>(x.size()) / features, features}, x)}, op == "SVMClassifier" ? 2 : 1) {
    node->domain = "ai.onnx.ml";
  }
};

double rbf(const float* x, const std::vector<float>& v, int64_t at, int64_t f, double gamma) {
  double d2 = 0;
  for (int64_t i = 0; i < f; ++i) d2 += (x[i] - v[at * f + i]) * (x[i] - v[at * f + i]);
  return std::exp(-gamma * d2);
}

// Two features, four support vectors, three classes of 1, 2 and 1 vectors.
const std::vector<float> kVectors = {0.5f, 1, -1, 0.25f, 2, -0.5f, 0, 0};
const std::vector<float> kCoef = {0.7f, -0.3f, 0.4f, -0.9f, 0.2f, 1.1f, -0.6f, 0.5f};  // [2, 4]
const std::vector<float> kRho = {0.1f, -0.2f, 0.3f};

SvmNode& three_classes(SvmNode& n) {
  n.floats("support_vectors", kVectors).floats("coefficients", kCoef).floats("rho", kRho)
      .floats("kernel_params", {0.5f, 0, 3}).s("kernel_type", "RBF").ints("vectors_per_class", {1, 2, 1})
      .ints("classlabels_ints", {10, 20, 30});
  return n;
}

}  // namespace

TEST(MlSvmRegressor, KernelsLinearAndOneClass) {
  const auto x = random_floats(3 * 2, 7);
  const std::vector<float> sv = {0.5f, 1, -1, 0.25f}, coef = {0.75f, -1.5f};
  for (const char* kt : {"LINEAR", "POLY", "RBF", "SIGMOID"}) {
    SvmNode n("SVMRegressor", x, 2);
    n.floats("support_vectors", sv).floats("coefficients", coef).floats("rho", {0.25f})
        .floats("kernel_params", {0.5f, 0.125f, 3}).s("kernel_type", kt).i("n_supports", 2);
    Tensor y = n.out();
    ASSERT_EQ(y.shape(), (Shape{3, 1})) << kt;
    for (int r = 0; r < 3; ++r) {
      double s = 0.25;
      for (int v = 0; v < 2; ++v) {
        const double dot = x[r * 2] * sv[v * 2] + x[r * 2 + 1] * sv[v * 2 + 1];
        const std::string k = kt;
        const double kv = k == "LINEAR" ? dot : k == "POLY" ? std::pow(0.5 * dot + 0.125, 3)
                        : k == "RBF" ? rbf(&x[r * 2], sv, v, 2, 0.5) : std::tanh(0.5 * dot + 0.125);
        s += coef[v] * kv;
      }
      EXPECT_NEAR(y.data<float>()[r], s, 1e-5) << kt << " row " << r;
    }
  }
  // No support vectors: x·coefficients + rho whatever the kernel; one_class gives ±1.
  SvmNode lin("SVMRegressor", {1, 2, -3, 0.5f}, 2);
  lin.floats("coefficients", {0.5f, -1}).floats("rho", {0.25f}).s("kernel_type", "RBF");
  EXPECT_EQ(values<float>(lin.out()), (std::vector<float>{-1.25f, -1.75f}));
  SvmNode one("SVMRegressor", {1, 2, -3, 0.5f, 0, 0}, 2);
  one.floats("coefficients", {0.5f, -1}).floats("rho", {0}).i("one_class", 1);
  EXPECT_EQ(values<float>(one.out()), (std::vector<float>{-1, -1, -1}));  // a zero sum is -1
}

TEST(MlSvmRegressor, HostileAttributesAreErrors) {
  auto make = [](int64_t n_supports, std::vector<float> coef, std::vector<float> sv) {
    auto n = std::make_unique<SvmNode>("SVMRegressor", std::vector<float>{1, 2}, 2);
    n->floats("support_vectors", std::move(sv)).floats("coefficients", std::move(coef)).floats("rho", {0})
        .i("n_supports", n_supports);
    return n;
  };
  EXPECT_TRUE(make(2, {1, 1}, {1, 2, 3, 4})->run().ok());
  EXPECT_FALSE(make(-1, {1}, {1, 2})->run().ok());
  EXPECT_FALSE(make(int64_t{1} << 62, {1, 1}, {1, 2, 3, 4})->run().ok());
  EXPECT_FALSE(make(2, {1, 1}, {1, 2, 3})->run().ok());   // not whole rows
  EXPECT_FALSE(make(2, {1}, {1, 2, 3, 4})->run().ok());   // a coefficient short
  EXPECT_FALSE(make(1, {1}, {1, 2, 3})->run().ok());      // 3 features, X has 2
  auto k = make(2, {1, 1}, {1, 2, 3, 4});
  k->floats("kernel_params", {0.5f, 1});
  auto st = k->run();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().to_string().find("kernel_params"), std::string::npos) << st.status().to_string();
  auto t = make(2, {1, 1}, {1, 2, 3, 4});
  t->s("kernel_type", "CUBIC");
  EXPECT_FALSE(t->run().ok());
}

TEST(MlSvmClassifier, OneVsOneVotesAndDecisionValues) {
  const auto x = random_floats(5 * 2, 3, -2, 2);
  SvmNode n("SVMClassifier", x, 2);
  three_classes(n);
  auto res = n.run();
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  const Tensor& y = (*res)[0].tensor;
  const Tensor& z = (*res)[1].tensor;
  ASSERT_EQ(z.shape(), (Shape{5, 3}));
  const int64_t start[] = {0, 1, 3}, count[] = {1, 2, 1};
  for (int r = 0; r < 5; ++r) {
    double k[4];
    for (int v = 0; v < 4; ++v) k[v] = rbf(&x[r * 2], kVectors, v, 2, 0.5);
    int votes[3] = {0, 0, 0}, pair = 0;
    for (int i = 0; i < 3; ++i)
      for (int j = i + 1; j < 3; ++j, ++pair) {
        double d = kRho[pair];
        for (int64_t v = start[i]; v < start[i] + count[i]; ++v) d += kCoef[(j - 1) * 4 + v] * k[v];
        for (int64_t v = start[j]; v < start[j] + count[j]; ++v) d += kCoef[i * 4 + v] * k[v];
        EXPECT_NEAR(z.data<float>()[r * 3 + pair], d, 1e-5);
        ++votes[d > 0 ? i : j];
      }
    const int64_t best = std::max_element(votes, votes + 3) - votes;
    EXPECT_EQ(y.data<int64_t>()[r], 10 * (best + 1)) << r;
  }
}

TEST(MlSvmClassifier, ProbabilitiesSumToOneAndBinaryForms) {
  const auto x = random_floats(4 * 2, 5, -2, 2);
  SvmNode n("SVMClassifier", x, 2);
  three_classes(n).floats("prob_a", {-1.5f, -2, -0.5f}).floats("prob_b", {0.1f, 0, -0.2f});
  auto res = n.run();
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  const Tensor& z = (*res)[1].tensor;
  ASSERT_EQ(z.shape(), (Shape{4, 3}));
  for (int r = 0; r < 4; ++r) {
    const float* p = z.data<float>() + r * 3;
    EXPECT_NEAR(p[0] + p[1] + p[2], 1, 1e-5);
    for (int c = 0; c < 3; ++c) EXPECT_GT(p[c], 0);
  }
  // Two classes, no probabilities: the decision value d as [-d, d]; d > 0 votes for the first class.
  SvmNode b("SVMClassifier", {0.5f, 1, 3, 3}, 2);
  b.floats("support_vectors", {0.5f, 1, -1, 0.25f}).floats("coefficients", {1, -1}).floats("rho", {-0.5f})
      .s("kernel_type", "RBF").floats("kernel_params", {0.5f, 0, 3}).ints("vectors_per_class", {1, 1})
      .strings("classlabels_strings", {"no", "yes"});
  auto rb = b.run();
  ASSERT_TRUE(rb.ok()) << rb.status().to_string();
  const float first[] = {0.5f, 1};
  const double d0 = 1 - rbf(first, {0.5f, 1, -1, 0.25f}, 1, 2, 0.5) - 0.5;
  EXPECT_NEAR((*rb)[1].tensor.data<float>()[0], -d0, 1e-6);
  EXPECT_NEAR((*rb)[1].tensor.data<float>()[1], d0, 1e-6);
  EXPECT_EQ(values<std::string>((*rb)[0].tensor), (std::vector<std::string>{"no", "yes"}));
  b.s("post_transform", "PROBIT");  // onnxruntime's output is undefined there: refused
  EXPECT_FALSE(b.run().ok());
}

TEST(MlSvmClassifier, LinearFormAndItsBinaryLabelRule) {
  // Coefficients [2, 2] all >= 0: the first class wins a tie or a lead only below 0.5.
  SvmNode n("SVMClassifier", {1, 0, 0, 1, 0.2f, 0.1f, 0, 0}, 2);
  n.floats("coefficients", {0.5f, 0.25f, 0.25f, 0.5f}).floats("rho", {0}).ints("classlabels_ints", {5, 6});
  auto res = n.run();
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  EXPECT_EQ(values<int64_t>((*res)[0].tensor), (std::vector<int64_t>{6, 6, 5, 5}));
  EXPECT_EQ(values<float>((*res)[1].tensor), (std::vector<float>{0.5f, 0.25f, 0.25f, 0.5f, 0.125f, 0.1f, 0, 0}));
}

TEST(MlSvmClassifier, HostileAttributesAreErrors) {
  auto run = [](const std::function<void(SvmNode&)>& edit) {
    SvmNode n("SVMClassifier", {0.5f, 1}, 2);
    three_classes(n);
    edit(n);
    return n.run().ok();
  };
  EXPECT_TRUE(run([](SvmNode&) {}));
  EXPECT_FALSE(run([](SvmNode& n) { n.ints("vectors_per_class", {1, 2}); }));
  EXPECT_FALSE(run([](SvmNode& n) { n.ints("vectors_per_class", {1, -2, 5}); }));
  EXPECT_FALSE(run([](SvmNode& n) { n.ints("vectors_per_class", {1, int64_t{1} << 62, 1}); }));
  EXPECT_FALSE(run([](SvmNode& n) { n.floats("coefficients", {1, 2, 3}); }));
  EXPECT_FALSE(run([](SvmNode& n) { n.floats("rho", {0.5f}); }));
  EXPECT_FALSE(run([](SvmNode& n) { n.floats("prob_a", {1, 2, 3}); }));  // without prob_b
  EXPECT_FALSE(run([](SvmNode& n) { n.ints("classlabels_ints", {1}); }));
  EXPECT_FALSE(run([](SvmNode& n) { n.s("post_transform", "EXP"); }));
  SvmNode wide("SVMClassifier", {0.5f, 1, 2}, 3);  // three features, two in the vectors
  three_classes(wide);
  EXPECT_FALSE(wide.run().ok());
}

TEST(MlSvmShapeInfer, ScoreWidths) {
  auto width = [](std::vector<int64_t> vpc, bool proba, int64_t labels) {
    ir::Graph g;
    auto* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim("N"), 4})));
    auto* y = g.add_value("y");
    auto* z = g.add_value("z");
    ir::Node* n = g.add_node("SVMClassifier", "ai.onnx.ml", {x}, {y, z}, "svm");
    ir::Attribute& l = n->attrs["classlabels_ints"];
    l.kind = ir::Attribute::Kind::kInts;
    for (int64_t i = 0; i < labels; ++i) l.ints.push_back(i);
    if (!vpc.empty()) {
      n->attrs["vectors_per_class"] = l;
      n->attrs["vectors_per_class"].ints = vpc;
    }
    if (proba) {
      n->attrs["prob_a"].kind = ir::Attribute::Kind::kFloats;
      n->attrs["prob_a"].floats = {1};
    }
    EXPECT_TRUE(ops::infer_node(*n).ok());
    EXPECT_EQ(y->type.dtype, DataType::kInt64);
    return z->type.shape.to_string();
  };
  auto shape = [](int64_t w) { return ir::SymShape({ir::Dim("N"), w}).to_string(); };
  EXPECT_EQ(width({1, 1, 1, 1}, false, 4), shape(6));
  EXPECT_EQ(width({1, 1, 1, 1}, true, 4), shape(4));
  EXPECT_EQ(width({1, 1}, false, 2), shape(2));
  EXPECT_EQ(width({}, false, 3), shape(3));
}
