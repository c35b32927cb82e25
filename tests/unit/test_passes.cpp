// Pass tests: each builds a tiny graph shaped like exporter output, optimizes a copy at level 2,
// checks the op counts after, and runs both graphs node by node (CPU kernels) on random inputs to
// check the outputs agree.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backends/backend.h"
#include "builder/build.h"
#include "builder/precision.h"
#include "ir/epilogue.h"
#include "ir/float_types.h"
#include "ops/op_table.h"
#include "ops/params_nn.h"
#include "passes/passes.h"
#include "runtime/engine_impl.h"
#include "runtime/eager.h"
#include "graph_runner.h"

namespace {

using namespace kiln;

ir::Attribute attr_ints(std::vector<int64_t> v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kInts; a.ints = std::move(v); return a; }
ir::Attribute attr_int(int64_t v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kInt; a.i = v; return a; }
ir::Attribute attr_float(float v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kFloat; a.f = v; return a; }

// A tiny graph under construction, with random float constants.
struct Builder {
  std::unique_ptr<ir::Graph> g = std::make_unique<ir::Graph>();
  std::mt19937 rng{7};
  int opset = 17;
  Builder() { g->opsets[""] = opset; }

  ir::Value* input(const std::string& name, Shape shape, DataType dt = DataType::kFloat32) {
    ir::Value* v = g->add_value(name, ir::Type::tensor(dt, ir::SymShape::of(shape)));
    v->is_input = true;
    g->inputs.push_back(v);
    return v;
  }
  ir::Value* constant(Tensor t) {
    ir::Value* v = g->new_value("c", ir::Type::tensor(t.dtype(), ir::SymShape::of(t.shape())));
    v->constant = t;
    return v;
  }
  ir::Value* floats(Shape shape, float lo = -1, float hi = 1) {
    Tensor t = Tensor::empty(DataType::kFloat32, shape);
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    return constant(t);
  }
  ir::Value* scalar(float x, Shape shape = {}) {
    Tensor t = Tensor::empty(DataType::kFloat32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = x;
    return constant(t);
  }
  ir::Value* ints(std::vector<int64_t> v) {
    Tensor t = Tensor::empty(DataType::kInt64, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
    return constant(t);
  }
  ir::Value* node(const std::string& op, std::vector<ir::Value*> in, std::map<std::string, ir::Attribute> attrs = {},
                  int outputs = 1) {
    std::vector<ir::Value*> outs;
    for (int i = 0; i < outputs; ++i) outs.push_back(g->new_value(op));
    ir::Node* n = g->add_node(op, "", std::move(in), outs);
    n->attrs = std::move(attrs);
    n->opset = opset;
    EXPECT_TRUE(ops::infer_node(*n).ok()) << n->describe();
    return outs[0];
  }
  void output(ir::Value* v) { v->is_output = true; g->outputs.push_back(v); }
};

std::map<std::string, int> op_counts(const ir::Graph& g) {
  std::map<std::string, int> h;
  for (const ir::Node* n : g.nodes()) ++h[n->domain.empty() ? n->op_type : n->domain + "." + n->op_type];
  return h;
}

// Runs the graph node by node with the CPU kernels; returns the outputs by name.
std::map<std::string, Tensor> run(const ir::Graph& g, const std::map<std::string, Tensor>& feeds) {
  return test::run_graph_on_cpu(g, feeds);
}

struct Expect {
  std::map<std::string, int> ops;  // op → count after (0 = must be gone)
  std::map<std::string, int> fired;  // pass → rewrites
  double tol = 1e-4;
};

// Optimizes a copy at `level`, checks counts, and compares outputs with the unoptimized graph.
passes::OptimizeStats check(Builder& b, const Expect& e, int level = 2) {
  auto opt = b.g->clone();
  passes::PassOptions po = builder_pass_options(level, nullptr);
  passes::OptimizeStats stats;
  Status st = passes::optimize(*opt, po, &stats);
  EXPECT_TRUE(st.ok()) << st.to_string();
  auto h = op_counts(*opt);
  for (const auto& [op, n] : e.ops) EXPECT_EQ(h[op], n) << op << "\n" << opt->to_string();
  for (const auto& [p, n] : e.fired) EXPECT_EQ(stats.fired[p], n) << p;
  // Output names survive.
  if (opt->outputs.size() != b.g->outputs.size()) {
    ADD_FAILURE() << "output count changed";
    return stats;
  }
  for (size_t i = 0; i < opt->outputs.size(); ++i) EXPECT_EQ(opt->outputs[i]->name, b.g->outputs[i]->name);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2, 2);
  std::map<std::string, Tensor> feeds;
  for (const ir::Value* v : b.g->inputs) {
    Tensor t = Tensor::empty(v->type.dtype, v->type.shape.to_static());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (t.dtype() == DataType::kBool) t.data<bool>()[i] = (rng() % 4) != 0;
      else t.data<float>()[i] = u(rng);
    }
    feeds[v->name] = t;
  }
  auto want = run(*b.g, feeds);
  auto got = run(*opt, feeds);
  for (const auto& [name, w] : want) {
    if (!got.count(name) || got.at(name).shape() != w.shape()) {
      ADD_FAILURE() << name << " missing or reshaped";
      continue;
    }
    const Tensor& gt = got.at(name);
    double worst = 0;
    for (int64_t i = 0; i < w.numel(); ++i)
      worst = std::max(worst, std::fabs(double(gt.data<float>()[i]) - w.data<float>()[i]) /
                                  std::max(1.0, std::fabs(double(w.data<float>()[i]))));
    EXPECT_LE(worst, e.tol) << name;
  }
  return stats;
}

TEST(Passes, RemoveNoopsKeepsOutputNames) {
  Builder b;
  ir::Value* x = b.input("x", {2, 3});
  ir::Value* r = b.node("Relu", {x});
  ir::Value* i = b.node("Identity", {r});
  ir::Value* c = b.node("Cast", {i}, {{"to", attr_int(1)}});
  ir::Value* d = b.node("Dropout", {c});
  ir::Value* a = b.node("Add", {d, b.scalar(0)});
  ir::Value* m = b.node("Mul", {a, b.scalar(1, {1, 1})});
  ir::Value* s = b.node("Reshape", {m, b.ints({2, 3})});
  b.output(s);
  check(b, {{{"Relu", 1}, {"Identity", 0}, {"Cast", 0}, {"Dropout", 0}, {"Add", 0}, {"Mul", 0}, {"Reshape", 0}},
            {{"remove-noops", 6}}}, 1);
}

// torchvision's Swin exports its attention dropout as Dropout(p, ratio 0, training_mode true): every
// element kept, scaled by 1 / (1 - 0), so the input as it is. A ratio that is not exactly 0 drops
// elements in training mode and stays.
TEST(Passes, RemoveNoopsDropsTrainingDropoutOfRatioZero) {
  auto boolean = [](Builder& b, bool v) {
    Tensor t = Tensor::empty(DataType::kBool, {});
    t.data<bool>()[0] = v;
    return b.constant(t);
  };
  {
    Builder b;
    ir::Value* x = b.input("x", {2, 3});
    b.output(b.node("Relu", {b.node("Dropout", {x, b.scalar(0), boolean(b, true)})}));
    check(b, {{{"Dropout", 0}, {"Relu", 1}}, {{"remove-noops", 1}}}, 1);
  }
  {
    Builder b;
    ir::Value* x = b.input("x", {2, 3});
    b.output(b.node("Relu", {b.node("Dropout", {x, b.scalar(1e-7f), boolean(b, true)})}));
    check(b, {{{"Dropout", 1}, {"Relu", 1}}, {{"remove-noops", 0}}}, 1);
  }
}

TEST(Passes, RemoveNoopsKeepsBroadcastsAndReversals) {
  Builder b;
  ir::Value* x = b.input("x", {2, 3});
  b.output(b.node("Add", {x, b.scalar(0, {4, 2, 3})}));  // broadcasts: not a no-op
  b.output(b.node("Slice", {x, b.ints({-1}), b.ints({-100}), b.ints({1}), b.ints({-1})}));  // reverses
  check(b, {{{"Add", 1}, {"Slice", 1}}, {{"remove-noops", 0}}}, 1);
}

TEST(Passes, CseMergesEqualNodesAndConstants) {
  Builder b;
  ir::Value* x = b.input("x", {4});
  ir::Value* a1 = b.node("Add", {x, b.scalar(2)});
  ir::Value* a2 = b.node("Add", {x, b.scalar(2)});
  ir::Value* a3 = b.node("Add", {x, b.scalar(3)});
  b.output(b.node("Mul", {a1, a2}));
  b.output(a3);
  check(b, {{{"Add", 2}, {"Mul", 1}}, {}}, 1);
}

TEST(Passes, CseKeepsBothGraphOutputNames) {
  Builder b;
  ir::Value* x = b.input("x", {4});
  ir::Value* e1 = b.node("Exp", {x});
  ir::Value* e2 = b.node("Exp", {x});
  b.output(b.node("Neg", {e1}));
  b.output(e2);
  check(b, {{{"Exp", 1}}, {{"cse", 1}}}, 1);
}

TEST(Passes, FoldShapesOfDynamicBatch) {
  Builder b;
  ir::Value* x = b.g->add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim("batch"), 3, 4})));
  x->is_input = true;
  b.g->inputs.push_back(x);
  ir::Value* sh = b.node("Shape", {x});
  ir::Value* d2 = b.node("Gather", {sh, b.ints({2})}, {{"axis", attr_int(0)}});
  ir::Value* d1 = b.node("Slice", {sh, b.ints({1}), b.ints({2})});
  ir::Value* cat = b.node("Concat", {b.ints({-1}), d1, d2}, {{"axis", attr_int(0)}});
  b.output(b.node("Reshape", {x, cat}));
  auto opt = b.g->clone();
  passes::PassOptions po = builder_pass_options(1, nullptr);
  passes::OptimizeStats stats;
  ASSERT_TRUE(passes::optimize(*opt, po, &stats).ok());
  EXPECT_EQ(stats.fired["fold-shapes"], 3);  // two dims, then the Reshape's shape [-1, 3, 4]
  auto h = op_counts(*opt);
  EXPECT_EQ(h["Shape"] + h["Gather"] + h["Slice"] + h["Concat"], 0);
  EXPECT_EQ(h["Reshape"], 1);
}

// A Reshape whose shape has one element read from another tensor's anonymous dynamic dim (and the
// rest static) gets a constant shape with -1 there: the element count fixes that dim.
TEST(Passes, FoldShapesMakesOneComputedDimMinusOne) {
  Builder b;
  ir::Value* x = b.g->add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim("batch"), 6, 4})));
  x->is_input = true;
  b.g->inputs.push_back(x);
  ir::Value* flat = b.node("Relu", {b.node("Reshape", {x, b.ints({-1, 4})})});  // [?, 4]: an anonymous dim
  ir::Value* rows = b.node("Gather", {b.node("Shape", {flat}), b.ints({0})}, {{"axis", attr_int(0)}});
  ir::Value* shape = b.node("Concat", {b.ints({2}), rows, b.ints({2})}, {{"axis", attr_int(0)}});
  b.output(b.node("Reshape", {b.node("Exp", {x}), shape}));
  auto opt = b.g->clone();
  passes::OptimizeStats stats;
  ASSERT_TRUE(passes::optimize(*opt, builder_pass_options(1, nullptr), &stats).ok());
  const ir::Node* reshape = opt->outputs[0]->producer;
  ASSERT_TRUE(reshape && reshape->op_type == "Reshape") << opt->to_string();
  ASSERT_TRUE(reshape->inputs[1]->is_constant()) << opt->to_string();
  const Tensor& c = *reshape->inputs[1]->constant;
  EXPECT_EQ(std::vector<int64_t>(c.data<int64_t>(), c.data<int64_t>() + c.numel()), (std::vector<int64_t>{2, -1, 2}));
  const auto& ys = opt->outputs[0]->type.shape;
  ASSERT_TRUE(ys.known && ys.rank() == 3);
  EXPECT_TRUE(ys.dims[0].is_static() && ys.dims[0].value == 2 && ys.dims[2].is_static() && ys.dims[2].value == 2);
  Tensor xt = Tensor::empty(DataType::kFloat32, {3, 6, 4});
  for (int64_t i = 0; i < xt.numel(); ++i) xt.data<float>()[i] = 0.01f * static_cast<float>(i);
  const auto want = run(*b.g, {{"x", xt}}), got = run(*opt, {{"x", xt}});
  const Tensor& w = want.begin()->second;
  const Tensor& g2 = got.begin()->second;
  ASSERT_EQ(g2.shape(), w.shape());
  EXPECT_EQ(w.shape(), (Shape{2, 18, 2}));  // the computed dim: 3 x 6 rows
  for (int64_t i = 0; i < w.numel(); ++i) EXPECT_EQ(g2.data<float>()[i], w.data<float>()[i]);
}

// Shape(Transpose(x)) and Shape(Reshape(x, constant)) read x's shape instead, so the moved tensors
// lose their metadata readers; a Slice/Gather of the rebuilt shape vector whose picked dims are static
// folds to a constant (GPT-2's causal-mask sizes and head scale, as torch 1.13 exported them).
TEST(Passes, ShapesOfMovedTensorsReadTheirInputs) {
  Builder b;
  ir::Value* x = b.g->add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim("batch"), 5, 6})));
  x->is_input = true;
  b.g->inputs.push_back(x);
  ir::Value* t = b.node("Transpose", {x}, {{"perm", attr_ints({0, 2, 1})}});
  ir::Value* r = b.node("Reshape", {x, b.ints({0, 0, 2, 3})});
  ir::Value* st = b.node("Shape", {t});
  ir::Value* sr = b.node("Shape", {r});
  b.output(b.node("Relu", {t}));
  b.output(b.node("Exp", {r}));
  b.output(st);
  b.output(sr);
  b.output(b.node("Slice", {b.node("Shape", {t}), b.ints({-1}), b.ints({1000})}));  // [5]: static
  auto opt = b.g->clone();
  passes::OptimizeStats stats;
  ASSERT_TRUE(passes::optimize(*opt, builder_pass_options(1, nullptr), &stats).ok());
  for (const ir::Node* n : opt->nodes())
    if (n->op_type == "Shape") EXPECT_EQ(n->inputs[0]->name, "x") << opt->to_string();
  EXPECT_TRUE(opt->outputs[4]->is_constant()) << opt->to_string();
  Tensor xt = Tensor::empty(DataType::kFloat32, {3, 5, 6});
  for (int64_t i = 0; i < xt.numel(); ++i) xt.data<float>()[i] = 0.01f * static_cast<float>(i);
  const auto want = run(*b.g, {{"x", xt}}), got = run(*opt, {{"x", xt}});
  for (const auto& [name, w] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    const Tensor& g2 = got.at(name);
    ASSERT_EQ(g2.shape(), w.shape()) << name;
    ASSERT_EQ(g2.dtype(), w.dtype()) << name;
    EXPECT_EQ(std::memcmp(g2.raw(), w.raw(), w.nbytes()), 0) << name;
  }
}

TEST(Passes, TransposesMergeAndCancel) {
  Builder b;
  ir::Value* x = b.input("x", {2, 3, 4, 5});
  ir::Value* t1 = b.node("Transpose", {x}, {{"perm", attr_ints({0, 2, 1, 3})}});
  ir::Value* t2 = b.node("Transpose", {t1}, {{"perm", attr_ints({0, 1, 3, 2})}});  // → (0,2,3,1)
  ir::Value* u1 = b.node("Transpose", {b.node("Relu", {x})}, {{"perm", attr_ints({0, 2, 1, 3})}});
  ir::Value* u2 = b.node("Transpose", {u1}, {{"perm", attr_ints({0, 2, 1, 3})}});   // cancels
  b.output(t2);
  b.output(b.node("Neg", {u2}));
  check(b, {{{"Transpose", 1}}, {{"transposes", 2}}}, 1);
}

ir::Value* conv(Builder& b, ir::Value* x, int64_t cin, int64_t cout, bool bias, int64_t k = 3) {
  std::vector<ir::Value*> in = {x, b.floats({cout, cin, k, k})};
  if (bias) in.push_back(b.floats({cout}));
  return b.node("Conv", in, {{"pads", attr_ints({k / 2, k / 2, k / 2, k / 2})}});
}

TEST(Passes, ConvBatchNormFolds) {
  Builder b;
  ir::Value* x = b.input("x", {2, 3, 8, 8});
  ir::Value* c = conv(b, x, 3, 4, false);
  ir::Value* bn = b.node("BatchNormalization", {c, b.floats({4}), b.floats({4}), b.floats({4}), b.floats({4}, 0.5f, 2.0f)},
                         {{"epsilon", attr_float(1e-3f)}});
  b.output(b.node("Relu", {bn}));
  check(b, {{{"BatchNormalization", 0}, {"Conv", 0}, {"Relu", 0}, {"kiln.FusedConv", 1}},
            {{"fold-conv-bn", 1}, {"fuse-activation", 1}}});
}

TEST(Passes, ConvAffineAndPadFold) {
  Builder b;
  ir::Value* x = b.input("x", {1, 2, 6, 6});
  ir::Value* p = b.node("Pad", {x, b.ints({0, 0, 1, 2, 0, 0, 1, 2})});
  ir::Value* c = b.node("Conv", {p, b.floats({3, 2, 3, 3}), b.floats({3})});
  ir::Value* m = b.node("Mul", {b.floats({3, 1, 1}), c});
  ir::Value* a = b.node("Add", {m, b.floats({1, 3, 1, 1})});
  b.output(a);
  check(b, {{{"Pad", 0}, {"Mul", 0}, {"Add", 0}, {"Conv", 1}}, {{"fold-pad-conv", 1}, {"fold-conv-affine", 2}}});
}

// PyTorch's avg_pool2d(count_include_pad=True) as exporters write it: a zero Pad, then an AveragePool
// without pads. The Pad becomes the pool's padding, counted in its divisor; the result is unchanged
// (check() runs both graphs). Not with ceil_mode (a window past the padded input would count
// differently) nor where the pool's own padding is not counted.
TEST(Passes, PadFoldsIntoAveragePool) {
  {
    Builder b;
    ir::Value* x = b.input("x", {1, 3, 7, 6});
    ir::Value* p = b.node("Pad", {x, b.ints({0, 0, 1, 1, 0, 0, 1, 1})});
    b.output(b.node("AveragePool", {p}, {{"kernel_shape", attr_ints({3, 3})}, {"strides", attr_ints({1, 1})}}));
    check(b, {{{"Pad", 0}, {"AveragePool", 1}}, {{"fold-pad-conv", 1}}});
  }
  {
    Builder b;  // the pool's own padding counted too: the pads add up
    ir::Value* x = b.input("x", {1, 2, 8, 9});
    ir::Value* p = b.node("Pad", {x, b.ints({0, 0, 2, 0, 0, 0, 1, 1})});
    b.output(b.node("AveragePool", {p}, {{"kernel_shape", attr_ints({3, 2})}, {"strides", attr_ints({2, 1})},
                                           {"pads", attr_ints({1, 1, 0, 1})}, {"count_include_pad", attr_int(1)}}));
    check(b, {{{"Pad", 0}, {"AveragePool", 1}}, {{"fold-pad-conv", 1}}});
  }
  for (int variant = 0; variant < 2; ++variant) {
    Builder b;
    ir::Value* x = b.input("x", {1, 2, 8, 9});
    ir::Value* p = b.node("Pad", {x, b.ints({0, 0, 1, 1, 0, 0, 1, 1})});
    std::map<std::string, ir::Attribute> attrs = {{"kernel_shape", attr_ints({3, 3})}, {"strides", attr_ints({2, 2})}};
    if (variant == 0) attrs["ceil_mode"] = attr_int(1);
    else attrs["pads"] = attr_ints({1, 1, 1, 1});  // not counted (count_include_pad 0)
    b.output(b.node("AveragePool", {p}, attrs));
    auto stats = check(b, {{{"Pad", 1}, {"AveragePool", 1}}, {{"fold-pad-conv", 0}}});
    EXPECT_FALSE(stats.near_misses.empty());
  }
}

TEST(Passes, ConvAffineLeavesNonChannelConstants) {
  Builder b;
  ir::Value* x = b.input("x", {1, 2, 6, 6});
  ir::Value* c = conv(b, x, 2, 3, true);
  b.output(b.node("Add", {c, b.floats({6})}));  // along the width, not the channels
  auto stats = check(b, {{{"Add", 1}, {"Conv", 1}}, {{"fold-conv-affine", 0}}});
  EXPECT_FALSE(stats.near_misses.empty());
}

TEST(Passes, ConvActivations) {
  for (const char* act : {"Relu", "Sigmoid", "HardSwish", "LeakyRelu", "Tanh", "HardSigmoid"}) {
    Builder b;
    ir::Value* x = b.input("x", {1, 3, 5, 5});
    b.output(b.node(act, {conv(b, x, 3, 4, true)}));
    check(b, {{{act, 0}, {"kiln.FusedConv", 1}}, {{"fuse-activation", 1}}});
  }
  Builder b;  // Clip with constant bounds (ReLU6), SiLU as x * sigmoid(x)
  ir::Value* x = b.input("x", {1, 3, 5, 5});
  ir::Value* c1 = b.node("Clip", {conv(b, x, 3, 4, true), b.scalar(0), b.scalar(6)});
  ir::Value* c2 = conv(b, c1, 4, 4, false, 1);
  b.output(b.node("Mul", {c2, b.node("Sigmoid", {c2})}));
  check(b, {{{"Clip", 0}, {"Sigmoid", 0}, {"Mul", 0}, {"kiln.FusedConv", 2}}, {{"fuse-activation", 2}}});
}

// A ResNet bottleneck's tail: conv → Add(residual) → Relu becomes one FusedConv with the residual as
// input 3; a downsampling block (both Add operands convolutions) fuses one of them; a residual Add
// without an activation fuses too; a broadcast Add (not the output's shape) does not.
TEST(Passes, ConvResidualFuses) {
  Builder b;
  ir::Value* x = b.input("x", {2, 4, 6, 6});
  ir::Value* r1 = b.node("Relu", {conv(b, x, 4, 4, true)});
  ir::Value* block = b.node("Relu", {b.node("Add", {conv(b, r1, 4, 4, true, 1), x})});
  ir::Value* down = b.node("Relu", {b.node("Add", {conv(b, block, 4, 8, true, 1), conv(b, block, 4, 8, false, 1)})});
  ir::Value* plain = b.node("Add", {conv(b, down, 8, 8, true, 1), down});
  ir::Value* bcast = b.node("Add", {conv(b, plain, 8, 8, true, 1), b.node("GlobalAveragePool", {plain})});
  b.output(bcast);
  check(b, {{{"Relu", 0}, {"Add", 1}, {"kiln.FusedConv", 4}, {"Conv", 2}}, {{"fuse-conv-residual", 3}}});
}

TEST(Passes, MatMulAddBecomesGemmOrFusedMatMul) {
  Builder b;
  ir::Value* x2 = b.input("x2", {4, 8});
  ir::Value* x3 = b.input("x3", {2, 4, 8});
  b.output(b.node("Add", {b.node("MatMul", {x2, b.floats({8, 6})}), b.floats({6})}));
  ir::Value* y3 = b.node("Add", {b.floats({1, 1, 6}), b.node("MatMul", {x3, b.floats({8, 6})})});
  b.output(b.node("Relu", {y3}));
  ir::Value* y4 = b.node("Add", {b.node("MatMul", {x2, b.floats({8, 6})}), b.floats({4, 6})});  // not a bias
  b.output(y4);
  check(b, {{{"Gemm", 1}, {"kiln.FusedMatMul", 1}, {"Relu", 0}, {"MatMul", 1}, {"Add", 1}},
            {{"fuse-matmul-add", 2}, {"fuse-activation", 1}}});
}

TEST(Passes, GemmActivation) {
  Builder b;
  ir::Value* x = b.input("x", {4, 8});
  ir::Value* y = b.node("Gemm", {x, b.floats({6, 8}), b.floats({6})}, {{"transB", attr_int(1)}, {"alpha", attr_float(0.5f)}});
  b.output(b.node("Clip", {y, b.scalar(-0.5f), b.scalar(0.5f)}));
  check(b, {{{"Gemm", 0}, {"Clip", 0}, {"kiln.FusedGemm", 1}}, {{"fuse-activation", 1}}});
}

// BERT's FFN: x @ W1 + b1 → GELU (erf, as nn.GELU exports before opset 20) → @ W2 + b2.
TEST(Passes, GeluErfFormFusesIntoMatMul) {
  Builder b;
  ir::Value* x = b.input("x", {2, 5, 8});
  ir::Value* h = b.node("Add", {b.node("MatMul", {x, b.floats({8, 16})}), b.floats({16})});
  ir::Value* e = b.node("Erf", {b.node("Div", {h, b.scalar(1.4142135f)})});
  ir::Value* g = b.node("Mul", {b.node("Mul", {h, b.node("Add", {e, b.scalar(1)})}), b.scalar(0.5f)});
  b.output(b.node("Add", {b.node("MatMul", {g, b.floats({16, 8})}), b.floats({8})}));
  check(b, {{{"Erf", 0}, {"Gelu", 0}, {"Div", 0}, {"Mul", 0}, {"kiln.FusedMatMul", 2}},
            {{"fuse-gelu", 1}, {"fuse-matmul-add", 2}, {"fuse-activation", 1}}});
}

// GPT-2's NewGELU: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
TEST(Passes, GeluTanhForm) {
  Builder b;
  ir::Value* x = b.input("x", {3, 7});
  ir::Value* cube = b.node("Mul", {b.scalar(0.044715f), b.node("Pow", {x, b.scalar(3)})});
  ir::Value* t = b.node("Tanh", {b.node("Mul", {b.scalar(0.7978845608f), b.node("Add", {x, cube})})});
  b.output(b.node("Mul", {b.node("Mul", {b.scalar(0.5f), x}), b.node("Add", {b.scalar(1), t})}));
  check(b, {{{"Gelu", 1}, {"Tanh", 0}, {"Pow", 0}}, {{"fuse-gelu", 1}}});
}

ir::Value* layer_norm(Builder& b, ir::Value* x, int64_t n) {
  ir::Value* mean = b.node("ReduceMean", {x}, {{"axes", attr_ints({-1})}});
  ir::Value* d = b.node("Sub", {x, mean});
  ir::Value* var = b.node("ReduceMean", {b.node("Pow", {d, b.scalar(2)})}, {{"axes", attr_ints({-1})}});
  ir::Value* nrm = b.node("Div", {d, b.node("Sqrt", {b.node("Add", {var, b.scalar(1e-12f)})})});
  return b.node("Add", {b.node("Mul", {nrm, b.floats({n})}), b.floats({n})});
}

TEST(Passes, LayerNormDecomposedAndSkip) {
  Builder b;
  ir::Value* x = b.input("x", {2, 4, 16});
  ir::Value* r = b.input("r", {2, 4, 16});
  ir::Value* s = b.node("Add", {x, r});
  ir::Value* y = layer_norm(b, s, 16);
  b.output(y);
  b.output(b.node("Neg", {s}));  // the sum is read elsewhere: kept as output 1
  check(b, {{{"ReduceMean", 0}, {"Sqrt", 0}, {"LayerNormalization", 0}, {"kiln.SkipLayerNorm", 1}, {"Add", 0}},
            {{"fuse-layer-norm", 1}, {"fuse-skip-layer-norm", 1}}});
}

TEST(Passes, LayerNormOverWrongAxisIsANearMiss) {
  Builder b;
  ir::Value* x = b.input("x", {2, 4, 16});
  ir::Value* mean = b.node("ReduceMean", {x}, {{"axes", attr_ints({1})}});
  ir::Value* d = b.node("Sub", {x, mean});
  ir::Value* var = b.node("ReduceMean", {b.node("Pow", {d, b.scalar(2)})}, {{"axes", attr_ints({1})}});
  ir::Value* nrm = b.node("Div", {d, b.node("Sqrt", {b.node("Add", {var, b.scalar(1e-5f)})})});
  b.output(b.node("Add", {b.node("Mul", {nrm, b.floats({16})}), b.floats({16})}));
  auto stats = check(b, {{{"LayerNormalization", 0}, {"ReduceMean", 2}}, {{"fuse-layer-norm", 0}}});
  bool found = false;
  for (const auto& s : stats.near_misses) found |= s.find("last dim") != std::string::npos;
  EXPECT_TRUE(found);
}

TEST(Passes, RmsNorm) {
  Builder b;
  ir::Value* x = b.input("x", {3, 16});
  ir::Value* ms = b.node("ReduceMean", {b.node("Pow", {x, b.scalar(2)})}, {{"axes", attr_ints({-1})}});
  ir::Value* inv = b.node("Reciprocal", {b.node("Sqrt", {b.node("Add", {ms, b.scalar(1e-6f)})})});
  b.output(b.node("Mul", {b.floats({16}), b.node("Mul", {x, inv})}));
  check(b, {{{"RMSNormalization", 1}, {"ReduceMean", 0}}, {{"fuse-rms-norm", 1}}});
}

// A scale of ones (a fresh or random-weight Llama) is removed as a no-op once the shapes are static,
// leaving x * 1/rms: still one RMSNormalization (with a scale of ones), not five elementwise steps.
TEST(Passes, RmsNormWithoutScale) {
  Builder b;
  ir::Value* x = b.input("x", {3, 16});
  ir::Value* ms = b.node("ReduceMean", {b.node("Pow", {x, b.scalar(2)})}, {{"axes", attr_ints({-1})}});
  ir::Value* inv = b.node("Reciprocal", {b.node("Sqrt", {b.node("Add", {ms, b.scalar(1e-6f)})})});
  b.output(b.node("Mul", {x, inv}));
  check(b, {{{"RMSNormalization", 1}, {"ReduceMean", 0}, {"Mul", 0}}, {{"fuse-rms-norm", 1}}});
}

// A Llama block's residual: h = x + attn; RMSNorm(h) for the MLP and h read by the next residual Add →
// kiln.SkipLayerNorm(simplified = 1) writing the normalized rows and the sum; the final norm (its sum
// read nowhere else) writes the rows alone. Both from fuse-rms-norm's decomposed form and from ONNX's
// RMSNormalization.
TEST(Passes, ResidualAddRmsNormIsSimplifiedSkipLayerNorm) {
  for (bool decomposed : {true, false}) {
    Builder b;
    if (!decomposed) b.g->opsets[""] = b.opset = 23;
    ir::Value* x = b.input("x", {2, 4, 16});
    ir::Value* attn = b.input("attn", {2, 4, 16});
    auto rms = [&](ir::Value* v) {
      if (!decomposed) return b.node("RMSNormalization", {v, b.floats({16})}, {{"axis", attr_int(-1)}, {"epsilon", attr_float(1e-6f)}});
      ir::Value* ms = b.node("ReduceMean", {b.node("Pow", {v, b.scalar(2)})}, {{"axes", attr_ints({-1})}});
      ir::Value* inv = b.node("Reciprocal", {b.node("Sqrt", {b.node("Add", {ms, b.scalar(1e-6f)})})});
      return b.node("Mul", {b.floats({16}), b.node("Mul", {v, inv})});
    };
    ir::Value* h = b.node("Add", {x, attn});
    ir::Value* mlp = b.node("MatMul", {rms(h), b.floats({16, 16})});
    ir::Value* h2 = b.node("Add", {h, mlp});
    b.output(rms(h2));
    check(b, {{{"kiln.SkipLayerNorm", 2}, {"RMSNormalization", 0}, {"Add", 0}}, {{"fuse-skip-layer-norm", 2}}});
  }
}

// Grouped-query attention on 4-D heads as Llama exports it: K and V [B, Hkv, T, D] repeated for the
// query heads by Reshape(Expand(Unsqueeze(x, 2), [B, Hkv, n, T, D]), [B, Hkv*n, T, D]), K transposed for
// the product, the context transposed to [B, S, H, D] → kiln.Attention(heads_first) reading K and V's
// heads in place. An Expand that also grows a batch of 1 (folded into the heads by the Reshape: query
// head j then reads K/V head (j / n) % Hkv, not j / (H / Hkv)) is not read as a repeat: the attention
// takes the repeated K and V as the graph makes them. The outputs match the unfused graph's either way.
TEST(Passes, HeadsFirstGroupedAttention) {
  for (bool grow_batch : {false, true}) {
    Builder b;
    const int64_t B = grow_batch ? 1 : 2, Hkv = 2, n = 2, H = grow_batch ? Hkv * n * 2 : Hkv * n, S = 5, D = 8;
    ir::Value* q = b.input("q", {B, H, S, D});
    ir::Value* k = b.input("k", {B, Hkv, S, D});
    ir::Value* v = b.input("v", {B, Hkv, S, D});
    auto repeat = [&](ir::Value* x) {
      ir::Value* u = b.node("Unsqueeze", {x, b.ints({2})});
      ir::Value* e = b.node("Expand", {u, b.ints({grow_batch ? 2 : B, Hkv, n, S, D})});
      return b.node("Reshape", {e, b.ints({B, H, S, D})});
    };
    ir::Value* kt = b.node("Transpose", {repeat(k)}, {{"perm", attr_ints({0, 1, 3, 2})}});
    ir::Value* scores = b.node("Mul", {b.node("MatMul", {q, kt}), b.scalar(0.35f)});
    ir::Value* p = b.node("Softmax", {scores}, {{"axis", attr_int(-1)}});
    b.output(b.node("Transpose", {b.node("MatMul", {p, repeat(v)})}, {{"perm", attr_ints({0, 2, 1, 3})}}));
    if (!grow_batch)
      check(b, {{{"kiln.Attention", 1}, {"Expand", 0}, {"Softmax", 0}, {"Transpose", 0}}, {{"fuse-attention", 1}}});
    else  // the attention still fuses, over the repeated K and V the graph makes (8 K/V heads)
      check(b, {{{"kiln.Attention", 1}, {"Expand", 2}, {"Softmax", 0}}, {{"fuse-attention", 1}}});
  }
}

// A Llama attention block as exported: projections split into heads [B, S, h, d], transposed to
// [B, h, S, d], rotated (Q and K), K/V repeated for the query heads, attended, transposed back. After
// fuse-rotary and fuse-attention, fold-head-transposes lets the attention read the rows in place
// (batch-first, grouped K/V heads) and the rotary embeddings rotate them in place: the three head
// Transposes go (tables [B, 1, S, D] are laid along the rows by a Reshape, [S, D] and [1, S, D] by an
// Unsqueeze: no Transpose is left). The outputs match the unfused graph.
TEST(Passes, HeadTransposesFoldIntoBatchFirstAttention) {
  for (const Shape& table : {Shape{2, 1, 5, 8}, Shape{5, 8}, Shape{1, 5, 8}}) {
    SCOPED_TRACE(shape_to_string(table));
    Builder b;
    const int64_t B = 2, S = 5, H = 4, Hkv = 2, D = 8;
    ir::Value* xq = b.input("xq", {B, S, H, D});
    ir::Value* xk = b.input("xk", {B, S, Hkv, D});
    ir::Value* xv = b.input("xv", {B, S, Hkv, D});
    ir::Value* cos = b.input("cos", table);
    ir::Value* sin = b.input("sin", table);
    auto heads = [&](ir::Value* x) { return b.node("Transpose", {x}, {{"perm", attr_ints({0, 2, 1, 3})}}); };
    auto rotate = [&](ir::Value* x) {
      auto slice = [&](int64_t s, int64_t e) { return b.node("Slice", {x, b.ints({s}), b.ints({e}), b.ints({-1}), b.ints({1})}); };
      ir::Value* rot = b.node("Concat", {b.node("Neg", {slice(D / 2, INT64_MAX)}), slice(0, D / 2)}, {{"axis", attr_int(-1)}});
      return b.node("Add", {b.node("Mul", {x, cos}), b.node("Mul", {rot, sin})});
    };
    auto repeat = [&](ir::Value* x) {
      ir::Value* u = b.node("Unsqueeze", {x, b.ints({2})});
      return b.node("Reshape", {b.node("Expand", {u, b.ints({B, Hkv, H / Hkv, S, D})}), b.ints({B, H, S, D})});
    };
    ir::Value* q = rotate(heads(xq));
    ir::Value* kt = b.node("Transpose", {repeat(rotate(heads(xk)))}, {{"perm", attr_ints({0, 1, 3, 2})}});
    ir::Value* p = b.node("Softmax", {b.node("Mul", {b.node("MatMul", {q, kt}), b.scalar(0.35f)})}, {{"axis", attr_int(-1)}});
    ir::Value* y = b.node("Transpose", {b.node("MatMul", {p, repeat(heads(xv))})}, {{"perm", attr_ints({0, 2, 1, 3})}});
    b.output(b.node("Reshape", {y, b.ints({B, S, H * D})}));
    check(b, {{{"kiln.Attention", 1}, {"kiln.Rotary", 2}, {"Transpose", 0}, {"Softmax", 0}},
              {{"fuse-rotary", 2}, {"fuse-attention", 1}, {"fold-head-transposes", 1}}});
  }
}

// ONNX's Attention op (23; torch's dynamo export of scaled_dot_product_attention, and what ORT's
// MultiHeadAttention/GroupQueryAttention lower to) → kiln.Attention: without a mask, with an additive
// or a bool mask, causal (ONNX aligns it top-left: query i sees keys j <= i, also where S < T), causal
// with a bool mask, an explicit scale, grouped K/V heads; against the op's own CPU kernel. With a past
// it stays. In the dynamo form (heads split by Reshape + Transpose, merged back the same way) the
// Transposes go too (fold-head-transposes, and the op's own output Transpose cancels the export's).
TEST(Passes, OnnxAttentionOpBecomesKilnAttention) {
  struct Case {
    const char* what;
    int64_t S, T;
    bool float_mask, bool_mask, causal, scale;
  };
  const Case cases[] = {{"plain", 5, 5, false, false, false, false},       {"additive mask", 5, 7, true, false, false, false},
                        {"bool mask", 5, 7, false, true, false, true},      {"causal", 6, 6, false, false, true, false},
                        {"causal, S < T", 3, 6, false, false, true, false}, {"causal and bool mask", 4, 6, false, true, true, false},
                        {"causal and additive mask", 4, 4, true, false, true, true}};
  for (const Case& c : cases) {
    Builder b;
    b.g->opsets[""] = b.opset = 23;
    const int64_t B = 2, H = 4, Hkv = 2, D = 8;
    ir::Value* q = b.input("q", {B, H, c.S, D});
    ir::Value* k = b.input("k", {B, Hkv, c.T, D});
    ir::Value* v = b.input("v", {B, Hkv, c.T, D});
    std::vector<ir::Value*> ins = {q, k, v};
    if (c.float_mask) ins.push_back(b.input("mask", {B, 1, c.S, c.T}));
    if (c.bool_mask) ins.push_back(b.input("keep", {c.S, c.T}, DataType::kBool));
    std::map<std::string, ir::Attribute> attrs;
    if (c.causal) attrs["is_causal"] = attr_int(1);
    if (c.scale) attrs["scale"] = attr_float(0.3f);
    b.output(b.node("Attention", ins, attrs));
    SCOPED_TRACE(c.what);
    check(b, {{{"Attention", 0}, {"kiln.Attention", 1}}, {{"attention-op", 1}}});
  }
  {  // a past: left to the op
    Builder b;
    b.g->opsets[""] = b.opset = 23;
    ir::Value* q = b.input("q", {1, 2, 3, 8});
    ir::Value* k = b.input("k", {1, 2, 3, 8});
    ir::Value* v = b.input("v", {1, 2, 3, 8});
    ir::Value* pk = b.input("past_k", {1, 2, 4, 8});
    ir::Value* pv = b.input("past_v", {1, 2, 4, 8});
    b.output(b.node("Attention", {q, k, v, nullptr, pk, pv}));
    check(b, {{{"Attention", 1}, {"kiln.Attention", 0}}, {{"attention-op", 0}}});
  }
  {  // torch's dynamo export: x [B, S, E] → heads → Attention → heads merged
    Builder b;
    b.g->opsets[""] = b.opset = 23;
    const int64_t B = 2, S = 5, H = 2, D = 4, E = H * D;
    ir::Value* x = b.input("x", {B, S, E});
    auto heads = [&]() {
      ir::Value* p = b.node("MatMul", {x, b.floats({E, E})});
      return b.node("Transpose", {b.node("Reshape", {p, b.ints({B, S, H, D})})}, {{"perm", attr_ints({0, 2, 1, 3})}});
    };
    ir::Value* y = b.node("Attention", {heads(), heads(), heads()}, {{"is_causal", attr_int(1)}});
    ir::Value* merged = b.node("Reshape", {b.node("Transpose", {y}, {{"perm", attr_ints({0, 2, 1, 3})}}), b.ints({B, S, E})});
    b.output(b.node("MatMul", {merged, b.floats({E, E})}));
    check(b, {{{"Attention", 0}, {"kiln.Attention", 1}, {"Transpose", 0}}, {{"attention-op", 1}, {"fold-head-transposes", 1}}});
  }
}

// transformers' apply_rotary_pos_emb: x·cos + Concat(-x[..., D/2:], x[..., :D/2])·sin → kiln.Rotary;
// cut anywhere but at D/2 it is another function, left alone (the outputs match either way).
TEST(Passes, RotaryEmbedding) {
  for (int64_t cut : {4, 3}) {
    Builder b;
    ir::Value* x = b.input("x", {2, 3, 5, 8});
    ir::Value* cos = b.input("cos", {2, 1, 5, 8});
    ir::Value* sin = b.input("sin", {2, 1, 5, 8});
    auto slice = [&](int64_t s, int64_t e) { return b.node("Slice", {x, b.ints({s}), b.ints({e}), b.ints({-1}), b.ints({1})}); };
    ir::Value* rot = b.node("Concat", {b.node("Neg", {slice(cut, INT64_MAX)}), slice(0, cut)}, {{"axis", attr_int(-1)}});
    b.output(b.node("Add", {b.node("Mul", {x, cos}), b.node("Mul", {rot, sin})}));
    if (cut == 4)
      check(b, {{{"kiln.Rotary", 1}, {"Slice", 0}, {"Concat", 0}, {"Neg", 0}}, {{"fuse-rotary", 1}}});
    else
      check(b, {{{"kiln.Rotary", 0}, {"Slice", 2}}, {{"fuse-rotary", 0}}});
  }
}

// HuggingFace BERT self-attention (eager, as exported at opset 14-17), with an additive mask.
// dynamic_merge: the output reshape's shape is computed from Shape(context) as the exporter does.
// minus_one: heads split as view(B, S, -1, D) and merged as reshape(B, S, -1), as transformers 5
// exports them.
void bert_attention(Builder& b, bool mul_scale, bool dynamic_merge = false, bool minus_one = false) {
  const int64_t B = 2, S = 5, H = 2, D = 4, E = H * D;
  ir::Value* x = b.input("x", {B, S, E});
  ir::Value* mask = b.input("mask", {B, 1, 1, S});
  auto proj = [&](ir::Value* in) { return b.node("Add", {b.node("MatMul", {in, b.floats({E, E})}), b.floats({E})}); };
  auto heads = [&](ir::Value* v, std::vector<int64_t> perm) {
    return b.node("Transpose", {b.node("Reshape", {v, b.ints({0, 0, minus_one ? -1 : H, D})})}, {{"perm", attr_ints(perm)}});
  };
  ir::Value* q = heads(proj(x), {0, 2, 1, 3});
  ir::Value* k = b.node("Transpose", {heads(proj(x), {0, 2, 1, 3})}, {{"perm", attr_ints({0, 1, 3, 2})}});
  ir::Value* v = heads(proj(x), {0, 2, 1, 3});
  ir::Value* s = b.node("MatMul", {q, k});
  s = mul_scale ? b.node("Mul", {s, b.scalar(0.5f)}) : b.node("Div", {s, b.scalar(2.0f)});
  ir::Value* p = b.node("Softmax", {b.node("Add", {s, mask})}, {{"axis", attr_int(-1)}});
  p = b.node("Dropout", {p});
  ir::Value* ctx = b.node("Transpose", {b.node("MatMul", {p, v})}, {{"perm", attr_ints({0, 2, 1, 3})}});
  ir::Value* merge = b.ints({0, 0, minus_one ? -1 : E});
  if (dynamic_merge) {
    ir::Value* lead = b.node("Slice", {b.node("Shape", {ctx}), b.ints({0}), b.ints({2})});
    merge = b.node("Concat", {lead, b.ints({E})}, {{"axis", attr_int(0)}});
  }
  ir::Value* y = b.node("Reshape", {ctx, merge});
  b.output(proj(y));
}

TEST(Passes, BertAttention) {
  for (bool mul : {false, true}) {
    Builder b;
    bert_attention(b, mul);
    check(b, {{{"kiln.Attention", 1}, {"Softmax", 0}, {"Transpose", 0}, {"Reshape", 0}, {"kiln.FusedMatMul", 4}},
              {{"fuse-attention", 1}}});
  }
}

// transformers' T5 attention (eager: T5 has no SDPA path): no scaling (the initialization folds it into
// the weights), projections without biases, scores + position_bias where position_bias is the relative
// position bias [1, H, S, T] plus the extended mask [B, 1, 1, T]; self-attention (S = T) and the
// decoder's cross-attention over the encoder's T positions.
TEST(Passes, T5AttentionWithRelativePositionBias) {
  for (bool cross : {false, true}) {
    Builder b;
    const int64_t B = 2, S = 5, T = cross ? 7 : 5, H = 2, D = 4, E = H * D;
    ir::Value* x = b.input("x", {B, S, E});
    ir::Value* enc = cross ? b.input("enc", {B, T, E}) : x;
    ir::Value* rel = b.input("rel_bias", {1, H, S, T});
    ir::Value* mask = b.input("mask", {B, 1, 1, T});
    auto heads = [&](ir::Value* in, int64_t len) {
      ir::Value* p = b.node("MatMul", {in, b.floats({E, E})});
      return b.node("Transpose", {b.node("Reshape", {p, b.ints({B, len, H, D})})}, {{"perm", attr_ints({0, 2, 1, 3})}});
    };
    ir::Value* q = heads(x, S);
    ir::Value* kt = b.node("Transpose", {heads(enc, T)}, {{"perm", attr_ints({0, 1, 3, 2})}});
    ir::Value* v = heads(enc, T);
    ir::Value* scores = b.node("Add", {b.node("MatMul", {q, kt}), b.node("Add", {rel, mask})});
    ir::Value* p = b.node("Softmax", {scores}, {{"axis", attr_int(-1)}});
    ir::Value* ctx = b.node("Transpose", {b.node("MatMul", {p, v})}, {{"perm", attr_ints({0, 2, 1, 3})}});
    b.output(b.node("MatMul", {b.node("Reshape", {ctx, b.ints({B, -1, E})}), b.floats({E, E})}));
    check(b, {{{"kiln.Attention", 1}, {"Softmax", 0}, {"Transpose", 0}}, {{"fuse-attention", 1}}});
  }
}

TEST(Passes, BertAttentionWithMinusOneHeads) {
  Builder b;
  bert_attention(b, true, false, true);
  check(b, {{{"kiln.Attention", 1}, {"Softmax", 0}, {"Transpose", 0}}, {{"fuse-attention", 1}}});
}

TEST(Passes, BertAttentionWithShapeReadsOfTheContext) {
  Builder b;
  bert_attention(b, false, true);
  check(b, {{{"kiln.Attention", 1}, {"Softmax", 0}, {"Transpose", 0}}, {{"fuse-attention", 1}}});
}

// GPT-2 (Where(causal, scores, min) + additive mask) and DistilBERT (Q / sqrt(d), Where(mask, min, scores)).
TEST(Passes, AttentionWithWhereMasks) {
  for (bool gpt2 : {true, false}) {
    Builder b;
    const int64_t B = 2, S = 6, H = 3, D = 2, E = H * D;
    ir::Value* x = b.input("x", {B, S, E});
    ir::Value* cond = b.input("cond", {B, 1, 1, S}, DataType::kBool);
    ir::Value* madd = b.input("madd", {B, 1, 1, S});
    auto heads = [&](std::vector<int64_t> perm) {
      ir::Value* p = b.node("MatMul", {x, b.floats({E, E})});
      return b.node("Transpose", {b.node("Reshape", {p, b.ints({0, 0, H, D})})}, {{"perm", attr_ints(perm)}});
    };
    ir::Value* q = heads({0, 2, 1, 3});
    ir::Value* k = heads({0, 2, 3, 1});
    ir::Value* v = heads({0, 2, 1, 3});
    ir::Value* s;
    if (gpt2) {
      Tensor causal = Tensor::empty(DataType::kBool, {1, 1, S, S});
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j) causal.data<bool>()[i * S + j] = j <= i;
      s = b.node("Div", {b.node("MatMul", {q, k}), b.scalar(1.5f)});
      s = b.node("Where", {b.constant(causal), s, b.scalar(-3.4e38f)});
      s = b.node("Add", {s, madd});
    } else {
      ir::Value* qk = b.node("MatMul", {b.node("Div", {q, b.scalar(1.5f)}), k});
      ir::Value* c = b.node("Expand", {cond, b.node("Shape", {qk})});
      s = b.node("Where", {c, b.scalar(-3.4e38f), qk});
    }
    ir::Value* p = b.node("Softmax", {s}, {{"axis", attr_int(-1)}});
    ir::Value* ctx = b.node("Transpose", {b.node("MatMul", {p, v})}, {{"perm", attr_ints({0, 2, 1, 3})}});
    b.output(b.node("Reshape", {ctx, b.ints({0, 0, E})}));
    if (gpt2) b.output(b.node("Identity", {cond}));  // keep the unused inputs read
    else b.output(b.node("Identity", {madd}));
    check(b, {{{"kiln.Attention", 1}, {"Softmax", 0}, {"Where", 0}, {"Expand", 0}}, {{"fuse-attention", 1}}});
  }
}

TEST(Passes, SkipLayerNormBroadcastsEmbeddings) {
  Builder b;
  ir::Value* x = b.input("x", {2, 5, 8});
  ir::Value* pos = b.floats({1, 5, 8});
  ir::Value* ln = b.node("LayerNormalization", {b.node("Add", {x, pos}), b.floats({8}), b.floats({8})},
                         {{"axis", attr_int(-1)}, {"epsilon", attr_float(1e-5f)}});
  b.output(ln);
  check(b, {{{"kiln.SkipLayerNorm", 1}, {"Add", 0}, {"LayerNormalization", 0}}, {{"fuse-skip-layer-norm", 1}}});
}

// timm's Swin block: `x = x + attn; x = x.reshape(B, -1, C); y = norm2(x)`, the reshaped sum read
// again by the next residual Add, and `x.reshape(B, H, W, C)` before the next block's norm1: both
// Add → Reshape → LayerNormalization chains fuse (the Reshape kept for the sum and twinned for the
// rows); a Reshape that moves the last dim does not.
TEST(Passes, SkipLayerNormThroughReshapeKeepingRows) {
  Builder b;
  ir::Value* x = b.input("x", {2, 4, 4, 8});
  ir::Value* attn = b.input("attn", {2, 4, 4, 8});
  auto norm = [&](ir::Value* v) {
    return b.node("LayerNormalization", {v, b.floats({8}), b.floats({8})}, {{"axis", attr_int(-1)}, {"epsilon", attr_float(1e-5f)}});
  };
  ir::Value* s1 = b.node("Reshape", {b.node("Add", {x, attn}), b.ints({2, -1, 8})});
  ir::Value* mlp = b.node("MatMul", {norm(s1), b.floats({8, 8})});
  ir::Value* s2 = b.node("Reshape", {b.node("Add", {s1, mlp}), b.ints({2, 4, 4, 8})});
  b.output(norm(s2));
  b.output(s2);
  check(b, {{{"kiln.SkipLayerNorm", 2}, {"Add", 0}, {"LayerNormalization", 0}}, {{"fuse-skip-layer-norm", 2}}});
  Builder c;  // [2, 4, 8] → [2, 8, 4]: rows change, nothing fuses
  ir::Value* u = c.input("u", {2, 4, 8});
  c.output(c.node("LayerNormalization", {c.node("Reshape", {c.node("Add", {u, u}), c.ints({2, 8, 4})}), c.floats({4})},
                  {{"axis", attr_int(-1)}}));
  check(c, {{{"kiln.SkipLayerNorm", 0}, {"LayerNormalization", 1}}, {{"fuse-skip-layer-norm", 0}}});
}

// Input "x" [batch, seq, E] with symbolic batch and sequence dims.
ir::Value* sequence_input(Builder& b, int64_t E) {
  ir::Value* x = b.g->add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim("batch"), ir::Dim("seq"), E})));
  x->is_input = true;
  b.g->inputs.push_back(x);
  return x;
}

// Optimizing b's graph (input "x" [batch, seq, E]) fuses one attention (`packed`: then it reads its
// Q, K and V in place from the projection they were cut from, a second rewrite, and no Split is
// left), and the fused graph gives the unfused one's numbers at batch 2, sequence 5 (random x from `seed`).
void expect_attention_fused_same_numbers(Builder& b, int64_t E, unsigned seed, bool packed = false) {
  auto opt = b.g->clone();
  passes::OptimizeStats stats;
  ASSERT_TRUE(passes::optimize(*opt, builder_pass_options(2, nullptr), &stats).ok());
  EXPECT_EQ(stats.fired["fuse-attention"], packed ? 2 : 1) << opt->to_string();
  EXPECT_EQ(op_counts(*opt)["Softmax"], 0);
  if (packed) EXPECT_EQ(op_counts(*opt)["Split"], 0) << opt->to_string();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  Tensor xt = Tensor::empty(DataType::kFloat32, {2, 5, E});
  for (int64_t i = 0; i < xt.numel(); ++i) xt.data<float>()[i] = u(rng);
  const auto want = run(*b.g, {{"x", xt}}), got = run(*opt, {{"x", xt}});
  ASSERT_EQ(got.size(), 1u);
  const Tensor& w = want.begin()->second;
  const Tensor& g2 = got.begin()->second;
  ASSERT_EQ(g2.shape(), w.shape());
  for (int64_t i = 0; i < w.numel(); ++i) EXPECT_NEAR(g2.data<float>()[i], w.data<float>()[i], 1e-4) << i;
}

// An INT8 engine's attention: the projections are kiln.QMatMul (with the bias) of the quantized layer
// input, and the head reshapes read batch and sequence sizes from that input, whose dims are unnamed
// (so only the producers can prove the heads keep them). The heads keep its leading dims through
// QuantizeLinear and the int8 product: attention fuses, with the unfused graph's numbers.
TEST(Passes, AttentionOverInt8Projections) {
  Builder b;
  const int64_t H = 2, D = 4, E = H * D;
  ir::Value* x = sequence_input(b, E);
  x->type.shape.dims[0] = x->type.shape.dims[1] = ir::Dim();  // unnamed: only the producers prove dims kept
  std::mt19937 wrng(9);
  auto int8s = [&](Shape shape) {
    Tensor t = Tensor::empty(DataType::kInt8, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(wrng() % 255) - 127);
    return b.constant(t);
  };
  Tensor zero = Tensor::empty(DataType::kInt8, {});
  zero.data<int8_t>()[0] = 0;
  ir::Value* xz = b.constant(zero);
  ir::Value* xs = b.scalar(0.02f);
  ir::Value* xq = b.node("QuantizeLinear", {x, xs, xz});
  auto proj = [&]() {
    ir::Value* y = b.g->new_value("QMatMul");
    std::vector<ir::Value*> in = {xq, xs, xz, int8s({E, E}), b.floats({E}, 0.001f, 0.01f), b.constant(zero), nullptr, nullptr,
                                  b.floats({E})};
    ir::Node* n = b.g->add_node("QMatMul", "kiln", in, {y});
    n->opset = 1;
    EXPECT_TRUE(ops::infer_node(*n).ok());
    return y;
  };
  auto dim0 = [&](ir::Value* of, int64_t i) {
    return b.node("Gather", {b.node("Shape", {of}), b.ints({i})}, {{"axis", attr_int(0)}});
  };
  auto heads = [&](ir::Value* t, std::vector<int64_t> perm) {
    ir::Value* shape = b.node("Concat", {dim0(x, 0), dim0(x, 1), b.ints({H}), b.ints({D})}, {{"axis", attr_int(0)}});
    return b.node("Transpose", {b.node("Reshape", {t, shape})}, {{"perm", attr_ints(perm)}});
  };
  ir::Value* s = b.node("Mul", {b.node("MatMul", {heads(proj(), {0, 2, 1, 3}), heads(proj(), {0, 2, 3, 1})}), b.scalar(0.5f)});
  ir::Value* p = b.node("Softmax", {s}, {{"axis", attr_int(-1)}});
  ir::Value* ctx = b.node("Transpose", {b.node("MatMul", {p, heads(proj(), {0, 2, 1, 3})})}, {{"perm", attr_ints({0, 2, 1, 3})}});
  b.output(b.node("Reshape", {ctx, b.node("Concat", {dim0(x, 0), dim0(x, 1), b.ints({E})}, {{"axis", attr_int(0)}})}));
  expect_attention_fused_same_numbers(b, E, 4);
}

// GPT-2 as transformers 5 exports it: one Gemm for Q, K and V on the flattened rows, reshaped back
// to [batch, seq, 3E] (dims unnamed from there on) and Split in three; the V heads' reshape reads its
// batch and sequence sizes from K's shape (its Split sibling). Symbolic batch and sequence dims.
TEST(Passes, AttentionAfterASplitQkvProjection) {
  Builder b;
  const int64_t H = 3, D = 2, E = H * D;
  ir::Value* x = sequence_input(b, E);
  auto dim0 = [&](ir::Value* of, int64_t i) {  // a 1-element shape value (Gather of a 1-element index)
    return b.node("Gather", {b.node("Shape", {of}), b.ints({i})}, {{"axis", attr_int(0)}});
  };
  ir::Value* rows = b.node("Reshape", {x, b.ints({-1, E})});
  ir::Value* qkv2 = b.node("Gemm", {rows, b.floats({E, 3 * E}), b.floats({3 * E})});
  ir::Value* qkv = b.node("Reshape", {qkv2, b.node("Concat", {dim0(x, 0), dim0(x, 1), b.ints({3 * E})}, {{"axis", attr_int(0)}})});
  std::vector<ir::Value*> outs;
  {
    std::vector<ir::Value*> o;
    for (int i = 0; i < 3; ++i) o.push_back(b.g->new_value("Split"));
    ir::Node* n = b.g->add_node("Split", "", {qkv, b.ints({E, E, E})}, o);
    n->attrs["axis"] = attr_int(2);
    n->opset = b.opset;
    ASSERT_TRUE(ops::infer_node(*n).ok());
    outs = o;
  }
  ir::Value *q = outs[0], *k = outs[1], *v = outs[2];
  auto heads = [&](ir::Value* t, ir::Value* sizes_of, std::vector<int64_t> perm) {
    ir::Value* shape = b.node("Concat", {dim0(sizes_of, 0), dim0(sizes_of, 1), b.ints({H}), b.ints({D})}, {{"axis", attr_int(0)}});
    return b.node("Transpose", {b.node("Reshape", {t, shape})}, {{"perm", attr_ints(perm)}});
  };
  ir::Value* s = b.node("Mul", {b.node("MatMul", {heads(q, q, {0, 2, 1, 3}), heads(k, k, {0, 2, 3, 1})}), b.scalar(0.5f)});
  ir::Value* p = b.node("Softmax", {s}, {{"axis", attr_int(-1)}});
  ir::Value* ctx = b.node("Transpose", {b.node("MatMul", {p, heads(v, k, {0, 2, 1, 3})})}, {{"perm", attr_ints({0, 2, 1, 3})}});
  ir::Value* y = b.node("Reshape", {ctx, b.node("Concat", {dim0(ctx, 0), dim0(ctx, 1), b.ints({E})}, {{"axis", attr_int(0)}})});
  b.output(y);
  expect_attention_fused_same_numbers(b, E, 3, /*packed=*/true);
}

// timm's packed QKV (ViT): one projection reshaped to [B, N, 3, H, D], Transpose(2,0,3,1,4), one Split
// in three along axis 0 and a Squeeze of axis 0 per part. The Split's sizes and the Squeezes' axes are
// read however the opset gives them: no sizes (equal parts), sizes 1, 1, 1 as opset 13's input or as
// opset 11's attribute, axes as an input or an attribute; every form fuses, with the same numbers.
TEST(Passes, AttentionPackedQkvSplitAndSqueezeForms) {
  enum class Sizes { kNone, kInput, kAttribute };
  for (const auto& [opset, sizes] : std::vector<std::pair<int, Sizes>>{
           {17, Sizes::kNone}, {17, Sizes::kInput}, {11, Sizes::kNone}, {11, Sizes::kAttribute}}) {
    SCOPED_TRACE("opset " + std::to_string(opset) + ", sizes form " + std::to_string(static_cast<int>(sizes)));
    Builder b;
    b.opset = opset;
    b.g->opsets[""] = opset;
    const int64_t H = 2, D = 3, E = H * D;
    ir::Value* x = sequence_input(b, E);
    auto dim0 = [&](int64_t i) { return b.node("Gather", {b.node("Shape", {x}), b.ints({i})}, {{"axis", attr_int(0)}}); };
    ir::Value* qkv = b.node("MatMul", {x, b.floats({E, 3 * E})});
    ir::Value* shape = b.node("Concat", {dim0(0), dim0(1), b.ints({3, H, D})}, {{"axis", attr_int(0)}});
    ir::Value* heads = b.node("Transpose", {b.node("Reshape", {qkv, shape})}, {{"perm", attr_ints({2, 0, 3, 1, 4})}});
    std::vector<ir::Value*> parts;
    {
      std::vector<ir::Value*> o;
      for (int i = 0; i < 3; ++i) o.push_back(b.g->new_value("Split"));
      std::vector<ir::Value*> in = {heads};
      if (sizes == Sizes::kInput) in.push_back(b.ints({1, 1, 1}));
      ir::Node* n = b.g->add_node("Split", "", in, o);
      n->attrs["axis"] = attr_int(0);
      if (sizes == Sizes::kAttribute) n->attrs["split"] = attr_ints({1, 1, 1});
      n->opset = opset;
      ASSERT_TRUE(ops::infer_node(*n).ok());
      for (ir::Value* part : o)
        parts.push_back(opset >= 13 ? b.node("Squeeze", {part, b.ints({0})}) : b.node("Squeeze", {part}, {{"axes", attr_ints({0})}}));
    }
    ir::Value* kt = b.node("Transpose", {parts[1]}, {{"perm", attr_ints({0, 1, 3, 2})}});
    ir::Value* s = b.node("Mul", {b.node("MatMul", {parts[0], kt}), b.scalar(0.5f)});
    ir::Value* p = b.node("Softmax", {s}, {{"axis", attr_int(-1)}});
    ir::Value* ctx = b.node("Transpose", {b.node("MatMul", {p, parts[2]})}, {{"perm", attr_ints({0, 2, 1, 3})}});
    b.output(b.node("Reshape", {ctx, b.node("Concat", {dim0(0), dim0(1), b.ints({E})}, {{"axis", attr_int(0)}})}));
    expect_attention_fused_same_numbers(b, E, 11);
  }
}

// CUDA builds pad a constant weight's columns to a multiple of 8 (aligned GEMM rows; GPT-2's LM
// head has 50257): MatMul + bias → the padded product, the padded bias, a Slice back; same numbers.
TEST(Passes, PadMatMulColumnsForAlignedRows) {
  for (bool with_bias : {false, true}) {
    Builder b;
    ir::Value* a = b.input("a", {2, 3, 16});
    ir::Value* y = b.node("MatMul", {a, b.floats({16, 515})});
    if (with_bias) y = b.node("Add", {y, b.floats({515})});
    b.output(b.node("Relu", {y}));
    b.output(b.node("MatMul", {a, b.floats({16, 40})}));  // 40 columns: aligned, left alone
    auto opt = b.g->clone();
    passes::PassOptions po = builder_pass_options(2, nullptr);
    po.pad_matmul_columns = 8;
    passes::OptimizeStats stats;
    ASSERT_TRUE(passes::optimize(*opt, po, &stats).ok());
    EXPECT_EQ(stats.fired["pad-matmul-columns"], 1);
    EXPECT_EQ(op_counts(*opt)["Slice"], 1) << opt->to_string();
    bool padded = false;
    for (const ir::Node* n : opt->nodes())
      for (const ir::Value* v : n->inputs)
        if (v && v->is_constant() && v->constant->shape() == Shape{16, 520}) padded = true;
    EXPECT_TRUE(padded) << opt->to_string();
    Tensor at = Tensor::empty(DataType::kFloat32, {2, 3, 16});
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t i = 0; i < at.numel(); ++i) at.data<float>()[i] = u(rng);
    const auto want = run(*b.g, {{"a", at}}), got = run(*opt, {{"a", at}});
    for (const auto& [name, w] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      ASSERT_EQ(got.at(name).shape(), w.shape()) << name;
      for (int64_t i = 0; i < w.numel(); ++i) EXPECT_FLOAT_EQ(got.at(name).data<float>()[i], w.data<float>()[i]) << name << " " << i;
    }
    // Without the option (CPU builds) nothing is padded.
    auto cpu = b.g->clone();
    passes::OptimizeStats cpu_stats;
    ASSERT_TRUE(passes::optimize(*cpu, builder_pass_options(2, nullptr), &cpu_stats).ok());
    EXPECT_EQ(cpu_stats.fired["pad-matmul-columns"], 0);
  }
}

TEST(Passes, AttentionWithReadIntermediateDoesNotFuse) {
  Builder b;
  bert_attention(b, false);
  // Also return the attention probabilities: the fusion would lose them.
  for (ir::Node* n : b.g->nodes())
    if (n->op_type == "Softmax") b.output(n->outputs[0]);
  auto stats = check(b, {{{"kiln.Attention", 0}, {"Softmax", 1}}, {{"fuse-attention", 0}}});
  EXPECT_FALSE(stats.near_misses.empty());
}

TEST(Passes, Level1DoesNotFuse) {
  Builder b;
  bert_attention(b, false);
  check(b, {{{"kiln.Attention", 0}, {"kiln.FusedMatMul", 0}, {"Dropout", 0}}, {{"fuse-attention", 0}}}, 1);
}

}  // namespace

// Reduced precision: nodes the target runs in half get half inputs (constants converted with
// saturation, computed values cast), the rest get float32 back; outputs keep their name and dtype.
TEST(Passes, ConvertPrecisionCastsAtBoundariesAndSaturatesConstants) {
  ir::Graph g;
  g.opsets[""] = 17;
  ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 3})));
  x->is_input = true;
  g.inputs.push_back(x);
  ir::Value* c = g.add_value("c", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({3})));
  Tensor ct = Tensor::empty(DataType::kFloat32, {3});
  ct.data<float>()[0] = -3.4e38f;  // an exporter's "minus infinity" mask value
  ct.data<float>()[1] = 1.f;
  ct.data<float>()[2] = 7e4f;
  c->constant = ct;
  ir::Value* a = g.add_value("a", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 3})));
  ir::Value* b = g.add_value("b", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 3})));
  ir::Value* y = g.add_value("y", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 3})));
  ir::Value* s = g.add_value("s", ir::Type::tensor(DataType::kInt64, ir::SymShape::of({2})));
  g.add_node("Mul", "", {x, c}, {a}, "mul");
  g.add_node("Softsign", "", {a}, {b}, "softsign");  // stays float32 here
  g.add_node("Relu", "", {b}, {y}, "relu");
  g.add_node("Shape", "", {a}, {s}, "shape");  // reads a's shape only: no cast
  g.outputs = {y, s};
  y->is_output = s->is_output = true;
  auto half = [](const ir::Node& n) { return n.op_type == "Mul" || n.op_type == "Relu"; };
  auto changed = passes::convert_precision(g, DataType::kFloat16, half);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_EQ(*changed, 2);
  ASSERT_TRUE(g.verify().ok());
  // The outputs: same values (names), float32 and int64 as before.
  ASSERT_EQ(g.outputs.size(), 2u);
  EXPECT_EQ(g.outputs[0]->name, "y");
  EXPECT_EQ(g.outputs[0]->type.dtype, DataType::kFloat32);
  EXPECT_EQ(g.outputs[1]->type.dtype, DataType::kInt64);
  std::map<std::string, int> casts;
  for (const ir::Node* n : g.nodes()) {
    if (n->op_type == "Mul") {
      EXPECT_EQ(n->inputs[0]->type.dtype, DataType::kFloat16);  // x cast at the boundary
      ASSERT_TRUE(n->inputs[1]->constant.has_value());
      const Tensor& h = *n->inputs[1]->constant;
      ASSERT_EQ(h.dtype(), DataType::kFloat16);
      EXPECT_EQ(f16_to_f32(h.data<uint16_t>()[0]), -65504.f);  // saturated, not -inf
      EXPECT_EQ(f16_to_f32(h.data<uint16_t>()[1]), 1.f);
      EXPECT_EQ(f16_to_f32(h.data<uint16_t>()[2]), 65504.f);
      EXPECT_EQ(n->outputs[0]->type.dtype, DataType::kFloat16);
    }
    if (n->op_type == "Softsign") EXPECT_EQ(n->inputs[0]->type.dtype, DataType::kFloat32);
    if (n->op_type == "Shape") EXPECT_EQ(n->inputs[0]->type.dtype, DataType::kFloat16);
    if (n->op_type == "Cast") ++casts[std::to_string(n->attr_int("to", 0))];
  }
  // x→half, a→float (Softsign), b→half (Relu), y_half→float (output).
  EXPECT_EQ(casts[std::to_string(static_cast<int>(DataType::kFloat16))], 2);
  EXPECT_EQ(casts[std::to_string(static_cast<int>(DataType::kFloat32))], 2);
}

// half_outputs (BuildOptions::half_outputs): an output computed in half stays half under its name, no
// Cast back; an output the target keeps in float32 stays float32; a float32 build refuses the option.
TEST(Passes, ConvertPrecisionHalfOutputsStayHalf) {
  ir::Graph g;
  g.opsets[""] = 17;
  ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 3})));
  x->is_input = true;
  g.inputs.push_back(x);
  ir::Value* y = g.add_value("y", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 3})));
  ir::Value* z = g.add_value("z", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 3})));
  g.add_node("Relu", "", {x}, {y}, "relu");
  g.add_node("Softsign", "", {y}, {z}, "softsign");  // stays float32
  g.outputs = {y, z};
  y->is_output = z->is_output = true;
  auto half = [](const ir::Node& n) { return n.op_type == "Relu"; };
  auto changed = passes::convert_precision(g, DataType::kFloat16, half, true);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  ASSERT_TRUE(g.verify().ok());
  EXPECT_EQ(g.outputs[0]->name, "y");
  EXPECT_EQ(g.outputs[0]->type.dtype, DataType::kFloat16);
  EXPECT_EQ(g.outputs[0]->producer->op_type, "Relu");
  EXPECT_EQ(g.outputs[1]->name, "z");
  EXPECT_EQ(g.outputs[1]->type.dtype, DataType::kFloat32);
  int casts = 0;
  for (const ir::Node* n : g.nodes()) casts += n->op_type == "Cast";
  EXPECT_EQ(casts, 2);  // x to half (Relu), y back to float32 for Softsign only
  BuildOptions o;
  o.half_outputs = true;
  EXPECT_FALSE(resolve_precision(o).ok());  // float32
  o.precision = Precision::kFloat16;
  EXPECT_TRUE(resolve_precision(o).ok());
}

// A half value that is a graph output and is also read by a float32 node gets one Cast back to float32,
// shared by both (it had two: the reader's and the output's).
TEST(Passes, ConvertPrecisionCastsAnOutputReadByFloatNodesOnce) {
  ir::Graph g;
  g.opsets[""] = 17;
  ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 3})));
  x->is_input = true;
  g.inputs.push_back(x);
  ir::Value* r = g.add_value("r", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 3})));
  ir::Value* s = g.add_value("s", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 3})));
  g.add_node("Relu", "", {x}, {r}, "relu");
  g.add_node("Softsign", "", {r}, {s}, "softsign");  // stays float32
  g.outputs = {r, s};
  r->is_output = s->is_output = true;
  auto half = [](const ir::Node& n) { return n.op_type == "Relu"; };
  ASSERT_TRUE(passes::convert_precision(g, DataType::kFloat16, half).ok());
  ASSERT_TRUE(g.verify().ok());
  int to_float = 0;
  for (const ir::Node* n : g.nodes()) {
    if (n->op_type == "Cast" && n->attr_int("to", 0) == static_cast<int>(DataType::kFloat32)) ++to_float;
    if (n->op_type == "Softsign") EXPECT_EQ(n->inputs[0]->name, "r");
  }
  EXPECT_EQ(to_float, 1);
  EXPECT_EQ(g.outputs[0]->name, "r");
  EXPECT_EQ(g.outputs[0]->type.dtype, DataType::kFloat32);
}

// A global pool reading a value that stays float32 stays float32 (the cast moves to its small output);
// one reading a half value runs in half as any other node.
TEST(Passes, GlobalPoolOfAFloatValueCastsItsOutputNotItsInput) {
  for (const bool producer_half : {false, true}) {
    ir::Graph g;
    g.opsets[""] = 17;
    ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 8, 7, 7})));
    x->is_input = true;
    g.inputs.push_back(x);
    auto value = [&](const char* name, std::vector<int64_t> dims) {
      return g.add_value(name, ir::Type::tensor(DataType::kFloat32, ir::SymShape::of(dims)));
    };
    ir::Value* a = value("a", {2, 8, 7, 7});
    ir::Value* p = value("p", {2, 8, 1, 1});
    ir::Value* y = value("y", {2, 8, 1, 1});
    g.add_node(producer_half ? "Relu" : "Softsign", "", {x}, {a}, "producer");
    g.add_node("GlobalAveragePool", "", {a}, {p}, "pool");
    g.add_node("Elu", "", {p}, {y}, "after");
    g.outputs = {y};
    y->is_output = true;
    auto half = [](const ir::Node& n) { return n.op_type != "Softsign"; };
    auto changed = passes::convert_precision(g, DataType::kFloat16, half);
    ASSERT_TRUE(changed.ok()) << changed.status().to_string();
    ASSERT_TRUE(g.verify().ok());
    const ir::Node* pool = nullptr;
    for (const ir::Node* n : g.nodes())
      if (n->op_type == "GlobalAveragePool") pool = n;
    ASSERT_NE(pool, nullptr);
    const DataType want = producer_half ? DataType::kFloat16 : DataType::kFloat32;
    EXPECT_EQ(pool->inputs[0]->type.dtype, want) << producer_half;
    EXPECT_EQ(pool->outputs[0]->type.dtype, want) << producer_half;
    EXPECT_EQ(pool->inputs[0]->producer->op_type, producer_half ? "Relu" : "Softsign") << "no cast before the pool";
    // The node after the pool runs in half either way: a cast of the pooled vector when the pool stayed float32.
    const ir::Node* after = nullptr;
    for (const ir::Node* n : g.nodes())
      if (n->op_type == "Elu") after = n;
    ASSERT_NE(after, nullptr);
    EXPECT_EQ(after->inputs[0]->type.dtype, DataType::kFloat16);
    EXPECT_EQ(after->inputs[0]->producer->op_type, producer_half ? "GlobalAveragePool" : "Cast");
  }
}

// CUDA's int8 products take signed A: a uint8 activation read only by them (and DequantizeLinear)
// becomes int8 with zero point z - 128 — the same outputs, bit for bit, on the CPU's kernels too.
TEST(Passes, Uint8ActivationsReadByInt8ProductsBecomeSigned) {
  for (int variant = 0; variant < 3; ++variant) {  // 0: converted; 1: a Cast reads it too; 2: refused
    SCOPED_TRACE(variant);
    Builder b;
    ir::Value* x = b.input("x", {4, 32});
    Tensor zp = Tensor::empty(DataType::kUInt8, {});
    zp.data<uint8_t>()[0] = 131;
    ir::Value* z = b.constant(zp);
    ir::Value* q = b.node("QuantizeLinear", {x, b.scalar(0.02f), z});
    Tensor w = Tensor::empty(DataType::kInt8, {32, 16});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(i * 7 % 255 - 127);
    ir::Value* y = b.g->new_value("y");
    ir::Node* mm = b.g->add_node("QMatMul", "kiln", {q, b.scalar(0.02f), z, b.constant(w), b.floats({16}, 0.01f, 0.02f)}, {y}, "mm");
    mm->opset = 1;
    ASSERT_TRUE(ops::infer_node(*mm).ok());
    b.output(y);
    b.output(b.node("DequantizeLinear", {q, b.scalar(0.02f), z}));
    if (variant == 1) {
      ir::Value* c = b.node("Cast", {q}, {{"to", attr_int(static_cast<int64_t>(DataType::kInt32))}});
      b.output(c);
    }
    Tensor xt = Tensor::empty(DataType::kFloat32, {4, 32});
    std::uniform_real_distribution<float> u(-3.f, 3.f);
    for (int64_t i = 0; i < xt.numel(); ++i) xt.data<float>()[i] = u(b.rng);
    std::map<std::string, Tensor> feeds = {{"x", xt}};
    const auto before = run(*b.g, feeds);
    const int changed = passes::signed_activations(*b.g, [variant](const ir::Node&) { return variant != 2; });
    ASSERT_TRUE(b.g->verify().ok());
    EXPECT_EQ(changed, variant == 0 ? 1 : 0);
    EXPECT_EQ(q->type.dtype, variant == 0 ? DataType::kInt8 : DataType::kUInt8);
    if (variant == 0) {
      EXPECT_EQ(mm->inputs[2]->type.dtype, DataType::kInt8);
      EXPECT_EQ(mm->inputs[2]->constant->data<int8_t>()[0], 3);
      EXPECT_EQ(q->producer->inputs[2], mm->inputs[2]);
    }
    const auto after = run(*b.g, feeds);
    ASSERT_EQ(before.size(), after.size());
    for (const auto& [name, t] : before) {
      ASSERT_TRUE(after.count(name)) << name;
      EXPECT_EQ(std::memcmp(t.raw(), after.at(name).raw(), t.nbytes()), 0) << name;
    }
  }
}

// The same for an int8 product's uint8 output (its y_zero_point) read by the next product; a graph
// output, or a reader with another zero point, keeps uint8.
TEST(Passes, Uint8ProductOutputsReadByInt8ProductsBecomeSigned) {
  for (int variant = 0; variant < 3; ++variant) {  // 0: converted; 1: also a graph output; 2: zero points differ
    SCOPED_TRACE(variant);
    Builder b;
    ir::Value* x = b.input("x", {4, 32}, DataType::kUInt8);
    auto zero = [&](uint8_t v) {
      Tensor t = Tensor::empty(DataType::kUInt8, {});
      t.data<uint8_t>()[0] = v;
      return b.constant(t);
    };
    auto weights = [&](int64_t k, int64_t n) {
      Tensor w = Tensor::empty(DataType::kInt8, {k, n});
      for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(i * 5 % 251 - 125);
      return b.constant(w);
    };
    auto product = [&](ir::Value* a, ir::Value* az, int64_t k, int64_t n, bool quantized) {
      std::vector<ir::Value*> in = {a, b.scalar(0.02f), az, weights(k, n), b.floats({n}, 0.01f, 0.02f)};
      if (quantized) in.insert(in.end(), {nullptr, b.scalar(0.5f), zero(120)});
      ir::Value* y = b.g->new_value("y");
      ir::Node* n8 = b.g->add_node("QMatMul", "kiln", in, {y}, "mm");
      n8->opset = 1;
      EXPECT_TRUE(ops::infer_node(*n8).ok());
      return n8;
    };
    ir::Node* first = product(x, zero(7), 32, 16, true);
    ir::Node* second = product(first->outputs[0], zero(variant == 2 ? 121 : 120), 16, 8, false);
    b.output(second->outputs[0]);
    if (variant == 1) b.output(first->outputs[0]);
    Tensor xt = Tensor::empty(DataType::kUInt8, {4, 32});
    for (int64_t i = 0; i < xt.numel(); ++i) xt.data<uint8_t>()[i] = static_cast<uint8_t>(i * 37 % 256);
    const auto before = run(*b.g, {{"x", xt}});
    EXPECT_EQ(passes::signed_activations(*b.g, [](const ir::Node&) { return true; }), variant == 0 ? 1 : 0);
    ASSERT_TRUE(b.g->verify().ok());
    EXPECT_EQ(first->outputs[0]->type.dtype, variant == 0 ? DataType::kInt8 : DataType::kUInt8);
    EXPECT_EQ(x->type.dtype, DataType::kUInt8) << "a graph input keeps its type";
    const auto after = run(*b.g, {{"x", xt}});
    for (const auto& [name, t] : before) EXPECT_EQ(std::memcmp(t.raw(), after.at(name).raw(), t.nbytes()), 0) << name;
  }
}

// A float-output kiln.QMatMul read only by a Cast to float16 writes float16 itself where the target
// takes it; not when another node reads the float32 value, nor when the target refuses.
TEST(Passes, Int8ProductWritesHalfInsteadOfACast) {
  for (int variant = 0; variant < 3; ++variant) {  // 0: only the Cast reads it; 1: a Relu too; 2: refused
    ir::Graph g;
    g.opsets[""] = 19;
    auto value = [&](const char* name, DataType dt, std::vector<int64_t> dims) {
      return g.add_value(name, ir::Type::tensor(dt, ir::SymShape::of(dims)));
    };
    ir::Value* a = value("a", DataType::kInt8, {2, 8});
    a->is_input = true;
    g.inputs.push_back(a);
    ir::Value* y = value("y", DataType::kFloat32, {2, 4});
    ir::Value* h = value("h", DataType::kFloat16, {2, 4});
    ir::Value* out = value("out", DataType::kFloat16, {2, 4});
    auto constant = [&](const char* name, DataType dt, std::vector<int64_t> dims) {
      ir::Value* v = value(name, dt, dims);
      v->constant = Tensor::empty(dt, Shape(dims.begin(), dims.end()));
      return v;
    };
    ir::Node* q = g.add_node("QMatMul", "kiln",
                             {a, constant("as", DataType::kFloat32, {}), nullptr, constant("b", DataType::kInt8, {8, 4}),
                              constant("bs", DataType::kFloat32, {})},
                             {y}, "product");
    q->opset = 1;
    ir::Node* cast = g.add_node("Cast", "", {y}, {h}, "cast");
    cast->attrs["to"].kind = ir::Attribute::Kind::kInt;
    cast->attrs["to"].i = static_cast<int64_t>(DataType::kFloat16);
    g.add_node("Relu", "", {h}, {out}, "after");
    g.outputs = {out};
    out->is_output = true;
    if (variant == 1) {
      ir::Value* r = value("r", DataType::kFloat32, {2, 4});
      g.add_node("Relu", "", {y}, {r}, "float_reader");
      g.outputs.push_back(r);
      r->is_output = true;
    }
    auto accepts = [variant](const ir::Node&) { return variant != 2; };
    const int changed = passes::products_write_half(g, DataType::kFloat16, accepts);
    const Status verified = g.verify();
    ASSERT_TRUE(verified.ok()) << variant << ": " << verified.to_string();
    EXPECT_EQ(changed, variant == 0 ? 1 : 0) << variant;
    EXPECT_EQ(y->type.dtype, variant == 0 ? DataType::kFloat16 : DataType::kFloat32) << variant;
    EXPECT_EQ(q->attr_int("output_dtype", 0), variant == 0 ? static_cast<int64_t>(DataType::kFloat16) : 0) << variant;
    int casts = 0;
    for (const ir::Node* n : g.nodes()) casts += n->op_type == "Cast";
    EXPECT_EQ(casts, variant == 0 ? 0 : 1) << variant;
    for (const ir::Node* n : g.nodes())
      if (n->name == "after") EXPECT_EQ(n->inputs[0], variant == 0 ? y : h) << variant;
  }
}

// A half product read only by a Cast to float32 — directly, or through pad-matmul-columns' Slice —
// becomes a kiln.FusedMatMul writing float32 (output_dtype), the Slice slicing float32 and the graph
// output keeping its name; a second reader, a Cast to another type or a refusing target leave it.
TEST(Passes, HalfProductsWriteFloatInsteadOfACast) {
  // 0: MatMul → Slice → Cast (the Slice's leading columns taken into the product: output_columns);
  // 1: MatMul → Cast; 2: the Slice read twice; 3: Cast to float16; 4: refused; 5: as 0 with Slice-1
  // (starts/ends/axes as attributes); 6: as 0, the target refusing output_columns (the Slice kept,
  // slicing float32); 7: as 6 with Slice-1 (its attributes kept by the new Slice); 8: a Slice that
  // does not start at column 0 (kept).
  for (int variant = 0; variant < 9; ++variant) {
    ir::Graph g;
    g.opsets[""] = 17;
    auto value = [&](const char* name, DataType dt, std::vector<int64_t> dims) {
      return g.add_value(name, ir::Type::tensor(dt, ir::SymShape::of(dims)));
    };
    auto int64s = [&](const char* name, int64_t v) {
      ir::Value* c = value(name, DataType::kInt64, {1});
      c->constant = Tensor::empty(DataType::kInt64, {1});
      c->constant->data<int64_t>()[0] = v;
      return c;
    };
    ir::Value* x = value("x", DataType::kFloat16, {2, 8});
    x->is_input = true;
    g.inputs.push_back(x);
    ir::Value* w = value("w", DataType::kFloat16, {8, 16});
    w->constant = Tensor::empty(DataType::kFloat16, {8, 16});
    const bool sliced = variant != 1;
    ir::Value* y = value("y", DataType::kFloat16, {2, 16});
    g.add_node("MatMul", "", {x, w}, {y}, "head")->opset = 17;
    ir::Value* s = y;
    if (sliced) {
      s = value("s", DataType::kFloat16, {2, 13});
      if (variant == 5 || variant == 7) {
        ir::Node* sl = g.add_node("Slice", "", {y}, {s}, "columns");
        sl->opset = 9;
        for (const auto& [k, v] : std::vector<std::pair<std::string, int64_t>>{{"starts", 0}, {"ends", 13}, {"axes", -1}}) {
          sl->attrs[k].kind = ir::Attribute::Kind::kInts;
          sl->attrs[k].ints = {v};
        }
      } else {
        g.add_node("Slice", "", {y, int64s("starts", variant == 8 ? 3 : 0), int64s("ends", variant == 8 ? 16 : 13),
                                 int64s("axes", -1)}, {s}, "columns")->opset = 17;
      }
    }
    const DataType to = variant == 3 ? DataType::kFloat16 : DataType::kFloat32;
    ir::Value* logits = value("logits", to, {2, sliced ? 13 : 16});
    ir::Node* cast = g.add_node("Cast", "", {s}, {logits}, "cast");
    cast->attrs["to"].kind = ir::Attribute::Kind::kInt;
    cast->attrs["to"].i = static_cast<int64_t>(to);
    g.outputs = {logits};
    logits->is_output = true;
    if (variant == 2) {
      ir::Value* r = value("r", DataType::kFloat16, {2, 13});
      g.add_node("Relu", "", {s}, {r}, "other_reader");
      g.outputs.push_back(r);
      r->is_output = true;
    }
    auto accepts = [variant](const ir::Node& n) {
      EXPECT_EQ(n.op_type, "FusedMatMul");
      return variant != 4 && !((variant == 6 || variant == 7) && n.attr("output_columns"));
    };
    const int changed = passes::products_write_float(g, accepts);
    ASSERT_TRUE(g.sort().ok()) << variant;
    const Status verified = g.verify();
    ASSERT_TRUE(verified.ok()) << variant << ": " << verified.to_string();
    const bool rewritten = variant <= 1 || variant >= 5;
    const bool columns_taken = variant == 0 || variant == 5;
    const bool slice_kept = sliced && !columns_taken;
    EXPECT_EQ(changed, rewritten ? 1 : 0) << variant;
    std::map<std::string, int> ops;
    for (const ir::Node* n : g.nodes()) ++ops[n->op_type];
    EXPECT_EQ(ops["Cast"], rewritten ? 0 : 1) << variant;
    EXPECT_EQ(ops["FusedMatMul"], rewritten ? 1 : 0) << variant;
    EXPECT_EQ(ops["MatMul"], rewritten ? 0 : 1) << variant;
    ASSERT_EQ(g.outputs[0], logits) << variant;
    EXPECT_EQ(logits->name, "logits");
    if (!rewritten) continue;
    const ir::Node* producer = logits->producer;
    ASSERT_NE(producer, nullptr);
    const ir::Node* product = slice_kept ? producer->inputs[0]->producer : producer;
    EXPECT_EQ(producer->op_type, slice_kept ? "Slice" : "FusedMatMul") << variant;
    EXPECT_EQ(ops["Slice"], slice_kept ? 1 : 0) << variant;
    ASSERT_NE(product, nullptr);
    EXPECT_EQ(product->op_type, "FusedMatMul");
    EXPECT_EQ(product->domain, "kiln");
    EXPECT_EQ(product->attr_int("output_dtype", 0), static_cast<int64_t>(DataType::kFloat32));
    EXPECT_EQ(product->outputs[0]->type.dtype, DataType::kFloat32);
    EXPECT_EQ(product->inputs[0], x);
    EXPECT_EQ(product->inputs[1], w);
    EXPECT_EQ(product->attr_int("output_columns", 0), columns_taken ? 13 : 0) << variant;
    if (columns_taken) {  // the shape function agrees: [2, 13] float32
      ASSERT_TRUE(ops::infer_node(*logits->producer).ok()) << variant;
      EXPECT_EQ(logits->type.shape.dims.back().value, 13);
      EXPECT_EQ(logits->type.dtype, DataType::kFloat32);
    }
    if (slice_kept) {
      EXPECT_EQ(producer->opset, variant == 7 ? 9 : 17);
      EXPECT_EQ(producer->attr_ints("ends"), variant == 7 ? std::vector<int64_t>{13} : std::vector<int64_t>{});
      EXPECT_EQ(producer->inputs.size(), variant == 7 ? 1u : 4u);
    }
  }
}

// A QuantizeLinear behind Cast(half → float32) reads the half value where the target takes it; the
// Cast goes unless another node reads it; a refusing target keeps the graph as it was.
TEST(Passes, QuantizeReadsHalfValuesWithoutTheCast) {
  for (int variant = 0; variant < 3; ++variant) {  // 0: only Q reads the cast; 1: Relu too; 2: refused
    ir::Graph g;
    g.opsets[""] = 19;
    ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat16, ir::SymShape::of({2, 8})));
    x->is_input = true;
    g.inputs.push_back(x);
    ir::Value* f = g.add_value("f", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 8})));
    ir::Value* sc = g.add_value("sc", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({})));
    sc->constant = Tensor::empty(DataType::kFloat32, {});
    sc->constant->data<float>()[0] = 0.1f;
    ir::Value* zp = g.add_value("zp", ir::Type::tensor(DataType::kInt8, ir::SymShape::of({})));
    zp->constant = Tensor::empty(DataType::kInt8, {});
    zp->constant->data<int8_t>()[0] = 0;
    ir::Value* q = g.add_value("q", ir::Type::tensor(DataType::kInt8, ir::SymShape::of({2, 8})));
    ir::Node* cast = g.add_node("Cast", "", {x}, {f}, "cast");
    cast->attrs["to"].kind = ir::Attribute::Kind::kInt;
    cast->attrs["to"].i = static_cast<int64_t>(DataType::kFloat32);
    g.add_node("QuantizeLinear", "", {f, sc, zp}, {q}, "quantize");
    g.outputs = {q};
    q->is_output = true;
    if (variant == 1) {
      ir::Value* r = g.add_value("r", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({2, 8})));
      g.add_node("Relu", "", {f}, {r}, "relu");
      g.outputs.push_back(r);
      r->is_output = true;
    }
    const int folded = passes::quantize_half_directly(g, [variant](const ir::Node& n) {
      return variant != 2 && n.inputs[0]->type.dtype == DataType::kFloat16;
    });
    ASSERT_TRUE(g.verify().ok()) << variant;
    int casts = 0;
    for (const ir::Node* n : g.nodes()) {
      casts += n->op_type == "Cast";
      if (n->op_type == "QuantizeLinear")
        EXPECT_EQ(n->inputs[0]->type.dtype, variant == 2 ? DataType::kFloat32 : DataType::kFloat16) << variant;
    }
    EXPECT_EQ(folded, variant == 2 ? 0 : 1) << variant;
    EXPECT_EQ(casts, variant == 0 ? 0 : 1) << variant;
  }
}

// A stem as the CUDA layout pass leaves it — Cast(float16) → Transpose(to channels-last) →
// kiln.FusedConv(3 → 64, 7x7/2, ReLU) → max kiln.ChannelsLastPool(3x3/2) → QuantizeLinear(int8) —
// becomes one kiln.ConvPool reading the float32 channels-first input; without the quantization, or
// when something else reads the pool's output too, the pool's float16 output is the node's (the
// QuantizeLinear stays). Not fused: an average pool, a refusing target.
TEST(Passes, StemConvolutionPoolAndQuantizationBecomeOneNode) {
  for (int variant = 0; variant < 5; ++variant) {  // 0 quantized; 1 float16 out; 2 pool also read by a Relu; 3 average; 4 refused
    Builder b;
    ir::Value* x = b.input("x", {2, 3, 20, 20});
    ir::Value* h = b.node("Cast", {x}, {{"to", attr_int(static_cast<int64_t>(DataType::kFloat16))}});
    ir::Value* t = b.node("Transpose", {h}, {{"perm", attr_ints({0, 2, 3, 1})}});
    auto kiln = [&b](const std::string& op, std::vector<ir::Value*> in, std::map<std::string, ir::Attribute> attrs) {
      ir::Value* out = b.g->new_value(op);
      ir::Node* n = b.g->add_node(op, "kiln", std::move(in), {out});
      n->attrs = std::move(attrs);
      n->opset = 1;
      EXPECT_TRUE(ops::infer_node(*n).ok()) << n->describe();
      return out;
    };
    ir::Attribute relu;
    relu.kind = ir::Attribute::Kind::kString;
    relu.s = "Relu";
    ir::Attribute op = relu;
    op.s = variant == 3 ? "AveragePool" : "MaxPool";
    Tensor w = Tensor::empty(DataType::kFloat16, {64, 7, 7, 3});
    std::fill_n(w.data<uint16_t>(), w.numel(), f32_to_f16(0.01f));
    Tensor bias = Tensor::empty(DataType::kFloat16, {64});
    std::fill_n(bias.data<uint16_t>(), bias.numel(), f32_to_f16(0.5f));
    ir::Value* c = kiln("FusedConv", {t, b.constant(w), b.constant(bias)},
                        {{"channels_last", attr_int(1)}, {"activation", relu}, {"strides", attr_ints({2, 2})},
                         {"pads", attr_ints({3, 3, 3, 3})}, {"kernel_shape", attr_ints({7, 7})}});
    ir::Value* p = kiln("ChannelsLastPool", {c},
                        {{"op", op}, {"kernel_shape", attr_ints({3, 3})}, {"strides", attr_ints({2, 2})}, {"pads", attr_ints({1, 1, 1, 1})}});
    Tensor zp = Tensor::empty(DataType::kInt8, {});
    zp.data<int8_t>()[0] = 0;
    if (variant == 1) {
      b.output(b.node("Relu", {p}));
    } else {
      b.output(b.node("QuantizeLinear", {p, b.scalar(0.1f), b.constant(zp)}));
      if (variant == 2) b.output(b.node("Relu", {p}));
    }
    const auto before = op_counts(*b.g);
    const size_t values_before = b.g->num_values();
    auto fused = passes::fuse_conv_max_pool(*b.g, [variant](const ir::Node&) { return variant != 4; });
    ASSERT_TRUE(fused.ok()) << fused.status().to_string();
    ASSERT_TRUE(b.g->verify().ok()) << variant;
    const auto counts = op_counts(*b.g);
    if (variant >= 3) {
      EXPECT_EQ(*fused, 0) << variant;
      EXPECT_EQ(counts, before) << variant;
      EXPECT_EQ(b.g->num_values(), values_before) << variant;  // no value of a refused trial left
      continue;
    }
    EXPECT_EQ(*fused, 1) << variant;
    EXPECT_EQ(counts.count("Cast") + counts.count("Transpose") + counts.count("kiln.FusedConv") + counts.count("kiln.ChannelsLastPool"),
              0u)
        << variant;
    EXPECT_EQ(counts.count("QuantizeLinear"), variant == 2 ? 1u : 0u) << variant;
    ir::Node* n = nullptr;
    for (ir::Node* m : b.g->nodes())
      if (m->op_type == "ConvPool") n = m;
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->domain, "kiln");
    EXPECT_EQ(n->inputs[0], x);  // the float32 channels-first input itself
    EXPECT_EQ(n->attr_int("x_channels_first", 0), 1);
    EXPECT_EQ(n->attr_ints("kernel_shape"), (std::vector<int64_t>{7, 7}));
    EXPECT_EQ(n->attr_ints("pool_pads"), (std::vector<int64_t>{1, 1, 1, 1}));
    EXPECT_EQ(n->attr_string("activation", ""), "Relu");
    EXPECT_EQ(n->inputs.size(), variant == 0 ? 5u : 3u);
    EXPECT_EQ(n->outputs[0]->uses.size(), static_cast<size_t>(variant));  // 0: the graph output itself
    EXPECT_EQ(n->outputs[0]->is_output, variant == 0);
    // Shape inference agrees with the steps it replaced: 20 → conv 10 → pool 5.
    ASSERT_TRUE(ops::infer_node(*n).ok());
    EXPECT_EQ(n->outputs[0]->type.shape.to_static(), (Shape{2, 5, 5, 64}));
    EXPECT_EQ(n->outputs[0]->type.dtype, variant == 0 ? DataType::kInt8 : DataType::kFloat16);
  }
}

// [N,H,W,C] → [N,C,H,W] (to_first) or back, float32.
static Tensor permute_4d(const Tensor& t, bool to_first) {
  const Shape& s = t.shape();
  const Shape out = to_first ? Shape{s[0], s[3], s[1], s[2]} : Shape{s[0], s[2], s[3], s[1]};
  Tensor r = Tensor::empty(DataType::kFloat32, out);
  const int64_t n = s[0], a = s[1], b = s[2], c = s[3];  // source dims
  for (int64_t i = 0; i < n; ++i)
    for (int64_t x = 0; x < a; ++x)
      for (int64_t y = 0; y < b; ++y)
        for (int64_t z = 0; z < c; ++z) {
          const float v = t.data<float>()[((i * a + x) * b + y) * c + z];
          // to_first: source [N,H,W,C] = (x=h, y=w, z=c) → [N,C,H,W]; else source [N,C,H,W] → [N,H,W,C]
          const int64_t o = to_first ? ((i * c + z) * a + x) * b + y : ((i * b + y) * c + z) * a + x;
          r.data<float>()[o] = v;
        }
  return r;
}

TEST(Passes, ChannelsLastChainsWithTransposesAtTheEdges) {
  Builder b;
  ir::Value* x = b.input("x", {2, 4, 6, 6});
  ir::Value* c1 = b.node("Conv", {x, b.floats({8, 4, 3, 3}), b.floats({8})}, {{"pads", attr_ints({1, 1, 1, 1})}});
  ir::Value* r1 = b.node("Relu", {c1});
  ir::Value* c2 = b.node("Conv", {r1, b.floats({8, 8, 1, 1})});
  ir::Value* s = b.node("Mul", {c2, b.scalar(0.5f)});
  ir::Value* a = b.node("Add", {s, r1});  // the residual: both operands NHWC
  ir::Value* r2 = b.node("Relu", {a});
  // Pooling of an NHWC value goes channels-last too (kiln.ChannelsLastPool).
  ir::Value* mp = b.node("MaxPool", {r2}, {{"kernel_shape", attr_ints({3, 3})}, {"strides", attr_ints({2, 2})},
                                           {"pads", attr_ints({1, 1, 1, 1})}});
  ir::Value* y = b.node("GlobalAveragePool", {mp});
  b.output(y);
  b.output(r1);  // a graph output inside the chain keeps its name and NCHW shape
  auto g = b.g->clone();
  auto changed = passes::convert_to_channels_last(*g, [](const ir::Node&) { return true; });
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_EQ(*changed, 8);  // 2 convolutions, Relu, Mul, Add, Relu, the two pools
  ASSERT_TRUE(g->verify().ok());
  auto h = op_counts(*g);
  EXPECT_EQ(h["kiln.FusedConv"], 2);
  EXPECT_EQ(h["kiln.ChannelsLastPool"], 2);
  EXPECT_EQ(h["Conv"], 0);
  EXPECT_EQ(h["MaxPool"] + h["GlobalAveragePool"], 0);
  EXPECT_EQ(h["Transpose"], 3);  // x in; the pooled output y and r1 back to their graph outputs
  for (const ir::Node* n : g->nodes()) {
    if (n->op_type == "FusedConv") {
      EXPECT_EQ(n->attr_int("channels_last", 0), 1);
      EXPECT_EQ(n->inputs[0]->type.shape.rank(), 4);
    }
  }
  ASSERT_EQ(g->outputs.size(), 2u);
  EXPECT_EQ(g->outputs[1]->name, b.g->outputs[1]->name);
  EXPECT_EQ(g->outputs[1]->type.shape.to_static(), (Shape{2, 8, 6, 6}));
  // The rewired graph computes what the original does: channels-last convolutions are evaluated
  // here as what they mean (X and W turned channels-first, a plain convolution, Y turned back).
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor xt = Tensor::empty(DataType::kFloat32, {2, 4, 6, 6});
  for (int64_t i = 0; i < xt.numel(); ++i) xt.data<float>()[i] = u(rng);
  auto want = run(*b.g, {{"x", xt}});
  std::map<const ir::Value*, Tensor> env{{g->inputs[0], xt}};
  for (const ir::Node* n : g->nodes()) {
    std::vector<Slot> ins;
    for (const ir::Value* v : n->inputs) {
      if (!v) ins.emplace_back();
      else ins.push_back(Slot::of(v->is_constant() ? *v->constant : env.at(v)));
    }
    if (n->op_type == "ChannelsLastPool") {  // the pool it stands for, channels-first
      ir::Node plain = *n;
      plain.op_type = n->attr_string("op", "");
      plain.domain.clear();
      plain.opset = 13;
      plain.attrs.erase("op");
      ins[0] = Slot::of(permute_4d(ins[0].tensor, true));
      auto r = run_node_eager(plain, ins);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      env[n->outputs[0]] = permute_4d((*r)[0].tensor, false);
      continue;
    }
    if (n->attr_int("channels_last", 0)) {
      ir::Node plain = *n;
      plain.attrs.erase("channels_last");
      for (int i = 0; i < 2; ++i) ins[i] = Slot::of(permute_4d(ins[i].tensor, true));
      auto r = run_node_eager(plain, ins);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      env[n->outputs[0]] = permute_4d((*r)[0].tensor, false);
      continue;
    }
    auto r = run_node_eager(*n, ins);
    ASSERT_TRUE(r.ok()) << n->describe() << ": " << r.status().to_string();
    env[n->outputs[0]] = (*r)[0].tensor;
  }
  for (int o = 0; o < 2; ++o) {
    const Tensor& w = want.at(b.g->outputs[o]->name);
    const Tensor& got = env.at(g->outputs[o]);
    ASSERT_EQ(got.shape(), w.shape());
    for (int64_t i = 0; i < w.numel(); ++i) EXPECT_NEAR(got.data<float>()[i], w.data<float>()[i], 1e-5) << o << " " << i;
  }
}

// A half BatchNormalization on an NHWC value (DenseNet's pre-activation BN) becomes one
// kiln.ChannelAffine with scale = gamma / sqrt(var + eps) and shift = beta - mean * scale in its
// dtype, and the ReLU after it joins it when it is its only reader (not when the BN's output is also a
// graph output). No Transpose around it: only x in and y out.
TEST(Passes, ChannelsLastHalfBatchNormIsOneChannelAffine) {
  for (bool bn_is_output : {false, true}) {
    Builder b;
    auto half = [&](Shape shape, float lo, float hi) {
      Tensor t = Tensor::empty(DataType::kFloat16, shape);
      std::uniform_real_distribution<float> u(lo, hi);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = f32_to_f16(u(b.rng));
      return b.constant(t);
    };
    ir::Value* x = b.input("x", {2, 4, 6, 6}, DataType::kFloat16);
    ir::Value* c1 = b.node("Conv", {x, half({8, 4, 3, 3}, -1, 1)}, {{"pads", attr_ints({1, 1, 1, 1})}});
    ir::Value *gamma = half({8}, 0.5f, 2), *beta = half({8}, -1, 1), *mean = half({8}, -1, 1), *var = half({8}, 0.1f, 3);
    ir::Value* bn = b.node("BatchNormalization", {c1, gamma, beta, mean, var}, {{"epsilon", attr_float(1e-3f)}});
    ir::Value* r = b.node("Relu", {bn});
    b.output(b.node("Conv", {r, half({8, 8, 1, 1}, -1, 1)}));
    if (bn_is_output) b.output(bn);
    // The parameters, kept: the pass drops the constants it no longer reads.
    const Tensor pg = *gamma->constant, pb = *beta->constant, pm = *mean->constant, pv = *var->constant;
    auto changed = passes::convert_to_channels_last(*b.g, [](const ir::Node&) { return true; });
    ASSERT_TRUE(changed.ok()) << changed.status().to_string();
    ASSERT_TRUE(b.g->verify().ok());
    auto h = op_counts(*b.g);
    EXPECT_EQ(h["kiln.ChannelAffine"], 1) << bn_is_output;
    EXPECT_EQ(h["BatchNormalization"], 0) << bn_is_output;
    EXPECT_EQ(h["Relu"], bn_is_output ? 1 : 0) << bn_is_output;
    EXPECT_EQ(h["Transpose"], bn_is_output ? 3 : 2) << bn_is_output;
    const ir::Node* ca = nullptr;
    for (const ir::Node* n : b.g->nodes())
      if (n->op_type == "ChannelAffine") ca = n;
    ASSERT_NE(ca, nullptr);
    EXPECT_EQ(ca->domain, "kiln");
    EXPECT_EQ(ca->attr_int("channels_last", 0), 1);
    EXPECT_EQ(ca->attr_string("activation", ""), bn_is_output ? "" : "Relu");
    EXPECT_EQ(ca->inputs[0]->producer->op_type, "FusedConv");
    EXPECT_EQ(ca->outputs[0]->type.shape.to_static(), (Shape{2, 6, 6, 8}));
    ASSERT_TRUE(ops::infer_node(*const_cast<ir::Node*>(ca)).ok());
    auto f = [](const Tensor& t, int64_t c) { return static_cast<double>(f16_to_f32(t.data<uint16_t>()[c])); };
    ASSERT_EQ(ca->inputs[1]->constant->dtype(), DataType::kFloat32);
    ASSERT_EQ(ca->inputs[2]->constant->dtype(), DataType::kFloat32);
    for (int64_t c = 0; c < 8; ++c) {
      const double k = f(pg, c) / std::sqrt(f(pv, c) + static_cast<double>(1e-3f));
      EXPECT_NEAR(ca->inputs[1]->constant->data<float>()[c], k, 1e-6 * std::fabs(k)) << c;
      EXPECT_NEAR(ca->inputs[2]->constant->data<float>()[c], f(pb, c) - f(pm, c) * k, 1e-6 * (1 + std::fabs(f(pm, c) * k))) << c;
    }
  }
}

// kiln.ChannelAffine's CPU kernel: act(x * scale[c] + shift[c]) with the channel axis 1 or last.
TEST(FusedKernels, ChannelAffineBothLayoutsAndActivations) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2, 2);
  for (bool last : {false, true})
    for (ActKind k : {ActKind::kNone, ActKind::kRelu, ActKind::kLeakyRelu}) {
      const Shape xs = last ? Shape{2, 3, 5, 7} : Shape{2, 7, 3, 5};
      Tensor x = Tensor::empty(DataType::kFloat32, xs), a = Tensor::empty(DataType::kFloat32, {7}),
             sh = Tensor::empty(DataType::kFloat32, {7});
      for (Tensor* t : {&x, &a, &sh})
        for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = u(rng);
      ir::Graph g;
      std::vector<ir::Value*> ins;
      for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"x", &x}, {"a", &a}, {"b", &sh}})
        ins.push_back(g.add_value(name, ir::Type::tensor(DataType::kFloat32, ir::SymShape::of(t->shape()))));
      ir::Node* n = g.add_node("ChannelAffine", "kiln", ins, {g.add_value("y", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of(xs)))});
      n->opset = 1;
      n->attrs["channels_last"] = attr_int(last ? 1 : 0);
      write_activation(Activation{k, 0.1f, 0}, n->attrs);
      auto r = run_node_eager(*n, {Slot::of(x), Slot::of(a), Slot::of(sh)});
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      const Tensor& y = (*r)[0].tensor;
      ASSERT_EQ(y.shape(), xs);
      const int64_t inner = last ? 1 : 15;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t c = (i / inner) % 7;
        float v = x.data<float>()[i] * a.data<float>()[c] + sh.data<float>()[c];
        if (k == ActKind::kRelu) v = v < 0 ? 0 : v;
        if (k == ActKind::kLeakyRelu) v = v < 0 ? 0.1f * v : v;
        ASSERT_NEAR(y.data<float>()[i], v, 1e-5f) << last << " " << static_cast<int>(k) << " " << i;
      }
      // The wrong number of scale values is an error naming them.
      auto bad = run_node_eager(*n, {Slot::of(x), Slot::of(Tensor::empty(DataType::kFloat32, {6})), Slot::of(sh)});
      ASSERT_FALSE(bad.ok());
      EXPECT_NE(bad.status().message().find("one value per channel"), std::string::npos) << bad.status().to_string();
    }
}

TEST(Passes, ChannelsLastLeavesWhatTheTargetRefuses) {
  Builder b;
  ir::Value* x = b.input("x", {1, 3, 8, 8});
  ir::Value* c = b.node("Conv", {x, b.floats({4, 3, 3, 3})}, {{"pads", attr_ints({0, 0, 1, 1})}});  // asymmetric pads
  b.output(b.node("Relu", {b.node("Conv", {c, b.floats({4, 4, 1, 1})})}));
  auto g = b.g->clone();
  auto refuse = passes::convert_to_channels_last(*g, [](const ir::Node&) { return false; });
  ASSERT_TRUE(refuse.ok());
  EXPECT_EQ(*refuse, 0);
  EXPECT_EQ(op_counts(*g)["Transpose"], 0);
  auto changed = passes::convert_to_channels_last(*g, [](const ir::Node&) { return true; });
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(*changed, 2);  // the 1x1 convolution and the Relu; the asymmetric one stays channels-first
  EXPECT_EQ(op_counts(*g)["Conv"], 1);
  EXPECT_EQ(op_counts(*g)["Transpose"], 2);
}

TEST(Passes, AllowTf32MarksFloatConvolutionsAndGemmsOnly) {
  Builder b;
  ir::Value* x = b.input("x", {1, 3, 6, 6});
  ir::Value* c = b.node("Relu", {conv(b, x, 3, 4, true)});
  ir::Value* f = b.node("Flatten", {c});
  ir::Value* m = b.node("MatMul", {f, b.floats({144, 8})});
  b.output(b.node("Gemm", {m, b.floats({8, 2})}));
  auto g = b.g->clone();
  EXPECT_EQ(passes::allow_tf32(*g), 3);  // Conv, MatMul, Gemm; not Relu, Flatten
  for (const ir::Node* n : g->nodes())
    EXPECT_EQ(n->attr_int(ops::kTF32Attr, 0), n->op_type == "Relu" || n->op_type == "Flatten" ? 0 : 1) << n->describe();
}

namespace kiln {
namespace {

// A ResNet block's end as CUDA INT8 engines see it after fuse-qdq: a float-output kiln.QConv, Add of
// the block's int8 input (dequantized), Relu, and the next block's int8 QuantizeLinear; the sum is
// also read by a float op.
struct ResidualBlock {
  Builder b;
  ir::Value *xq, *a, *v, *yq;
  ResidualBlock(bool relu, DataType residual_type, const std::string& conv_activation = "", bool dynamic_batch = false,
                bool quantized_after = true) {
    xq = b.input("xq", {1, 16, 4, 4}, residual_type);
    if (dynamic_batch) xq->type.shape.dims[0] = ir::Dim("N");  // as exported models have it
    Tensor z = Tensor::empty(residual_type, {});
    static_cast<uint8_t*>(z.raw())[0] = 0;
    ir::Value* zp = b.constant(z);
    // An FP8 engine's block (E4M3 residual): E4M3 weights and output too.
    const bool e4m3 = residual_type == DataType::kFloat8E4M3FN;
    const DataType q8 = e4m3 ? DataType::kFloat8E4M3FN : DataType::kInt8;
    Tensor zi = Tensor::empty(q8, {});
    static_cast<uint8_t*>(zi.raw())[0] = 0;
    ir::Value* zp8 = b.constant(zi);
    Tensor w = Tensor::empty(q8, {16, 16, 1, 1});
    for (int64_t i = 0; i < w.numel(); ++i) static_cast<uint8_t*>(w.raw())[i] = static_cast<uint8_t>(e4m3 ? i % 7 * 8 : i % 7 - 3);
    std::vector<ir::Value*> ins = {xq, b.scalar(0.05f), zp, b.constant(w), b.floats({16}, 0.01f, 0.02f), nullptr, nullptr,
                                   nullptr, b.floats({16})};
    a = b.g->new_value("conv3");
    ir::Node* q = b.g->add_node("QConv", "kiln", ins, {a}, "conv3");
    q->opset = 1;
    if (!conv_activation.empty()) write_activation(Activation{ActKind::kRelu}, q->attrs);
    EXPECT_TRUE(ops::infer_node(*q).ok());
    ir::Value* r = b.node("DequantizeLinear", {xq, b.scalar(0.05f), zp});
    ir::Value* sum = b.node("Add", {a, r});
    v = relu ? b.node("Relu", {sum}) : sum;
    if (quantized_after) {
      yq = b.node("QuantizeLinear", {v, b.scalar(0.1f), zp8});
      b.output(b.node("DequantizeLinear", {yq, b.scalar(0.1f), zp8}));
    }
    b.output(b.node("Mul", {v, b.scalar(2.0f)}));
  }
};

// No int8 quantization after the block (ResNet's last, read by the pooling in float): the float sum
// comes out of the convolution itself, the residual still read in int8.
// The block's graph after fuse_qconv_residual, which folds it once: no Add or Relu left.
auto fused_once(const Builder& b) {
  auto g = b.g->clone();
  auto fused = passes::fuse_qconv_residual(*g);
  EXPECT_TRUE(fused.ok()) << fused.status().to_string();
  EXPECT_EQ(fused.ok() ? *fused : -1, 1);
  auto counts = op_counts(*g);
  EXPECT_EQ(counts["Add"], 0);
  EXPECT_EQ(counts["Relu"], 0);
  return g;
}

TEST(Passes, QConvResidualWithAFloatOutput) {
  ResidualBlock blk(true, DataType::kInt8, "", /*dynamic_batch=*/true, /*quantized_after=*/false);
  auto g = fused_once(blk.b);
  auto counts = op_counts(*g);
  EXPECT_EQ(counts["DequantizeLinear"], 0);
  ASSERT_EQ(counts["kiln.QConv"], 1);
  for (const ir::Node* n : g->nodes()) {
    if (n->op_type == "QConv") {
      ASSERT_EQ(n->inputs.size(), 11u);
      EXPECT_FALSE(n->has_input(6)) << "float output: no y_scale";
      EXPECT_EQ(n->inputs[9]->name, "xq");
      EXPECT_FLOAT_EQ(n->inputs[10]->constant->data<float>()[0], 0.05f);
      EXPECT_EQ(n->outputs[0]->type.dtype, DataType::kFloat32);
      EXPECT_EQ(n->attr_string("activation", ""), "Relu");
    }
    if (n->op_type == "Mul") EXPECT_EQ(n->inputs[0]->producer->op_type, "QConv");
  }
  EXPECT_TRUE(g->verify().ok());
}

void residual_folds_the_add_relu_and_quantize(DataType q8);

TEST(Passes, QConvResidualFoldsTheAddReluAndQuantize) {
  for (DataType q8 : {DataType::kInt8, DataType::kFloat8E4M3FN}) {
    SCOPED_TRACE(dtype_name(q8));
    residual_folds_the_add_relu_and_quantize(q8);
  }
}

// An int8 block with an E4M3 residual (or the reverse) keeps its Add: the kernel reads Z in X's type.
TEST(Passes, QConvResidualNeedsTheConvolutionsType) {
  ResidualBlock blk(true, DataType::kInt8, "", /*dynamic_batch=*/true);
  for (ir::Node* n : blk.b.g->nodes())
    if (n->op_type == "DequantizeLinear" && n->inputs[0] == blk.xq) {
      Tensor z = Tensor::empty(DataType::kFloat8E4M3FN, {});
      static_cast<uint8_t*>(z.raw())[0] = 0;
      ir::Value* zf = blk.b.constant(z);
      ir::Value* x8 = blk.b.g->add_value("x8", ir::Type::tensor(DataType::kFloat8E4M3FN, blk.xq->type.shape));
      x8->is_input = true;
      blk.b.g->inputs.push_back(x8);
      blk.b.g->set_input(n, 0, x8);
      blk.b.g->set_input(n, 2, zf);
    }
  auto g = blk.b.g->clone();
  auto fused = passes::fuse_qconv_residual(*g);
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(*fused, 0);
}

void residual_folds_the_add_relu_and_quantize(DataType q8) {
  ResidualBlock blk(true, q8, "", /*dynamic_batch=*/true);
  auto g = fused_once(blk.b);
  auto counts = op_counts(*g);
  EXPECT_EQ(counts["QuantizeLinear"], 0);
  EXPECT_EQ(counts["kiln.QConv"], 1);
  const ir::Node* q = nullptr;
  for (const ir::Node* n : g->nodes())
    if (n->op_type == "QConv") q = n;
  ASSERT_NE(q, nullptr);
  ASSERT_EQ(q->inputs.size(), 11u);
  EXPECT_EQ(q->inputs[9]->name, "xq");  // the residual read in int8
  EXPECT_FLOAT_EQ(q->inputs[10]->constant->data<float>()[0], 0.05f);
  EXPECT_FLOAT_EQ(q->inputs[6]->constant->data<float>()[0], 0.1f);
  EXPECT_EQ(q->outputs[0]->type.dtype, q8);
  EXPECT_EQ(q->attr_string("activation", ""), "Relu");
  // Both outputs now come from the int8 output: one DequantizeLinear each side (the graph's, and the
  // Mul's new one).
  EXPECT_EQ(counts["DequantizeLinear"], 2);
  for (const ir::Value* o : g->outputs) {
    const ir::Node* p = o->producer;
    ASSERT_NE(p, nullptr);
    const ir::Node* dq = p->op_type == "Mul" ? p->inputs[0]->producer : p;
    ASSERT_NE(dq, nullptr);
    EXPECT_EQ(dq->op_type, "DequantizeLinear");
    EXPECT_EQ(dq->inputs[0], q->outputs[0]);
  }
  EXPECT_TRUE(g->verify().ok());
  // Channels-last then converts the residual with X (both NHWC).
  auto cl = passes::convert_to_channels_last(*g, [](const ir::Node& n) { return n.op_type == "QConv"; });
  ASSERT_TRUE(cl.ok());
  for (const ir::Node* n : g->nodes())
    if (n->op_type == "QConv") {
      EXPECT_EQ(n->attr_int("channels_last", 0), 1);
      EXPECT_EQ(n->inputs[9], n->inputs[0]) << "X and Z are the same int8 value, one NHWC form";
      EXPECT_EQ(n->inputs[9]->type.shape.to_string(), "[N,4,4,16]");
    }
}

// ONNX Runtime's QDQ form of a ResNet block's end: the convolution quantizes its own output (y_scale
// 0.2), DequantizeLinear, Add with the dequantized int8 input, then Q → DQ → Relu → Q. One QConv
// remains: the residual read in int8, the ReLU, the last quantization's scale (the two inner
// roundings go, as requantized_relu does it).
TEST(Passes, QConvResidualFoldsOnnxRuntimesQdqForm) {
  Builder b;
  ir::Value* xq = b.input("xq", {1, 16, 4, 4}, DataType::kInt8);
  xq->type.shape.dims[0] = ir::Dim("N");
  Tensor zi = Tensor::empty(DataType::kInt8, {});
  zi.data<int8_t>()[0] = 0;
  ir::Value* zp = b.constant(zi);
  Tensor w = Tensor::empty(DataType::kInt8, {16, 16, 1, 1});
  for (int64_t i = 0; i < w.numel(); ++i) w.data<int8_t>()[i] = static_cast<int8_t>(i % 5 - 2);
  std::vector<ir::Value*> ins = {xq, b.scalar(0.05f), zp, b.constant(w), b.floats({16}, 0.01f, 0.02f), nullptr,
                                 b.scalar(0.2f), zp, b.floats({16})};
  ir::Value* y8 = b.g->new_value("conv3_q");
  ir::Node* q = b.g->add_node("QConv", "kiln", ins, {y8}, "conv3");
  q->opset = 1;
  ASSERT_TRUE(ops::infer_node(*q).ok());
  ir::Value* sum = b.node("Add", {b.node("DequantizeLinear", {y8, b.scalar(0.2f), zp}),
                                  b.node("DequantizeLinear", {xq, b.scalar(0.05f), zp})});
  ir::Value* q2 = b.node("QuantizeLinear", {sum, b.scalar(0.3f), zp});
  ir::Value* r = b.node("Relu", {b.node("DequantizeLinear", {q2, b.scalar(0.3f), zp})});
  ir::Value* q3 = b.node("QuantizeLinear", {r, b.scalar(0.15f), zp});
  b.output(b.node("DequantizeLinear", {q3, b.scalar(0.15f), zp}));
  auto g = fused_once(b);
  auto counts = op_counts(*g);
  EXPECT_EQ(counts["QuantizeLinear"], 0);
  EXPECT_EQ(counts["DequantizeLinear"], 1);  // the graph output's
  ASSERT_EQ(counts["kiln.QConv"], 1);
  for (const ir::Node* n : g->nodes())
    if (n->op_type == "QConv") {
      ASSERT_EQ(n->inputs.size(), 11u);
      EXPECT_FLOAT_EQ(n->inputs[6]->constant->data<float>()[0], 0.15f) << "the last quantization's scale";
      EXPECT_EQ(n->inputs[9]->name, "xq");
      EXPECT_FLOAT_EQ(n->inputs[10]->constant->data<float>()[0], 0.05f);
      EXPECT_EQ(n->outputs[0]->type.dtype, DataType::kInt8);
      EXPECT_EQ(n->attr_string("activation", ""), "Relu");
      EXPECT_EQ(n->outputs[0]->uses.size(), 1u);
    }
  EXPECT_TRUE(g->verify().ok());
}

TEST(Passes, QConvResidualNeedsInt8AndAPlainConvolution) {
  {
    ResidualBlock blk(false, DataType::kInt8);  // no Relu: fused too, without an activation
    auto g = blk.b.g->clone();
    auto fused = passes::fuse_qconv_residual(*g);
    ASSERT_TRUE(fused.ok());
    EXPECT_EQ(*fused, 1);
    for (const ir::Node* n : g->nodes())
      if (n->op_type == "QConv") EXPECT_EQ(n->attr_string("activation", ""), "");
  }
  {
    ResidualBlock blk(true, DataType::kUInt8);  // a uint8 residual (zero point of its own type): left alone
    auto g = blk.b.g->clone();
    auto fused = passes::fuse_qconv_residual(*g);
    ASSERT_TRUE(fused.ok());
    EXPECT_EQ(*fused, 0);
  }
  {
    ResidualBlock blk(true, DataType::kInt8, "Relu");  // the convolution has its own activation before the Add
    auto g = blk.b.g->clone();
    auto fused = passes::fuse_qconv_residual(*g);
    ASSERT_TRUE(fused.ok());
    EXPECT_EQ(*fused, 0);
  }
}


// x → QuantizeLinear(zero point `z`) → DequantizeLinear → Conv(DequantizeLinear(int8 W)), 3x3 on
// 16 channels: the float convolution of a QDQ model (ONNX Runtime's, or kiln's calibration).
// E4M3 weights (an FP8 engine's, builder/calibrate.cpp) when z is float8e4m3fn.
ir::Value* quantized_conv(Builder& b, ir::Value* z) {
  ir::Value* x = b.input("x", {1, 16, 6, 6});
  ir::Value* xd = b.node("DequantizeLinear", {b.node("QuantizeLinear", {x, b.scalar(0.05f), z}), b.scalar(0.05f), z});
  const bool e4m3 = z->type.dtype == DataType::kFloat8E4M3FN;
  Tensor w = Tensor::empty(e4m3 ? DataType::kFloat8E4M3FN : DataType::kInt8, {16, 16, 3, 3});
  for (int64_t i = 0; i < w.numel(); ++i)
    static_cast<uint8_t*>(w.raw())[i] = e4m3 ? static_cast<uint8_t>((i % 11) * 8 | (i % 2) << 7) : static_cast<uint8_t>(i % 11 - 5);
  ir::Value* wd = b.node("DequantizeLinear", {b.constant(w), b.scalar(0.01f)});
  return b.node("Conv", {xd, wd, b.floats({16})}, {{"pads", attr_ints({1, 1, 1, 1})}});
}

ir::Value* zero_point(Builder& b, DataType t, int64_t v) {
  Tensor zp = Tensor::empty(t, {});
  if (t == DataType::kFloat8E4M3FN) static_cast<uint8_t*>(zp.raw())[0] = f32_to_mini(static_cast<float>(v), MiniFloat::kE4M3FN, true);
  else if (t == DataType::kUInt8) zp.data<uint8_t>()[0] = static_cast<uint8_t>(v);
  else zp.data<int8_t>()[0] = static_cast<int8_t>(v);
  return b.constant(zp);
}

// The quantized convolution → Relu → QuantizeLinear (kiln's calibration writes it so).
std::unique_ptr<ir::Graph> qdq_conv(DataType act, int64_t zp) {
  Builder b;
  ir::Value* z = zero_point(b, act, zp);
  b.output(b.node("QuantizeLinear", {b.node("Relu", {quantized_conv(b, z)}), b.scalar(0.1f), z}));
  return b.g->clone();
}

TEST(Passes, FuseQdqMakesOnlyConvolutionsTheTargetTakes) {
  const KernelRegistry* cuda = cuda_kernel_registry();
  if (!cuda) GTEST_SKIP() << "built without CUDA";
  auto qconvs = [&](DataType act, int64_t zp, const KernelRegistry* target) {
    auto g = qdq_conv(act, zp);
    passes::OptimizeStats stats;
    EXPECT_TRUE(passes::optimize(*g, builder_pass_options(2, target), &stats).ok());
    return op_counts(*g)["kiln.QConv"];
  };
  // CUDA's int8 convolution takes symmetric int8 activations only; a uint8 (or int8 with a nonzero
  // zero point) one stays a float convolution between Q/DQ, which runs on the GPU, instead of an
  // 8-bit one the CUDA engine would run on the CPU.
  EXPECT_EQ(qconvs(DataType::kInt8, 0, cuda), 1);
  EXPECT_EQ(qconvs(DataType::kUInt8, 128, cuda), 0);
  EXPECT_EQ(qconvs(DataType::kInt8, 3, cuda), 0);
  // Without a target (every kernel taken) the uint8 form fuses, as the CPU's kernel takes it.
  EXPECT_EQ(qconvs(DataType::kUInt8, 128, nullptr), 1);
  // An FP8 engine's E4M3 form: CUDA's kernel takes it (E4M3 in and out), the CPU's does not.
  EXPECT_EQ(qconvs(DataType::kFloat8E4M3FN, 0, cuda), 1);
  EXPECT_EQ(qconvs(DataType::kFloat8E4M3FN, 0, &cpu_backend().kernels()), 0);
  auto g = qdq_conv(DataType::kFloat8E4M3FN, 0);
  passes::OptimizeStats stats;
  ASSERT_TRUE(passes::optimize(*g, builder_pass_options(2, cuda), &stats).ok());
  ASSERT_EQ(op_counts(*g)["kiln.QConv"], 1);
  for (const ir::Node* n : g->nodes())
    if (n->op_type == "QConv") {
      EXPECT_EQ(n->inputs[3]->type.dtype, DataType::kFloat8E4M3FN);
      EXPECT_EQ(n->outputs[0]->type.dtype, DataType::kFloat8E4M3FN);
      EXPECT_EQ(n->attr_string("activation", ""), "Relu");
    }
}


// No kernel converts between integer and E4M3 results: an int8 convolution followed by an E4M3
// QuantizeLinear (or one with saturate = 0) stays a float convolution between its Q/DQ, and an E4M3
// MatMul's weights (no kiln.QMatMul reads E4M3) are folded to float once instead of dequantized on
// every run.
TEST(Passes, FuseQdqKeepsIntegerAndE4M3Apart) {
  const KernelRegistry* cuda = cuda_kernel_registry();
  if (!cuda) GTEST_SKIP() << "built without CUDA";
  for (bool unsaturated : {false, true}) {
    Builder b;
    ir::Value* z = zero_point(b, unsaturated ? DataType::kFloat8E4M3FN : DataType::kInt8, 0);
    ir::Value* z8 = zero_point(b, DataType::kFloat8E4M3FN, 0);
    std::map<std::string, ir::Attribute> attrs;
    if (unsaturated) attrs["saturate"] = attr_int(0);
    b.output(b.node("QuantizeLinear", {b.node("Relu", {quantized_conv(b, z)}), b.scalar(0.1f), z8}, attrs));
    auto g = b.g->clone();
    passes::OptimizeStats stats;
    ASSERT_TRUE(passes::optimize(*g, builder_pass_options(2, cuda), &stats).ok());
    for (const ir::Node* n : g->nodes()) {
      if (n->op_type == "QConv") EXPECT_NE(n->outputs[0]->type.dtype, DataType::kFloat8E4M3FN) << unsaturated;
      EXPECT_FALSE(n->op_type == "QConv" && n->has_input(6)) << unsaturated << ": the E4M3 quantization went into the product";
    }
    EXPECT_EQ(op_counts(*g)["QuantizeLinear"], 2) << unsaturated;  // x's and y's
  }
  Builder b;
  ir::Value* x = b.input("x", {2, 32});
  ir::Value* z8 = zero_point(b, DataType::kFloat8E4M3FN, 0);
  ir::Value* xd = b.node("DequantizeLinear", {b.node("QuantizeLinear", {x, b.scalar(0.05f), z8}), b.scalar(0.05f), z8});
  Tensor w = Tensor::empty(DataType::kFloat8E4M3FN, {32, 16});
  for (int64_t i = 0; i < w.numel(); ++i) static_cast<uint8_t*>(w.raw())[i] = static_cast<uint8_t>(i % 40);
  b.output(b.node("MatMul", {xd, b.node("DequantizeLinear", {b.constant(w), b.scalar(0.01f)})}));
  auto g = b.g->clone();
  passes::OptimizeStats stats;
  ASSERT_TRUE(passes::optimize(*g, builder_pass_options(2, cuda), &stats).ok());
  EXPECT_EQ(op_counts(*g)["DequantizeLinear"], 1) << "the weights' DequantizeLinear is folded";
  // An int8 MatMul quantized to E4M3 after it: an int8 product with a float output at most.
  Builder m;
  ir::Value* xm = m.input("x", {2, 32});
  ir::Value* zi = zero_point(m, DataType::kInt8, 0);
  ir::Value* zf = zero_point(m, DataType::kFloat8E4M3FN, 0);
  ir::Value* xmd = m.node("DequantizeLinear", {m.node("QuantizeLinear", {xm, m.scalar(0.05f), zi}), m.scalar(0.05f), zi});
  Tensor wi = Tensor::empty(DataType::kInt8, {32, 16});
  for (int64_t i = 0; i < wi.numel(); ++i) wi.data<int8_t>()[i] = static_cast<int8_t>(i % 9 - 4);
  ir::Value* mm = m.node("MatMul", {xmd, m.node("DequantizeLinear", {m.constant(wi), m.scalar(0.01f)})});
  m.output(m.node("QuantizeLinear", {mm, m.scalar(0.1f), zf}));
  auto gm = m.g->clone();
  ASSERT_TRUE(passes::optimize(*gm, builder_pass_options(2, cuda), &stats).ok());
  for (const ir::Node* n : gm->nodes())
    if (n->op_type == "QMatMul") EXPECT_FALSE(n->has_input(6)) << "the E4M3 quantization went into the int8 product";
}

// ONNX Runtime's QDQ form of Conv → Relu: Q → DQ after the convolution, then Relu, then Q again.
std::unique_ptr<ir::Graph> ort_conv_relu(bool extra_reader) {
  Builder b;
  ir::Value* z = zero_point(b, DataType::kInt8, 0);
  ir::Value* c = quantized_conv(b, z);
  ir::Value* cd = b.node("DequantizeLinear", {b.node("QuantizeLinear", {c, b.scalar(0.2f), z}), b.scalar(0.2f), z});
  ir::Value* r = b.node("Relu", {cd});
  b.output(b.node("QuantizeLinear", {r, b.scalar(0.1f), z}));
  if (extra_reader) b.output(b.node("Mul", {cd, b.scalar(2.0f)}));
  return b.g->clone();
}

TEST(Passes, FuseQdqRequantizesARelusQuantizeIntoTheProduct) {
  for (const KernelRegistry* target : {static_cast<const KernelRegistry*>(nullptr), cuda_kernel_registry()}) {
    if (target == nullptr && cuda_kernel_registry() == nullptr) continue;
    auto g = ort_conv_relu(false);
    passes::OptimizeStats stats;
    ASSERT_TRUE(passes::optimize(*g, builder_pass_options(2, target), &stats).ok());
    auto counts = op_counts(*g);
    EXPECT_EQ(counts["kiln.QConv"], 1);
    EXPECT_EQ(counts["Relu"], 0);
    EXPECT_EQ(counts["QuantizeLinear"], 1);  // x's
    for (const ir::Node* n : g->nodes())
      if (n->op_type == "QConv") {
        EXPECT_EQ(n->attr_string("activation", ""), "Relu");
        EXPECT_FLOAT_EQ(n->inputs[6]->constant->data<float>()[0], 0.1f);  // the ReLU's scale, not the convolution's
        EXPECT_TRUE(n->outputs[0]->is_output);
      }
  }
  // The convolution's dequantized output read by another node: the Relu stays.
  auto g = ort_conv_relu(true);
  passes::OptimizeStats stats;
  ASSERT_TRUE(passes::optimize(*g, builder_pass_options(2, nullptr), &stats).ok());
  EXPECT_EQ(op_counts(*g)["Relu"], 1);
}

}  // namespace
}  // namespace kiln

#include "builder/calibrate.h"

namespace kiln {
namespace {

// A CUDA FP8 build's quantization (builder/calibrate.cpp) of a residual block: the convolutions the
// FP8 kernel takes get E4M3 Q/DQ (activations amax / 448 of the calibration sets, zero point 0;
// weights per output channel), the block's shortcut too (for the residual fold); one with 8 output
// channels stays float. fuse-qdq and the residual fold then make E4M3 kiln.QConvs, and the quantized
// graph stays close to the float one on the CPU's Q/DQ kernels.
TEST(Calibration, Fp8CudaBuildQuantizesConvolutionsAsE4M3) {
  const KernelRegistry* cuda = cuda_kernel_registry();
  if (!cuda) GTEST_SKIP() << "built without CUDA";
  Builder b;
  ir::Value* x = b.input("x", {2, 16, 6, 6});
  ir::Value* r1 = b.node("Relu", {conv(b, x, 16, 32, true)});
  ir::Value* sum = b.node("Add", {conv(b, r1, 32, 32, true, 1), conv(b, x, 16, 32, false, 1)});
  ir::Value* y = b.node("Relu", {sum});
  b.output(y);
  b.output(conv(b, y, 32, 8, true, 1));
  const auto float_graph = b.g->clone();

  BuildOptions o;
  o.device = DeviceType::kCUDA;
  o.precision = Precision::kFP8;
  double amax = 0;
  for (int s = 0; s < 2; ++s) {
    Tensor t = Tensor::empty(DataType::kFloat32, {2, 16, 6, 6});
    std::uniform_real_distribution<float> u(-2.f, 2.f);
    for (int64_t i = 0; i < t.numel(); ++i) amax = std::max(amax, std::fabs(static_cast<double>(t.data<float>()[i] = u(b.rng))));
    o.calibration.push_back({{"x", t}});
  }
  auto cpu = [](std::unique_ptr<ir::Graph> g) { return build_graph_as_is(std::move(g), DeviceType::kCPU); };
  auto unused = [](std::unique_ptr<ir::Graph>) -> Expected<std::shared_ptr<Engine>> { return invalid_argument("no budget"); };
  auto g = b.g->clone();
  auto report = quantize_8bit(*g, o, DataType::kFloat8E4M3FN, *cuda, "", cpu, unused);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->layers.size(), 3u);

  int e4m3_weights = 0, e4m3_quantize = 0;
  for (const ir::Node* n : g->nodes()) {
    if (n->op_type == "QuantizeLinear") {
      EXPECT_EQ(n->outputs[0]->type.dtype, DataType::kFloat8E4M3FN) << n->describe();
      ++e4m3_quantize;
      if (n->inputs[0]->name == "x")
        EXPECT_FLOAT_EQ(n->inputs[1]->constant->data<float>()[0], static_cast<float>(amax / 448.0));
    }
    if (n->op_type == "DequantizeLinear" && n->inputs[0]->is_constant()) {
      EXPECT_EQ(n->inputs[0]->type.dtype, DataType::kFloat8E4M3FN);
      EXPECT_EQ(n->inputs[1]->constant->numel(), 32) << "one scale per output channel";
      ++e4m3_weights;
    }
    if (n->op_type == "Conv") {
      const bool quantized = n->inputs[0]->producer && n->inputs[0]->producer->op_type == "DequantizeLinear";
      EXPECT_EQ(quantized, n->outputs[0]->type.shape.dims[1].value != 8) << n->describe();
    }
    if (n->op_type == "Add") {
      EXPECT_EQ(n->inputs[0]->producer->op_type, "Conv");
      EXPECT_EQ(n->inputs[1]->producer->op_type, "DequantizeLinear") << "the shortcut, quantized for the residual fold";
    }
  }
  EXPECT_EQ(e4m3_weights, 3);
  EXPECT_EQ(e4m3_quantize, 3);  // x (read by two convolutions), r1, the shortcut's output

  // The CPU runs the Q/DQ graph: within E4M3's rounding of the float graph.
  const auto want = run(*float_graph, o.calibration[0]);
  const auto got = run(*g, o.calibration[0]);
  for (const auto& [name, t] : want) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double d = got.at(name).data<float>()[i] - t.data<float>()[i];
      num += d * d;
      den += static_cast<double>(t.data<float>()[i]) * t.data<float>()[i];
    }
    EXPECT_LT(std::sqrt(num / den), 0.08) << name;
  }

  // fuse-qdq and the residual fold: three E4M3 kiln.QConvs, the shortcut read as the residual.
  passes::OptimizeStats stats;
  ASSERT_TRUE(passes::optimize(*g, builder_pass_options(2, cuda), &stats).ok());
  ASSERT_TRUE(passes::fuse_qconv_residual(*g).ok());
  int qconvs = 0, residual = 0;
  for (const ir::Node* n : g->nodes())
    if (n->op_type == "QConv") {
      ++qconvs;
      EXPECT_EQ(n->inputs[3]->type.dtype, DataType::kFloat8E4M3FN);
      if (n->has_input(9)) {
        ++residual;
        EXPECT_EQ(n->inputs[9]->type.dtype, DataType::kFloat8E4M3FN);
      }
    }
  EXPECT_EQ(qconvs, 3);
  EXPECT_EQ(residual, 1);
}

}  // namespace
}  // namespace kiln

// ONNX Runtime's contrib ops (#44) are lowered at every level (lower-contrib-ops) and kiln's fusions
// take the result: a BERT layer as ONNX Runtime's optimizer writes it (FusedMatMul + bias, FastGelu
// with its bias, SkipLayerNormalization with its bias) ends as kiln.FusedMatMul and kiln.SkipLayerNorm.
TEST(Passes, ContribOpsLowerIntoFusedKernels) {
  Builder b;
  b.g->opsets["com.microsoft"] = 1;
  auto contrib = [&](const std::string& op, std::vector<ir::Value*> in, std::map<std::string, ir::Attribute> attrs = {}) {
    ir::Value* out = b.g->new_value(op);
    ir::Node* n = b.g->add_node(op, "com.microsoft", std::move(in), {out});
    n->attrs = std::move(attrs);
    EXPECT_TRUE(ops::check_arity(*n).ok() && ops::infer_node(*n).ok()) << n->describe();
    return out;
  };
  ir::Value* x = b.input("x", {2, 5, 8});
  ir::Value* h = contrib("FusedMatMul", {x, b.floats({16, 8})}, {{"transB", attr_int(1)}});
  ir::Value* g = contrib("FastGelu", {h, b.floats({16})});
  ir::Value* p = b.node("MatMul", {g, b.floats({16, 8})});
  ir::Value* y = contrib("SkipLayerNormalization", {p, x, b.floats({8}), b.floats({8}), b.floats({8})},
                         {{"epsilon", attr_float(1e-5f)}});
  b.output(y);

  // Level 0: lowered, nothing fused; the reference the fused graph is compared with.
  auto plain = b.g->clone();
  passes::OptimizeStats st0;
  ASSERT_TRUE(passes::optimize(*plain, builder_pass_options(0, nullptr), &st0).ok());
  EXPECT_EQ(st0.fired["lower-contrib-ops"], 3);
  auto h0 = op_counts(*plain);
  EXPECT_EQ(h0["LayerNormalization"], 1);
  EXPECT_EQ(h0["Gelu"], 1);
  for (const auto& [op, n] : h0) EXPECT_EQ(op.rfind("com.microsoft.", 0), std::string::npos) << op;

  auto opt = b.g->clone();
  passes::OptimizeStats st;
  ASSERT_TRUE(passes::optimize(*opt, builder_pass_options(2, nullptr), &st).ok());
  auto h2 = op_counts(*opt);
  EXPECT_EQ(h2["kiln.SkipLayerNorm"], 1) << opt->to_string();
  EXPECT_EQ(h2["kiln.FusedMatMul"], 2) << opt->to_string();
  EXPECT_EQ(h2["Add"] + h2["Gelu"] + h2["Transpose"] + h2["LayerNormalization"], 0) << opt->to_string();

  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2, 2);
  Tensor xt = Tensor::empty(DataType::kFloat32, {2, 5, 8});
  for (int64_t i = 0; i < xt.numel(); ++i) xt.data<float>()[i] = u(rng);
  const Tensor want = run(*plain, {{"x", xt}}).at(y->name);
  const Tensor got = run(*opt, {{"x", xt}}).at(y->name);
  ASSERT_EQ(want.shape(), got.shape());
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-4);
}

// A contrib node asking for what kiln cannot give is refused by name, at every level.
TEST(Passes, ContribOpRefusalNamesTheNode) {
  Builder b;
  b.g->opsets["com.microsoft"] = 1;
  ir::Value* x = b.input("x", {2, 8});
  ir::Value* y = b.g->new_value("y");
  ir::Value* mean = b.g->new_value("mean");
  b.g->add_node("SkipSimplifiedLayerNormalization", "com.microsoft", {x, x, b.floats({8})}, {y, mean}, "rms");
  b.output(y);
  b.output(mean);
  for (int level : {0, 2}) {
    auto g = b.g->clone();
    Status st = passes::optimize(*g, builder_pass_options(level, nullptr));
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("node 'rms' (com.microsoft.SkipSimplifiedLayerNormalization)"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("no mean"), std::string::npos) << st.message();
  }
}

// MultiHeadAttention and GroupQueryAttention become one ai.onnx Attention (opset 23) at every level, so
// every device's attention kernels run them (tests/python/test_contrib_attention.py compares their
// values with onnxruntime), and at level 2 (no past) one kiln.Attention (attention-op: grouped K/V
// heads, GroupQueryAttention's window mask as its bool mask); GroupQueryAttention's output keeps its
// inferred shape through the lowering.
TEST(Passes, ContribAttentionOpsLowerToOneAttention) {
  for (const std::string op : {"MultiHeadAttention", "GroupQueryAttention"}) {
    Builder b;
    b.g->opsets["com.microsoft"] = 1;
    const bool gqa = op == "GroupQueryAttention";
    std::vector<ir::Value*> ins = {b.input("q", {2, 5, 32}), b.input("k", {2, 5, gqa ? 16 : 32}),
                                   b.input("v", {2, 5, gqa ? 16 : 32})};
    std::map<std::string, ir::Attribute> attrs = {{"num_heads", attr_int(4)}};
    if (gqa) {
      Tensor seqlens = Tensor::empty(DataType::kInt32, {2});
      seqlens.data<int32_t>()[0] = seqlens.data<int32_t>()[1] = 4;
      Tensor total = Tensor::empty(DataType::kInt32, {});
      total.data<int32_t>()[0] = 5;
      ins.insert(ins.end(), {nullptr, nullptr, b.constant(seqlens), b.constant(total)});
      attrs["kv_num_heads"] = attr_int(2);
    } else {
      ins.push_back(b.floats({96}));
      attrs["unidirectional"] = attr_int(1);
    }
    ir::Value* y = b.g->new_value("y");
    ir::Node* n = b.g->add_node(op, "com.microsoft", ins, {y}, "attn");
    n->attrs = attrs;
    ASSERT_TRUE(ops::check_arity(*n).ok() && ops::infer_node(*n).ok()) << n->describe();
    EXPECT_EQ(y->type.shape.to_string(), ir::SymShape::of(Shape{2, 5, 32}).to_string()) << op;
    b.output(y);
    for (int level : {0, 2}) {
      auto g = b.g->clone();
      passes::OptimizeStats st;
      ASSERT_TRUE(passes::optimize(*g, builder_pass_options(level, nullptr), &st).ok()) << op;
      EXPECT_EQ(st.fired["lower-contrib-ops"], 1) << op;
      auto h = op_counts(*g);
      EXPECT_EQ(h[level ? "kiln.Attention" : "Attention"], 1) << op << " level " << level << "\n" << g->to_string();
      EXPECT_EQ(h[level ? "Attention" : "kiln.Attention"], 0) << op << " level " << level;
      EXPECT_EQ(h["Softmax"] + h["MatMul"], 0) << op << " level " << level;
    }
  }
}

// A form lowering cannot give exactly is refused naming the node and what it asks for.
TEST(Passes, GroupQueryAttentionRefusesSmoothSoftmaxWithABias) {
  Builder b;
  b.g->opsets["com.microsoft"] = 1;
  Tensor seqlens = Tensor::empty(DataType::kInt32, {1});
  seqlens.data<int32_t>()[0] = 1;
  Tensor total = Tensor::empty(DataType::kInt32, {});
  total.data<int32_t>()[0] = 2;
  ir::Value* y = b.g->new_value("y");
  ir::Node* n = b.g->add_node("GroupQueryAttention", "com.microsoft",
                              {b.input("q", {1, 2, 32}), b.input("k", {1, 2, 16}), b.input("v", {1, 2, 16}), nullptr,
                               nullptr, b.constant(seqlens), b.constant(total), nullptr, nullptr, nullptr,
                               b.floats({1, 2, 2, 2})},
                              {y}, "gqa");
  n->attrs = {{"num_heads", attr_int(2)}, {"kv_num_heads", attr_int(1)}, {"smooth_softmax", attr_int(1)}};
  b.output(y);
  Status st = passes::optimize(*b.g, builder_pass_options(2, nullptr));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'gqa' (com.microsoft.GroupQueryAttention): smooth_softmax with attention_bias"),
            std::string::npos)
      << st.message();
}
