// kiln.Pointwise and the fuse-pointwise pass: randomly generated graphs of elementwise ops (random
// shapes that broadcast, scalar constants, float16/bfloat16 round trips, intermediate values that are
// also graph outputs) are fused and run with the CPU interpreter against the unfused graph's own CPU
// kernels; on a GPU the generated CUDA kernels run the same fused graphs against the CPU interpreter.
// The program's checks refuse malformed attributes with errors naming what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <functional>
#include <cstring>
#include <iostream>
#include <map>
#include <random>

#include "backends/backend.h"
#include "ir/epilogue.h"
#include "ir/float_types.h"
#include "ops/op_table.h"
#include "ops/pointwise.h"
#include "passes/passes.h"
#include "runtime/eager.h"
#include "graph_runner.h"
#include "test_cuda_util.h"

namespace {

using namespace kiln;

struct RandomGraph {
  std::unique_ptr<ir::Graph> g = std::make_unique<ir::Graph>();
  std::map<std::string, Tensor> feeds;
  bool rounds = false;  // holds a value in a half type somewhere (a rounding may flip)
};

Tensor random_input(DataType dt, const Shape& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  Tensor t = Tensor::empty(dt, s);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float x = u(rng);
    if (dt == DataType::kFloat16) t.data<uint16_t>()[i] = f32_to_f16(x);
    else if (dt == DataType::kBFloat16) t.data<uint16_t>()[i] = f32_to_bf16(x);
    else t.data<float>()[i] = x;
  }
  return t;
}

ir::Value* add(ir::Graph& g, const std::string& op, std::vector<ir::Value*> in, int opset = 17,
               std::map<std::string, ir::Attribute> attrs = {}) {
  ir::Value* y = g.new_value(op);
  ir::Node* n = g.add_node(op, "", std::move(in), {y});
  n->opset = opset;
  n->attrs = std::move(attrs);
  EXPECT_TRUE(ops::infer_node(*n).ok()) << n->describe();
  return y;
}

ir::Value* scalar(ir::Graph& g, float x) {
  Tensor t = Tensor::empty(DataType::kFloat32, {});
  t.data<float>()[0] = x;
  ir::Value* v = g.new_value("c", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({})));
  v->constant = t;
  return v;
}

ir::Value* cast(ir::Graph& g, ir::Value* x, DataType to) {
  ir::Attribute a;
  a.kind = ir::Attribute::Kind::kInt;
  a.i = static_cast<int64_t>(to);
  return add(g, "Cast", {x}, 17, {{"to", a}});
}

// A graph of 3-10 elementwise ops over 1-3 inputs whose shapes broadcast to one of rank 1-4; inputs
// of `io` type are widened by a Cast first and the result is narrowed back to it.
RandomGraph random_graph(std::mt19937& rng, DataType io) {
  RandomGraph r;
  ir::Graph& g = *r.g;
  g.opsets[""] = 20;
  auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  Shape base(1 + pick(4));
  for (int64_t& d : base) d = 1 + pick(6);
  if (pick(2)) base.back() = 4 * (1 + pick(3));  // the CUDA kernels' four-element path
  std::vector<ir::Value*> pool;
  const int inputs = 1 + pick(3);
  for (int i = 0; i < inputs; ++i) {
    Shape s(base.begin() + pick(static_cast<int>(base.size())), base.end());
    for (int64_t& d : s)
      if (pick(3) == 0) d = 1;
    ir::Value* v = g.add_value("x" + std::to_string(i), ir::Type::tensor(io, ir::SymShape::of(s)));
    v->is_input = true;
    g.inputs.push_back(v);
    r.feeds[v->name] = random_input(io, s, rng);
    pool.push_back(io == DataType::kFloat32 ? v : cast(g, v, DataType::kFloat32));
  }
  r.rounds = io != DataType::kFloat32;
  static const char* const unary[] = {"Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Erf", "Floor", "Ceil",
                                      "Softplus", "HardSwish", "Sin", "Cos", "Sqrt", "Log", "Reciprocal"};
  static const char* const binary[] = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"};
  const int ops = 3 + pick(8);
  for (int k = 0; k < ops; ++k) {
    ir::Value* x = pool[pick(static_cast<int>(pool.size()))];
    ir::Value* y = nullptr;
    switch (pick(6)) {
      case 0:
      case 1: {
        ir::Value* b = pick(4) == 0 ? scalar(g, 0.25f + 0.5f * pick(5)) : pool[pick(static_cast<int>(pool.size()))];
        y = add(g, binary[pick(7)], pick(2) ? std::vector<ir::Value*>{x, b} : std::vector<ir::Value*>{b, x});
        break;
      }
      case 2: y = add(g, unary[pick(16)], {x}); break;
      case 3: {
        ir::Attribute a;
        a.kind = ir::Attribute::Kind::kFloat;
        a.f = 0.1f + 0.3f * pick(4);
        static const char* const param[] = {"LeakyRelu", "Elu", "HardSigmoid"};
        y = add(g, param[pick(3)], {x}, 17, {{"alpha", a}});
        break;
      }
      case 4:
        if (pick(2)) {
          y = add(g, "Clip", {x, scalar(g, -1.f + 0.25f * pick(3)), scalar(g, 0.5f + 0.5f * pick(3))}, 13);
        } else {
          ir::Attribute a;
          a.kind = ir::Attribute::Kind::kString;
          a.s = pick(2) ? "tanh" : "none";
          y = add(g, "Gelu", {x}, 20, {{"approximate", a}});
        }
        break;
      default:  // a round trip through a half type
        y = cast(g, cast(g, x, pick(2) ? DataType::kFloat16 : DataType::kBFloat16), DataType::kFloat32);
        r.rounds = true;
        break;
    }
    pool.push_back(y);
  }
  ir::Value* last = pool.back();
  if (io != DataType::kFloat32) last = cast(g, last, io);
  last->is_output = true;
  g.outputs.push_back(last);
  // Sometimes an intermediate value is an output too: the region must end there.
  if (pool.size() > static_cast<size_t>(inputs) + 2 && pick(3) == 0) {
    ir::Value* mid = pool[inputs + pick(static_cast<int>(pool.size()) - inputs - 1)];
    if (!mid->is_output) {
      mid->is_output = true;
      g.outputs.push_back(mid);
    }
  }
  return r;
}


Tensor as_float(const Tensor& t) {
  if (t.dtype() == DataType::kFloat32) return t;
  Tensor f = Tensor::empty(DataType::kFloat32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i)
    f.data<float>()[i] = t.dtype() == DataType::kFloat16 ? f16_to_f32(t.data<uint16_t>()[i]) : bf16_to_f32(t.data<uint16_t>()[i]);
  return f;
}

// Elements that differ beyond tolerance (NaN matches NaN, an infinity itself). A chain of ops can
// amplify a last-bit difference (and a half rounding can flip on one), so a few outliers are allowed;
// a wrong op or index differs almost everywhere.
int64_t mismatches(const Tensor& got, const Tensor& want, float tol) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return want.numel() + 1;
  const Tensor g = as_float(got), w = as_float(want);
  int64_t bad = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float a = g.data<float>()[i], b = w.data<float>()[i];
    if ((std::isnan(a) && std::isnan(b)) || a == b) continue;
    if (!(std::fabs(a - b) <= tol * (1.f + std::fabs(b))) && ++bad <= 3)
      std::cout << "  element " << i << ": got " << a << ", want " << b << "\n";
  }
  return bad;
}

int count_pointwise(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node* node : g.nodes()) n += node->domain == "kiln" && node->op_type == "Pointwise";
  return n;
}

TEST(Pointwise, RandomGraphsFuseAndMatchTheirOps) {
  std::mt19937 rng(2026);
  int fused_graphs = 0;
  for (int t = 0; t < 300; ++t) {
    const DataType io = t % 3 == 0 ? DataType::kFloat32 : t % 3 == 1 ? DataType::kFloat16 : DataType::kBFloat16;
    RandomGraph r = random_graph(rng, io);
    auto fused = r.g->clone();
    auto n = passes::fuse_pointwise(*fused, [](const ir::Node&) { return true; });
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    ASSERT_TRUE(fused->verify().ok()) << fused->to_string();
    fused_graphs += *n > 0;
    const auto want = test::run_graph_on_cpu(*r.g, r.feeds), got = test::run_graph_on_cpu(*fused, r.feeds);
    for (const auto& [name, w] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      const int64_t bad = mismatches(got.at(name), w, r.rounds ? 5e-3f : 1e-4f);
      EXPECT_LE(bad, w.numel() / 50) << "graph " << t << ", output " << name << "\n" << r.g->to_string();
    }
  }
  EXPECT_GT(fused_graphs, 250);
}

TEST(Pointwise, RegionsStopAtValuesReadOutside) {
  ir::Graph g;
  g.opsets[""] = 17;
  ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({4, 8})));
  x->is_input = true;
  g.inputs.push_back(x);
  ir::Value* e = add(g, "Exp", {x});
  ir::Value* s = add(g, "Sigmoid", {e});
  ir::Value* m = add(g, "Mul", {e, s});      // e read twice inside
  ir::Value* t = add(g, "Tanh", {m});
  ir::Value* sum = add(g, "ReduceSum", {t});  // not elementwise: ends the region
  ir::Value* u = add(g, "Add", {t, scalar(g, 1.f)});
  for (ir::Value* o : {sum, u}) {
    o->is_output = true;
    g.outputs.push_back(o);
  }
  auto n = passes::fuse_pointwise(g, [](const ir::Node&) { return true; });
  ASSERT_TRUE(n.ok());
  // Tanh is read by ReduceSum and Add: the region Exp..Tanh ends at Tanh; Add alone stays.
  EXPECT_EQ(*n, 1);
  EXPECT_EQ(count_pointwise(g), 1);
  const ir::Node* pw = t->producer;
  ASSERT_NE(pw, nullptr);
  EXPECT_EQ(pw->op_type, "Pointwise");
  EXPECT_EQ(pw->inputs.size(), 1u);
  auto p = ops::parse_pointwise(*pw);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->code.size(), 4u);  // exp, sigmoid, mul, tanh
  EXPECT_EQ(u->producer->op_type, "Add");
}

// SwiGLU after fuse-activation: kiln.FusedMatMul(x, Wg) with SiLU, times MatMul(x, Wu). The SiLU goes
// back to the graph and joins the Mul's region (one kernel reading both products); a ReLU (cuBLASLt's
// epilogue) and a SiLU read by a non-elementwise op stay in the product. The results match the graph
// before the pass.
TEST(Pointwise, ActivationsLeaveProductsForTheirRegion) {
  std::mt19937 rng(23);
  for (const char* act : {"Silu", "Gelu", "LeakyRelu", "Relu", "Silu read by ReduceSum"}) {
    const std::string a = act;
    const bool moves = a == "Silu" || a == "Gelu" || a == "LeakyRelu";
    ir::Graph g;
    g.opsets[""] = 20;
    g.opsets["kiln"] = 1;
    ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({4, 16})));
    x->is_input = true;
    g.inputs.push_back(x);
    auto weight = [&](const std::string& name) {
      ir::Value* w = g.add_value(name, ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({16, 24})));
      w->constant = random_input(DataType::kFloat32, {16, 24}, rng);
      return w;
    };
    ir::Value* gate = g.new_value("gate");
    ir::Node* fm = g.add_node("FusedMatMul", "kiln", {x, weight("wg")}, {gate}, "gate_proj");
    fm->opset = 1;
    Activation act_attr{a.rfind("Silu", 0) == 0 ? ActKind::kSilu : a == "Gelu" ? ActKind::kGelu : a == "LeakyRelu" ? ActKind::kLeakyRelu
                                                                                                                  : ActKind::kRelu};
    if (act_attr.kind == ActKind::kLeakyRelu) act_attr.a = 0.2f;
    write_activation(act_attr, fm->attrs);
    ASSERT_TRUE(ops::infer_node(*fm).ok());
    ir::Value* up = add(g, "MatMul", {x, weight("wu")});
    ir::Value* y = a == "Silu read by ReduceSum" ? add(g, "ReduceSum", {gate}) : add(g, "Mul", {gate, up});
    y->is_output = true;
    g.outputs.push_back(y);
    if (a == "Silu read by ReduceSum") {
      up->is_output = true;
      g.outputs.push_back(up);
    }
    auto fused = g.clone();
    auto n = passes::fuse_pointwise(*fused, [](const ir::Node&) { return true; });
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(*n, moves ? 1 : 0) << a << "\n" << fused->to_string();
    const ir::Node* product = nullptr;
    for (const ir::Node* m : fused->nodes())
      if (m->op_type == "FusedMatMul") product = m;
    ASSERT_NE(product, nullptr) << a;
    EXPECT_EQ(product->attr("activation") == nullptr, moves) << a;
    if (moves) {
      const ir::Node* pw = fused->outputs[0]->producer;
      ASSERT_EQ(pw->op_type, "Pointwise") << a;
      EXPECT_EQ(pw->inputs.size(), 2u) << a;  // the two products
    }
    const std::map<std::string, Tensor> feeds = {{"x", random_input(DataType::kFloat32, {4, 16}, rng)}};
    const auto want = test::run_graph_on_cpu(g, feeds), got = test::run_graph_on_cpu(*fused, feeds);
    for (const auto& [name, w] : want) EXPECT_EQ(mismatches(got.at(name), w, 1e-5f), 0) << a << " " << name;
    // A target that refuses the region: the activation goes back into the product, the graph as before.
    auto refused = g.clone();
    auto none = passes::fuse_pointwise(*refused, [](const ir::Node&) { return false; });
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(*none, 0);
    EXPECT_EQ(refused->nodes().size(), g.nodes().size()) << a << "\n" << refused->to_string();
    for (const ir::Node* m : refused->nodes()) {
      EXPECT_TRUE(m->op_type != "Sigmoid" && m->op_type != "Gelu" && m->op_type != "LeakyRelu") << a << " " << m->describe();
      if (m->op_type == "FusedMatMul") EXPECT_NE(m->attr("activation"), nullptr) << a;
    }
    const auto back = test::run_graph_on_cpu(*refused, feeds);
    for (const auto& [name, w] : want) EXPECT_EQ(mismatches(back.at(name), w, 0.f), 0) << a << " " << name;
  }
}

// Bit for bit: an intermediate the graph held in float16 is rounded there (without the rounding,
// x + float16(x) would differ), and Clip clamps as kiln's kernels do — opset 6 attributes, one bound,
// none (infinities clamped to the float range), min > max, NaN inputs and a NaN bound.
TEST(Pointwise, FusedRegionsMatchTheirOpsExactly) {
  auto exact = [](const Tensor& a, const Tensor& b) {  // bit for bit (signed zeros too); any NaN matches a NaN
    if (a.shape() != b.shape() || a.dtype() != DataType::kFloat32 || b.dtype() != DataType::kFloat32) return false;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const float u = a.data<float>()[i], v = b.data<float>()[i];
      if (std::isnan(u) && std::isnan(v)) continue;
      if (std::memcmp(&u, &v, sizeof(float)) != 0) return false;
    }
    return true;
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::empty(DataType::kFloat32, {12});
  const float xs[12] = {-inf, -3.f, -1.f / 3, -0.f, 0.f, 0.1f, 1.f / 3, 2.5f, 70000.f, 1e-8f, inf, nan};
  std::memcpy(x.raw(), xs, sizeof(xs));
  auto graph = [](ir::Graph& g) {
    g.opsets[""] = 17;
    ir::Value* v = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({12})));
    v->is_input = true;
    g.inputs.push_back(v);
    return v;
  };
  auto attr_f = [](float f) { ir::Attribute a; a.kind = ir::Attribute::Kind::kFloat; a.f = f; return a; };
  using Make = std::function<ir::Value*(ir::Graph&, ir::Value*)>;
  const std::vector<std::pair<std::string, Make>> cases = {
      {"x + float16(x)", [](ir::Graph& g, ir::Value* v) {
         return add(g, "Add", {cast(g, cast(g, v, DataType::kFloat16), DataType::kFloat32), v}); }},
      {"Clip opset 6 (min only)", [&](ir::Graph& g, ir::Value* v) {
         return add(g, "Neg", {add(g, "Clip", {add(g, "Neg", {v})}, 6, {{"min", attr_f(-2.f)}})}); }},
      {"Clip with min only", [](ir::Graph& g, ir::Value* v) {
         return add(g, "Neg", {add(g, "Clip", {add(g, "Abs", {v}), scalar(g, 0.25f)}, 13)}); }},
      {"Clip without bounds", [](ir::Graph& g, ir::Value* v) { return add(g, "Neg", {add(g, "Clip", {add(g, "Abs", {v})}, 13)}); }},
      {"Clip min > max", [](ir::Graph& g, ir::Value* v) {
         return add(g, "Neg", {add(g, "Clip", {add(g, "Neg", {v}), scalar(g, 1.f), scalar(g, -1.f)}, 13)}); }},
      {"Clip with a NaN bound", [&](ir::Graph& g, ir::Value* v) {
         return add(g, "Neg", {add(g, "Clip", {add(g, "Abs", {v}), scalar(g, nan), scalar(g, 2.f)}, 13)}); }},
  };
  for (const auto& [what, make] : cases) {
    ir::Graph g;
    ir::Value* y = make(g, graph(g));
    y->is_output = true;
    g.outputs.push_back(y);
    auto fused = g.clone();
    auto n = passes::fuse_pointwise(*fused, [](const ir::Node&) { return true; });
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, 1) << what << "\n" << fused->to_string();
    const std::map<std::string, Tensor> feeds = {{"x", x}};
    const Tensor want = test::run_graph_on_cpu(g, feeds).begin()->second;
    const Tensor got = test::run_graph_on_cpu(*fused, feeds).begin()->second;
    EXPECT_TRUE(exact(got, want)) << what;
    if (what == "x + float16(x)") {  // the rounding matters here, and the program has it
      Tensor twice = Tensor::empty(DataType::kFloat32, {12});
      for (int i = 0; i < 12; ++i) twice.data<float>()[i] = xs[i] + xs[i];
      EXPECT_FALSE(exact(want, twice));
      auto p = ops::parse_pointwise(*fused->outputs[0]->producer);
      ASSERT_TRUE(p.ok());
      EXPECT_EQ(p->code[0].op, ops::PwOp::kRoundHalf);
    }
  }
}

TEST(Pointwise, MalformedProgramsAreRefusedByName) {
  ir::Graph g;
  ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({3})));
  ir::Node* n = g.add_node("Pointwise", "kiln", {x}, {g.new_value("y")}, "pw");
  n->opset = 1;
  auto set = [n](std::vector<int64_t> code, std::vector<float> consts = {}, int64_t dt = 1) {
    n->attrs.clear();
    n->attrs["code"].kind = ir::Attribute::Kind::kInts;
    n->attrs["code"].ints = std::move(code);
    n->attrs["constants"].kind = ir::Attribute::Kind::kFloats;
    n->attrs["constants"].floats = std::move(consts);
    n->attrs["dtype"].kind = ir::Attribute::Kind::kInt;
    n->attrs["dtype"].i = dt;
  };
  auto why = [n]() { auto p = ops::parse_pointwise(*n); return p.ok() ? std::string() : p.status().message(); };
  set({static_cast<int64_t>(ops::PwOp::kExp), 0, 0});
  EXPECT_EQ(why(), "");
  set({static_cast<int64_t>(ops::PwOp::kExp), 1, 0});
  EXPECT_NE(why().find("no earlier register"), std::string::npos) << why();
  set({static_cast<int64_t>(ops::PwOp::kAdd), 0, 5});
  EXPECT_NE(why().find("second operand"), std::string::npos) << why();
  set({999, 0, 0});
  EXPECT_NE(why().find("unknown op"), std::string::npos) << why();
  set({static_cast<int64_t>(ops::PwOp::kConst), 3, 0}, {1.f});
  EXPECT_NE(why().find("no such constant"), std::string::npos) << why();
  set({static_cast<int64_t>(ops::PwOp::kExp), 0});
  EXPECT_NE(why().find("three ints"), std::string::npos) << why();
  set({static_cast<int64_t>(ops::PwOp::kExp), 0, 0}, {}, static_cast<int64_t>(DataType::kInt64));
  EXPECT_NE(why().find("dtype"), std::string::npos) << why();
  set({static_cast<int64_t>(ops::PwOp::kConst), 0, 0}, {1.f});
  EXPECT_NE(why().find("computed"), std::string::npos) << why();
  set({static_cast<int64_t>(ops::PwOp::kExp), 0, 0});
  EXPECT_TRUE(ops::infer_node(*n).ok());
}

// The generated CUDA kernels against the CPU interpreter, node by node of the fused graphs (half
// inputs and outputs read and written by the kernels themselves).
TEST(CudaPointwise, GeneratedKernelsMatchTheInterpreter) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(77);
  int ran = 0;
  for (int t = 0; t < 120; ++t) {
    const DataType io = t % 3 == 0 ? DataType::kFloat32 : t % 3 == 1 ? DataType::kFloat16 : DataType::kBFloat16;
    RandomGraph r = random_graph(rng, io);
    auto n = passes::fuse_pointwise(*r.g, [](const ir::Node&) { return true; });
    ASSERT_TRUE(n.ok());
    std::map<const ir::Value*, Tensor> env;
    for (const ir::Value* v : r.g->inputs) env[v] = r.feeds.at(v->name);
    for (const ir::Node* node : r.g->nodes()) {
      std::vector<Slot> ins;
      std::vector<Tensor> tensors;
      for (const ir::Value* v : node->inputs) {
        tensors.push_back(v->is_constant() ? *v->constant : env.at(v));
        ins.push_back(Slot::of(tensors.back()));
      }
      auto cpu = run_node_eager(*node, ins);
      ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
      env[node->outputs[0]] = (*cpu)[0].tensor;
      if (node->op_type != "Pointwise") continue;
      auto gpu = cudatest::run_cuda(*node, tensors);
      ASSERT_TRUE(gpu.ok()) << node->describe() << ": " << gpu.status().to_string();
      const Tensor& want = (*cpu)[0].tensor;
      EXPECT_EQ((*gpu)[0].dtype(), want.dtype());
      const int64_t bad = mismatches((*gpu)[0], want, r.rounds ? 5e-3f : 1e-4f);
      EXPECT_LE(bad, want.numel() / 50) << "graph " << t << ", node " << node->describe() << "\n" << r.g->to_string();
      ++ran;
    }
  }
  EXPECT_GT(ran, 80);
}

}  // namespace
