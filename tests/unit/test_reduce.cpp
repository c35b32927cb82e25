// Unit tests of the reduce kernel family against naive references.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/op_table.h"
#include "test_reduce_helpers.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

// Naive reduction over `axes` (all when empty) in double: walks every input index.
std::vector<double> ref_reduce(const std::string& op, const Shape& shape, const std::vector<float>& x,
                               std::vector<int64_t> axes, bool keepdims, Shape* out_shape) {
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> red(rank, axes.empty());
  for (int64_t a : axes) red[a < 0 ? a + rank : a] = true;
  Shape os;
  for (int i = 0; i < rank; ++i)
    if (!red[i]) os.push_back(shape[i]);
    else if (keepdims) os.push_back(1);
  *out_shape = os;
  const int64_t on = shape_numel(os);
  std::vector<std::vector<double>> groups(on);
  std::vector<int64_t> idx(rank, 0);
  for (size_t k = 0; k < x.size(); ++k) {
    int64_t o = 0;
    for (int d = 0; d < rank; ++d)
      if (!red[d]) o = o * shape[d] + idx[d];
    groups[o].push_back(x[k]);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  std::vector<double> out(on);
  for (int64_t o = 0; o < on; ++o) {
    const auto& g = groups[o];
    double r = 0;
    if (op == "ReduceSum") for (double v : g) r += v;
    else if (op == "ReduceMean") { for (double v : g) r += v; r /= g.size(); }
    else if (op == "ReduceMax") { r = -INFINITY; for (double v : g) r = std::max(r, v); }
    else if (op == "ReduceMin") { r = INFINITY; for (double v : g) r = std::min(r, v); }
    else if (op == "ReduceProd") { r = 1; for (double v : g) r *= v; }
    else if (op == "ReduceL1") for (double v : g) r += std::fabs(v);
    else if (op == "ReduceL2") { for (double v : g) r += v * v; r = std::sqrt(r); }
    else if (op == "ReduceLogSum") { for (double v : g) r += v; r = std::log(r); }
    else if (op == "ReduceLogSumExp") { for (double v : g) r += std::exp(v); r = std::log(r); }
    else if (op == "ReduceSumSquare") for (double v : g) r += v * v;
    out[o] = r;
  }
  return out;
}

const char* kReduceOps[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                            "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};

void expect_near_all(const std::vector<double>& ref, const std::vector<float>& got, double rtol, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) EXPECT_EQ(ref[i], got[i]) << what << " @" << i;
    else EXPECT_NEAR(ref[i], got[i], rtol * (1 + std::fabs(ref[i]))) << what << " @" << i;
  }
}

}  // namespace

TEST(ReduceKernels, AllOpsRandomAxesBothOpsets) {
  const Shape shape = {3, 4, 5};
  // Positive data keeps LogSum defined.
  const auto x = random_floats(60, 1, 0.1f, 1.5f);
  const std::vector<std::vector<int64_t>> axes_cases = {{}, {0}, {1}, {-1}, {0, 2}, {-3, -2}, {0, 1, 2}};
  for (const char* op : kReduceOps) {
    const int new_opset = std::string(op) == "ReduceSum" ? 13 : 18;
    for (const auto& axes : axes_cases) {
      for (int keep = 0; keep <= 1; ++keep) {
        Shape os;
        const auto ref = ref_reduce(op, shape, x, axes, keep, &os);
        // Attribute form (opset 11) and input form.
        OneNode a(op, 11, {f32(shape, x)});
        a.i("keepdims", keep);
        if (!axes.empty()) a.ints("axes", axes);
        Tensor ya = a.out();
        EXPECT_EQ(ya.shape(), os) << op;
        expect_near_all(ref, values<float>(ya), 1e-5, std::string(op) + " attr");
        OneNode b(op, new_opset, {f32(shape, x), axes.empty() ? Tensor() : i64({(int64_t)axes.size()}, axes)});
        b.i("keepdims", keep);
        Tensor yb = b.out();
        EXPECT_EQ(yb.shape(), os) << op;
        expect_near_all(ref, values<float>(yb), 1e-5, std::string(op) + " input");
      }
    }
  }
}

TEST(ReduceKernels, EmptySetIdentities) {
  // Reducing a zero-sized axis gives the identity of the reduction (onnx test_reduce_*_empty_set).
  const std::vector<std::pair<std::string, float>> cases = {
      {"ReduceSum", 0.f}, {"ReduceProd", 1.f}, {"ReduceMax", -INFINITY}, {"ReduceMin", INFINITY},
      {"ReduceL1", 0.f}, {"ReduceL2", 0.f}, {"ReduceLogSum", -INFINITY}, {"ReduceLogSumExp", -INFINITY},
      {"ReduceSumSquare", 0.f}};
  for (const auto& [op, want] : cases) {
    OneNode n(op, 20, {f32({2, 0, 4}, {}), i64({1}, {1})});
    Tensor y = n.out();
    ASSERT_EQ(y.shape(), (Shape{2, 1, 4})) << op;
    for (float v : values<float>(y)) EXPECT_EQ(v, want) << op;
  }
  // A zero-sized kept axis gives an empty output.
  OneNode z("ReduceSum", 13, {f32({2, 0, 4}, {}), i64({1}, {2})});
  EXPECT_EQ(z.out().shape(), (Shape{2, 0, 1}));
  // Integer max over nothing is the lowest value.
  OneNode im("ReduceMax", 18, {make_tensor<int32_t>(DataType::kInt32, {0, 3}, {}), i64({1}, {0})});
  im.i("keepdims", 0);
  EXPECT_EQ(values<int32_t>(im.out()), std::vector<int32_t>(3, std::numeric_limits<int32_t>::lowest()));
}

TEST(ReduceKernels, NoopWithEmptyAxes) {
  const auto x = random_floats(12, 2);
  OneNode n("ReduceSum", 13, {f32({3, 2, 2}, x), i64({0}, {})});
  n.i("noop_with_empty_axes", 1);
  Tensor y = n.out();
  EXPECT_EQ(y.shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(values<float>(y), x);
  // Without the flag, empty axes reduce everything.
  OneNode m("ReduceSum", 13, {f32({3, 2, 2}, x), i64({0}, {})});
  m.i("keepdims", 0);
  Tensor z = m.out();
  EXPECT_EQ(z.shape(), Shape{});
  EXPECT_NEAR(values<float>(z)[0], std::accumulate(x.begin(), x.end(), 0.0), 1e-5);
}

TEST(ReduceKernels, BoolMaxMin) {
  Tensor x = make_tensor<bool>(DataType::kBool, {4, 2}, {true, true, true, false, false, true, false, false});
  OneNode mx("ReduceMax", 20, {x, i64({1}, {1})});
  EXPECT_EQ(values<bool>(mx.out()), (std::vector<bool>{true, true, true, false}));
  OneNode mn("ReduceMin", 20, {x, i64({1}, {1})});
  EXPECT_EQ(values<bool>(mn.out()), (std::vector<bool>{true, false, false, false}));
}

TEST(ReduceKernels, IntegerAndHalfDtypes) {
  const Shape shape = {4, 6};
  std::vector<int32_t> xi(24);
  for (int i = 0; i < 24; ++i) xi[i] = (i * 7) % 11 - 5;
  OneNode s("ReduceSum", 13, {make_tensor(DataType::kInt32, shape, xi), i64({1}, {-1})});
  s.i("keepdims", 0);
  std::vector<int32_t> want(4, 0);
  for (int i = 0; i < 24; ++i) want[i / 6] += xi[i];
  EXPECT_EQ(values<int32_t>(s.out()), want);

  OneNode l1("ReduceL1", 18, {make_tensor(DataType::kInt32, shape, xi), i64({1}, {0})});
  std::vector<int32_t> wl1(6, 0);
  for (int i = 0; i < 24; ++i) wl1[i % 6] += std::abs(xi[i]);
  EXPECT_EQ(values<int32_t>(l1.out()), wl1);

  std::vector<uint8_t> xu(24);
  for (int i = 0; i < 24; ++i) xu[i] = static_cast<uint8_t>(i * 13);
  OneNode mn("ReduceMin", 18, {make_tensor(DataType::kUInt8, shape, xu), i64({1}, {1})});
  mn.i("keepdims", 0);
  std::vector<uint8_t> wmn(4, 255);
  for (int i = 0; i < 24; ++i) wmn[i / 6] = std::min(wmn[i / 6], xu[i]);
  EXPECT_EQ(values<uint8_t>(mn.out()), wmn);

  // float16 mean accumulates in float.
  const auto xf = random_floats(24, 3);
  std::vector<uint16_t> h(24);
  for (int i = 0; i < 24; ++i) h[i] = f32_to_f16(xf[i]);
  OneNode m("ReduceMean", 18, {make_tensor(DataType::kFloat16, shape, h), i64({1}, {1})});
  m.i("keepdims", 0);
  Tensor y = m.out();
  ASSERT_EQ(y.dtype(), DataType::kFloat16);
  for (int r = 0; r < 4; ++r) {
    double ref = 0;
    for (int c = 0; c < 6; ++c) ref += f16_to_f32(h[r * 6 + c]);
    EXPECT_NEAR(f16_to_f32(y.data<uint16_t>()[r]), ref / 6, 2e-3);
  }
  // bfloat16 and double
  std::vector<uint16_t> b(24);
  for (int i = 0; i < 24; ++i) b[i] = f32_to_bf16(xf[i]);
  OneNode bm("ReduceMax", 18, {make_tensor(DataType::kBFloat16, shape, b)});
  bm.i("keepdims", 0);
  float bmax = -INFINITY;
  for (auto v : b) bmax = std::max(bmax, bf16_to_f32(v));
  EXPECT_EQ(bf16_to_f32(bm.out().data<uint16_t>()[0]), bmax);
  std::vector<double> xd(xf.begin(), xf.end());
  OneNode dp("ReduceSumSquare", 18, {make_tensor(DataType::kFloat64, shape, xd), i64({1}, {0})});
  Tensor yd = dp.out();
  for (int c = 0; c < 6; ++c) {
    double ref = 0;
    for (int r = 0; r < 4; ++r) ref += xd[r * 6 + c] * xd[r * 6 + c];
    EXPECT_NEAR(yd.data<double>()[c], ref, 1e-12);
  }
}

TEST(ReduceKernels, BadAxisIsAnError) {
  OneNode n("ReduceSum", 13, {f32({2, 3}, std::vector<float>(6, 1)), i64({1}, {2})});
  EXPECT_FALSE(n.run().ok());
  OneNode m("ReduceMean", 11, {f32({2, 3}, std::vector<float>(6, 1))});
  m.ints("axes", {-3});
  EXPECT_FALSE(m.run().ok());
}

// ---- ArgMax / ArgMin

TEST(ReduceArg, RandomAgainstNaive) {
  const Shape shape = {3, 5, 4};
  std::vector<float> x = random_floats(60, 4);
  for (auto& v : x) v = std::round(v * 3);  // many ties
  for (const char* op : {"ArgMax", "ArgMin"}) {
    const bool is_max = std::string(op) == "ArgMax";
    for (int64_t axis : {0, 1, 2, -1, -2}) {
      for (int keep = 0; keep <= 1; ++keep) {
        for (int last = 0; last <= 1; ++last) {
          OneNode n(op, 13, {f32(shape, x)});
          n.i("axis", axis).i("keepdims", keep).i("select_last_index", last);
          Tensor y = n.out();
          const int64_t ax = axis < 0 ? axis + 3 : axis;
          Shape os = shape;
          if (keep) os[ax] = 1; else os.erase(os.begin() + ax);
          ASSERT_EQ(y.shape(), os);
          // naive
          int64_t outer = 1, inner = 1;
          for (int64_t d = 0; d < ax; ++d) outer *= shape[d];
          for (int64_t d = ax + 1; d < 3; ++d) inner *= shape[d];
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
              int64_t best = 0;
              for (int64_t k = 1; k < shape[ax]; ++k) {
                const float v = x[(o * shape[ax] + k) * inner + i], b = x[(o * shape[ax] + best) * inner + i];
                if (is_max ? (v > b || (last && v == b)) : (v < b || (last && v == b))) best = k;
              }
              EXPECT_EQ(y.data<int64_t>()[o * inner + i], best) << op << " axis " << axis << " last " << last;
            }
        }
      }
    }
  }
}

TEST(ReduceArg, TiesSelectLastIndex) {
  Tensor x = f32({2, 3}, {2, 2, 1, 1, 3, 3});
  OneNode a("ArgMax", 12, {x});
  a.i("axis", 1).i("keepdims", 0);
  EXPECT_EQ(values<int64_t>(a.out()), (std::vector<int64_t>{0, 1}));
  OneNode b("ArgMax", 12, {x});
  b.i("axis", 1).i("keepdims", 0).i("select_last_index", 1);
  EXPECT_EQ(values<int64_t>(b.out()), (std::vector<int64_t>{1, 2}));
  OneNode c("ArgMin", 12, {make_tensor<int64_t>(DataType::kInt64, {4}, {5, -1, 7, -1})});
  c.i("select_last_index", 1);
  EXPECT_EQ(values<int64_t>(c.out()), (std::vector<int64_t>{3}));
}

// ---- TopK

TEST(ReduceTopK, RandomAgainstStableSort) {
  const Shape shape = {4, 7, 3};
  std::vector<float> x = random_floats(84, 5);
  for (auto& v : x) v = std::round(v * 4);  // ties
  for (int64_t axis : {1, -1, 0}) {
    const int64_t ax = axis < 0 ? axis + 3 : axis;
    for (int largest = 0; largest <= 1; ++largest) {
      for (int64_t k : {int64_t(0), int64_t(1), int64_t(3), shape[ax]}) {
        OneNode n("TopK", 11, {f32(shape, x), i64({1}, {k})}, 2);
        n.i("axis", axis).i("largest", largest);
        auto r = n.run();
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        const Tensor& v = (*r)[0].tensor;
        const Tensor& ix = (*r)[1].tensor;
        Shape os = shape;
        os[ax] = k;
        ASSERT_EQ(v.shape(), os);
        int64_t outer = 1, inner = 1;
        for (int64_t d = 0; d < ax; ++d) outer *= shape[d];
        for (int64_t d = ax + 1; d < 3; ++d) inner *= shape[d];
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            std::vector<int64_t> order(shape[ax]);
            std::iota(order.begin(), order.end(), 0);
            auto at = [&](int64_t j) { return x[(o * shape[ax] + j) * inner + i]; };
            std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
              return largest ? at(a) > at(b) : at(a) < at(b);
            });
            for (int64_t j = 0; j < k; ++j) {
              EXPECT_EQ(ix.data<int64_t>()[(o * k + j) * inner + i], order[j]);
              EXPECT_EQ(v.data<float>()[(o * k + j) * inner + i], at(order[j]));
            }
          }
      }
    }
  }
}

TEST(ReduceTopK, OldOpsetAttributeAndBadK) {
  OneNode n("TopK", 1, {f32({5}, {3, 1, 4, 1, 5})}, 2);
  n.i("k", 2);
  auto r = n.run();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{5, 4}));
  EXPECT_EQ(values<int64_t>((*r)[1].tensor), (std::vector<int64_t>{4, 2}));
  OneNode bad("TopK", 11, {f32({5}, {3, 1, 4, 1, 5}), i64({1}, {6})}, 2);
  EXPECT_FALSE(bad.run().ok());
  // int32 smallest
  OneNode s("TopK", 11, {make_tensor<int32_t>(DataType::kInt32, {5}, {3, 1, 4, 1, 5}), i64({1}, {3})}, 2);
  s.i("largest", 0);
  auto rs = s.run();
  ASSERT_TRUE(rs.ok());
  EXPECT_EQ(values<int32_t>((*rs)[0].tensor), (std::vector<int32_t>{1, 1, 3}));
  EXPECT_EQ(values<int64_t>((*rs)[1].tensor), (std::vector<int64_t>{1, 3, 0}));
}

// ---- CumSum

TEST(ReduceCumSum, AllModesAgainstNaive) {
  const Shape shape = {3, 4};
  const auto x = random_floats(12, 6);
  for (int64_t axis : {0, 1, -1}) {
    const int64_t ax = axis < 0 ? axis + 2 : axis;
    for (int excl = 0; excl <= 1; ++excl)
      for (int rev = 0; rev <= 1; ++rev) {
        OneNode n("CumSum", 14, {f32(shape, x), make_tensor<int32_t>(DataType::kInt32, {}, {(int32_t)axis})});
        n.i("exclusive", excl).i("reverse", rev);
        Tensor y = n.out();
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t c = 0; c < 4; ++c) {
            double s = 0;
            const int64_t pos = ax == 0 ? r : c, len = shape[ax];
            for (int64_t j = 0; j < len; ++j) {
              const bool take = rev ? (excl ? j > pos : j >= pos) : (excl ? j < pos : j <= pos);
              if (take) s += ax == 0 ? x[j * 4 + c] : x[r * 4 + j];
            }
            EXPECT_NEAR(y.data<float>()[r * 4 + c], s, 1e-5) << axis << excl << rev;
          }
      }
  }
  OneNode ni("CumSum", 11, {make_tensor<int32_t>(DataType::kInt32, {5}, {1, 2, 3, 4, 5}), i64({}, {0})});
  ni.i("exclusive", 1);
  EXPECT_EQ(values<int32_t>(ni.out()), (std::vector<int32_t>{0, 1, 3, 6, 10}));
}

// ---- Shape functions

namespace {

// Infers `op`'s output types; inputs are (type, optional constant value).
std::vector<ir::Type> infer(const std::string& op, int opset, std::vector<std::pair<ir::Type, Tensor>> ins,
                            int nout, std::function<void(ir::Node&)> attrs = {}) {
  ir::Graph g;
  std::vector<ir::Value*> in, out;
  for (size_t i = 0; i < ins.size(); ++i) {
    ir::Value* v = g.add_value("i" + std::to_string(i), ins[i].first);
    if (ins[i].second.defined()) v->constant = ins[i].second;
    in.push_back(v);
  }
  for (int i = 0; i < nout; ++i) out.push_back(g.add_value("o" + std::to_string(i)));
  ir::Node* n = g.add_node(op, "", in, out, "n");
  n->opset = opset;
  if (attrs) attrs(*n);
  Status st = ops::infer_node(*n);
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<ir::Type> r;
  for (auto* v : out) r.push_back(v->type);
  return r;
}

ir::Type ft(const Shape& s) { return ir::Type::tensor(DataType::kFloat32, ir::SymShape::of(s)); }
ir::Type it(const Shape& s) { return ir::Type::tensor(DataType::kInt64, ir::SymShape::of(s)); }

}  // namespace

TEST(ReduceShape, ReductionsArgTopK) {
  auto r = infer("ReduceSum", 13, {{ft({2, 3, 4}), {}}, {it({1}), i64({1}, {-1})}}, 1);
  EXPECT_EQ(r[0].shape.to_string(), ir::SymShape::of({2, 3, 1}).to_string());
  r = infer("ReduceMean", 11, {{ft({2, 3, 4}), {}}}, 1, [](ir::Node& n) {
    ir::Attribute a; a.kind = ir::Attribute::Kind::kInts; a.ints = {0, 2}; n.attrs["axes"] = a;
    ir::Attribute k; k.kind = ir::Attribute::Kind::kInt; k.i = 0; n.attrs["keepdims"] = k;
  });
  EXPECT_EQ(r[0].shape.to_string(), ir::SymShape::of({3}).to_string());
  EXPECT_EQ(r[0].dtype, DataType::kFloat32);
  // no axes: all reduced
  r = infer("ReduceMax", 18, {{ft({2, 3}), {}}}, 1);
  EXPECT_EQ(r[0].shape.to_string(), ir::SymShape::of({1, 1}).to_string());
  // runtime axes with keepdims keep the rank
  r = infer("ReduceMax", 18, {{ft({2, 3}), {}}, {it({1}), {}}}, 1);
  ASSERT_TRUE(r[0].shape.known);
  EXPECT_EQ(r[0].shape.rank(), 2);
  EXPECT_FALSE(r[0].shape.dims[0].is_static());
  r = infer("ArgMax", 13, {{ft({2, 3, 4}), {}}}, 1, [](ir::Node& n) {
    ir::Attribute a; a.kind = ir::Attribute::Kind::kInt; a.i = -1; n.attrs["axis"] = a;
  });
  EXPECT_EQ(r[0].dtype, DataType::kInt64);
  EXPECT_EQ(r[0].shape.to_string(), ir::SymShape::of({2, 3, 1}).to_string());
  r = infer("TopK", 11, {{ft({2, 8}), {}}, {it({1}), i64({1}, {3})}}, 2);
  EXPECT_EQ(r[0].shape.to_string(), ir::SymShape::of({2, 3}).to_string());
  EXPECT_EQ(r[1].dtype, DataType::kInt64);
  // bad axis is an error
  ir::Graph g;
  auto* x = g.add_value("x", ft({2, 3}));
  auto* ax = g.add_value("ax", it({1}));
  ax->constant = i64({1}, {5});
  ir::Node* n = g.add_node("ReduceSum", "", {x, ax}, {g.add_value("y")}, "n");
  n->opset = 13;
  EXPECT_FALSE(ops::infer_node(*n).ok());
}
