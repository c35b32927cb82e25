// Binary, variadic and Where kernels against naive references.
#include <cmath>
#include <functional>

#include "ops/op_table.h"
#include "test_elementwise_util.h"

using namespace kiln;
using namespace kiln::ewtest;

namespace {

struct ShapePair {
  Shape a, b;
};

const std::vector<ShapePair> kShapes = {
    {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}},    {{2, 1, 4}, {3, 1}},    {{}, {2, 3}},
    {{2, 3}, {}},           {{5, 0, 3}, {1, 3}}, {{1}, {7}},             {{3, 1, 5, 1}, {1, 4, 1, 6}},
    {{64, 1024}, {1024}},   {{64, 1}, {64, 700}}, {{300000}, {300000}}, {{2, 1, 1}, {1, 1}},
};

void check_binary_f32(const std::string& op, const std::function<float(float, float)>& ref, float lo = -3, float hi = 3) {
  uint32_t seed = 1;
  for (const auto& [sa, sb] : kShapes) {
    auto va = random_floats(shape_numel(sa), lo, hi, seed++);
    auto vb = random_floats(shape_numel(sb), lo, hi, seed++);
    auto out = run(op, {f32(sa, va), f32(sb, vb)});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    Shape so;
    ASSERT_TRUE(ops::broadcast_shapes(sa, sb, &so));
    ASSERT_EQ(out->shape(), so) << op;
    const float* o = out->data<float>();
    for (int64_t i = 0; i < shape_numel(so); ++i) {
      const float want = ref(va[bcast_index(so, sa, i)], vb[bcast_index(so, sb, i)]);
      ASSERT_NEAR(o[i], want, 1e-6f * (1 + std::fabs(want))) << op << " " << shape_to_string(sa) << " "
                                                               << shape_to_string(sb) << " at " << i;
    }
  }
}

}  // namespace

TEST(ElementwiseBinary, ArithmeticF32Broadcasting) {
  check_binary_f32("Add", [](float a, float b) { return a + b; });
  check_binary_f32("Sub", [](float a, float b) { return a - b; });
  check_binary_f32("Mul", [](float a, float b) { return a * b; });
  check_binary_f32("Div", [](float a, float b) { return a / b; }, 0.5f, 3.0f);
  check_binary_f32("Pow", [](float a, float b) { return std::pow(a, b); }, 0.1f, 2.0f);
  check_binary_f32("PRelu", [](float x, float s) { return x < 0 ? s * x : x; });
}

TEST(ElementwiseBinary, IncompatibleShapesFail) {
  auto out = run("Add", {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({2}, {1, 2})});
  EXPECT_FALSE(out.ok());
  auto mixed = run("Add", {f32({1}, {1}), i64({1}, {1})});
  EXPECT_FALSE(mixed.ok());
}

TEST(ElementwiseBinary, IntegerDivisionTruncates) {
  auto out = run("Div", {i32({6}, {7, -7, 7, -7, 5, 3}), i32({6}, {2, 2, -2, -2, 0, -1})});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(values<int32_t>(*out), (std::vector<int32_t>{3, -3, -3, 3, 0, -3}));
  // MIN / -1 must not trap.
  auto edge = run("Div", {i64({1}, {INT64_MIN}), i64({1}, {-1})});
  ASSERT_TRUE(edge.ok());
  EXPECT_EQ(values<int64_t>(*edge)[0], INT64_MIN);
}

TEST(ElementwiseBinary, ModSignRules) {
  const std::vector<int64_t> a = {-4, 7, 5, -5, 4, 0, 9};
  const std::vector<int64_t> b = {3, -3, 2, -2, 2, 5, 0};
  auto py = run("Mod", {i64({7}, a), i64({7}, b)}, {{"fmod", attr_i(0)}});
  ASSERT_TRUE(py.ok()) << py.status().to_string();
  EXPECT_EQ(values<int64_t>(*py), (std::vector<int64_t>{2, -2, 1, -1, 0, 0, 0}));  // sign of the divisor
  auto c = run("Mod", {i64({7}, a), i64({7}, b)}, {{"fmod", attr_i(1)}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(values<int64_t>(*c), (std::vector<int64_t>{-1, 1, 1, -1, 0, 0, 0}));  // sign of the dividend
  auto f = run("Mod", {f32({4}, {-4.5f, 7.5f, 5.f, -5.f}), f32({4}, {3.f, -3.f, 2.f, 2.f})}, {{"fmod", attr_i(1)}});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(values<float>(*f), (std::vector<float>{-1.5f, 1.5f, 1.f, -1.f}));
  // float16 goes through float.
  Tensor h = Tensor::empty(DataType::kFloat16, {2});
  h.data<uint16_t>()[0] = f32_to_f16(-4.5f);
  h.data<uint16_t>()[1] = f32_to_f16(7.5f);
  Tensor hd = Tensor::empty(DataType::kFloat16, {2});
  hd.data<uint16_t>()[0] = f32_to_f16(3.f);
  hd.data<uint16_t>()[1] = f32_to_f16(-3.f);
  auto hf = run("Mod", {h, hd}, {{"fmod", attr_i(1)}});
  ASSERT_TRUE(hf.ok());
  EXPECT_EQ(f16_to_f32(hf->data<uint16_t>()[0]), -1.5f);
  EXPECT_EQ(f16_to_f32(hf->data<uint16_t>()[1]), 1.5f);
}

TEST(ElementwiseBinary, SmallIntegerTypesWrap) {
  auto out = run("Add", {make<int8_t>(DataType::kInt8, {2}, {120, -120}), make<int8_t>(DataType::kInt8, {2}, {10, -10})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(values<int8_t>(*out), (std::vector<int8_t>{-126, 126}));
  auto u = run("Sub", {make<uint16_t>(DataType::kUInt16, {1}, {1}), make<uint16_t>(DataType::kUInt16, {1}, {2})});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(values<uint16_t>(*u)[0], 65535);
}

TEST(ElementwiseBinary, Float16AndBFloat16ComputeInFloat) {
  auto va = random_floats(100, -4, 4, 7), vb = random_floats(100, -4, 4, 8);
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    auto enc = [dt](float x) { return dt == DataType::kFloat16 ? f32_to_f16(x) : f32_to_bf16(x); };
    auto dec = [dt](uint16_t x) { return dt == DataType::kFloat16 ? f16_to_f32(x) : bf16_to_f32(x); };
    Tensor a = Tensor::empty(dt, {100}), b = Tensor::empty(dt, {100});
    for (int i = 0; i < 100; ++i) {
      a.data<uint16_t>()[i] = enc(va[i]);
      b.data<uint16_t>()[i] = enc(vb[i]);
    }
    auto out = run("Mul", {a, b});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(out->dtype(), dt);
    for (int i = 0; i < 100; ++i) {
      const uint16_t want = enc(dec(a.data<uint16_t>()[i]) * dec(b.data<uint16_t>()[i]));
      ASSERT_EQ(out->data<uint16_t>()[i], want) << i;
    }
  }
}

TEST(ElementwiseBinary, ComparisonsGiveBool) {
  auto a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto b = f32({3}, {2, 2, 7});
  struct Case { const char* op; std::vector<bool> want; };
  for (const Case& c : {Case{"Less", {1, 0, 1, 0, 0, 1}}, Case{"LessOrEqual", {1, 1, 1, 0, 0, 1}},
                        Case{"Greater", {0, 0, 0, 1, 1, 0}}, Case{"GreaterOrEqual", {0, 1, 0, 1, 1, 0}},
                        Case{"Equal", {0, 1, 0, 0, 0, 0}}}) {
    auto out = run(c.op, {a, b});
    ASSERT_TRUE(out.ok()) << c.op << ": " << out.status().to_string();
    ASSERT_EQ(out->dtype(), DataType::kBool);
    EXPECT_EQ(values<bool>(*out), c.want) << c.op;
  }
}

TEST(ElementwiseBinary, EqualOnStringsAndBools) {
  auto s = run("Equal", {make<std::string>(DataType::kString, {3}, {"a", "bc", ""}),
                         make<std::string>(DataType::kString, {1}, {"bc"})});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(values<bool>(*s), (std::vector<bool>{false, true, false}));
  auto b = run("Equal", {boolean({2}, {true, false}), boolean({2}, {true, true})});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(values<bool>(*b), (std::vector<bool>{true, false}));
}

TEST(ElementwiseBinary, LogicAndBitwise) {
  auto x = boolean({2, 2}, {true, true, false, false}), y = boolean({2}, {true, false});
  auto a = run("And", {x, y}), o = run("Or", {x, y}), e = run("Xor", {x, y});
  ASSERT_TRUE(a.ok() && o.ok() && e.ok());
  EXPECT_EQ(values<bool>(*a), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(values<bool>(*o), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(values<bool>(*e), (std::vector<bool>{false, true, true, false}));
  auto ba = run("BitwiseAnd", {i32({2}, {12, -1}), i32({2}, {10, 5})}, {}, 18);
  auto bo = run("BitwiseOr", {i32({2}, {12, -1}), i32({2}, {10, 5})}, {}, 18);
  auto bx = run("BitwiseXor", {i32({2}, {12, -1}), i32({2}, {10, 5})}, {}, 18);
  ASSERT_TRUE(ba.ok() && bo.ok() && bx.ok());
  EXPECT_EQ(values<int32_t>(*ba), (std::vector<int32_t>{8, 5}));
  EXPECT_EQ(values<int32_t>(*bo), (std::vector<int32_t>{14, -1}));
  EXPECT_EQ(values<int32_t>(*bx), (std::vector<int32_t>{6, -6}));
  EXPECT_FALSE(run("And", {f32({1}, {1}), f32({1}, {1})}).ok());
}

TEST(ElementwiseBinary, BitShift) {
  auto x = make<uint8_t>(DataType::kUInt8, {4}, {16, 4, 1, 255});
  auto s = make<uint8_t>(DataType::kUInt8, {4}, {1, 2, 3, 9});
  auto l = run("BitShift", {x, s}, {{"direction", attr_s("LEFT")}}, 11);
  auto r = run("BitShift", {x, s}, {{"direction", attr_s("RIGHT")}}, 11);
  ASSERT_TRUE(l.ok() && r.ok()) << l.status().to_string();
  EXPECT_EQ(values<uint8_t>(*l), (std::vector<uint8_t>{32, 16, 8, 0}));
  EXPECT_EQ(values<uint8_t>(*r), (std::vector<uint8_t>{8, 1, 0, 0}));
}

TEST(ElementwiseBinary, PowMixedTypes) {
  auto fi = run("Pow", {f32({3}, {1.5f, 2.f, -2.f}), i64({3}, {2, 3, 3})}, {}, 15);
  ASSERT_TRUE(fi.ok()) << fi.status().to_string();
  EXPECT_EQ(fi->dtype(), DataType::kFloat32);
  EXPECT_EQ(values<float>(*fi), (std::vector<float>{2.25f, 8.f, -8.f}));
  auto ii = run("Pow", {i64({3}, {2, 3, -3}), i64({3}, {10, 3, 3})}, {}, 15);
  ASSERT_TRUE(ii.ok());
  EXPECT_EQ(values<int64_t>(*ii), (std::vector<int64_t>{1024, 27, -27}));
  auto i_f = run("Pow", {i32({3}, {1, 2, 3}), f32({3}, {4, 5, 6})}, {}, 15);
  ASSERT_TRUE(i_f.ok());
  EXPECT_EQ(values<int32_t>(*i_f), (std::vector<int32_t>{1, 32, 729}));
}

TEST(ElementwiseBinary, VariadicBroadcastAndNaN) {
  auto a = f32({3}, {1, NAN, 3}), b = f32({2, 1}, {2, 0}), c = f32({}, {2.5f});
  auto mx = run("Max", {a, b, c}, {}, 13);
  ASSERT_TRUE(mx.ok()) << mx.status().to_string();
  ASSERT_EQ(mx->shape(), (Shape{2, 3}));
  auto v = values<float>(*mx);
  EXPECT_EQ(v[0], 2.5f);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], 3.f);
  auto mn = run("Min", {a, b}, {}, 13);
  ASSERT_TRUE(mn.ok());
  EXPECT_EQ(values<float>(*mn)[3], 0.f);
  auto sum = run("Sum", {f32({2}, {1, 2}), f32({2}, {3, 4}), f32({1}, {10})}, {}, 13);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(values<float>(*sum), (std::vector<float>{14, 16}));
  auto mean = run("Mean", {f32({2}, {1, 2}), f32({2}, {3, 4}), f32({1}, {2})}, {}, 13);
  ASSERT_TRUE(mean.ok());
  EXPECT_EQ(values<float>(*mean), (std::vector<float>{2, 8.f / 3}));
  auto one = run("Max", {i32({2}, {5, -5})}, {}, 13);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(values<int32_t>(*one), (std::vector<int32_t>{5, -5}));
}

TEST(ElementwiseBinary, WhereBroadcastsAnyDtype) {
  auto cond = boolean({2, 1}, {true, false});
  auto s = run("Where", {cond, make<std::string>(DataType::kString, {2}, {"a", "b"}),
                         make<std::string>(DataType::kString, {1}, {"z"})}, {}, 16);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(values<std::string>(*s), (std::vector<std::string>{"a", "b", "z", "z"}));
  const Shape sc = {3, 1, 4}, sx = {1, 5, 4}, sy = {5, 1};
  std::vector<bool> vc;
  for (int i = 0; i < 12; ++i) vc.push_back(i % 3 == 0);
  auto vx = random_floats(20, -1, 1, 3), vy = random_floats(5, -1, 1, 4);
  auto out = run("Where", {boolean(sc, vc), f32(sx, vx), f32(sy, vy)}, {}, 16);
  ASSERT_TRUE(out.ok());
  const Shape so = {3, 5, 4};
  ASSERT_EQ(out->shape(), so);
  for (int64_t i = 0; i < 60; ++i) {
    const float want = vc[bcast_index(so, sc, i)] ? vx[bcast_index(so, sx, i)] : vy[bcast_index(so, sy, i)];
    ASSERT_EQ(out->data<float>()[i], want) << i;
  }
  auto i64w = run("Where", {boolean({2}, {true, false}), i64({2}, {1, 2}), i64({2}, {3, 4})}, {}, 16);
  ASSERT_TRUE(i64w.ok());
  EXPECT_EQ(values<int64_t>(*i64w), (std::vector<int64_t>{1, 4}));
}

TEST(ElementwiseBinary, LegacyBroadcastAttribute) {
  // Opset 6: B of shape [3] aligned at axis 1 of A [2,3,2].
  std::vector<float> va(12, 1.0f);
  auto out = run("Add", {f32({2, 3, 2}, va), f32({3}, {10, 20, 30})}, {{"broadcast", attr_i(1)}, {"axis", attr_i(1)}}, 6);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto v = values<float>(*out);
  EXPECT_EQ(v[0], 11);
  EXPECT_EQ(v[2], 21);
  EXPECT_EQ(v[5], 31);
  EXPECT_EQ(v[6], 11);
}

TEST(ElementwiseBinary, IntegerArithmeticMatchesReference) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> d(-1000, 1000);
  std::vector<int64_t> a(200), b(200);
  for (int i = 0; i < 200; ++i) {
    a[i] = d(rng);
    b[i] = d(rng);
    if (b[i] == 0) b[i] = 7;
  }
  auto add = run("Add", {i64({200}, a), i64({200}, b)});
  auto mul = run("Mul", {i64({200}, a), i64({200}, b)});
  auto div = run("Div", {i64({200}, a), i64({200}, b)});
  auto mod = run("Mod", {i64({200}, a), i64({200}, b)});
  ASSERT_TRUE(add.ok() && mul.ok() && div.ok() && mod.ok());
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(add->data<int64_t>()[i], a[i] + b[i]);
    EXPECT_EQ(mul->data<int64_t>()[i], a[i] * b[i]);
    EXPECT_EQ(div->data<int64_t>()[i], a[i] / b[i]);
    const int64_t m = ((a[i] % b[i]) + b[i]) % b[i];
    EXPECT_EQ(mod->data<int64_t>()[i], m) << a[i] << " mod " << b[i];
  }
}

TEST(ElementwiseShapes, BroadcastAndTypes) {
  ir::Graph g;
  auto* a = g.add_value("a", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim("N"), ir::Dim(1), ir::Dim(4)})));
  auto* b = g.add_value("b", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim(3), ir::Dim(1)})));
  auto* c = g.add_value("c");
  auto* d = g.add_value("d");
  auto* e = g.add_value("e");
  a->is_input = b->is_input = true;
  g.inputs = {a, b};
  ir::Node* add = g.add_node("Add", "", {a, b}, {c}, "add");
  add->opset = 14;
  ir::Node* less = g.add_node("Less", "", {a, b}, {d}, "less");
  less->opset = 13;
  ir::Node* cast = g.add_node("Cast", "", {c}, {e}, "cast");
  cast->opset = 21;
  cast->attrs["to"] = attr_i(static_cast<int64_t>(DataType::kFloat16));
  ASSERT_TRUE(ops::infer_graph(g).ok());
  EXPECT_EQ(c->type.dtype, DataType::kFloat32);
  ASSERT_EQ(c->type.shape.rank(), 3);
  EXPECT_EQ(c->type.shape.dims[0].symbol, "N");
  EXPECT_EQ(c->type.shape.dims[1].value, 3);
  EXPECT_EQ(c->type.shape.dims[2].value, 4);
  EXPECT_EQ(d->type.dtype, DataType::kBool);
  EXPECT_EQ(e->type.dtype, DataType::kFloat16);
  EXPECT_EQ(e->type.shape.rank(), 3);
}
