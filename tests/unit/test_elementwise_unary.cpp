// Unary kernels against std:: references, including the float32 fast paths at extreme inputs.
#include <cmath>
#include <functional>
#include <limits>

#include "test_elementwise_util.h"

using namespace kiln;
using namespace kiln::ewtest;

namespace {

struct UnaryCase {
  const char* op;
  int opset;
  std::function<double(double)> ref;
  float lo, hi;
  std::map<std::string, ir::Attribute> attrs = {};
};

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double softplus(double x) { return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0); }

std::vector<UnaryCase> cases() {
  return {
      {"Abs", 13, [](double x) { return std::fabs(x); }, -5, 5},
      {"Neg", 13, [](double x) { return -x; }, -5, 5},
      {"Exp", 13, [](double x) { return std::exp(x); }, -10, 10},
      {"Log", 13, [](double x) { return std::log(x); }, 0.01f, 10},
      {"Sqrt", 13, [](double x) { return std::sqrt(x); }, 0, 10},
      {"Reciprocal", 13, [](double x) { return 1 / x; }, 0.5f, 10},
      {"Floor", 13, [](double x) { return std::floor(x); }, -5, 5},
      {"Ceil", 13, [](double x) { return std::ceil(x); }, -5, 5},
      {"Sin", 7, [](double x) { return std::sin(x); }, -5, 5},
      {"Cos", 7, [](double x) { return std::cos(x); }, -5, 5},
      {"Tan", 7, [](double x) { return std::tan(x); }, -1, 1},
      {"Asin", 7, [](double x) { return std::asin(x); }, -1, 1},
      {"Acos", 7, [](double x) { return std::acos(x); }, -1, 1},
      {"Atan", 7, [](double x) { return std::atan(x); }, -5, 5},
      {"Sinh", 9, [](double x) { return std::sinh(x); }, -5, 5},
      {"Cosh", 9, [](double x) { return std::cosh(x); }, -5, 5},
      {"Asinh", 9, [](double x) { return std::asinh(x); }, -5, 5},
      {"Acosh", 9, [](double x) { return std::acosh(x); }, 1, 5},
      {"Atanh", 9, [](double x) { return std::atanh(x); }, -0.9f, 0.9f},
      {"Erf", 13, [](double x) { return std::erf(x); }, -4, 4},
      {"Sign", 13, [](double x) { return double((x > 0) - (x < 0)); }, -5, 5},
      {"Relu", 14, [](double x) { return std::max(x, 0.0); }, -5, 5},
      {"Tanh", 13, [](double x) { return std::tanh(x); }, -12, 12},
      {"Sigmoid", 13, sigmoid, -30, 30},
      {"Softplus", 1, softplus, -20, 20},
      {"Softsign", 1, [](double x) { return x / (1 + std::fabs(x)); }, -5, 5},
      {"Mish", 18, [](double x) { return x * std::tanh(softplus(x)); }, -5, 5},
      {"LeakyRelu", 16, [](double x) { return x < 0 ? 0.1 * x : x; }, -5, 5, {{"alpha", attr_f(0.1f)}}},
      {"Elu", 6, [](double x) { return x < 0 ? 2 * (std::exp(x) - 1) : x; }, -5, 5, {{"alpha", attr_f(2.f)}}},
      {"Selu", 6, [](double x) { return 1.0507009873554805 * (x <= 0 ? 1.6732632423543772 * (std::exp(x) - 1) : x); }, -5, 5},
      {"Celu", 12, [](double x) { return std::max(0.0, x) + std::min(0.0, 2 * (std::exp(x / 2) - 1)); }, -5, 5,
       {{"alpha", attr_f(2.f)}}},
      {"HardSigmoid", 6, [](double x) { return std::clamp(0.2 * x + 0.5, 0.0, 1.0); }, -5, 5},
      {"HardSwish", 14, [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, -5, 5},
      {"ThresholdedRelu", 10, [](double x) { return x > 1.5 ? x : 0; }, -5, 5, {{"alpha", attr_f(1.5f)}}},
      {"Gelu", 20, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, -6, 6},
      {"Gelu", 20,
       [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }, -6, 6,
       {{"approximate", attr_s("tanh")}}},
      {"Shrink", 9, [](double x) { return x < -1 ? x + 0.5 : x > 1 ? x - 0.5 : 0; }, -3, 3,
       {{"lambd", attr_f(1.f)}, {"bias", attr_f(0.5f)}}},
      {"Swish", 24, [](double x) { return x * sigmoid(2 * x); }, -10, 10, {{"alpha", attr_f(2.f)}}},
  };
}

}  // namespace

TEST(ElementwiseUnary, Float32AndFloat64MatchReference) {
  uint32_t seed = 100;
  for (const UnaryCase& c : cases()) {
    auto v = random_floats(5000, c.lo, c.hi, seed++);
    v[0] = c.lo;
    if (c.lo <= 0 && c.hi >= 0) v[1] = 0.f;
    auto out = run(c.op, {f32({50, 100}, v)}, c.attrs, c.opset);
    ASSERT_TRUE(out.ok()) << c.op << ": " << out.status().to_string();
    ASSERT_EQ(out->shape(), (Shape{50, 100}));
    std::vector<double> vd(v.begin(), v.end());
    auto outd = run(c.op, {make(DataType::kFloat64, {5000}, vd)}, c.attrs, c.opset);
    ASSERT_TRUE(outd.ok()) << c.op << ": " << outd.status().to_string();
    for (size_t i = 0; i < v.size(); ++i) {
      const double want = c.ref(v[i]);
      ASSERT_NEAR(out->data<float>()[i], want, 2e-6 * (1 + std::fabs(want))) << c.op << " at x=" << v[i];
      ASSERT_NEAR(outd->data<double>()[i], want, 1e-6 * (1 + std::fabs(want))) << c.op << " (f64) at x=" << v[i];
    }
  }
}

TEST(ElementwiseUnary, Float32FastMathAtExtremes) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {0.f, -0.f, 1e-8f, -1e-8f, 0.2499f, 0.2501f, 0.4999f, 0.5001f, 8.9f, 9.1f, 50.f, -50.f,
                                88.f, 88.9f, -88.f, -100.f, -110.f, 100.f, inf, -inf};
  auto exp_ = run("Exp", {f32({20}, v)});
  auto sig = run("Sigmoid", {f32({20}, v)});
  auto th = run("Tanh", {f32({20}, v)});
  auto er = run("Erf", {f32({20}, v)});
  ASSERT_TRUE(sig.ok() && th.ok() && er.ok() && exp_.ok());
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i];
    const double s = 1 / (1 + std::exp(-x));
    EXPECT_NEAR(sig->data<float>()[i], s, 1e-7 + 2e-7 * s) << x;
    EXPECT_NEAR(th->data<float>()[i], std::tanh(x), 2e-7 * (1e-30 + std::fabs(std::tanh(x))) + 1e-30) << x;
    EXPECT_NEAR(er->data<float>()[i], std::erf(x), 3e-7 + 1e-6 * std::fabs(std::erf(x))) << x;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const char* op : {"Sigmoid", "Tanh", "Erf", "Exp", "Gelu"}) {
    auto r = run(op, {f32({1}, {nan})}, {}, 20);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(std::isnan(r->data<float>()[0])) << op;
  }
}

TEST(ElementwiseUnary, RoundHalfToEven) {
  auto out = run("Round", {f32({8}, {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f, 2.6f, -2.6f})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(values<float>(*out), (std::vector<float>{0, 2, 2, -0.f, -2, 2, 3, -3}));
}

TEST(ElementwiseUnary, IntegerOps) {
  auto abs = run("Abs", {i32({3}, {-3, 0, 4})});
  auto neg = run("Neg", {i64({2}, {5, -7})});
  auto sign = run("Sign", {i32({3}, {-9, 0, 4})});
  auto relu = run("Relu", {make<int8_t>(DataType::kInt8, {2}, {-3, 3})}, {}, 14);
  auto bnot = run("BitwiseNot", {make<uint8_t>(DataType::kUInt8, {2}, {0, 0xf0})}, {}, 18);
  auto nott = run("Not", {boolean({2}, {true, false})});
  ASSERT_TRUE(abs.ok() && neg.ok() && sign.ok() && relu.ok() && bnot.ok() && nott.ok());
  EXPECT_EQ(values<int32_t>(*abs), (std::vector<int32_t>{3, 0, 4}));
  EXPECT_EQ(values<int64_t>(*neg), (std::vector<int64_t>{-5, 7}));
  EXPECT_EQ(values<int32_t>(*sign), (std::vector<int32_t>{-1, 0, 1}));
  EXPECT_EQ(values<int8_t>(*relu), (std::vector<int8_t>{0, 3}));
  EXPECT_EQ(values<uint8_t>(*bnot), (std::vector<uint8_t>{0xff, 0x0f}));
  EXPECT_EQ(values<bool>(*nott), (std::vector<bool>{false, true}));
  EXPECT_FALSE(run("Exp", {i32({1}, {1})}).ok());
}

TEST(ElementwiseUnary, NaNAndInfTests) {
  const float inf = std::numeric_limits<float>::infinity();
  auto x = f32({4}, {1.f, NAN, inf, -inf});
  auto isnan = run("IsNaN", {x}, {}, 20);
  auto isinf = run("IsInf", {x}, {}, 20);
  auto pos = run("IsInf", {x}, {{"detect_negative", attr_i(0)}}, 20);
  auto neg = run("IsInf", {x}, {{"detect_positive", attr_i(0)}}, 20);
  ASSERT_TRUE(isnan.ok() && isinf.ok() && pos.ok() && neg.ok());
  EXPECT_EQ(values<bool>(*isnan), (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(values<bool>(*isinf), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(values<bool>(*pos), (std::vector<bool>{false, false, true, false}));
  EXPECT_EQ(values<bool>(*neg), (std::vector<bool>{false, false, false, true}));
}

TEST(ElementwiseUnary, ClipAttributesAndInputs) {
  auto x = f32({5}, {-3, -1, 0, 1, 3});
  auto old = run("Clip", {x}, {{"min", attr_f(-1.5f)}, {"max", attr_f(2.f)}}, 6);
  ASSERT_TRUE(old.ok()) << old.status().to_string();
  EXPECT_EQ(values<float>(*old), (std::vector<float>{-1.5f, -1, 0, 1, 2}));
  auto both = run("Clip", {x, f32({}, {-1.5f}), f32({}, {2.f})}, {}, 13);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(values<float>(*both), (std::vector<float>{-1.5f, -1, 0, 1, 2}));
  auto only_max = run("Clip", {x, Tensor(), f32({}, {0.5f})}, {}, 13);
  ASSERT_TRUE(only_max.ok()) << only_max.status().to_string();
  EXPECT_EQ(values<float>(*only_max), (std::vector<float>{-3, -1, 0, 0.5f, 0.5f}));
  auto none = run("Clip", {x}, {}, 13);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(values<float>(*none), values<float>(x));
  auto ints = run("Clip", {i64({4}, {-10, 0, 5, 100}), i64({}, {-2}), i64({}, {50})}, {}, 13);
  ASSERT_TRUE(ints.ok());
  EXPECT_EQ(values<int64_t>(*ints), (std::vector<int64_t>{-2, 0, 5, 50}));
  auto inverted = run("Clip", {x, f32({}, {2.f}), f32({}, {1.f})}, {}, 13);  // min > max: all become max
  ASSERT_TRUE(inverted.ok());
  EXPECT_EQ(values<float>(*inverted), (std::vector<float>(5, 1.f)));
}

TEST(ElementwiseUnary, HalfTypesAndEmptyTensors) {
  Tensor h = Tensor::empty(DataType::kFloat16, {3});
  const std::vector<float> v = {-1.f, 0.5f, 2.f};
  for (int i = 0; i < 3; ++i) h.data<uint16_t>()[i] = f32_to_f16(v[i]);
  auto out = run("Sigmoid", {h});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->dtype(), DataType::kFloat16);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(f16_to_f32(out->data<uint16_t>()[i]), 1 / (1 + std::exp(-v[i])), 1e-3);
  Tensor b = Tensor::empty(DataType::kBFloat16, {1});
  b.data<uint16_t>()[0] = f32_to_bf16(-2.f);
  auto babs = run("Abs", {b});
  ASSERT_TRUE(babs.ok());
  EXPECT_EQ(bf16_to_f32(babs->data<uint16_t>()[0]), 2.f);
  auto empty = run("Relu", {f32({0, 3}, {})});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->shape(), (Shape{0, 3}));
}

TEST(ElementwiseUnary, IdentityCopiesTensorsAndSequences) {
  auto t = run("Identity", {make<std::string>(DataType::kString, {2}, {"x", "y"})});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(values<std::string>(*t), (std::vector<std::string>{"x", "y"}));
  Tensor a = f32({2}, {1, 2});
  auto seq = run_slots("Identity", {Slot::of_sequence({a}, DataType::kFloat32)}, {}, 16);
  ASSERT_TRUE(seq.ok()) << seq.status().to_string();
  ASSERT_EQ((*seq)[0].kind, Slot::Kind::kSequence);
  ASSERT_EQ((*seq)[0].sequence.size(), 1u);
  EXPECT_NE((*seq)[0].sequence[0].raw(), a.raw());
  EXPECT_EQ(values<float>((*seq)[0].sequence[0]), values<float>(a));
  auto none = run_slots("Identity", {Slot{}}, {}, 16);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)[0].kind, Slot::Kind::kNone);
}
