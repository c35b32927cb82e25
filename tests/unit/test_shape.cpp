// Unit tests of the shape family's movement kernels against naive references.
#include <algorithm>
#include <numeric>

#include "test_shape_util.h"

using namespace kiln;
using namespace kiln::shape_test;

TEST(ShapeReshape, ZeroMinusOneAndAllowzero) {
  Tensor x = iota_i64({2, 3, 4});
  auto y = run("Reshape", {x, i64({3}, {0, -1, 2})});
  EXPECT_EQ(y[0].shape(), (Shape{2, 6, 2}));
  EXPECT_EQ(values<int64_t>(y[0]), values<int64_t>(x));
  y = run("Reshape", {x, i64({2}, {-1, 0})});  // 0 copies input dim 1
  EXPECT_EQ(y[0].shape(), (Shape{8, 3}));
  // allowzero: a 0 is a real zero dim.
  Tensor e = iota_i64({0, 3});
  y = run("Reshape", {e, i64({2}, {3, 0})}, {{"allowzero", ai(1)}});
  EXPECT_EQ(y[0].shape(), (Shape{3, 0}));
  EXPECT_FALSE(try_run("Reshape", {x, i64({2}, {0, 0})}, {{"allowzero", ai(1)}}).ok());
  EXPECT_FALSE(try_run("Reshape", {x, i64({2}, {-1, -1})}).ok());
  EXPECT_FALSE(try_run("Reshape", {x, i64({2}, {5, -1})}).ok());
  // Strings move as whole objects.
  Tensor s = iota_str({2, 3});
  y = run("Reshape", {s, i64({1}, {-1})});
  EXPECT_EQ(y[0].shape(), (Shape{6}));
  EXPECT_EQ(values<std::string>(y[0]), values<std::string>(s));
}

TEST(ShapeSqueezeUnsqueezeFlatten, Shapes) {
  Tensor x = iota_i64({1, 3, 1, 2});
  EXPECT_EQ(run("Squeeze", {x})[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(run("Squeeze", {x, i64({1}, {-2})})[0].shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(run("Squeeze", {x}, {{"axes", ais({0})}}, 1, 11)[0].shape(), (Shape{3, 1, 2}));
  EXPECT_FALSE(try_run("Squeeze", {x, i64({1}, {1})}).ok());
  EXPECT_EQ(run("Unsqueeze", {x, i64({2}, {-1, 0})})[0].shape(), (Shape{1, 1, 3, 1, 2, 1}));
  EXPECT_EQ(run("Unsqueeze", {x}, {{"axes", ais({1, 3})}}, 1, 11)[0].shape(), (Shape{1, 1, 3, 1, 1, 2}));
  EXPECT_FALSE(try_run("Unsqueeze", {x, i64({2}, {1, 1})}).ok());
  auto y = run("Flatten", {x}, {{"axis", ai(-2)}});
  EXPECT_EQ(y[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values<int64_t>(y[0]), values<int64_t>(x));
  EXPECT_EQ(run("Flatten", {x}, {{"axis", ai(0)}})[0].shape(), (Shape{1, 6}));
  EXPECT_EQ(run("Flatten", {x}, {{"axis", ai(4)}})[0].shape(), (Shape{6, 1}));
}

TEST(ShapeTranspose, RandomPermsMatchNaive) {
  std::mt19937 rng(1);
  for (int iter = 0; iter < 60; ++iter) {
    const int r = 1 + iter % 5;
    Shape s = rand_shape(rng, r);
    std::vector<int64_t> perm(r);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    Tensor x = iota_i64(s);
    auto y = run("Transpose", {x}, {{"perm", ais(perm)}});
    Shape out(r);
    for (int d = 0; d < r; ++d) out[d] = s[perm[d]];
    ASSERT_EQ(y[0].shape(), out);
    for (int64_t i = 0; i < y[0].numel(); ++i) {
      auto oi = unravel(i, out);
      std::vector<int64_t> ii(r);
      for (int d = 0; d < r; ++d) ii[perm[d]] = oi[d];
      ASSERT_EQ(y[0].data<int64_t>()[i], ravel(ii, s));
    }
  }
}

TEST(ShapeTranspose, Large2DBlockedDefaultPermAndStrings) {
  Tensor x = iota_i64({67, 130});  // not a multiple of the tile size
  auto y = run("Transpose", {x});
  ASSERT_EQ(y[0].shape(), (Shape{130, 67}));
  for (int64_t i = 0; i < 130; ++i)
    for (int64_t j = 0; j < 67; ++j) ASSERT_EQ(y[0].data<int64_t>()[i * 67 + j], j * 130 + i);
  Tensor u = Tensor::empty(DataType::kUInt8, {3, 5});
  for (int i = 0; i < 15; ++i) u.data<uint8_t>()[i] = static_cast<uint8_t>(i);
  y = run("Transpose", {u});
  EXPECT_EQ(y[0].data<uint8_t>()[1], 5);
  Tensor s = iota_str({2, 3});
  y = run("Transpose", {s}, {{"perm", ais({1, 0})}});
  EXPECT_EQ(y[0].data<std::string>()[1], s.data<std::string>()[3]);
  Tensor z = iota_i64({0, 3});
  EXPECT_EQ(run("Transpose", {z})[0].shape(), (Shape{3, 0}));
}

TEST(ShapeConcat, RandomAxesEmptyInputsStrings) {
  std::mt19937 rng(2);
  for (int iter = 0; iter < 30; ++iter) {
    const int r = 1 + iter % 4;
    Shape base = rand_shape(rng, r);
    const int axis = std::uniform_int_distribution<int>(-r, r - 1)(rng);
    const int a = axis < 0 ? axis + r : axis;
    std::vector<Tensor> ins;
    std::vector<int64_t> offsets = {0};
    for (int k = 0; k < 3; ++k) {
      Shape s = base;
      s[a] = iter % 5 == 0 && k == 1 ? 0 : std::uniform_int_distribution<int>(1, 4)(rng);
      Tensor t = iota_i64(s);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] += 1000 * k;
      ins.push_back(t);
      offsets.push_back(offsets.back() + s[a]);
    }
    auto y = run("Concat", ins, {{"axis", ai(axis)}});
    Shape out = base;
    out[a] = offsets.back();
    ASSERT_EQ(y[0].shape(), out);
    for (int64_t i = 0; i < y[0].numel(); ++i) {
      auto idx = unravel(i, out);
      int k = 0;
      while (idx[a] >= offsets[k + 1]) ++k;
      idx[a] -= offsets[k];
      ASSERT_EQ(y[0].data<int64_t>()[i], ins[k].data<int64_t>()[ravel(idx, ins[k].shape())]);
    }
  }
  auto y = run("Concat", {strs({1, 2}, {"a", "b"}), strs({2, 2}, {"c", "d", "e", "f"})}, {{"axis", ai(0)}});
  EXPECT_EQ(values<std::string>(y[0]), (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
  EXPECT_FALSE(try_run("Concat", {iota_i64({2, 2}), iota_i64({2, 3})}, {{"axis", ai(0)}}).ok());
}

TEST(ShapeSplit, AttrInputAndNumOutputs) {
  Tensor x = iota_i64({2, 7});
  // opset 11: split attribute.
  auto y = run("Split", {x}, {{"axis", ai(1)}, {"split", ais({2, 5})}}, 2, 11);
  EXPECT_EQ(y[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int64_t>(y[1]), (std::vector<int64_t>{2, 3, 4, 5, 6, 9, 10, 11, 12, 13}));
  // opset 13: split input, zero-size part.
  y = run("Split", {x, i64({3}, {3, 0, 4})}, {{"axis", ai(-1)}}, 3, 13);
  EXPECT_EQ(y[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(values<int64_t>(y[2]), (std::vector<int64_t>{3, 4, 5, 6, 10, 11, 12, 13}));
  // opset 18: num_outputs with an uneven last chunk: 7 → 3, 3, 1.
  y = run("Split", {x}, {{"axis", ai(1)}, {"num_outputs", ai(3)}}, 3, 18);
  EXPECT_EQ(y[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(y[2].shape(), (Shape{2, 1}));
  EXPECT_EQ(values<int64_t>(y[2]), (std::vector<int64_t>{6, 13}));
  // 5 into 4 parts: chunks of ceil(5/4) = 2 run out early; like onnx's reference the rest is empty.
  Tensor five = iota_i64({5});
  y = run("Split", {five}, {{"num_outputs", ai(4)}}, 4, 18);
  EXPECT_EQ(values<int64_t>(y[1]), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values<int64_t>(y[2]), (std::vector<int64_t>{4}));
  EXPECT_EQ(y[3].shape(), (Shape{0}));
  // Equal split by output count along axis 0.
  y = run("Split", {x}, {}, 2, 13);
  EXPECT_EQ(values<int64_t>(y[1]), (std::vector<int64_t>{7, 8, 9, 10, 11, 12, 13}));
  EXPECT_FALSE(try_run("Split", {x, i64({2}, {3, 3})}, {{"axis", ai(1)}}, 2, 13).ok());
}

// Reference of one sliced axis, by the ONNX spec's clamping (for negative steps a start before the
// axis clamps to 0, where Python's slicing would give nothing; ONNX Runtime follows the spec).
static std::vector<int64_t> ref_slice_indices(int64_t dim, int64_t start, int64_t end, int64_t step) {
  std::vector<int64_t> r;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::max<int64_t>(0, std::min(start, dim));
    end = std::max<int64_t>(0, std::min(end, dim));
    for (int64_t i = start; i < end; i += step) r.push_back(i);
  } else {
    start = std::max<int64_t>(0, std::min(start, dim - 1));
    end = std::max<int64_t>(-1, std::min(end, dim - 1));
    for (int64_t i = start; i > end; i += step) r.push_back(i);
  }
  return r;
}

TEST(ShapeSlice, RandomWithNegativeStepsAndClamping) {
  std::mt19937 rng(3);
  auto pick = [&](int lo, int hi) { return static_cast<int64_t>(std::uniform_int_distribution<int>(lo, hi)(rng)); };
  for (int iter = 0; iter < 80; ++iter) {
    const int r = 1 + iter % 3;
    Shape s = rand_shape(rng, r, 6);
    Tensor x = iota_i64(s);
    std::vector<int64_t> starts, ends, axes, steps;
    std::vector<std::vector<int64_t>> sel(r);
    for (int d = 0; d < r; ++d) {
      sel[d].resize(s[d]);
      std::iota(sel[d].begin(), sel[d].end(), 0);
    }
    for (int d = 0; d < r; ++d) {
      if (pick(0, 3) == 0) continue;
      int64_t st = pick(-8, 8), en = pick(-8, 8), sp = pick(-3, 3);
      if (sp == 0) sp = 1;
      if (pick(0, 5) == 0) en = sp > 0 ? INT64_MAX : INT64_MIN;
      starts.push_back(st);
      ends.push_back(en);
      axes.push_back(pick(0, 1) ? d : d - r);
      steps.push_back(sp);
      sel[d] = ref_slice_indices(s[d], st, en, sp);
    }
    auto y = run("Slice", {x, i64({(int64_t)starts.size()}, starts), i64({(int64_t)ends.size()}, ends),
                           i64({(int64_t)axes.size()}, axes), i64({(int64_t)steps.size()}, steps)});
    Shape out(r);
    for (int d = 0; d < r; ++d) out[d] = static_cast<int64_t>(sel[d].size());
    ASSERT_EQ(y[0].shape(), out) << "iter " << iter;
    for (int64_t i = 0; i < y[0].numel(); ++i) {
      auto idx = unravel(i, out);
      for (int d = 0; d < r; ++d) idx[d] = sel[d][idx[d]];
      ASSERT_EQ(y[0].data<int64_t>()[i], ravel(idx, s));
    }
  }
}

TEST(ShapeSlice, DefaultAxesOldOpsetEmptyAndStrings) {
  Tensor x = iota_i64({3, 4});
  auto y = run("Slice", {x, i64({1}, {1}), i64({1}, {1000})});
  EXPECT_EQ(y[0].shape(), (Shape{2, 4}));
  y = run("Slice", {x}, {{"starts", ais({1, -1})}, {"ends", ais({3, 100})}, {"axes", ais({0, 1})}}, 1, 9);
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{7, 11}));
  y = run("Slice", {x, i64({1}, {2}), i64({1}, {2}), i64({1}, {1})});
  EXPECT_EQ(y[0].shape(), (Shape{3, 0}));
  Tensor s = iota_str({5});
  y = run("Slice", {s, i64({1}, {-1}), i64({1}, {INT64_MIN}), i64({1}, {0}), i64({1}, {-2})});
  EXPECT_EQ(values<std::string>(y[0]), (std::vector<std::string>{s.data<std::string>()[4], s.data<std::string>()[2], s.data<std::string>()[0]}));
  EXPECT_FALSE(try_run("Slice", {x, i64({1}, {0}), i64({1}, {1}), i64({1}, {0}), i64({1}, {0})}).ok());
}

TEST(ShapeExpand, BroadcastsBothWays) {
  std::mt19937 rng(4);
  Tensor x = rand_f32({3, 1}, rng);
  auto y = run("Expand", {x, i64({3}, {2, 1, 4})});
  ASSERT_EQ(y[0].shape(), (Shape{2, 3, 4}));
  for (int64_t i = 0; i < y[0].numel(); ++i) EXPECT_EQ(y[0].data<float>()[i], x.data<float>()[(i / 4) % 3]);
  // The shape may be smaller than the input: input dims win.
  y = run("Expand", {x, i64({1}, {1})});
  EXPECT_EQ(y[0].shape(), (Shape{3, 1}));
  y = run("Expand", {strs({1}, {"z"}), i64({2}, {2, 2})});
  EXPECT_EQ(values<std::string>(y[0]), (std::vector<std::string>(4, "z")));
  EXPECT_FALSE(try_run("Expand", {x, i64({2}, {0, 1})}).ok());  // 3 cannot become 0
  EXPECT_EQ(run("Expand", {rand_f32({1, 1}, rng), i64({2}, {0, 3})})[0].shape(), (Shape{0, 3}));
}

TEST(ShapeTile, MatchesNaive) {
  std::mt19937 rng(5);
  for (int iter = 0; iter < 20; ++iter) {
    const int r = 1 + iter % 3;
    Shape s = rand_shape(rng, r, 4);
    std::vector<int64_t> reps(r);
    for (auto& v : reps) v = std::uniform_int_distribution<int>(iter == 7 ? 0 : 1, 3)(rng);
    Tensor x = iota_i64(s);
    auto y = run("Tile", {x, i64({r}, reps)});
    Shape out(r);
    for (int d = 0; d < r; ++d) out[d] = s[d] * reps[d];
    ASSERT_EQ(y[0].shape(), out);
    for (int64_t i = 0; i < y[0].numel(); ++i) {
      auto idx = unravel(i, out);
      for (int d = 0; d < r; ++d) idx[d] %= s[d];
      ASSERT_EQ(y[0].data<int64_t>()[i], ravel(idx, s));
    }
  }
}

TEST(ShapePad, ModesMatchHandComputed) {
  Tensor x = f32({3}, {1, 2, 3});
  auto pad = [&](const std::string& mode, std::vector<int64_t> pads) {
    return values<float>(run("Pad", {x, i64({2}, pads)}, {{"mode", as(mode)}}, 1, 19)[0]);
  };
  EXPECT_EQ(pad("constant", {2, 1}), (std::vector<float>{0, 0, 1, 2, 3, 0}));
  EXPECT_EQ(pad("reflect", {2, 2}), (std::vector<float>{3, 2, 1, 2, 3, 2, 1}));
  EXPECT_EQ(pad("edge", {2, 1}), (std::vector<float>{1, 1, 1, 2, 3, 3}));
  EXPECT_EQ(pad("wrap", {2, 4}), (std::vector<float>{2, 3, 1, 2, 3, 1, 2, 3, 1}));
  EXPECT_EQ(pad("constant", {-1, 1}), (std::vector<float>{2, 3, 0}));
  // Constant value input, axes input (opset 18) with a negative axis.
  Tensor m = iota_i64({2, 2});
  auto y = run("Pad", {m, i64({2}, {1, 0}), i64({}, {9}), i64({1}, {-1})});
  EXPECT_EQ(y[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{9, 0, 1, 9, 2, 3}));
  // Old opset: pads and value attributes.
  y = run("Pad", {f32({1, 2}, {5, 6})}, {{"pads", ais({1, 0, 0, 1})}, {"value", af(1.5f)}}, 1, 2);
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1.5f, 1.5f, 1.5f, 5, 6, 1.5f}));
  // 2-D reflect against a naive reference (pads < dim).
  Tensor big = iota_i64({4, 5});
  y = run("Pad", {big, i64({4}, {2, 1, 3, 4})}, {{"mode", as("reflect")}});
  ASSERT_EQ(y[0].shape(), (Shape{9, 10}));
  auto refl = [](int64_t i, int64_t n) { return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i; };
  for (int64_t i = 0; i < 9; ++i)
    for (int64_t j = 0; j < 10; ++j) ASSERT_EQ(y[0].data<int64_t>()[i * 10 + j], refl(i - 2, 4) * 5 + refl(j - 1, 5));
  // Strings pad with empty strings.
  y = run("Pad", {strs({1}, {"a"}), i64({2}, {1, 0})});
  EXPECT_EQ(values<std::string>(y[0]), (std::vector<std::string>{"", "a"}));
  EXPECT_FALSE(try_run("Pad", {x, i64({2}, {-2, -2})}).ok());
}

TEST(ShapeCenterCropPad, CropAndPad) {
  Tensor x = iota_i64({4, 3});
  auto y = run("CenterCropPad", {x, i64({2}, {2, 5})});
  ASSERT_EQ(y[0].shape(), (Shape{2, 5}));
  // rows 1..2; cols: one zero before, then 0..2, then one zero.
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, 3, 4, 5, 0, 0, 6, 7, 8, 0}));
  y = run("CenterCropPad", {x, i64({1}, {1})}, {{"axes", ais({-1})}});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{1, 4, 7, 10}));
}

TEST(ShapeDepthSpace, DcrCrdAndRoundTrip) {
  const int64_t N = 2, C = 8, H = 2, W = 3, b = 2, c = C / 4;
  Tensor x = iota_i64({N, C, H, W});
  for (std::string mode : {"DCR", "CRD"}) {
    auto y = run("DepthToSpace", {x}, {{"blocksize", ai(b)}, {"mode", as(mode)}});
    ASSERT_EQ(y[0].shape(), (Shape{N, c, H * b, W * b}));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t cc = 0; cc < c; ++cc)
        for (int64_t h = 0; h < H * b; ++h)
          for (int64_t w = 0; w < W * b; ++w) {
            const int64_t bh = h % b, bw = w % b;
            const int64_t ic = mode == "DCR" ? (bh * b + bw) * c + cc : cc * b * b + bh * b + bw;
            ASSERT_EQ(y[0].data<int64_t>()[((n * c + cc) * H * b + h) * W * b + w], ((n * C + ic) * H + h / b) * W + w / b);
          }
  }
  // SpaceToDepth inverts DCR DepthToSpace.
  auto d = run("DepthToSpace", {x}, {{"blocksize", ai(b)}});
  auto s = run("SpaceToDepth", {d[0]}, {{"blocksize", ai(b)}});
  EXPECT_EQ(s[0].shape(), x.shape());
  EXPECT_EQ(values<int64_t>(s[0]), values<int64_t>(x));
}

TEST(ShapeShapeSize, StartEnd) {
  Tensor x = iota_i64({2, 3, 4, 5});
  EXPECT_EQ(values<int64_t>(run("Shape", {x})[0]), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(values<int64_t>(run("Shape", {x}, {{"start", ai(1)}, {"end", ai(-1)}})[0]), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(values<int64_t>(run("Shape", {x}, {{"start", ai(-10)}, {"end", ai(10)}})[0]), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(run("Shape", {x}, {{"start", ai(3)}, {"end", ai(1)}})[0].shape(), (Shape{0}));
  auto sz = run("Size", {x});
  EXPECT_EQ(sz[0].rank(), 0);
  EXPECT_EQ(sz[0].data<int64_t>()[0], 120);
}

TEST(ShapeConstant, AllAttributeForms) {
  auto c = run("Constant", {}, {{"value", at(f32({2}, {1, 2}))}});
  EXPECT_EQ(values<float>(c[0]), (std::vector<float>{1, 2}));
  c = run("Constant", {}, {{"value_float", af(2.5f)}});
  EXPECT_EQ(c[0].rank(), 0);
  EXPECT_EQ(c[0].data<float>()[0], 2.5f);
  c = run("Constant", {}, {{"value_floats", afs({1, 2, 3})}});
  EXPECT_EQ(c[0].shape(), (Shape{3}));
  c = run("Constant", {}, {{"value_int", ai(7)}});
  EXPECT_EQ(c[0].dtype(), DataType::kInt64);
  EXPECT_EQ(c[0].data<int64_t>()[0], 7);
  c = run("Constant", {}, {{"value_ints", ais({4, 5})}});
  EXPECT_EQ(values<int64_t>(c[0]), (std::vector<int64_t>{4, 5}));
  c = run("Constant", {}, {{"value_string", as("hi")}});
  EXPECT_EQ(c[0].data<std::string>()[0], "hi");
  c = run("Constant", {}, {{"value_strings", astrs({"a", "b"})}});
  EXPECT_EQ(values<std::string>(c[0]), (std::vector<std::string>{"a", "b"}));
  ir::Attribute sp = at(i64({2}, {0, 3}));
  sp.kind = ir::Attribute::Kind::kSparseTensor;
  c = run("Constant", {}, {{"sparse_value", sp}});
  EXPECT_EQ(values<int64_t>(c[0]), (std::vector<int64_t>{0, 3}));
  EXPECT_FALSE(try_run("Constant", {}, {}).ok());
}

TEST(ShapeConstantOfShape, ValueAndDefault) {
  auto y = run("ConstantOfShape", {i64({2}, {2, 3})});
  EXPECT_EQ(y[0].dtype(), DataType::kFloat32);
  EXPECT_EQ(values<float>(y[0]), std::vector<float>(6, 0.0f));
  y = run("ConstantOfShape", {i64({1}, {4})}, {{"value", at(i32({1}, {7}))}});
  EXPECT_EQ(values<int32_t>(y[0]), std::vector<int32_t>(4, 7));
  y = run("ConstantOfShape", {i64({2}, {0, 3})}, {{"value", at(i32({1}, {7}))}});
  EXPECT_EQ(y[0].shape(), (Shape{0, 3}));
  y = run("ConstantOfShape", {i64({0}, {})});
  EXPECT_EQ(y[0].rank(), 0);
}

TEST(ShapeRange, FloatIntNegativeDeltaEmpty) {
  auto y = run("Range", {f32({}, {1}), f32({}, {2}), f32({}, {0.3f})});
  ASSERT_EQ(y[0].shape(), (Shape{4}));
  EXPECT_FLOAT_EQ(y[0].data<float>()[3], 1.9f);
  y = run("Range", {i32({}, {10}), i32({}, {4}), i32({}, {-3})});
  EXPECT_EQ(values<int32_t>(y[0]), (std::vector<int32_t>{10, 7}));
  y = run("Range", {i64({}, {5}), i64({}, {1}), i64({}, {2})});
  EXPECT_EQ(y[0].shape(), (Shape{0}));
  EXPECT_FALSE(try_run("Range", {i64({}, {5}), i64({}, {1}), i64({}, {0})}).ok());
}

TEST(ShapeTrilu, UpperLowerWithK) {
  std::mt19937 rng(6);
  Tensor x = rand_f32({2, 3, 5}, rng);
  for (int upper : {0, 1})
    for (int64_t k : {-4, -1, 0, 2, 7}) {
      auto y = run("Trilu", {x, i64({}, {k})}, {{"upper", ai(upper)}});
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t r = (i / 5) % 3, c = i % 5;
        const bool keep = upper ? c - r >= k : c - r <= k;
        ASSERT_EQ(y[0].data<float>()[i], keep ? x.data<float>()[i] : 0.0f);
      }
    }
  auto y = run("Trilu", {iota_i64({3, 3})});  // default: upper, k = 0
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, 1, 2, 0, 4, 5, 0, 0, 8}));
}

TEST(ShapeEyeLike, DtypeAndK) {
  auto y = run("EyeLike", {iota_i64({3, 4})}, {{"k", ai(1)}});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  y = run("EyeLike", {iota_i64({2, 2})}, {{"dtype", ai(1)}});
  EXPECT_EQ(y[0].dtype(), DataType::kFloat32);
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1, 0, 0, 1}));
}
