// Unit tests of the misc kernel family (Einsum, Unique, random, signal, string, NMS, Det) against
// naive references and hand-computed examples.
#include <cmath>
#include <complex>
#include <map>

#include "ops/op_table.h"
#include "test_reduce_helpers.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

Tensor einsum(const std::string& eq, const std::vector<Tensor>& in) {
  OneNode n("Einsum", 12, in);
  n.s("equation", eq);
  return n.out();
}

void expect_near(const Tensor& t, const std::vector<double>& want, double tol = 1e-4) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.data<float>()[i], want[i], tol) << "at " << i;
}

}  // namespace

// ---- Einsum

TEST(MiscEinsum, MatmulTransposeTraceBatch) {
  const auto a = random_floats(6, 1), b = random_floats(12, 2);
  // matmul ij,jk->ik
  std::vector<double> mm(8, 0);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 3; ++j) mm[i * 4 + k] += a[i * 3 + j] * b[j * 4 + k];
  Tensor y = einsum("ij,jk->ik", {f32({2, 3}, a), f32({3, 4}, b)});
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  expect_near(y, mm);
  // implicit output: same
  expect_near(einsum("ij,jk", {f32({2, 3}, a), f32({3, 4}, b)}), mm);
  // transpose
  Tensor t = einsum("ij->ji", {f32({2, 3}, a)});
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  expect_near(t, {a[0], a[3], a[1], a[4], a[2], a[5]});
  // implicit transpose: "ba" → output labels sorted "ab"
  expect_near(einsum("ba", {f32({2, 3}, a)}), {a[0], a[3], a[1], a[4], a[2], a[5]});
  // trace and diagonal
  const auto sq = random_floats(9, 3);
  expect_near(einsum("ii", {f32({3, 3}, sq)}), {sq[0] + sq[4] + sq[8]});
  expect_near(einsum("ii->i", {f32({3, 3}, sq)}), {sq[0], sq[4], sq[8]});
  // batch matmul with ellipsis
  const auto x = random_floats(2 * 2 * 3, 4), w = random_floats(2 * 3 * 2, 5);
  Tensor bm = einsum("...ij,...jk->...ik", {f32({2, 2, 3}, x), f32({2, 3, 2}, w)});
  EXPECT_EQ(bm.shape(), (Shape{2, 2, 2}));
  std::vector<double> ref(8, 0);
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k)
        for (int j = 0; j < 3; ++j) ref[(n * 2 + i) * 2 + k] += x[(n * 2 + i) * 3 + j] * w[(n * 3 + j) * 2 + k];
  expect_near(bm, ref);
  // ellipsis broadcasting: [2,1,3] with [4,3] → "...j,...j->..." gives [2,4]
  const auto p = random_floats(6, 6), q = random_floats(12, 7);
  Tensor bc = einsum("...j,...j->...", {f32({2, 1, 3}, p), f32({4, 3}, q)});
  EXPECT_EQ(bc.shape(), (Shape{2, 4}));
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double s = 0;
      for (int j = 0; j < 3; ++j) s += p[i * 3 + j] * q[k * 3 + j];
      EXPECT_NEAR(bc.data<float>()[i * 4 + k], s, 1e-5);
    }
  // full sum and outer product
  expect_near(einsum("ij->", {f32({2, 3}, a)}), {a[0] + a[1] + a[2] + a[3] + a[4] + a[5]});
  Tensor op = einsum("i,j->ij", {f32({2}, {1, 2}), f32({3}, {3, 4, 5})});
  expect_near(op, {3, 4, 5, 6, 8, 10});
}

TEST(MiscEinsum, IntegersAndErrors) {
  Tensor y = einsum("i,i->", {make_tensor<int64_t>(DataType::kInt64, {3}, {1, 2, 3}), make_tensor<int64_t>(DataType::kInt64, {3}, {4, 5, 6})});
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{32}));
  OneNode bad("Einsum", 12, {f32({2, 3}, std::vector<float>(6)), f32({4, 2}, std::vector<float>(8))});
  bad.s("equation", "ij,jk->ik");
  EXPECT_FALSE(bad.run().ok());
  OneNode rank("Einsum", 12, {f32({2, 3}, std::vector<float>(6))});
  rank.s("equation", "ijk->i");
  EXPECT_FALSE(rank.run().ok());
}

// ---- Unique

TEST(MiscUnique, SortedUnsortedAndAxis) {
  Tensor x = f32({6}, {2, 1, 1, 3, 4, 3});
  for (int sorted = 0; sorted <= 1; ++sorted) {
    OneNode n("Unique", 11, {x}, 4);
    n.i("sorted", sorted);
    auto r = n.run();
    ASSERT_TRUE(r.ok());
    const auto y = values<float>((*r)[0].tensor);
    const auto idx = values<int64_t>((*r)[1].tensor), inv = values<int64_t>((*r)[2].tensor), cnt = values<int64_t>((*r)[3].tensor);
    if (sorted) {
      EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4}));
      EXPECT_EQ(idx, (std::vector<int64_t>{1, 0, 3, 4}));
      EXPECT_EQ(inv, (std::vector<int64_t>{1, 0, 0, 2, 3, 2}));
      EXPECT_EQ(cnt, (std::vector<int64_t>{2, 1, 2, 1}));
    } else {
      EXPECT_EQ(y, (std::vector<float>{2, 1, 3, 4}));
      EXPECT_EQ(idx, (std::vector<int64_t>{0, 1, 3, 4}));
      EXPECT_EQ(inv, (std::vector<int64_t>{0, 1, 1, 2, 3, 2}));
      EXPECT_EQ(cnt, (std::vector<int64_t>{1, 2, 2, 1}));
    }
    // Invariant: y[inv[i]] == x[i]
    for (size_t i = 0; i < inv.size(); ++i) EXPECT_EQ(y[inv[i]], x.data<float>()[i]);
  }
  // Rows along axis 0, negative axis.
  Tensor m = make_tensor<int32_t>(DataType::kInt32, {3, 2}, {1, 0, 1, 0, 0, 5});
  OneNode a("Unique", 11, {m}, 4);
  a.i("axis", -2);
  auto r = a.run();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].tensor.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int32_t>((*r)[0].tensor), (std::vector<int32_t>{0, 5, 1, 0}));
  EXPECT_EQ(values<int64_t>((*r)[2].tensor), (std::vector<int64_t>{1, 1, 0}));
}

// ---- Random

TEST(MiscRandom, SeededShapesAndRanges) {
  auto uniform = [](float seed) {
    OneNode n("RandomUniform", 1, {});
    n.ints("shape", {3, 4}).f("low", 2.f).f("high", 5.f).f("seed", seed);
    return n.out();
  };
  Tensor a = uniform(1.f), b = uniform(1.f), c = uniform(2.f);
  EXPECT_EQ(a.shape(), (Shape{3, 4}));
  EXPECT_EQ(values<float>(a), values<float>(b));
  EXPECT_NE(values<float>(a), values<float>(c));
  for (float v : values<float>(a)) EXPECT_TRUE(v >= 2.f && v < 5.f);

  OneNode nl("RandomNormalLike", 1, {make_tensor<double>(DataType::kFloat64, {1000}, std::vector<double>(1000))});
  nl.f("mean", 3.f).f("scale", 0.5f).f("seed", 7.f);
  Tensor y = nl.out();
  ASSERT_EQ(y.dtype(), DataType::kFloat64);
  double mean = 0, var = 0;
  for (double v : values<double>(y)) mean += v / 1000;
  for (double v : values<double>(y)) var += (v - mean) * (v - mean) / 1000;
  EXPECT_NEAR(mean, 3.0, 0.1);
  EXPECT_NEAR(std::sqrt(var), 0.5, 0.1);

  OneNode be("Bernoulli", 15, {f32({4}, {0, 1, 0, 1})});
  be.i("dtype", static_cast<int64_t>(DataType::kInt32)).f("seed", 3.f);
  EXPECT_EQ(values<int32_t>(be.out()), (std::vector<int32_t>{0, 1, 0, 1}));

  OneNode mu("Multinomial", 7, {f32({2, 3}, {0, -100, -100, -100, -100, 0})});
  mu.i("sample_size", 5).f("seed", 1.f);
  Tensor s = mu.out();
  EXPECT_EQ(s.shape(), (Shape{2, 5}));
  EXPECT_EQ(values<int32_t>(s), (std::vector<int32_t>{0, 0, 0, 0, 0, 2, 2, 2, 2, 2}));
}

// ---- Signal

TEST(MiscSignal, DftAgainstNaive) {
  const int n = 6;
  const auto x = random_floats(2 * n, 8);
  auto naive = [&](int b, int k, bool inv, int len) {
    std::complex<double> s = 0;
    for (int t = 0; t < len; ++t) {
      const double v = t < n ? x[b * n + t] : 0.0;
      s += v * std::polar(1.0, (inv ? 2 : -2) * M_PI * k * t / len);
    }
    return inv ? s / double(len) : s;
  };
  // opset 17: axis attribute 1; real input [2, 6, 1]
  OneNode d("DFT", 17, {f32({2, n, 1}, x)});
  Tensor y = d.out();
  EXPECT_EQ(y.shape(), (Shape{2, n, 2}));
  for (int b = 0; b < 2; ++b)
    for (int k = 0; k < n; ++k) {
      EXPECT_NEAR(y.data<float>()[(b * n + k) * 2], naive(b, k, false, n).real(), 1e-4);
      EXPECT_NEAR(y.data<float>()[(b * n + k) * 2 + 1], naive(b, k, false, n).imag(), 1e-4);
    }
  // opset 20: onesided with zero padding to 8, axis input
  OneNode o("DFT", 20, {f32({2, n, 1}, x), i64({}, {8}), i64({}, {1})});
  o.i("onesided", 1);
  Tensor z = o.out();
  EXPECT_EQ(z.shape(), (Shape{2, 5, 2}));
  for (int b = 0; b < 2; ++b)
    for (int k = 0; k < 5; ++k) EXPECT_NEAR(z.data<float>()[(b * 5 + k) * 2 + 1], naive(b, k, false, 8).imag(), 1e-4);
  // Round trip: inverse of the full forward transform gives the signal back (imag ≈ 0).
  OneNode inv("DFT", 17, {y});
  inv.i("inverse", 1);
  Tensor back = inv.out();
  for (int i = 0; i < 2 * n; ++i) {
    EXPECT_NEAR(back.data<float>()[2 * i], x[i], 1e-5);
    EXPECT_NEAR(back.data<float>()[2 * i + 1], 0, 1e-5);
  }
  // irfft: inverse + onesided of the half spectrum gives the real signal, length 2*(m-1)
  OneNode full("DFT", 17, {f32({1, 8, 1}, random_floats(8, 9))});
  Tensor spec = full.out();
  std::vector<float> half(spec.data<float>(), spec.data<float>() + 5 * 2);
  OneNode ir("DFT", 17, {f32({1, 5, 2}, half)});
  ir.i("inverse", 1).i("onesided", 1);
  Tensor sig = ir.out();
  EXPECT_EQ(sig.shape(), (Shape{1, 8, 1}));
  const auto orig = random_floats(8, 9);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(sig.data<float>()[i], orig[i], 1e-5);
}

TEST(MiscSignal, StftWindowsMel) {
  const auto x = random_floats(16, 10);
  OneNode s("STFT", 17, {f32({1, 16, 1}, x), i64({}, {4}), Tensor(), i64({}, {8})});
  Tensor y = s.out();
  EXPECT_EQ(y.shape(), (Shape{1, 3, 5, 2}));
  // frame 1, bin 0 = sum of x[4..12)
  double dc = 0;
  for (int t = 4; t < 12; ++t) dc += x[t];
  EXPECT_NEAR(y.data<float>()[(1 * 5 + 0) * 2], dc, 1e-5);

  OneNode hann("HannWindow", 17, {make_tensor<int32_t>(DataType::kInt32, {}, {4})});
  expect_near(hann.out(), {0, 0.5, 1, 0.5});
  OneNode hs("HannWindow", 17, {make_tensor<int32_t>(DataType::kInt32, {}, {5})});
  hs.i("periodic", 0);
  expect_near(hs.out(), {0, 0.5, 1, 0.5, 0});
  OneNode ham("HammingWindow", 17, {i64({}, {2})});
  expect_near(ham.out(), {25.0 / 46 - 21.0 / 46, 1.0});
  OneNode bl("BlackmanWindow", 17, {i64({}, {4})});
  bl.i("output_datatype", static_cast<int64_t>(DataType::kFloat64));
  Tensor bw = bl.out();
  ASSERT_EQ(bw.dtype(), DataType::kFloat64);
  EXPECT_NEAR(bw.data<double>()[1], 0.42 - 0.5 * std::cos(M_PI / 2) + 0.08 * std::cos(M_PI), 1e-12);

  OneNode mel("MelWeightMatrix", 17, {i64({}, {8}), i64({}, {16}), i64({}, {8192}), f32({}, {0}), f32({}, {4096})});
  Tensor m = mel.out();
  EXPECT_EQ(m.shape(), (Shape{9, 8}));
  for (float v : values<float>(m)) EXPECT_TRUE(v >= 0 && v <= 1);
}

// ---- Strings

TEST(MiscString, NormalizerConcatSplitRegex) {
  auto strs = [](const Shape& s, std::vector<std::string> v) { return make_tensor(DataType::kString, s, v); };
  OneNode n("StringNormalizer", 10, {strs({4}, {"monday", "Tuesday", "MONDAY", "x"})});
  n.s("case_change_action", "UPPER").strings("stopwords", {"monday"});
  Tensor y = n.out();
  EXPECT_EQ(values<std::string>(y), (std::vector<std::string>{"TUESDAY", "X"}));
  OneNode cs("StringNormalizer", 10, {strs({1, 2}, {"monday", "MONDAY"})});
  cs.i("is_case_sensitive", 1).strings("stopwords", {"monday"}).s("case_change_action", "LOWER");
  Tensor z = cs.out();
  EXPECT_EQ(z.shape(), (Shape{1, 1}));
  EXPECT_EQ(values<std::string>(z), (std::vector<std::string>{"monday"}));
  OneNode all("StringNormalizer", 10, {strs({1}, {"a"})});
  all.strings("stopwords", {"a"});
  EXPECT_EQ(values<std::string>(all.out()), (std::vector<std::string>{""}));

  OneNode c("StringConcat", 20, {strs({2, 1}, {"a", "b"}), strs({2}, {"x", "y"})});
  Tensor cc = c.out();
  EXPECT_EQ(cc.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<std::string>(cc), (std::vector<std::string>{"ax", "ay", "bx", "by"}));

  OneNode sp("StringSplit", 20, {strs({2}, {"a.b..c", "d"})}, 2);
  sp.s("delimiter", ".");
  auto r = sp.run();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].tensor.shape(), (Shape{2, 4}));
  EXPECT_EQ(values<std::string>((*r)[0].tensor), (std::vector<std::string>{"a", "b", "", "c", "d", "", "", ""}));
  EXPECT_EQ(values<int64_t>((*r)[1].tensor), (std::vector<int64_t>{4, 1}));
  OneNode ws("StringSplit", 20, {strs({1}, {"  hello  big world "})}, 2);
  ws.i("maxsplit", 1);
  auto rw = ws.run();
  ASSERT_TRUE(rw.ok());
  EXPECT_EQ(values<std::string>((*rw)[0].tensor), (std::vector<std::string>{"hello", "big world"}));

  OneNode re("RegexFullMatch", 20, {strs({3}, {"www.google.com", "www.facebook.com", "google.com"})});
  re.s("pattern", R"(www\.[\w.-]+\.\bcom\b)");
  EXPECT_EQ(values<bool>(re.out()), (std::vector<bool>{true, true, false}));
  OneNode bad("RegexFullMatch", 20, {strs({1}, {"a"})});
  bad.s("pattern", "(");
  EXPECT_FALSE(bad.run().ok());
}

// ---- NMS / Det

TEST(MiscDetect, NonMaxSuppression) {
  // Three boxes: 0 and 1 overlap heavily (IoU 0.81), 2 is apart.
  Tensor boxes = f32({1, 3, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1, 0, 2, 1, 3});
  Tensor scores = f32({1, 2, 3}, {0.9f, 0.95f, 0.5f, 0.1f, 0.2f, 0.3f});
  OneNode n("NonMaxSuppression", 11, {boxes, scores, i64({1}, {3}), f32({1}, {0.5f}), f32({1}, {0.15f})});
  Tensor y = n.out();
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  EXPECT_EQ(values<int64_t>(y), (std::vector<int64_t>{0, 0, 1, 0, 0, 2, 0, 1, 2, 0, 1, 1}));
  // max_output 1 per class, center-point format
  Tensor cb = f32({1, 2, 4}, {0.5f, 0.5f, 1, 1, 0.5f, 0.6f, 1, 1});
  OneNode c("NonMaxSuppression", 11, {cb, f32({1, 1, 2}, {0.3f, 0.4f}), i64({1}, {1})});
  c.i("center_point_box", 1);
  EXPECT_EQ(values<int64_t>(c.out()), (std::vector<int64_t>{0, 0, 1}));
  // no max_output → nothing selected
  OneNode z("NonMaxSuppression", 11, {boxes, scores});
  EXPECT_EQ(z.out().shape(), (Shape{0, 3}));
}

TEST(MiscDetect, Det) {
  OneNode d("Det", 11, {f32({2, 2, 2}, {1, 2, 3, 4, 2, 0, 0, 3})});
  expect_near(d.out(), {-2, 6});
  // 3x3 needing a pivot swap
  OneNode p("Det", 11, {f32({3, 3}, {0, 1, 2, 1, 0, 3, 4, -3, 8})});
  expect_near(p.out(), {-2});
  OneNode bad("Det", 11, {f32({2, 3}, std::vector<float>(6))});
  EXPECT_FALSE(bad.run().ok());
}

// ---- Shape functions

TEST(MiscShape, ResizeWindowsDftDet) {
  auto run = [](ir::Node* n) { Status st = ops::infer_node(*n); EXPECT_TRUE(st.ok()) << st.to_string(); };
  ir::Graph g;
  auto* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({1, 3, 4, 6})));
  auto* scales = g.add_value("scales", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({4})));
  scales->constant = f32({4}, {1, 1, 2, 0.5f});
  auto* y = g.add_value("y");
  ir::Node* n = g.add_node("Resize", "", {x, nullptr, scales}, {y}, "r");
  n->opset = 13;
  run(n);
  EXPECT_EQ(y->type.shape.to_string(), ir::SymShape::of({1, 3, 8, 3}).to_string());

  auto* sizes = g.add_value("sizes", ir::Type::tensor(DataType::kInt64, ir::SymShape::of({2})));
  sizes->constant = i64({2}, {8, 8});
  auto* y2 = g.add_value("y2");
  ir::Node* n2 = g.add_node("Resize", "", {x, nullptr, nullptr, sizes}, {y2}, "r2");
  n2->opset = 19;
  ir::Attribute axes; axes.kind = ir::Attribute::Kind::kInts; axes.ints = {2, 3};
  n2->attrs["axes"] = axes;
  ir::Attribute pol; pol.kind = ir::Attribute::Kind::kString; pol.s = "not_larger";
  n2->attrs["keep_aspect_ratio_policy"] = pol;
  run(n2);
  // scale = min(8/4, 8/6) = 4/3 → 4*4/3 = 5.33 → 5, 6*4/3 = 8
  EXPECT_EQ(y2->type.shape.to_string(), ir::SymShape::of({1, 3, 5, 8}).to_string());

  auto* size = g.add_value("size", ir::Type::tensor(DataType::kInt64, ir::SymShape::of({})));
  size->constant = i64({}, {10});
  auto* w = g.add_value("w");
  run(g.add_node("HannWindow", "", {size}, {w}, "h"));
  EXPECT_EQ(w->type.shape.to_string(), ir::SymShape::of({10}).to_string());

  auto* sig = g.add_value("sig", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 10, 1})));
  auto* f = g.add_value("f");
  ir::Node* d = g.add_node("DFT", "", {sig}, {f}, "d");
  d->opset = 17;
  ir::Attribute one; one.kind = ir::Attribute::Kind::kInt; one.i = 1;
  d->attrs["onesided"] = one;
  run(d);
  EXPECT_EQ(f->type.shape.to_string(), ir::SymShape::of({2, 6, 2}).to_string());

  auto* m = g.add_value("m", ir::Type::tensor(DataType::kFloat64, ir::SymShape::of({5, 3, 3})));
  auto* det = g.add_value("det");
  run(g.add_node("Det", "", {m}, {det}, "det"));
  EXPECT_EQ(det->type.shape.to_string(), ir::SymShape::of({5}).to_string());
  EXPECT_EQ(det->type.dtype, DataType::kFloat64);
}
