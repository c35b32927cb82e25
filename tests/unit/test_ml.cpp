// Unit tests of the ai.onnx.ml kernels (ArrayFeatureExtractor, Binarizer, LabelEncoder,
// TreeEnsemble, FeatureVectorizer, CategoryMapper) against naive references and the examples of
// onnx's tests.
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>

#include "ops/op_table.h"
#include "test_reduce_helpers.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

struct MlNode : OneNode {
  MlNode(const std::string& op, int opset, const std::vector<Tensor>& inputs) : OneNode(op, opset, inputs) {
    node->domain = "ai.onnx.ml";
  }
  MlNode& tensor(const std::string& k, Tensor t) {
    ir::Attribute a;
    a.kind = ir::Attribute::Kind::kTensor;
    a.t = std::move(t);
    node->attrs[k] = a;
    return *this;
  }
};

Tensor strs(const Shape& s, const std::vector<std::string>& v) { return make_tensor(DataType::kString, s, v); }
Tensor f64(const Shape& s, const std::vector<double>& v) { return make_tensor(DataType::kFloat64, s, v); }

}  // namespace

// ---- ArrayFeatureExtractor

TEST(MlArrayFeatureExtractor, GathersTheLastAxis) {
  const auto x = random_floats(30, 1);
  const std::vector<int64_t> idx = {4, 0, 4};
  Tensor y = MlNode("ArrayFeatureExtractor", 1, {f32({2, 3, 5}, x), i64({3}, idx)}).out();
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(y.data<float>()[r * 3 + j], x[r * 5 + idx[j]]);
  // onnx's example: [3, 4] with indices [0, 1].
  std::vector<float> ex(12);
  for (int i = 0; i < 12; ++i) ex[i] = static_cast<float>(i);
  Tensor e = MlNode("ArrayFeatureExtractor", 1, {f32({3, 4}, ex), i64({2}, {0, 1})}).out();
  EXPECT_EQ(values<float>(e), (std::vector<float>{0, 1, 4, 5, 8, 9}));
  // A 1-D X gives one row; strings and int64 work too.
  Tensor s = MlNode("ArrayFeatureExtractor", 1, {strs({3}, {"a", "b", "c"}), i64({1, 2}, {2, 1})}).out();
  ASSERT_EQ(s.shape(), (Shape{1, 2}));
  EXPECT_EQ(values<std::string>(s), (std::vector<std::string>{"c", "b"}));
  Tensor k = MlNode("ArrayFeatureExtractor", 1, {i64({2, 2}, {1, 2, 3, 4}), i64({1}, {1})}).out();
  EXPECT_EQ(values<int64_t>(k), (std::vector<int64_t>{2, 4}));
  // Zero rows.
  EXPECT_EQ(MlNode("ArrayFeatureExtractor", 1, {f32({0, 4}, {}), i64({1}, {1})}).out().shape(), (Shape{0, 1}));
  EXPECT_FALSE(MlNode("ArrayFeatureExtractor", 1, {f32({3, 4}, ex), i64({1}, {4})}).run().ok());
  EXPECT_FALSE(MlNode("ArrayFeatureExtractor", 1, {f32({3, 4}, ex), i64({1}, {-1})}).run().ok());
}

// ---- Binarizer

TEST(MlBinarizer, ThresholdsEveryElement) {
  const auto x = random_floats(60, 2, -2, 3);
  MlNode n("Binarizer", 1, {f32({3, 4, 5}, x)});
  n.f("threshold", 1.0f);
  Tensor y = n.out();
  ASSERT_EQ(y.shape(), (Shape{3, 4, 5}));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y.data<float>()[i], x[i] > 1.0f ? 1.0f : 0.0f) << i;
  // Default threshold 0, double input, and the threshold itself maps to 0.
  Tensor d = MlNode("Binarizer", 1, {f64({4}, {-1, 0, 0.5, 2})}).out();
  EXPECT_EQ(d.dtype(), DataType::kFloat64);
  EXPECT_EQ(values<double>(d), (std::vector<double>{0, 0, 1, 1}));
  EXPECT_EQ(MlNode("Binarizer", 1, {f32({0}, {})}).out().numel(), 0);
}

// ---- LabelEncoder

TEST(MlLabelEncoder, StringToIntWithAndWithoutDefault) {
  const Tensor x = strs({5}, {"a", "b", "d", "c", "g"});
  MlNode with("LabelEncoder", 4, {x});
  with.strings("keys_strings", {"a", "b", "c"}).ints("values_int64s", {0, 1, 2}).i("default_int64", 42);
  Tensor y = with.out();
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{0, 1, 42, 2, 42}));
  MlNode without("LabelEncoder", 2, {x});
  without.strings("keys_strings", {"a", "b", "c"}).ints("values_int64s", {0, 1, 2});
  EXPECT_EQ(values<int64_t>(without.out()), (std::vector<int64_t>{0, 1, -1, 2, -1}));
}

TEST(MlLabelEncoder, TensorAttributes) {
  // keys_tensor / values_tensor of int16 with a default_tensor (onnx's tensor_mapping test).
  const Tensor x = strs({5}, {"a", "b", "d", "c", "g"});
  MlNode n("LabelEncoder", 4, {x});
  n.tensor("keys_tensor", strs({3}, {"a", "b", "c"}))
      .tensor("values_tensor", make_tensor<int16_t>(DataType::kInt16, {3}, {0, 1, 2}))
      .tensor("default_tensor", make_tensor<int16_t>(DataType::kInt16, {1}, {42}));
  Tensor y = n.out();
  EXPECT_EQ(y.dtype(), DataType::kInt16);
  EXPECT_EQ(values<int16_t>(y), (std::vector<int16_t>{0, 1, 42, 2, 42}));
  // Without default_tensor the spec's default for integers is -1; int32 keys from an int32 input.
  MlNode m("LabelEncoder", 4, {make_tensor<int32_t>(DataType::kInt32, {2, 2}, {7, 8, 9, 7})});
  m.tensor("keys_tensor", make_tensor<int32_t>(DataType::kInt32, {2}, {7, 9}))
      .tensor("values_tensor", f64({2}, {0.5, 1.5}));
  Tensor z = m.out();
  ASSERT_EQ(z.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<double>(z)[0], 0.5);
  EXPECT_TRUE(std::signbit(values<double>(z)[1]) && values<double>(z)[1] == 0);  // -0.0
  EXPECT_EQ(values<double>(z)[2], 1.5);
}

TEST(MlLabelEncoder, FloatKeysNaNAndRepeatedKeys) {
  MlNode n("LabelEncoder", 2, {f32({5}, {1.5f, kNaN, -0.0f, 3, 2})});
  // NaN matches NaN; -0 matches 0; the repeated key 2 takes its last value.
  n.floats("keys_floats", {1.5f, kNaN, 0.0f, 2, 2}).strings("values_strings", {"x", "nan", "zero", "first", "last"});
  Tensor y = n.out();
  EXPECT_EQ(values<std::string>(y), (std::vector<std::string>{"x", "nan", "zero", "_Unused", "last"}));
  MlNode f("LabelEncoder", 2, {i64({3}, {5, 6, 7})});
  f.ints("keys_int64s", {5, 7}).floats("values_floats", {0.25f, 0.75f}).f("default_float", 9);
  EXPECT_EQ(values<float>(f.out()), (std::vector<float>{0.25f, 9, 0.75f}));
  // The input type must match the keys'.
  MlNode bad("LabelEncoder", 2, {i64({1}, {5})});
  bad.strings("keys_strings", {"a"}).ints("values_int64s", {1});
  EXPECT_FALSE(bad.run().ok());
  // Keys and values must pair up.
  MlNode odd("LabelEncoder", 2, {i64({1}, {5})});
  odd.ints("keys_int64s", {1, 2}).ints("values_int64s", {1});
  EXPECT_FALSE(odd.run().ok());
}

TEST(MlLabelEncoder, Opset1ClassesStrings) {
  MlNode s2i("LabelEncoder", 1, {strs({3}, {"b", "z", "a"})});
  s2i.strings("classes_strings", {"a", "b"});
  EXPECT_EQ(values<int64_t>(s2i.out()), (std::vector<int64_t>{1, -1, 0}));
  MlNode i2s("LabelEncoder", 1, {i64({3}, {1, 5, 0})});
  i2s.strings("classes_strings", {"a", "b"}).s("default_string", "?");
  EXPECT_EQ(values<std::string>(i2s.out()), (std::vector<std::string>{"b", "?", "a"}));
}

// ---- TreeEnsemble

namespace {

// A tree ensemble in the attribute layout of TreeEnsemble, with a recursive reference evaluator.
struct Forest {
  std::vector<float> splits;
  std::vector<uint8_t> modes;
  std::vector<int64_t> features, true_ids, false_ids, true_leafs, false_leafs, missing, roots, targets;
  std::vector<float> weights, members;
  std::vector<std::vector<float>> member_sets;  // per node (empty unless mode 6)
  int64_t n_targets = 3;

  bool goes_true(size_t i, float x) const {
    if (std::isnan(x) && missing[i]) return true;
    const float s = splits[i];
    switch (modes[i]) {
      case 0: return x <= s;
      case 1: return x < s;
      case 2: return x >= s;
      case 3: return x > s;
      case 4: return x == s;
      case 5: return x != s;
      default:
        for (float m : member_sets[i])
          if (m == x) return true;
        return false;
    }
  }
  int64_t leaf_of(int64_t node, const float* row) const {
    const bool t = goes_true(static_cast<size_t>(node), row[features[node]]);
    const int64_t next = t ? true_ids[node] : false_ids[node];
    const bool leaf = t ? true_leafs[node] : false_leafs[node];
    return leaf ? next : leaf_of(next, row);
  }
  std::vector<double> eval(const float* row, int agg) const {
    const double init = agg == 2 ? std::numeric_limits<double>::max() : agg == 3 ? std::numeric_limits<double>::lowest() : 0;
    std::vector<double> out(n_targets, init);
    for (int64_t r : roots) {
      const int64_t l = leaf_of(r, row);
      double& o = out[targets[l]];
      if (agg == 2) o = std::min<double>(o, weights[l]);
      else if (agg == 3) o = std::max<double>(o, weights[l]);
      else o += weights[l];
    }
    if (agg == 0)
      for (double& o : out) o /= static_cast<double>(roots.size());
    return out;
  }

  // Random full binary trees of the given depth over `nf` features, with modes in [mode_lo, mode_hi]
  // (every mode by default; 6 is set membership).
  static Forest random(int trees, int depth, int nf, uint32_t seed, int mode_lo = 0, int mode_hi = 6) {
    Forest f;
    std::mt19937 g(seed);
    std::uniform_int_distribution<int> mode(mode_lo, mode_hi), feat(0, nf - 1), target(0, 2), coin(0, 1);
    std::uniform_int_distribution<int> val(-3, 3);
    std::function<int64_t(int)> build = [&](int d) -> int64_t {
      const int64_t me = static_cast<int64_t>(f.splits.size());
      f.splits.push_back(static_cast<float>(val(g)) / 2);
      f.modes.push_back(static_cast<uint8_t>(mode(g)));
      f.features.push_back(feat(g));
      f.missing.push_back(coin(g));
      f.member_sets.emplace_back();
      if (f.modes[me] == 6) {
        f.splits[me] = kNaN;
        for (int k = 0; k < 3; ++k) {
          f.member_sets[me].push_back(static_cast<float>(val(g)) / 2);
          f.members.push_back(f.member_sets[me].back());
        }
        f.members.push_back(kNaN);
      }
      f.true_ids.push_back(0), f.false_ids.push_back(0), f.true_leafs.push_back(0), f.false_leafs.push_back(0);
      for (int side = 0; side < 2; ++side) {
        int64_t child;
        const bool leaf = d + 1 >= depth;
        if (leaf) {
          child = static_cast<int64_t>(f.weights.size());
          f.weights.push_back(static_cast<float>(val(g)) + 0.25f * static_cast<float>(coin(g)));
          f.targets.push_back(target(g));
        } else {
          child = build(d + 1);
        }
        (side ? f.true_ids : f.false_ids)[me] = child;
        (side ? f.true_leafs : f.false_leafs)[me] = leaf;
      }
      return me;
    };
    for (int t = 0; t < trees; ++t) f.roots.push_back(build(0));
    return f;
  }

  void set_attrs(MlNode& n, int agg, int post) const {
    n.tensor("nodes_splits", make_tensor(DataType::kFloat32, {static_cast<int64_t>(splits.size())}, splits))
        .tensor("nodes_modes", make_tensor(DataType::kUInt8, {static_cast<int64_t>(modes.size())}, modes))
        .tensor("leaf_weights", make_tensor(DataType::kFloat32, {static_cast<int64_t>(weights.size())}, weights))
        .ints("nodes_featureids", features)
        .ints("nodes_truenodeids", true_ids)
        .ints("nodes_falsenodeids", false_ids)
        .ints("nodes_trueleafs", true_leafs)
        .ints("nodes_falseleafs", false_leafs)
        .ints("nodes_missing_value_tracks_true", missing)
        .ints("leaf_targetids", targets)
        .ints("tree_roots", roots)
        .i("n_targets", n_targets)
        .i("aggregate_function", agg)
        .i("post_transform", post);
    if (!members.empty())
      n.tensor("membership_values", make_tensor(DataType::kFloat32, {static_cast<int64_t>(members.size())}, members));
  }
};

}  // namespace

TEST(MlTreeEnsemble, RandomForestsEveryAggregate) {
  const int nf = 3, rows = 40;
  const Forest f = Forest::random(4, 3, nf, 7);
  std::mt19937 g(11);
  std::uniform_int_distribution<int> val(-4, 4);
  std::vector<float> x(rows * nf);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 7 == 3 ? kNaN : static_cast<float>(val(g)) / 2;  // hits splits exactly
  for (int agg = 0; agg < 4; ++agg) {
    MlNode n("TreeEnsemble", 5, {f32({rows, nf}, x)});
    f.set_attrs(n, agg, 0);
    Tensor y = n.out();
    ASSERT_EQ(y.shape(), (Shape{rows, 3})) << agg;
    for (int r = 0; r < rows; ++r) {
      const auto want = f.eval(&x[r * nf], agg);
      for (int k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(y.data<float>()[r * 3 + k], static_cast<float>(want[k])) << agg << " " << r;
    }
  }
}

// The compiled walk (backends/cpu/ml_forest.cpp: no membership nodes, SUM or AVERAGE): one mode for
// every node (each of LEQ, LT, GTE, GT) or mixed modes, enough trees for several chunks of 32, and row
// counts on both sides of the split between threads sharing trees (few rows) and rows (many); float
// and double X. Every row's scores are the same whatever the batch it is scored in, bit for bit.
TEST(MlTreeEnsemble, CompiledWalkMatchesTheReferenceInEveryBatch) {
  const int nf = 4;
  for (int mode = -1; mode < 4; ++mode) {
    const Forest f = mode < 0 ? Forest::random(70, 4, nf, 21, 0, 5) : Forest::random(70, 4, nf, 22 + mode, mode, mode);
    for (int agg : {0, 1}) {
      for (bool dbl : {false, true}) {
        std::vector<float> x(100 * nf);
        std::mt19937 g(31 + mode);
        std::uniform_int_distribution<int> val(-4, 4);
        for (size_t i = 0; i < x.size(); ++i) x[i] = i % 11 == 5 ? kNaN : static_cast<float>(val(g)) / 2;
        std::vector<float> batch_of_one;
        for (int rows : {1, 5, 31, 32, 100}) {
          std::vector<float> xr(x.begin(), x.begin() + rows * nf);
          Tensor in = dbl ? make_tensor(DataType::kFloat64, {rows, nf}, std::vector<double>(xr.begin(), xr.end()))
                          : f32({rows, nf}, xr);
          MlNode n("TreeEnsemble", 5, {in});
          f.set_attrs(n, agg, 0);
          Tensor y = n.out();
          ASSERT_EQ(y.shape(), (Shape{rows, 3}));
          auto at = [&](int64_t i) { return dbl ? static_cast<float>(y.data<double>()[i]) : y.data<float>()[i]; };
          for (int r = 0; r < rows; ++r) {
            const auto want = f.eval(&x[r * nf], agg);
            for (int k = 0; k < 3; ++k)
              EXPECT_FLOAT_EQ(at(r * 3 + k), static_cast<float>(want[k])) << mode << " " << agg << " " << rows << " " << r;
          }
          if (rows == 1) {
            for (int k = 0; k < 3; ++k) batch_of_one.push_back(at(k));
          } else {
            for (int k = 0; k < 3; ++k) EXPECT_EQ(at(k), batch_of_one[k]) << "row 0 in a batch of " << rows;
          }
        }
      }
    }
  }
}

TEST(MlTreeEnsemble, OnnxSingleTreeAndPostTransforms) {
  // onnx's single_tree test: X [3, 2] doubles, a depth-2 tree, SUM.
  MlNode n("TreeEnsemble", 5, {f64({3, 2}, {1.2, 3.4, -0.12, 1.66, 4.14, 1.77})});
  n.tensor("nodes_splits", f64({3}, {3.14, 1.2, 4.2}))
      .tensor("nodes_modes", make_tensor<uint8_t>(DataType::kUInt8, {3}, {0, 0, 0}))
      .tensor("leaf_weights", f64({4}, {5.23, 12.12, -12.23, 7.21}))
      .ints("nodes_featureids", {0, 0, 0})
      .ints("nodes_truenodeids", {1, 0, 1})
      .ints("nodes_trueleafs", {0, 1, 1})
      .ints("nodes_falsenodeids", {2, 2, 3})
      .ints("nodes_falseleafs", {0, 1, 1})
      .ints("leaf_targetids", {0, 1, 0, 1})
      .ints("tree_roots", {0})
      .i("n_targets", 2)
      .i("aggregate_function", 1);
  Tensor y = n.out();
  EXPECT_EQ(y.dtype(), DataType::kFloat64);
  EXPECT_EQ(values<double>(y), (std::vector<double>{5.23, 0, 5.23, 0, 0, 12.12}));
  // Post transforms on the same scores.
  auto run_post = [&](int post) {
    n.i("post_transform", post);
    return values<double>(n.out());
  };
  const auto lg = run_post(2);
  EXPECT_NEAR(lg[0], 1 / (1 + std::exp(-5.23)), 1e-12);
  EXPECT_NEAR(lg[1], 0.5, 1e-12);
  const auto sm = run_post(1);
  EXPECT_NEAR(sm[0], std::exp(5.23) / (std::exp(5.23) + 1), 1e-12);
  EXPECT_NEAR(sm[0] + sm[1], 1, 1e-12);
  const auto sz = run_post(3);  // zero scores keep zero
  EXPECT_NEAR(sz[0], 1, 1e-12);
  EXPECT_EQ(sz[1], 0);
}

TEST(MlTreeEnsemble, SetMembershipOnnxExample) {
  // onnx's set_membership test.
  MlNode n("TreeEnsemble", 5, {f32({6, 1}, {1.2f, 3.4f, -0.12f, kNaN, 12.0f, 7.0f})});
  n.tensor("nodes_splits", f32({3}, {11, 232344, kNaN}))
      .tensor("nodes_modes", make_tensor<uint8_t>(DataType::kUInt8, {3}, {0, 6, 6}))
      .tensor("membership_values", f32({8}, {1.2f, 3.7f, 8, 9, kNaN, 12, 7, kNaN}))
      .tensor("leaf_weights", f32({4}, {1, 10, 1000, 100}))
      .ints("nodes_featureids", {0, 0, 0})
      .ints("nodes_truenodeids", {1, 0, 1})
      .ints("nodes_trueleafs", {0, 1, 1})
      .ints("nodes_falsenodeids", {2, 2, 3})
      .ints("nodes_falseleafs", {1, 0, 1})
      .ints("leaf_targetids", {0, 1, 2, 3})
      .ints("tree_roots", {0})
      .i("n_targets", 4)
      .i("aggregate_function", 1);
  Tensor y = n.out();
  const std::vector<float> want = {1, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 100, 0, 0, 1000, 0, 0, 0, 1000, 0, 0, 10, 0, 0};
  EXPECT_EQ(values<float>(y), want);
}

TEST(MlTreeEnsemble, ProbitAndBadTrees) {
  // A one-leaf tree (both branches to leaf 0) with weight 0.975 → probit 1.959964.
  auto single = [](float w, std::vector<int64_t> true_ids) {
    auto n = std::make_unique<MlNode>("TreeEnsemble", 5, std::vector<Tensor>{f32({1, 1}, {0})});
    n->tensor("nodes_splits", f32({1}, {0}))
        .tensor("nodes_modes", make_tensor<uint8_t>(DataType::kUInt8, {1}, {0}))
        .tensor("leaf_weights", f32({1}, {w}))
        .ints("nodes_featureids", {0})
        .ints("nodes_truenodeids", true_ids)
        .ints("nodes_trueleafs", {1})
        .ints("nodes_falsenodeids", {0})
        .ints("nodes_falseleafs", {1})
        .ints("leaf_targetids", {0})
        .ints("tree_roots", {0})
        .i("n_targets", 1)
        .i("post_transform", 4);
    return n;
  };
  EXPECT_NEAR(single(0.975f, {0})->out().data<float>()[0], 1.959964f, 1e-4);
  EXPECT_NEAR(single(0.5f, {0})->out().data<float>()[0], 0.0f, 1e-6);
  EXPECT_NEAR(single(0.1f, {0})->out().data<float>()[0], -1.2815516f, 1e-4);
  // A leaf id past leaf_weights is refused at creation.
  EXPECT_FALSE(single(0.5f, {3})->run().ok());
  // A cycle (node 0's true branch is node 0 itself) is an error, not a hang.
  MlNode c("TreeEnsemble", 5, {f32({1, 1}, {0})});
  c.tensor("nodes_splits", f32({1}, {1}))
      .tensor("nodes_modes", make_tensor<uint8_t>(DataType::kUInt8, {1}, {0}))
      .tensor("leaf_weights", f32({1}, {1}))
      .ints("nodes_featureids", {0})
      .ints("nodes_truenodeids", {0})
      .ints("nodes_trueleafs", {0})
      .ints("nodes_falsenodeids", {0})
      .ints("nodes_falseleafs", {1})
      .ints("leaf_targetids", {0})
      .ints("tree_roots", {0})
      .i("n_targets", 1);
  EXPECT_FALSE(c.run().ok());
  // Features beyond X's width are refused.
  MlNode w("TreeEnsemble", 5, {f32({1, 1}, {0})});
  w.tensor("nodes_splits", f32({1}, {1}))
      .tensor("nodes_modes", make_tensor<uint8_t>(DataType::kUInt8, {1}, {0}))
      .tensor("leaf_weights", f32({1}, {1}))
      .ints("nodes_featureids", {2})
      .ints("nodes_truenodeids", {0})
      .ints("nodes_trueleafs", {1})
      .ints("nodes_falsenodeids", {0})
      .ints("nodes_falseleafs", {1})
      .ints("leaf_targetids", {0})
      .ints("tree_roots", {0})
      .i("n_targets", 1);
  EXPECT_FALSE(w.run().ok());
}

// ---- FeatureVectorizer and CategoryMapper

TEST(MlFeatureVectorizer, CutsPadsAndJoinsRows) {
  const std::vector<float> a = {0, 1, 2, 3, 4, 5};
  MlNode n("FeatureVectorizer", 1, {f32({2, 3}, a), i64({2, 1, 2}, {10, 11, 12, 13})});
  n.ints("inputdimensions", {2, 3});  // a cut to 2, b padded to 3
  Tensor y = n.out();
  ASSERT_EQ(y.shape(), (Shape{2, 5}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{0, 1, 10, 11, 0, 3, 4, 12, 13, 0}));
  MlNode one("FeatureVectorizer", 1, {f32({3}, {1, 2, 3})});  // a 1-D input is one row
  one.ints("inputdimensions", {3});
  EXPECT_EQ(one.out().shape(), (Shape{1, 3}));
  auto bad = [&](std::vector<int64_t> dims, Tensor b) {
    MlNode m("FeatureVectorizer", 1, {f32({2, 3}, a), b});
    m.ints("inputdimensions", std::move(dims));
    return m.run().ok();
  };
  EXPECT_TRUE(bad({3, 1}, f32({2, 1}, {1, 2})));
  EXPECT_FALSE(bad({3}, f32({2, 1}, {1, 2})));                              // a count short
  EXPECT_FALSE(bad({3, -1}, f32({2, 1}, {1, 2})));                          // negative
  EXPECT_FALSE(bad({3, std::numeric_limits<int64_t>::max()}, f32({2, 1}, {1, 2})));  // the sum overflows
  EXPECT_FALSE(bad({3, 1}, f32({3, 1}, {1, 2, 3})));                        // rows differ
}

TEST(MlCategoryMapper, BothDirectionsAndDefaults) {
  auto node = [](Tensor x) {
    auto n = std::make_unique<MlNode>("CategoryMapper", 1, std::vector<Tensor>{std::move(x)});
    n->ints("cats_int64s", {7, 3, 9}).strings("cats_strings", {"cat", "dog", "eel"});
    return n;
  };
  auto s = node(strs({2, 2}, {"eel", "cat", "gnu", "dog"}));
  s->i("default_int64", -5);
  Tensor y = s->out();
  ASSERT_EQ(y.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{9, 7, -5, 3}));
  EXPECT_EQ(values<std::string>(node(i64({3}, {3, 4, 7}))->out()), (std::vector<std::string>{"dog", "_Unused", "cat"}));
  auto short_strings = node(i64({1}, {3}));
  short_strings->strings("cats_strings", {"cat"});
  EXPECT_FALSE(short_strings->run().ok());
  auto empty = node(i64({1}, {3}));
  empty->ints("cats_int64s", {}).strings("cats_strings", {});
  EXPECT_FALSE(empty->run().ok());
}

TEST(MlShapeInfer, OutputTypes) {
  ir::Graph g;
  auto* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim("N"), 4})));
  auto* i = g.add_value("i", ir::Type::tensor(DataType::kInt64, ir::SymShape({2})));
  auto* y = g.add_value("y");
  ir::Node* afe = g.add_node("ArrayFeatureExtractor", "ai.onnx.ml", {x, i}, {y}, "afe");
  ASSERT_TRUE(ops::infer_node(*afe).ok());
  EXPECT_EQ(y->type.shape.to_string(), ir::SymShape({ir::Dim("N"), 2}).to_string());
  auto* z = g.add_value("z");
  ir::Node* te = g.add_node("TreeEnsemble", "ai.onnx.ml", {x}, {z}, "te");
  ir::Attribute nt;
  nt.i = 3;
  te->attrs["n_targets"] = nt;
  ASSERT_TRUE(ops::infer_node(*te).ok());
  EXPECT_EQ(z->type.shape.to_string(), ir::SymShape({ir::Dim("N"), 3}).to_string());
  auto* s = g.add_value("s", ir::Type::tensor(DataType::kString, ir::SymShape({5})));
  auto* l = g.add_value("l");
  ir::Node* le = g.add_node("LabelEncoder", "ai.onnx.ml", {s}, {l}, "le");
  ir::Attribute vals;
  vals.kind = ir::Attribute::Kind::kInts;
  vals.ints = {1};
  le->attrs["values_int64s"] = vals;
  ASSERT_TRUE(ops::infer_node(*le).ok());
  EXPECT_EQ(l->type.dtype, DataType::kInt64);
  EXPECT_EQ(l->type.shape.to_string(), ir::SymShape({5}).to_string());
}
