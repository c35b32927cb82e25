// MaxPool, AveragePool, LpPool, Global*Pool, MaxUnpool against a window-walking reference that
// follows the onnx reference semantics (ceil_mode, count_include_pad, dilations).
#include "test_nn_util.h"

using namespace nntest;

namespace {

struct PoolCase {
  std::string op = "MaxPool";
  Shape x;
  std::vector<int64_t> kernel, strides, pads, dilations;
  bool ceil = false, count_include_pad = false;
  double p = 2;
};

Shape pool_out(const PoolCase& c) {
  const size_t n = c.kernel.size();
  Shape out;
  for (size_t d = 0; d < n; ++d) {
    const int64_t in = c.x[d + 2], dk = (c.kernel[d] - 1) * c.dilations[d] + 1;
    const double v = static_cast<double>(in + c.pads[d] + c.pads[n + d] - dk) / c.strides[d] + 1;
    int64_t o = c.ceil ? static_cast<int64_t>(std::ceil(v)) : static_cast<int64_t>(std::floor(v));
    if (c.ceil && (o - 1) * c.strides[d] >= in + c.pads[d]) --o;
    out.push_back(o);
  }
  return out;
}

// Reference pooling; `indices` gets MaxPool's row-major flat argmax.
std::vector<double> ref_pool(const PoolCase& c, const Tensor& x, const Shape& out, std::vector<double>* indices) {
  const size_t n = c.kernel.size();
  const Shape in(c.x.begin() + 2, c.x.end());
  const Shape k(c.kernel.begin(), c.kernel.end());
  std::vector<double> y;
  for (int64_t plane = 0; plane < c.x[0] * c.x[1]; ++plane)
    for (int64_t o = 0; o < numel(out); ++o) {
      auto oc = coords(o, out);
      double mx = -INFINITY, sum = 0, arg = -1;
      int64_t valid = 0, padded = 0;
      for (int64_t kk = 0; kk < numel(k); ++kk) {
        auto kc = coords(kk, k);
        std::vector<int64_t> ic(n);
        bool in_pad = true, inside = true;
        for (size_t d = 0; d < n; ++d) {
          ic[d] = oc[d] * c.strides[d] - c.pads[d] + kc[d] * c.dilations[d];
          in_pad = in_pad && ic[d] < in[d] + c.pads[n + d];
          inside = inside && ic[d] >= 0 && ic[d] < in[d];
        }
        if (in_pad) ++padded;
        if (!inside) continue;
        ++valid;
        const int64_t idx = plane * numel(in) + flat(ic, in);
        const double v = get(x, idx);
        if (v > mx) { mx = v; arg = static_cast<double>(idx); }
        sum += c.op == "LpPool" ? std::pow(std::fabs(v), c.p) : v;
      }
      if (c.op == "MaxPool") y.push_back(mx);
      else if (c.op == "AveragePool") y.push_back(sum / (c.count_include_pad ? padded : valid));
      else y.push_back(std::pow(sum, 1.0 / c.p));
      if (indices) indices->push_back(arg);
    }
  return y;
}

void check_pool(PoolCase c, DataType dt = DataType::kFloat32, double tol = 1e-5) {
  const size_t n = c.kernel.size();
  if (c.strides.empty()) c.strides.assign(n, 1);
  if (c.pads.empty()) c.pads.assign(2 * n, 0);
  if (c.dilations.empty()) c.dilations.assign(n, 1);
  SCOPED_TRACE(c.op + " x" + shape_to_string(c.x) + " k" + shape_to_string(c.kernel) + " ceil " + std::to_string(c.ceil) +
               " cip " + std::to_string(c.count_include_pad));
  Tensor x = dtype_is_integer(dt) ? random(dt, c.x, -100, 100) : random(dt, c.x, -2, 2);
  const Shape out = pool_out(c);
  std::vector<double> idx;
  auto want = ref_pool(c, x, out, c.op == "MaxPool" ? &idx : nullptr);
  Attrs at = {{"kernel_shape", ints_attr(c.kernel)}, {"strides", ints_attr(c.strides)}, {"pads", ints_attr(c.pads)},
              {"ceil_mode", int_attr(c.ceil)}};
  if (c.op != "MaxPool" || true) at["dilations"] = ints_attr(c.dilations);
  if (c.op == "AveragePool") at["count_include_pad"] = int_attr(c.count_include_pad);
  if (c.op == "LpPool") at["p"] = int_attr(static_cast<int64_t>(c.p));
  const int outs = c.op == "MaxPool" ? 2 : 1;
  auto y = run(c.op, c.op == "MaxPool" ? 12 : 19, {x}, at, outs);
  Shape ys = {c.x[0], c.x[1]};
  ys.insert(ys.end(), out.begin(), out.end());
  expect_close(y[0], ys, want, tol, tol);
  if (outs == 2) {
    EXPECT_EQ(y[1].dtype(), DataType::kInt64);
    // Indices must point at an element holding the max (ties may pick any of them).
    for (int64_t i = 0; i < y[1].numel(); ++i)
      EXPECT_EQ(get(x, y[1].data<int64_t>()[i]), get(y[0], i)) << "index " << i;
  }
}

}  // namespace

TEST(NnPool, MaxBasicAndStrides) {
  check_pool({"MaxPool", {2, 3, 8, 7}, {3, 3}});
  check_pool({"MaxPool", {1, 2, 9, 9}, {3, 2}, {2, 3}, {1, 1, 0, 1}});
  check_pool({"MaxPool", {1, 1, 17}, {4}, {3}, {2, 1}});
  check_pool({"MaxPool", {1, 2, 5, 6, 7}, {2, 3, 2}, {2, 1, 2}, {0, 1, 1, 1, 0, 0}});
}

TEST(NnPool, MaxCeilModeAndDilations) {
  check_pool({"MaxPool", {1, 1, 4, 4}, {3, 3}, {2, 2}, {}, {}, true});
  check_pool({"MaxPool", {2, 2, 7, 8}, {3, 2}, {2, 3}, {1, 1, 1, 0}, {2, 2}, true});
  check_pool({"MaxPool", {1, 1, 10, 10}, {2, 2}, {1, 1}, {}, {3, 2}});
  check_pool({"MaxPool", {1, 1, 6}, {3}, {2}, {2, 0}, {}, true});  // last window would start in the end pad
}

TEST(NnPool, MaxKnownValues) {
  // onnx test_maxpool_2d_ceil: 4x4 of 1..16, kernel 3, stride 2, ceil → [[11, 12], [15, 16]]
  std::vector<double> v(16);
  for (int i = 0; i < 16; ++i) v[i] = i + 1;
  auto y = run("MaxPool", 12, {from(DataType::kFloat32, {1, 1, 4, 4}, v)},
               {{"kernel_shape", ints_attr({3, 3})}, {"strides", ints_attr({2, 2})}, {"ceil_mode", int_attr(1)}});
  expect_close(y[0], {1, 1, 2, 2}, {11, 12, 15, 16});
}

TEST(NnPool, MaxIndicesStorageOrder) {
  // 1x1x2x3 input; a 2x2 window (stride 1) over it: max of the right half is at (1, 2).
  Tensor x = from(DataType::kFloat32, {1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  auto y = run("MaxPool", 12, {x}, {{"kernel_shape", ints_attr({2, 2})}, {"storage_order", int_attr(1)}}, 2);
  expect_close(y[0], {1, 1, 1, 2}, {5, 6});
  // column major: index = h + w * H → (1,1) = 3, (1,2) = 5
  EXPECT_EQ(y[1].data<int64_t>()[0], 3);
  EXPECT_EQ(y[1].data<int64_t>()[1], 5);
  auto r = run("MaxPool", 12, {x}, {{"kernel_shape", ints_attr({2, 2})}}, 2);
  EXPECT_EQ(r[1].data<int64_t>()[0], 4);
  EXPECT_EQ(r[1].data<int64_t>()[1], 5);
}

TEST(NnPool, MaxDtypes) {
  check_pool({"MaxPool", {1, 2, 5, 5}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, DataType::kInt8, 0);
  check_pool({"MaxPool", {1, 2, 5, 5}, {3, 3}, {2, 2}}, DataType::kFloat64, 0);
  check_pool({"MaxPool", {1, 2, 5, 5}, {3, 3}, {2, 2}, {}, {}, true}, DataType::kFloat16, 0);
  Tensor u = random(DataType::kUInt8, {1, 1, 4, 4}, 0, 255);
  auto y = run("MaxPool", 12, {u}, {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}});
  EXPECT_EQ(y[0].dtype(), DataType::kUInt8);
  EXPECT_EQ(get(y[0], 0), std::max({get(u, 0), get(u, 1), get(u, 4), get(u, 5)}));
}

TEST(NnPool, AverageCountIncludePad) {
  for (bool cip : {false, true}) {
    check_pool({"AveragePool", {2, 3, 7, 6}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, false, cip});
    check_pool({"AveragePool", {1, 2, 7, 8}, {3, 2}, {2, 3}, {1, 0, 2, 1}, {}, true, cip});
    check_pool({"AveragePool", {1, 1, 9, 9, 9}, {3, 3, 3}, {3, 3, 3}, {1, 1, 1, 1, 1, 1}, {2, 2, 2}, true, cip});
    check_pool({"AveragePool", {1, 1, 10, 9}, {2, 3}, {1, 1}, {}, {2, 2}, false, cip});
  }
}

TEST(NnPool, AverageAutoPad) {
  Tensor x = random(DataType::kFloat32, {1, 1, 5, 5});
  for (std::string mode : {"SAME_UPPER", "SAME_LOWER"}) {
    PoolCase c{"AveragePool", {1, 1, 5, 5}, {2, 2}, {1, 1}};
    c.pads = mode == "SAME_UPPER" ? std::vector<int64_t>{0, 0, 1, 1} : std::vector<int64_t>{1, 1, 0, 0};
    c.dilations = {1, 1};
    auto want = ref_pool(c, x, {5, 5}, nullptr);
    auto y = run("AveragePool", 19, {x}, {{"kernel_shape", ints_attr({2, 2})}, {"auto_pad", string_attr(mode)}});
    expect_close(y[0], {1, 1, 5, 5}, want);
  }
}

TEST(NnPool, LpPool) {
  check_pool({"LpPool", {1, 2, 6, 6}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {}, false, false, 2});
  check_pool({"LpPool", {1, 2, 7}, {3}, {2}, {0, 0}, {}, false, false, 3});
}

TEST(NnPool, EmptyBatch) {
  auto y = run("MaxPool", 12, {random(DataType::kFloat32, {0, 3, 4, 4})}, {{"kernel_shape", ints_attr({2, 2})}});
  EXPECT_EQ(shape_to_string(y[0].shape()), shape_to_string({0, 3, 3, 3}));
}

TEST(NnPool, Global) {
  Tensor x = random(DataType::kFloat32, {2, 3, 4, 5});
  std::vector<double> mx, avg, lp;
  for (int64_t p = 0; p < 6; ++p) {
    double m = -INFINITY, s = 0, q = 0;
    for (int64_t i = 0; i < 20; ++i) {
      const double v = get(x, p * 20 + i);
      m = std::max(m, v);
      s += v;
      q += v * v;
    }
    mx.push_back(m);
    avg.push_back(s / 20);
    lp.push_back(std::sqrt(q));
  }
  expect_close(run("GlobalMaxPool", 1, {x}, {})[0], {2, 3, 1, 1}, mx);
  expect_close(run("GlobalAveragePool", 1, {x}, {})[0], {2, 3, 1, 1}, avg);
  expect_close(run("GlobalLpPool", 2, {x}, {})[0], {2, 3, 1, 1}, lp);
}

TEST(NnPool, MaxUnpoolInvertsMaxPool) {
  Tensor x = random(DataType::kFloat32, {1, 2, 4, 4});
  Attrs at = {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}};
  auto p = run("MaxPool", 12, {x}, at, 2);
  auto u = run("MaxUnpool", 11, {p[0], p[1]}, at);
  ASSERT_EQ(shape_to_string(u[0].shape()), shape_to_string({1, 2, 4, 4}));
  std::vector<double> want(32, 0.0);
  for (int64_t i = 0; i < p[1].numel(); ++i) want[p[1].data<int64_t>()[i]] = get(p[0], i);
  expect_close(u[0], {1, 2, 4, 4}, want);
  auto u2 = run("MaxUnpool", 11, {p[0], p[1], from(DataType::kInt64, {4}, {1, 2, 5, 5})}, at);
  EXPECT_EQ(shape_to_string(u2[0].shape()), shape_to_string({1, 2, 5, 5}));
  // With output_shape the indices still address the inferred 4x4 block, which sits at the origin of
  // each 5x5 plane (onnx's reference); the extra row and column stay zero.
  std::vector<double> want5(50, 0.0);
  for (int64_t i = 0; i < p[1].numel(); ++i) {
    const int64_t j = p[1].data<int64_t>()[i], plane = j / 16, r = j % 16 / 4, c = j % 4;
    want5[plane * 25 + r * 5 + c] = get(p[0], i);
  }
  expect_close(u2[0], {1, 2, 5, 5}, want5);
  // The onnx test's case: 2x2 values unpooled by a 2x2 / stride 2 window into 5x5.
  auto u3 = run("MaxUnpool", 11,
                {from(DataType::kFloat32, {1, 1, 2, 2}, {5, 6, 7, 8}), from(DataType::kInt64, {1, 1, 2, 2}, {5, 7, 13, 15}),
                 from(DataType::kInt64, {4}, {1, 1, 5, 5})},
                at);
  std::vector<double> want3(25, 0.0);
  want3[6] = 5, want3[8] = 6, want3[16] = 7, want3[18] = 8;
  expect_close(u3[0], {1, 1, 5, 5}, want3);
  // An output_shape smaller than the unpooled shape is refused.
  EXPECT_FALSE(try_run("MaxUnpool", 11, {p[0], p[1], from(DataType::kInt64, {4}, {1, 2, 3, 4})}, at).ok());
}

TEST(NnShapeInfer, PoolCeilAndGlobal) {
  ir::Graph g;
  auto* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim("N"), 3, 4, 4})));
  auto* y = g.add_value("y");
  auto* i = g.add_value("i");
  ir::Node* n = g.add_node("MaxPool", "", {x}, {y, i}, "pool");
  n->attrs["kernel_shape"] = ints_attr({3, 3});
  n->attrs["strides"] = ints_attr({2, 2});
  n->attrs["ceil_mode"] = int_attr(1);
  ASSERT_TRUE(ops::infer_node(*n).ok());
  EXPECT_EQ(y->type.shape.to_string(), ir::SymShape({ir::Dim("N"), 3, 2, 2}).to_string());
  EXPECT_EQ(i->type.dtype, DataType::kInt64);
  auto* z = g.add_value("z");
  ir::Node* gp = g.add_node("GlobalAveragePool", "", {x}, {z}, "gap");
  ASSERT_TRUE(ops::infer_node(*gp).ok());
  EXPECT_EQ(z->type.shape.to_string(), ir::SymShape({ir::Dim("N"), 3, 1, 1}).to_string());
}
