// Unit tests of the shape family's index-driven kernels, and of its shape inference.
#include <algorithm>
#include <numeric>

#include "ops/params_shape.h"
#include "test_shape_util.h"

using namespace kiln;
using namespace kiln::shape_test;

TEST(IndexGather, RandomAxesNegativeIndicesStrings) {
  std::mt19937 rng(11);
  for (int iter = 0; iter < 30; ++iter) {
    const int r = 1 + iter % 3;
    Shape s = rand_shape(rng, r);
    const int axis = std::uniform_int_distribution<int>(-r, r - 1)(rng);
    const int a = axis < 0 ? axis + r : axis;
    Shape is = rand_shape(rng, iter % 3);
    Tensor ind = Tensor::empty(DataType::kInt64, is);
    for (int64_t i = 0; i < ind.numel(); ++i) ind.data<int64_t>()[i] = std::uniform_int_distribution<int64_t>(-s[a], s[a] - 1)(rng);
    Tensor x = iota_i64(s);
    auto y = run("Gather", {x, ind}, {{"axis", ai(axis)}});
    Shape out(s.begin(), s.begin() + a);
    out.insert(out.end(), is.begin(), is.end());
    out.insert(out.end(), s.begin() + a + 1, s.end());
    ASSERT_EQ(y[0].shape(), out);
    for (int64_t i = 0; i < y[0].numel(); ++i) {
      auto oi = unravel(i, out);
      std::vector<int64_t> ii(oi.begin(), oi.begin() + a);
      std::vector<int64_t> k(oi.begin() + a, oi.begin() + a + is.size());
      int64_t v = ind.data<int64_t>()[ravel(k, is)];
      ii.push_back(v < 0 ? v + s[a] : v);
      ii.insert(ii.end(), oi.begin() + a + is.size(), oi.end());
      ASSERT_EQ(y[0].data<int64_t>()[i], ravel(ii, s));
    }
  }
  auto y = run("Gather", {strs({3}, {"a", "b", "c"}), i32({2}, {-1, 0})});
  EXPECT_EQ(values<std::string>(y[0]), (std::vector<std::string>{"c", "a"}));
  EXPECT_FALSE(try_run("Gather", {iota_i64({3}), i64({1}, {3})}).ok());
  EXPECT_FALSE(try_run("Gather", {iota_i64({3}), i64({1}, {-4})}).ok());
  EXPECT_EQ(run("Gather", {iota_i64({3, 2}), i64({0}, {})})[0].shape(), (Shape{0, 2}));
}

TEST(IndexGatherElements, MatchesNaive) {
  std::mt19937 rng(12);
  for (int iter = 0; iter < 20; ++iter) {
    const int r = 1 + iter % 3;
    Shape s = rand_shape(rng, r);
    const int axis = std::uniform_int_distribution<int>(-r, r - 1)(rng);
    const int a = axis < 0 ? axis + r : axis;
    Shape is = s;
    for (auto& d : is) d = std::uniform_int_distribution<int64_t>(1, d)(rng);
    is[a] = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    Tensor ind = Tensor::empty(DataType::kInt32, is);
    for (int64_t i = 0; i < ind.numel(); ++i) ind.data<int32_t>()[i] = std::uniform_int_distribution<int32_t>(-s[a], s[a] - 1)(rng);
    Tensor x = iota_i64(s);
    auto y = run("GatherElements", {x, ind}, {{"axis", ai(axis)}});
    ASSERT_EQ(y[0].shape(), is);
    for (int64_t i = 0; i < y[0].numel(); ++i) {
      auto idx = unravel(i, is);
      int64_t v = ind.data<int32_t>()[i];
      idx[a] = v < 0 ? v + s[a] : v;
      ASSERT_EQ(y[0].data<int64_t>()[i], ravel(idx, s));
    }
  }
  EXPECT_FALSE(try_run("GatherElements", {iota_i64({2, 2}), i64({2, 1}, {0, 2})}, {{"axis", ai(1)}}).ok());
}

TEST(IndexScatterElements, ReductionsMatchNaive) {
  std::mt19937 rng(13);
  for (std::string red : {"none", "add", "mul", "max", "min"}) {
    Shape s = {3, 4};
    Tensor x = rand_f32(s, rng);
    Shape is = {2, 4};
    Tensor ind = Tensor::empty(DataType::kInt64, is);
    for (int64_t i = 0; i < ind.numel(); ++i) ind.data<int64_t>()[i] = std::uniform_int_distribution<int64_t>(-3, 2)(rng);
    if (red == "none") ind.data<int64_t>()[4] = 1 - ind.data<int64_t>()[0];  // avoid duplicate order questions
    Tensor upd = rand_f32(is, rng);
    auto y = run("ScatterElements", {x, ind, upd}, {{"axis", ai(0)}, {"reduction", as(red)}});
    std::vector<float> ref = values<float>(x);
    for (int64_t i = 0; i < ind.numel(); ++i) {
      int64_t v = ind.data<int64_t>()[i];
      if (v < 0) v += 3;
      float& o = ref[v * 4 + i % 4];
      const float u = upd.data<float>()[i];
      if (red == "none") o = u;
      else if (red == "add") o += u;
      else if (red == "mul") o *= u;
      else if (red == "max") o = std::max(o, u);
      else o = std::min(o, u);
    }
    auto got = values<float>(y[0]);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-4f * (1 + std::abs(ref[i]))) << red << " " << i;
  }
  // Old Scatter (opset 10) and int64 data with add.
  auto y = run("Scatter", {iota_i64({1, 5}), i64({1, 2}, {1, 3}), i64({1, 2}, {-1, -2})}, {{"axis", ai(1)}}, 1, 10);
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, -1, 2, -2, 4}));
  y = run("ScatterElements", {iota_i64({1, 5}), i64({1, 3}, {1, 1, -1}), i64({1, 3}, {10, 20, 30})},
          {{"axis", ai(1)}, {"reduction", as("add")}});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, 31, 2, 3, 34}));
  EXPECT_FALSE(try_run("ScatterElements", {iota_i64({1, 5}), i64({1, 1}, {5}), i64({1, 1}, {0})}, {{"axis", ai(1)}}).ok());
}

TEST(IndexGatherND, BatchDimsAndExamples) {
  // onnx example: data [[0,1],[2,3]], indices [[0,0],[1,1]] → [0,3].
  auto y = run("GatherND", {iota_i64({2, 2}), i64({2, 2}, {0, 0, 1, 1})});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, 3}));
  // Slices: indices [[1],[0]] → rows swapped.
  y = run("GatherND", {iota_i64({2, 2}), i64({2, 1}, {1, -2})});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{2, 3, 0, 1}));
  // batch_dims = 1: data [2,2,2], indices [[1],[0]] → [[2,3],[4,5]].
  y = run("GatherND", {iota_i64({2, 2, 2}), i64({2, 1}, {1, 0})}, {{"batch_dims", ai(1)}});
  EXPECT_EQ(y[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{2, 3, 4, 5}));
  // Random batch_dims=1, k=2 against a naive reference.
  std::mt19937 rng(14);
  Tensor x = iota_i64({3, 4, 5, 2});
  Tensor ind = Tensor::empty(DataType::kInt64, {3, 6, 2});
  for (int64_t i = 0; i < ind.numel(); ++i) ind.data<int64_t>()[i] = std::uniform_int_distribution<int64_t>(-4, 3)(rng) % (i % 2 ? 5 : 4);
  y = run("GatherND", {x, ind}, {{"batch_dims", ai(1)}});
  ASSERT_EQ(y[0].shape(), (Shape{3, 6, 2}));
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t t = 0; t < 6; ++t)
      for (int64_t e = 0; e < 2; ++e) {
        int64_t i0 = ind.data<int64_t>()[(b * 6 + t) * 2], i1 = ind.data<int64_t>()[(b * 6 + t) * 2 + 1];
        if (i0 < 0) i0 += 4;
        if (i1 < 0) i1 += 5;
        ASSERT_EQ(y[0].data<int64_t>()[(b * 6 + t) * 2 + e], ravel({b, i0, i1, e}, x.shape()));
      }
  EXPECT_FALSE(try_run("GatherND", {iota_i64({2, 2}), i64({1, 2}, {0, 2})}).ok());
}

TEST(IndexScatterND, NoneAndReductions) {
  // onnx example: data [1..8], indices [[4],[3],[1],[7]], updates [9,10,11,12].
  Tensor x = i64({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto y = run("ScatterND", {x, i64({4, 1}, {4, 3, 1, 7}), i64({4}, {9, 10, 11, 12})});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{1, 11, 3, 10, 9, 6, 7, 12}));
  y = run("ScatterND", {x, i64({2, 1}, {0, 0}), i64({2}, {5, 6})}, {{"reduction", as("add")}});
  EXPECT_EQ(y[0].data<int64_t>()[0], 12);
  y = run("ScatterND", {x, i64({2, 1}, {-1, 0}), i64({2}, {5, 6})}, {{"reduction", as("mul")}});
  EXPECT_EQ(y[0].data<int64_t>()[7], 40);
  EXPECT_EQ(y[0].data<int64_t>()[0], 6);
  // Slice updates: data [2,3], indices [[1]] → row 1 replaced.
  y = run("ScatterND", {iota_i64({2, 3}), i64({1, 1}, {1}), i64({1, 3}, {7, 8, 9})}, {{"reduction", as("max")}});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, 1, 2, 7, 8, 9}));
  EXPECT_FALSE(try_run("ScatterND", {x, i64({1, 1}, {8}), i64({1}, {0})}).ok());
  EXPECT_FALSE(try_run("ScatterND", {x, i64({1, 1}, {0}), i64({2}, {0, 1})}).ok());
  EXPECT_FALSE(try_run("ScatterND", {x, i64({1, 1}, {0}), f32({1}, {0})}).ok());
}

// The updates check both ScatterND kernels (CPU and CUDA) call: shape indices[:-1] + data[indices[-1]:]
// and data's dtype.
TEST(IndexScatterND, UpdatesMustFitDataAndIndices) {
  const DataType f = DataType::kFloat32;
  EXPECT_EQ(ops::scatter_nd_updates_mismatch(f, {2, 3, 4}, {5, 1}, f, {5, 3, 4}), "");
  EXPECT_EQ(ops::scatter_nd_updates_mismatch(f, {2, 3, 4}, {5, 7, 2}, f, {5, 7, 4}), "");
  EXPECT_EQ(ops::scatter_nd_updates_mismatch(f, {2, 3, 4}, {5, 3}, f, {5}), "");
  EXPECT_EQ(ops::scatter_nd_updates_mismatch(f, {2, 3, 4}, {5, 1}, f, {5, 3, 5}), "updates shape [5,3,5], expected [5,3,4]");
  EXPECT_EQ(ops::scatter_nd_updates_mismatch(f, {2, 3, 4}, {5, 1}, DataType::kFloat16, {5, 3, 4}),
            "updates must have the dtype of data");
  EXPECT_NE(ops::scatter_nd_updates_mismatch(f, {2, 3}, {5, 3}, f, {5}).find("do not index data of rank 2"), std::string::npos);
  EXPECT_NE(ops::scatter_nd_updates_mismatch(f, {2, 3}, {}, f, {}).find("do not index"), std::string::npos);
}

TEST(IndexOneHot, AxesAndNegativeIndices) {
  auto y = run("OneHot", {i64({3}, {0, -1, 5}), i64({}, {3}), f32({2}, {0, 1})});
  ASSERT_EQ(y[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 0}));
  y = run("OneHot", {f32({2}, {1, 2}), f32({}, {3}), i64({2}, {-1, 7})}, {{"axis", ai(0)}});
  ASSERT_EQ(y[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{-1, -1, 7, -1, -1, 7}));
}

TEST(IndexNonZeroCompress, Basics) {
  auto y = run("NonZero", {f32({2, 3}, {0, 1, 0, -0.0f, 2, 3})});
  ASSERT_EQ(y[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, 1, 1, 1, 1, 2}));
  EXPECT_EQ(run("NonZero", {f32({0, 2}, {})})[0].shape(), (Shape{2, 0}));
  Tensor x = iota_i64({3, 2});
  y = run("Compress", {x, bools({3}, {false, true, true})}, {{"axis", ai(0)}});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{2, 3, 4, 5}));
  y = run("Compress", {x, bools({2}, {false, true})}, {{"axis", ai(-1)}});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{1, 3, 5}));
  y = run("Compress", {x, bools({5}, {true, false, false, false, true})});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, 4}));
  EXPECT_FALSE(try_run("Compress", {x, bools({3}, {false, false, true})}, {{"axis", ai(1)}}).ok());
}

TEST(IndexReverseSequence, TimeAndBatchMajor) {
  // time-major [T=4, B=2]: batch 0 reverses 3 steps, batch 1 all 4.
  Tensor x = iota_i64({4, 2});
  auto y = run("ReverseSequence", {x, i64({2}, {3, 4})}, {{"time_axis", ai(0)}, {"batch_axis", ai(1)}});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{4, 7, 2, 5, 0, 3, 6, 1}));
  // batch-major [B=2, T=3, 2].
  y = run("ReverseSequence", {iota_i64({2, 3, 2}), i64({2}, {1, 2})}, {{"time_axis", ai(1)}, {"batch_axis", ai(0)}});
  EXPECT_EQ(values<int64_t>(y[0]), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 8, 9, 6, 7, 10, 11}));
  EXPECT_FALSE(try_run("ReverseSequence", {x, i64({2}, {5, 1})}).ok());
}

TEST(IndexCol2Im, SumsOverlappingBlocks) {
  // Image 3x3, block 2x2, stride 1: 4 blocks; every block element 1 → count of covering blocks.
  Tensor x = Tensor::empty(DataType::kFloat32, {1, 4, 4});
  for (int64_t i = 0; i < 16; ++i) x.data<float>()[i] = 1;
  auto y = run("Col2Im", {x, i64({2}, {3, 3}), i64({2}, {2, 2})});
  ASSERT_EQ(y[0].shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(values<float>(y[0]), (std::vector<float>{1, 2, 1, 2, 4, 2, 1, 2, 1}));
  // Non-overlapping 1x5 blocks over a 5x5 image are a plain rearrangement.
  Tensor z = Tensor::empty(DataType::kFloat32, {1, 5, 5});
  for (int64_t i = 0; i < 25; ++i) z.data<float>()[i] = static_cast<float>(i);
  y = run("Col2Im", {z, i64({2}, {5, 5}), i64({2}, {1, 5})});
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t c = 0; c < 5; ++c) EXPECT_EQ(y[0].data<float>()[r * 5 + c], static_cast<float>(c * 5 + r));
}

// ---------------------------------------------------------------- shape inference

namespace {

ir::SymShape sym(std::vector<ir::Dim> d) { return ir::SymShape(std::move(d)); }
ir::Dim S(const char* s) { return ir::Dim(std::string(s)); }

// Builds a node whose inputs have the given types (and constant values where given) and infers it.
struct InferCase {
  ir::Graph g;
  ir::Node* n = nullptr;
  InferCase(const std::string& op, std::vector<ir::Type> types, std::vector<Tensor> consts, Attrs attrs = {},
            int n_out = 1, int opset = 18) {
    std::vector<ir::Value*> ins, outs;
    for (size_t i = 0; i < types.size(); ++i) {
      ir::Value* v = g.add_value("in" + std::to_string(i), types[i]);
      if (i < consts.size() && consts[i].defined()) v->constant = consts[i];
      ins.push_back(v);
    }
    for (int i = 0; i < n_out; ++i) outs.push_back(g.add_value("out" + std::to_string(i)));
    n = g.add_node(op, "", ins, outs, "n");
    n->attrs = std::move(attrs);
    n->opset = opset;
    Status st = ops::infer_node(*n);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  std::string out(int i = 0) const { return n->outputs[i]->type.shape.to_string(); }
  const ir::Type& type(int i = 0) const { return n->outputs[i]->type; }
};

ir::Type f32t(ir::SymShape s) { return ir::Type::tensor(DataType::kFloat32, std::move(s)); }
ir::Type i64t(int64_t n) { return ir::Type::tensor(DataType::kInt64, ir::SymShape::of({n})); }
std::string str(std::vector<ir::Dim> d) { return ir::SymShape(std::move(d)).to_string(); }

}  // namespace

TEST(ShapeInfer, ReshapeKeepsSymbols) {
  const ir::Type x = f32t(sym({S("B"), S("S"), 768}));
  EXPECT_EQ(InferCase("Reshape", {x, i64t(4)}, {Tensor(), i64({4}, {0, 0, 12, 64})}).out(), str({S("B"), S("S"), 12, 64}));
  const ir::Type y = f32t(sym({S("B"), S("S"), 12, 64}));
  EXPECT_EQ(InferCase("Reshape", {y, i64t(3)}, {Tensor(), i64({3}, {0, 0, -1})}).out(), str({S("B"), S("S"), 768}));
  EXPECT_EQ(InferCase("Reshape", {y, i64t(2)}, {Tensor(), i64({2}, {-1, 768})}).out(), str({ir::Dim(), 768}));
  EXPECT_EQ(InferCase("Reshape", {f32t(sym({S("B"), 3, 4})), i64t(2)}, {Tensor(), i64({2}, {-1, 12})}).out(), str({S("B"), 12}));
  // Unknown shape values: rank from the shape input's length.
  EXPECT_EQ(InferCase("Reshape", {x, i64t(2)}, {}).out(), str({ir::Dim(), ir::Dim()}));
}

TEST(ShapeInfer, TransposeConcatSqueezeFlatten) {
  const ir::Type x = f32t(sym({S("N"), 3, S("T")}));
  EXPECT_EQ(InferCase("Transpose", {x}, {}, {{"perm", ais({2, 0, 1})}}).out(), str({S("T"), S("N"), 3}));
  EXPECT_EQ(InferCase("Concat", {x, f32t(sym({S("N"), 5, S("T")}))}, {}, {{"axis", ai(1)}}).out(), str({S("N"), 8, S("T")}));
  EXPECT_EQ(InferCase("Concat", {x, x}, {}, {{"axis", ai(-1)}}).out(), str({S("N"), 3, ir::Dim()}));
  EXPECT_EQ(InferCase("Unsqueeze", {x, i64t(2)}, {Tensor(), i64({2}, {0, -1})}).out(), str({1, S("N"), 3, S("T"), 1}));
  const ir::Type u = f32t(sym({S("N"), 1, S("T")}));
  EXPECT_EQ(InferCase("Squeeze", {u, i64t(1)}, {Tensor(), i64({1}, {1})}).out(), str({S("N"), S("T")}));
  EXPECT_EQ(InferCase("Flatten", {f32t(sym({S("N"), 3, 4}))}, {}).out(), str({S("N"), 12}));
  EXPECT_EQ(InferCase("Flatten", {f32t(sym({S("N"), 3, 4}))}, {}, {{"axis", ai(2)}}).out(), str({ir::Dim(), 4}));
}

TEST(ShapeInfer, SliceExpandTilePadSplit) {
  const ir::Type x = f32t(sym({S("B"), 10, S("T")}));
  InferCase sl("Slice", {x, i64t(2), i64t(2), i64t(2), i64t(2)},
               {Tensor(), i64({2}, {2, 0}), i64({2}, {-1, INT64_MAX}), i64({2}, {1, 2}), i64({2}, {3, 1})});
  EXPECT_EQ(sl.out(), str({S("B"), 3, S("T")}));
  EXPECT_EQ(InferCase("Expand", {f32t(sym({S("B"), 1})), i64t(3)}, {Tensor(), i64({3}, {2, 1, 6})}).out(), str({2, S("B"), 6}));
  EXPECT_EQ(InferCase("Tile", {x, i64t(3)}, {Tensor(), i64({3}, {1, 2, 3})}).out(), str({S("B"), 20, ir::Dim()}));
  EXPECT_EQ(InferCase("Pad", {x, i64t(6)}, {Tensor(), i64({6}, {0, 1, 0, 0, 2, 0})}).out(), str({S("B"), 13, S("T")}));
  InferCase sp("Split", {x}, {}, {{"axis", ai(1)}, {"num_outputs", ai(3)}}, 3);
  EXPECT_EQ(sp.out(0), str({S("B"), 4, S("T")}));
  EXPECT_EQ(sp.out(2), str({S("B"), 2, S("T")}));
  InferCase sp4("Split", {x}, {}, {{"axis", ai(1)}, {"num_outputs", ai(4)}}, 4);  // 10 → 3, 3, 3, 1
  EXPECT_EQ(sp4.out(3), str({S("B"), 1, S("T")}));
  InferCase sp8("Split", {x}, {}, {{"axis", ai(1)}, {"num_outputs", ai(8)}}, 8);  // 10 → 2 ×5, then 0 ×3
  EXPECT_EQ(sp8.out(4), str({S("B"), 2, S("T")}));
  EXPECT_EQ(sp8.out(7), str({S("B"), 0, S("T")}));
}

TEST(ShapeInfer, ValueProducers) {
  const ir::Type x = f32t(sym({S("B"), 10, S("T")}));
  InferCase sh("Shape", {x}, {}, {{"start", ai(1)}});
  EXPECT_EQ(sh.type().dtype, DataType::kInt64);
  EXPECT_EQ(sh.out(), str({2}));
  EXPECT_EQ(InferCase("Size", {x}, {}).out(), str({}));
  InferCase c("Constant", {}, {}, {{"value_ints", ais({1, 2, 3})}});
  EXPECT_EQ(c.type().dtype, DataType::kInt64);
  EXPECT_EQ(c.out(), str({3}));
  InferCase cs("ConstantOfShape", {i64t(2)}, {i64({2}, {4, 5})}, {{"value", at(i32({1}, {1}))}});
  EXPECT_EQ(cs.type().dtype, DataType::kInt32);
  EXPECT_EQ(cs.out(), str({4, 5}));
  InferCase rg("Range", {i64t(1), i64t(1), i64t(1)}, {i64({}, {0}), i64({}, {10}), i64({}, {3})});
  EXPECT_EQ(rg.out(), str({4}));
  InferCase g("Gather", {x, ir::Type::tensor(DataType::kInt64, sym({S("K")}))}, {}, {{"axis", ai(1)}});
  EXPECT_EQ(g.out(), str({S("B"), S("K"), S("T")}));
  InferCase nz("NonZero", {x}, {});
  EXPECT_EQ(nz.out(), str({3, ir::Dim()}));
  InferCase d2s("DepthToSpace", {f32t(sym({S("N"), 8, 2, 3}))}, {}, {{"blocksize", ai(2)}});
  EXPECT_EQ(d2s.out(), str({S("N"), 2, 4, 6}));
}
