// Conv, ConvTranspose, ConvInteger, QLinearConv against direct-loop references.
#include "test_nn_util.h"

using namespace nntest;

namespace {

struct Win {
  std::vector<int64_t> strides, pads, dilations;
};

// Direct convolution with explicit pads; output dims from the usual floor formula.
std::vector<double> ref_conv(const Tensor& x, const Tensor& w, const Tensor* b, int64_t group, const Win& p,
                             Shape* out_shape, double x_zp = 0, double w_zp = 0) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const size_t n = xs.size() - 2;
  const int64_t N = xs[0], C = xs[1], M = ws[0], Cg = C / group, Mg = M / group;
  Shape in(xs.begin() + 2, xs.end()), k(ws.begin() + 2, ws.end()), out;
  for (size_t d = 0; d < n; ++d)
    out.push_back((in[d] + p.pads[d] + p.pads[n + d] - ((k[d] - 1) * p.dilations[d] + 1)) / p.strides[d] + 1);
  *out_shape = {N, M};
  out_shape->insert(out_shape->end(), out.begin(), out.end());
  std::vector<double> y;
  for (int64_t nn = 0; nn < N; ++nn)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o = 0; o < numel(out); ++o) {
        auto oc = coords(o, out);
        double s = b ? get(*b, m) : 0;
        const int64_t g = m / Mg;
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t kk = 0; kk < numel(k); ++kk) {
            auto kc = coords(kk, k);
            std::vector<int64_t> ic(n);
            bool ok = true;
            for (size_t d = 0; d < n; ++d) {
              ic[d] = oc[d] * p.strides[d] - p.pads[d] + kc[d] * p.dilations[d];
              ok = ok && ic[d] >= 0 && ic[d] < in[d];
            }
            if (!ok) continue;
            s += (get(x, (nn * C + g * Cg + c) * numel(in) + flat(ic, in)) - x_zp) *
                 (get(w, (m * Cg + c) * numel(k) + kk) - w_zp);
          }
        y.push_back(s);
      }
  return y;
}

Attrs conv_attrs(const Win& p, int64_t group) {
  return {{"strides", ints_attr(p.strides)}, {"pads", ints_attr(p.pads)}, {"dilations", ints_attr(p.dilations)},
          {"group", int_attr(group)}};
}

void check_conv(DataType dt, const Shape& xs, int64_t M, const Shape& k, int64_t group, const Win& p, bool bias,
                double tol = 1e-4) {
  SCOPED_TRACE("conv x" + shape_to_string(xs) + " k" + shape_to_string(k) + " group " + std::to_string(group) + " " +
               dtype_name(dt));
  Shape ws = {M, xs[1] / group};
  ws.insert(ws.end(), k.begin(), k.end());
  Tensor x = random(dt, xs), w = random(dt, ws), b = random(dt, {M});
  Shape os;
  auto want = ref_conv(x, w, bias ? &b : nullptr, group, p, &os);
  std::vector<Tensor> in = {x, w};
  if (bias) in.push_back(b);
  auto y = run("Conv", 11, in, conv_attrs(p, group));
  expect_close(y[0], os, want, tol, tol);
}

}  // namespace

TEST(NnConv, Basic2D) {
  check_conv(DataType::kFloat32, {1, 1, 5, 5}, 1, {3, 3}, 1, {{1, 1}, {1, 1, 1, 1}, {1, 1}}, false);
  check_conv(DataType::kFloat32, {2, 3, 7, 6}, 4, {3, 2}, 1, {{1, 1}, {0, 0, 0, 0}, {1, 1}}, true);
}

TEST(NnConv, StridesPadsDilations) {
  check_conv(DataType::kFloat32, {2, 3, 9, 8}, 5, {3, 3}, 1, {{2, 3}, {1, 0, 2, 1}, {1, 1}}, true);
  check_conv(DataType::kFloat32, {1, 2, 11, 10}, 3, {3, 2}, 1, {{1, 2}, {2, 2, 1, 0}, {2, 3}}, true);
}

TEST(NnConv, Groups) {
  check_conv(DataType::kFloat32, {2, 4, 6, 6}, 6, {3, 3}, 2, {{1, 1}, {1, 1, 1, 1}, {1, 1}}, true);
  // depthwise
  check_conv(DataType::kFloat32, {2, 8, 7, 7}, 8, {3, 3}, 8, {{2, 2}, {1, 1, 1, 1}, {1, 1}}, true);
  check_conv(DataType::kFloat32, {1, 4, 5, 5}, 8, {3, 3}, 4, {{1, 1}, {0, 0, 0, 0}, {2, 2}}, false);
}

// The depthwise kernel (group == C == M): taps falling off every border, strides, dilations,
// asymmetric pads, windows wider than the input, MobileNet's 3x3 and 5x5, ConvNeXt's 7x7, float64.
TEST(NnConv, Depthwise) {
  const DataType f = DataType::kFloat32;
  check_conv(f, {2, 6, 19, 23}, 6, {3, 3}, 6, {{1, 1}, {1, 1, 1, 1}, {1, 1}}, true);
  check_conv(f, {1, 5, 17, 18}, 5, {5, 5}, 5, {{2, 2}, {2, 1, 2, 3}, {1, 1}}, true);
  check_conv(f, {1, 3, 14, 14}, 3, {7, 7}, 3, {{1, 1}, {3, 3, 3, 3}, {1, 1}}, false);
  check_conv(f, {2, 4, 9, 11}, 4, {3, 3}, 4, {{2, 3}, {0, 2, 1, 0}, {2, 2}}, true);
  check_conv(f, {1, 2, 3, 4}, 2, {5, 5}, 2, {{1, 1}, {2, 2, 2, 2}, {1, 1}}, true);
  check_conv(f, {1, 1, 8, 8}, 1, {3, 3}, 1, {{1, 1}, {0, 0, 0, 0}, {1, 1}}, true);
  check_conv(DataType::kFloat64, {1, 3, 10, 9}, 3, {3, 3}, 3, {{2, 2}, {1, 1, 1, 1}, {1, 1}}, true, 1e-12);
}

TEST(NnConv, OneDAndThreeD) {
  check_conv(DataType::kFloat32, {2, 3, 17}, 4, {5}, 1, {{2}, {2, 1}, {2}}, true);
  check_conv(DataType::kFloat32, {1, 2, 5, 6, 7}, 3, {3, 2, 3}, 1, {{1, 2, 1}, {1, 0, 1, 1, 1, 0}, {1, 1, 2}}, true);
  check_conv(DataType::kFloat32, {2, 4, 4, 4, 4}, 4, {1, 1, 1}, 2, {{1, 1, 1}, {0, 0, 0, 0, 0, 0}, {1, 1, 1}}, true);
}

TEST(NnConv, Pointwise) {
  check_conv(DataType::kFloat32, {3, 16, 5, 7}, 8, {1, 1}, 1, {{1, 1}, {0, 0, 0, 0}, {1, 1}}, true);
}

TEST(NnConv, Dtypes) {
  check_conv(DataType::kFloat64, {2, 3, 6, 5}, 4, {3, 3}, 1, {{2, 1}, {1, 1, 0, 1}, {1, 1}}, true, 1e-12);
  check_conv(DataType::kFloat16, {1, 3, 6, 5}, 2, {3, 3}, 1, {{1, 1}, {1, 1, 1, 1}, {1, 1}}, true, 2e-2);
  check_conv(DataType::kBFloat16, {1, 2, 5, 5}, 2, {2, 2}, 1, {{1, 1}, {0, 0, 0, 0}, {1, 1}}, false, 6e-2);
}

TEST(NnConv, EmptyBatch) {
  auto y = run("Conv", 11, {random(DataType::kFloat32, {0, 3, 5, 5}), random(DataType::kFloat32, {4, 3, 3, 3})}, {});
  EXPECT_EQ(shape_to_string(y[0].shape()), shape_to_string({0, 4, 3, 3}));
}

TEST(NnConv, AutoPad) {
  // SAME_UPPER / SAME_LOWER give ceil(in / stride) outputs; extra padding goes at the end / start.
  Tensor x = random(DataType::kFloat32, {1, 2, 7, 6}), w = random(DataType::kFloat32, {3, 2, 4, 3});
  for (std::string mode : {"SAME_UPPER", "SAME_LOWER"}) {
    SCOPED_TRACE(mode);
    // H: out 4, total pad (4-1)*2+4-7 = 3; W: out 3, total (3-1)*2+3-6 = 1
    Win p = mode == "SAME_UPPER" ? Win{{2, 2}, {1, 0, 2, 1}, {1, 1}} : Win{{2, 2}, {2, 1, 1, 0}, {1, 1}};
    Shape os;
    auto want = ref_conv(x, w, nullptr, 1, p, &os);
    auto y = run("Conv", 11, {x, w}, {{"strides", ints_attr({2, 2})}, {"auto_pad", string_attr(mode)}});
    expect_close(y[0], os, want);
  }
  Shape os;
  auto want = ref_conv(x, w, nullptr, 1, {{1, 1}, {0, 0, 0, 0}, {1, 1}}, &os);
  auto y = run("Conv", 11, {x, w}, {{"auto_pad", string_attr("VALID")}, {"pads", ints_attr({1, 1, 1, 1})}});
  expect_close(y[0], os, want);
}

TEST(NnConv, RejectsBadChannels) {
  auto r = try_run("Conv", 11, {random(DataType::kFloat32, {1, 3, 5, 5}), random(DataType::kFloat32, {4, 2, 3, 3})}, {});
  EXPECT_FALSE(r.ok());
  r = try_run("Conv", 11, {random(DataType::kFloat32, {1, 3, 2, 2}), random(DataType::kFloat32, {4, 3, 3, 3})}, {});
  EXPECT_FALSE(r.ok());
}

namespace {

// Transposed convolution by scattering every input element through the kernel.
std::vector<double> ref_conv_transpose(const Tensor& x, const Tensor& w, const Tensor* b, int64_t group, const Win& p,
                                       const Shape& out) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const size_t n = xs.size() - 2;
  const int64_t N = xs[0], C = xs[1], Mg = ws[1], M = Mg * group, Cg = C / group;
  Shape in(xs.begin() + 2, xs.end()), k(ws.begin() + 2, ws.end());
  std::vector<double> y(static_cast<size_t>(N * M * numel(out)), 0.0);
  for (int64_t nn = 0; nn < N; ++nn)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < numel(in); ++i) {
        auto ic = coords(i, in);
        const double xv = get(x, (nn * C + c) * numel(in) + i);
        const int64_t g = c / Cg;
        for (int64_t m = 0; m < Mg; ++m)
          for (int64_t kk = 0; kk < numel(k); ++kk) {
            auto kc = coords(kk, k);
            std::vector<int64_t> oc(n);
            bool ok = true;
            for (size_t d = 0; d < n; ++d) {
              oc[d] = ic[d] * p.strides[d] - p.pads[d] + kc[d] * p.dilations[d];
              ok = ok && oc[d] >= 0 && oc[d] < out[d];
            }
            if (ok) y[(nn * M + g * Mg + m) * numel(out) + flat(oc, out)] += xv * get(w, (c * Mg + m) * numel(k) + kk);
          }
      }
  if (b)
    for (size_t i = 0; i < y.size(); ++i) y[i] += get(*b, (i / numel(out)) % M);
  return y;
}

void check_conv_transpose(const Shape& xs, int64_t Mg, const Shape& k, int64_t group, const Win& p,
                          std::vector<int64_t> output_padding, bool bias, DataType dt = DataType::kFloat32,
                          double tol = 1e-4) {
  SCOPED_TRACE("convT x" + shape_to_string(xs) + " k" + shape_to_string(k));
  const size_t n = k.size();
  Shape ws = {xs[1], Mg};
  ws.insert(ws.end(), k.begin(), k.end());
  Tensor x = random(dt, xs), w = random(dt, ws), b = random(dt, {Mg * group});
  Shape out;
  for (size_t d = 0; d < n; ++d)
    out.push_back(p.strides[d] * (xs[d + 2] - 1) + output_padding[d] + (k[d] - 1) * p.dilations[d] + 1 - p.pads[d] -
                  p.pads[n + d]);
  auto want = ref_conv_transpose(x, w, bias ? &b : nullptr, group, p, out);
  Attrs at = conv_attrs(p, group);
  at["output_padding"] = ints_attr(output_padding);
  std::vector<Tensor> in = {x, w};
  if (bias) in.push_back(b);
  auto y = run("ConvTranspose", 11, in, at);
  Shape os = {xs[0], Mg * group};
  os.insert(os.end(), out.begin(), out.end());
  expect_close(y[0], os, want, tol, tol);
}

}  // namespace

TEST(NnConvTranspose, Basic) {
  check_conv_transpose({1, 1, 3, 3}, 2, {3, 3}, 1, {{1, 1}, {0, 0, 0, 0}, {1, 1}}, {0, 0}, false);
  check_conv_transpose({2, 3, 4, 5}, 2, {3, 2}, 1, {{2, 3}, {1, 0, 1, 1}, {1, 1}}, {1, 0}, true);
}

TEST(NnConvTranspose, GroupsDilations) {
  check_conv_transpose({2, 4, 3, 4}, 3, {3, 3}, 2, {{2, 2}, {1, 1, 1, 1}, {2, 1}}, {1, 1}, true);
  check_conv_transpose({1, 6, 5, 5}, 1, {3, 3}, 6, {{1, 1}, {1, 1, 1, 1}, {1, 1}}, {0, 0}, true);
}

TEST(NnConvTranspose, OneDThreeDAndDouble) {
  check_conv_transpose({2, 3, 6}, 2, {3}, 1, {{3}, {1, 2}, {1}}, {2}, true);
  check_conv_transpose({1, 2, 3, 4, 3}, 2, {3, 3, 2}, 1, {{1, 2, 2}, {0, 1, 1, 0, 0, 1}, {1, 1, 1}}, {0, 1, 1}, true);
  check_conv_transpose({2, 2, 4, 3}, 3, {2, 3}, 1, {{2, 1}, {0, 0, 1, 1}, {1, 2}}, {1, 0}, true, DataType::kFloat64, 1e-12);
}

TEST(NnConvTranspose, OutputShapeAndAutoPad) {
  // output_shape without pads: pads stay zero and the output is cut/extended at the end (onnx reference).
  Tensor x = random(DataType::kFloat32, {1, 1, 3, 3}), w = random(DataType::kFloat32, {1, 2, 3, 3});
  auto want = ref_conv_transpose(x, w, nullptr, 1, {{3, 2}, {0, 0, 0, 0}, {1, 1}}, {10, 8});
  auto y = run("ConvTranspose", 11, {x, w}, {{"strides", ints_attr({3, 2})}, {"output_shape", ints_attr({10, 8})}});
  expect_close(y[0], {1, 2, 10, 8}, want);
  // SAME_UPPER: output = input * stride; total padding split with the extra at the end.
  // H: full = 2*2+3 = 7, out 6 → total 1 → pads (0, 1)
  auto want2 = ref_conv_transpose(x, w, nullptr, 1, {{2, 2}, {0, 0, 1, 1}, {1, 1}}, {6, 6});
  auto y2 = run("ConvTranspose", 11, {x, w}, {{"strides", ints_attr({2, 2})}, {"auto_pad", string_attr("SAME_UPPER")}});
  expect_close(y2[0], {1, 2, 6, 6}, want2);
  auto want3 = ref_conv_transpose(x, w, nullptr, 1, {{2, 2}, {1, 1, 0, 0}, {1, 1}}, {6, 6});
  auto y3 = run("ConvTranspose", 11, {x, w}, {{"strides", ints_attr({2, 2})}, {"auto_pad", string_attr("SAME_LOWER")}});
  expect_close(y3[0], {1, 2, 6, 6}, want3);
}

TEST(NnConvInteger, ZeroPoints) {
  Tensor x = random(DataType::kUInt8, {2, 3, 5, 5}, 0, 255), w = random(DataType::kUInt8, {4, 3, 3, 3}, 0, 255);
  Tensor xz = from(DataType::kUInt8, {}, {7}), wz = from(DataType::kUInt8, {}, {130});
  Win p{{2, 1}, {1, 1, 0, 1}, {1, 1}};
  Shape os;
  auto want = ref_conv(x, w, nullptr, 1, p, &os, 7, 130);
  auto y = run("ConvInteger", 10, {x, w, xz, wz}, conv_attrs(p, 1));
  EXPECT_EQ(y[0].dtype(), DataType::kInt32);
  expect_close(y[0], os, want, 0, 0);
}

TEST(NnQLinearConv, PerChannelScales) {
  Tensor x = random(DataType::kUInt8, {1, 2, 4, 4}, 0, 255), w = random(DataType::kInt8, {3, 2, 2, 2}, -127, 127);
  Tensor xs = from(DataType::kFloat32, {}, {0.02f}), xz = from(DataType::kUInt8, {}, {100});
  Tensor ws = from(DataType::kFloat32, {3}, {0.01f, 0.015f, 0.03f}), wz = from(DataType::kInt8, {3}, {0, 0, 0});
  Tensor ys = from(DataType::kFloat32, {}, {0.5f}), yz = from(DataType::kUInt8, {}, {120});
  Tensor b = from(DataType::kInt32, {3}, {100, -200, 0});
  Win p{{1, 1}, {0, 0, 0, 0}, {1, 1}};
  Shape os;
  auto acc = ref_conv(x, w, nullptr, 1, p, &os, 100, 0);
  const float wsv[3] = {0.01f, 0.015f, 0.03f};
  const int bv[3] = {100, -200, 0};
  std::vector<double> want;
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t m = (i / 9) % 3;
    const double q = std::nearbyint((acc[i] + bv[m]) * (0.02f * wsv[m] / 0.5f)) + 120;
    want.push_back(std::min(255.0, std::max(0.0, q)));
  }
  auto y = run("QLinearConv", 10, {x, xs, xz, w, ws, wz, ys, yz, b}, conv_attrs(p, 1));
  expect_close(y[0], os, want, 0, 1.0);
}

TEST(NnShapeInfer, ConvKeepsSymbolicBatch) {
  ir::Graph g;
  auto* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim("N"), 3, 224, 224})));
  auto* w = g.add_value("w", ir::Type::tensor(DataType::kFloat32, ir::SymShape({64, 3, 7, 7})));
  auto* y = g.add_value("y");
  ir::Node* n = g.add_node("Conv", "", {x, w}, {y}, "conv");
  n->attrs["strides"] = ints_attr({2, 2});
  n->attrs["pads"] = ints_attr({3, 3, 3, 3});
  ASSERT_TRUE(ops::infer_node(*n).ok());
  EXPECT_EQ(y->type.shape.to_string(), ir::SymShape({ir::Dim("N"), 64, 112, 112}).to_string());
  auto* z = g.add_value("z");
  ir::Node* t = g.add_node("ConvTranspose", "", {y, g.add_value("wt", ir::Type::tensor(DataType::kFloat32, ir::SymShape({64, 8, 4, 4})))}, {z}, "ct");
  t->attrs["strides"] = ints_attr({2, 2});
  t->attrs["pads"] = ints_attr({1, 1, 1, 1});
  t->attrs["group"] = int_attr(2);
  ASSERT_TRUE(ops::infer_node(*t).ok());
  EXPECT_EQ(z->type.shape.to_string(), ir::SymShape({ir::Dim("N"), 16, 224, 224}).to_string());
}
