// Tests for If, Loop and Scan: graphs built in C++, lowered, run through a Frame, and compared with
// hand-computed results.
#include "passes/passes.h"
#include "builder/build.h"
#include "runtime/engine_impl.h"
#include "test_control_util.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

const ir::Type kF2 = tensor_type(DataType::kFloat32, {2});
const ir::Type kF3 = tensor_type(DataType::kFloat32, {3});

// main: s = x + y (read only by the branches); out = If(c) { s + x } else { s * y }
G if_graph() {
  G m;
  auto* c = m.input("c", tensor_type(DataType::kBool, {}));
  auto* x = m.input("x", kF3);
  auto* y = m.input("y", kF3);
  m.add(x, y, "s", kF3);
  G then_b(21, m.g.get()), else_b(21, m.g.get());
  then_b.output(then_b.add(then_b.capture("s"), then_b.capture("x"), "t_out"));
  else_b.output(else_b.op("Mul", {else_b.capture("s"), else_b.capture("y")}, "e_out", "test"));
  auto* out = m.value("out");
  auto* n = m.node("If", {c}, {out});
  n->attrs["then_branch"] = graph_attr(then_b);
  n->attrs["else_branch"] = graph_attr(else_b);
  m.output(out);
  return m;
}

TEST(ControlIf, RunsTheChosenBranchWithCapturedValues) {
  for (bool plan : {true, false}) {
    G m = if_graph();
    const Tensor x = f32({3}, {1, 2, 3}), y = f32({3}, {10, 20, 30});
    auto r = run_graph(m, {Slot::of(boolean(true)), Slot::of(x), Slot::of(y)}, plan);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{12, 24, 36}));
    r = run_graph(m, {Slot::of(boolean(false)), Slot::of(x), Slot::of(y)}, plan);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{110, 440, 990}));
  }
}

// A reduced-precision build: "s", made by a node that runs in half and read only by the branches
// (by name), stays a float32 value of that name (a Cast of the half one), as the branches' nodes are
// typed; the Cast comes before the If. (SSDlite's and Faster R-CNN's float16 engines failed at run
// time: "Add: inputs have different dtypes (float16 and float32)" inside a branch.)
TEST(ControlIf, HalfPrecisionKeepsValuesReadByBranchesFloat) {
  G m = if_graph();
  ASSERT_TRUE(ops::infer_graph(*m.g).ok());
  auto half = [](const ir::Node& n) { return n.op_type == "Add" && n.outputs[0]->name == "s"; };
  auto changed = passes::convert_precision(*m.g, DataType::kFloat16, half);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_EQ(*changed, 1);
  ASSERT_TRUE(m.g->verify().ok());
  const ir::Value* s = m.g->find_value("s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->type.dtype, DataType::kFloat32);
  ASSERT_NE(s->producer, nullptr);
  EXPECT_EQ(s->producer->op_type, "Cast");
  EXPECT_EQ(s->producer->inputs[0]->type.dtype, DataType::kFloat16);
  int cast_at = -1, if_at = -1, i = 0;
  for (const ir::Node* n : m.g->nodes()) {
    if (n == s->producer) cast_at = i;
    if (n->op_type == "If") if_at = i;
    ++i;
  }
  EXPECT_GE(cast_at, 0);
  EXPECT_LT(cast_at, if_at) << "the branches read s: its Cast runs first";
}

// Graph::sort orders a value read by a node's subgraphs (by name, no use) before that node, whatever
// order the nodes were added in.
TEST(ControlIf, SortPutsProducersOfCapturedValuesFirst) {
  G m;
  auto* c = m.input("c", tensor_type(DataType::kBool, {}));
  auto* x = m.input("x", kF3);
  G then_b(21, m.g.get()), else_b(21, m.g.get());
  then_b.output(then_b.add(then_b.capture("late"), then_b.capture("x"), "t_out"));
  else_b.output(else_b.add(else_b.capture("x"), else_b.capture("x"), "e_out"));
  auto* out = m.value("out");
  auto* n = m.node("If", {c}, {out});
  n->attrs["then_branch"] = graph_attr(then_b);
  n->attrs["else_branch"] = graph_attr(else_b);
  m.add(x, x, "late", kF3);  // added after the If that reads it
  m.output(out);
  ASSERT_TRUE(m.g->sort().ok());
  EXPECT_EQ(m.g->nodes().front()->outputs[0]->name, "late");
  EXPECT_EQ(m.g->nodes().back()->op_type, "If");
}

TEST(ControlIf, OptimizationKeepsValuesReadOnlyByBranches) {
  // "s" (computed) and "k" (a constant) are read only inside the branches: dead-code elimination
  // and dead-value cleanup must keep them.
  G m = if_graph();
  G else_b(21, m.g.get());
  m.constant("k", f32({3}, {1, 1, 1}));
  else_b.output(else_b.add(else_b.capture("s"), else_b.capture("k"), "e_out"));
  m.g->nodes().back()->attrs["else_branch"] = graph_attr(else_b);
  register_test_kernels();
  passes::PassOptions po = builder_pass_options(1, nullptr);
  ASSERT_TRUE(passes::optimize(*m.g, po).ok());
  ASSERT_NE(m.g->find_value("s"), nullptr);
  ASSERT_NE(m.g->find_value("k"), nullptr);
  auto r = run_graph(m, {Slot::of(boolean(false)), Slot::of(f32({3}, {1, 2, 3})), Slot::of(f32({3}, {10, 20, 30}))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{12, 23, 34}));
}

TEST(ControlIf, InfersOutputTypeFromBranches) {
  G m = if_graph();
  auto& then_out = m.g->nodes().back()->attrs["then_branch"].g->outputs[0]->type;
  auto& else_out = m.g->nodes().back()->attrs["else_branch"].g->outputs[0]->type;
  then_out = tensor_type(DataType::kFloat32, {3});
  else_out = tensor_type(DataType::kFloat32, {4});
  ASSERT_TRUE(ops::infer_node(*m.g->nodes().back()).ok());
  const ir::Type& t = m.g->find_value("out")->type;
  EXPECT_EQ(t.dtype, DataType::kFloat32);
  ASSERT_TRUE(t.shape.known);
  ASSERT_EQ(t.shape.rank(), 1);
  EXPECT_FALSE(t.shape.dims[0].is_static());
}

TEST(ControlIf, BranchesMayGiveDifferentShapesSequencesAndOptionals) {
  G m;
  auto* c = m.input("c", tensor_type(DataType::kBool, {}));
  m.input("x", kF2);
  G then_b(21, m.g.get()), else_b(21, m.g.get());
  auto* tx = then_b.capture("x");
  then_b.output(then_b.constant("k2", f32({2}, {1, 2})));
  then_b.output(then_b.op("SequenceConstruct", {tx, tx}, "seq"));
  then_b.output(then_b.op("Optional", {tx}, "opt"));
  else_b.output(else_b.constant("k3", f32({3}, {7, 8, 9})));
  auto* empty = else_b.op("SequenceEmpty", {}, "seq_e");
  else_b.g->nodes().back()->attrs["dtype"] = int_attr(1);
  else_b.output(empty);
  auto* none = else_b.op("Optional", {}, "opt_e");
  else_b.output(none);
  std::vector<ir::Value*> outs = {m.value("o0"), m.value("o1"), m.value("o2")};
  auto* n = m.node("If", {c}, outs);
  n->attrs["then_branch"] = graph_attr(then_b);
  n->attrs["else_branch"] = graph_attr(else_b);
  for (auto* o : outs) m.output(o);

  const Tensor x = f32({2}, {5, 6});
  auto r = run_graph(m, {Slot::of(boolean(true)), Slot::of(x)});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{1, 2}));
  ASSERT_EQ((*r)[1].kind, Slot::Kind::kSequence);
  ASSERT_EQ((*r)[1].sequence.size(), 2u);
  EXPECT_EQ(values<float>((*r)[1].sequence[1]), (std::vector<float>{5, 6}));
  EXPECT_NE((*r)[1].sequence[0].raw(), x.raw());  // sequences own their tensors
  ASSERT_EQ((*r)[2].kind, Slot::Kind::kTensor);
  EXPECT_EQ(values<float>((*r)[2].tensor), (std::vector<float>{5, 6}));

  r = run_graph(m, {Slot::of(boolean(false)), Slot::of(x)});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].tensor.shape(), (Shape{3}));
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{7, 8, 9}));
  ASSERT_EQ((*r)[1].kind, Slot::Kind::kSequence);
  EXPECT_TRUE((*r)[1].sequence.empty());
  EXPECT_EQ((*r)[1].seq_dtype, DataType::kFloat32);
  EXPECT_EQ((*r)[2].kind, Slot::Kind::kNone);
}

TEST(ControlIf, ConditionMustBeOneBool) {
  G m = if_graph();
  auto r = run_graph(m, {Slot::of(make<bool>(DataType::kBool, {2}, {true, false})), Slot::of(f32({3}, {1, 2, 3})),
                         Slot::of(f32({3}, {1, 2, 3}))});
  EXPECT_FALSE(r.ok());
}

// ---- Loop

struct LoopSpec {
  bool with_m = true, with_cond = false;
  int64_t cond_limit = 1000;  // body cond: iter + 1 < cond_limit
};

// main: (M?, cond?, acc0 f32[2]) → Loop → (acc, scan_acc [n,2], scan_iter [n])
// body: acc_out = acc + x (x captured from main); cond_out = iter + 1 < limit
G loop_graph(const LoopSpec& spec) {
  G m;
  auto* M = spec.with_m ? m.input("M", tensor_type(DataType::kInt64, {})) : nullptr;
  auto* cond = spec.with_cond ? m.input("cond", tensor_type(DataType::kBool, {})) : nullptr;
  auto* acc0 = m.input("acc0", kF2);
  m.input("x", kF2);
  G b(21, m.g.get());
  auto* iter = b.input("iter", tensor_type(DataType::kInt64, {}));
  b.input("cond_in", tensor_type(DataType::kBool, {}));
  auto* acc = b.input("acc", kF2);
  auto* next = b.add(iter, b.constant("one", i64s(1)), "next");
  auto* cond_out = b.op("Less", {next, b.constant("limit", i64s(spec.cond_limit))}, "cond_out", "test");
  auto* acc_out = b.add(acc, b.capture("x"), "acc_out", kF2);
  auto* iter_f = b.add(iter, b.constant("zero", i64s(0)), "iter_copy", tensor_type(DataType::kInt64, {}));
  b.output(cond_out);
  b.output(acc_out);
  b.output(acc_out);
  b.output(iter_f);
  std::vector<ir::Value*> outs = {m.value("acc"), m.value("scan_acc"), m.value("scan_iter")};
  auto* n = m.node("Loop", {M, cond, acc0}, outs);
  n->attrs["body"] = graph_attr(b);
  for (auto* o : outs) m.output(o);
  return m;
}

struct LoopResult {
  std::vector<float> acc, scan_acc;
  std::vector<int64_t> scan_iter;
  Shape scan_acc_shape;
};

LoopResult run_loop(const LoopSpec& spec, int64_t M, bool cond) {
  G m = loop_graph(spec);
  std::vector<Slot> in;
  if (spec.with_m) in.push_back(Slot::of(i64s(M)));
  if (spec.with_cond) in.push_back(Slot::of(boolean(cond)));
  in.push_back(Slot::of(f32({2}, {1, 2})));
  in.push_back(Slot::of(f32({2}, {10, 100})));
  auto r = run_graph(m, in);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  return {values<float>((*r)[0].tensor), values<float>((*r)[1].tensor), values<int64_t>((*r)[2].tensor),
          (*r)[1].tensor.shape()};
}

// Reference: the same loop written out.
LoopResult reference_loop(const LoopSpec& spec, int64_t M, bool cond) {
  LoopResult r;
  r.acc = {1, 2};
  int64_t trip = spec.with_m ? M : INT64_MAX;
  bool c = spec.with_cond ? cond : true;
  int64_t n = 0;
  for (int64_t it = 0; it < trip && c; ++it, ++n) {
    r.acc[0] += 10, r.acc[1] += 100;
    r.scan_acc.insert(r.scan_acc.end(), r.acc.begin(), r.acc.end());
    r.scan_iter.push_back(it);
    if (spec.with_cond) c = it + 1 < spec.cond_limit;
  }
  r.scan_acc_shape = {n, 2};
  return r;
}

void expect_loop(const LoopSpec& spec, int64_t M, bool cond, int64_t expected_iters) {
  LoopResult got = run_loop(spec, M, cond), want = reference_loop(spec, M, cond);
  EXPECT_EQ(static_cast<int64_t>(want.scan_iter.size()), expected_iters);
  EXPECT_EQ(got.acc, want.acc);
  EXPECT_EQ(got.scan_acc, want.scan_acc);
  EXPECT_EQ(got.scan_iter, want.scan_iter);
  EXPECT_EQ(got.scan_acc_shape, want.scan_acc_shape);
}

TEST(ControlLoop, TripCountOnlyIgnoresBodyCond) {
  expect_loop({.with_m = true, .with_cond = false, .cond_limit = 2}, 4, true, 4);
}

TEST(ControlLoop, CondOnly) {
  expect_loop({.with_m = false, .with_cond = true, .cond_limit = 3}, 0, true, 3);
}

TEST(ControlLoop, TripCountAndCond) {
  expect_loop({.with_m = true, .with_cond = true, .cond_limit = 3}, 2, true, 2);   // M ends it
  expect_loop({.with_m = true, .with_cond = true, .cond_limit = 3}, 10, true, 3);  // cond ends it
}

TEST(ControlLoop, ZeroIterationsGiveEmptyScanOutputsTypedFromBody) {
  for (auto [spec, M, cond] : {std::tuple{LoopSpec{true, false}, int64_t{0}, true},
                               std::tuple{LoopSpec{true, true}, int64_t{5}, false},
                               std::tuple{LoopSpec{false, true}, int64_t{0}, false}}) {
    G m = loop_graph(spec);
    std::vector<Slot> in;
    if (spec.with_m) in.push_back(Slot::of(i64s(M)));
    if (spec.with_cond) in.push_back(Slot::of(boolean(cond)));
    in.push_back(Slot::of(f32({2}, {1, 2})));
    in.push_back(Slot::of(f32({2}, {10, 100})));
    auto r = run_graph(m, in);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{1, 2}));
    EXPECT_EQ((*r)[1].tensor.dtype(), DataType::kFloat32);
    EXPECT_EQ((*r)[1].tensor.shape(), (Shape{0, 2}));
    EXPECT_EQ((*r)[2].tensor.dtype(), DataType::kInt64);
    EXPECT_EQ((*r)[2].tensor.shape(), (Shape{0}));
    // Inferred types: carried from the body, scan outputs with a new leading dim.
    const ir::Type& st = m.g->find_value("scan_acc")->type;
    EXPECT_EQ(st.dtype, DataType::kFloat32);
    ASSERT_EQ(st.shape.rank(), 2);
    EXPECT_FALSE(st.shape.dims[0].is_static());
    EXPECT_EQ(st.shape.dims[1].value, 2);
    EXPECT_EQ(m.g->find_value("acc")->type.shape.to_string(), "[2]");
  }
}

TEST(ControlLoop, WithoutTripCountOrCondIsAnError) {
  G m = loop_graph({false, false});
  auto r = run_graph(m, {Slot::of(f32({2}, {1, 2})), Slot::of(f32({2}, {1, 2}))});
  EXPECT_FALSE(r.ok());
}

TEST(ControlLoop, ScanOutputsWithChangingShapesAreAnError) {
  G m;
  auto* M = m.input("M", tensor_type(DataType::kInt64, {}));
  G b(21, m.g.get());
  auto* iter = b.input("iter");
  auto* cin = b.input("cond_in");
  b.output(cin);
  b.output(b.op("Iota", {iter}, "iota", "test"));
  auto* out = m.value("scan");
  m.node("Loop", {M, nullptr}, {out})->attrs["body"] = graph_attr(b);
  m.output(out);
  auto r = run_graph(m, {Slot::of(i64s(3))});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("same shape"), std::string::npos) << r.status().message();
  // One iteration is fine.
  r = run_graph(m, {Slot::of(i64s(1))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].tensor.shape(), (Shape{1, 0}));
}

TEST(ControlLoop, CarriesSequences) {
  // seq = SequenceEmpty(int64); Loop M=3: seq = SequenceInsert(seq, iter) → [0, 1, 2]
  G m;
  auto* M = m.input("M", tensor_type(DataType::kInt64, {}));
  auto* seq0 = m.op("SequenceEmpty", {}, "seq0");
  m.g->nodes().back()->attrs["dtype"] = int_attr(static_cast<int>(DataType::kInt64));
  G b(21, m.g.get());
  auto* iter = b.input("iter");
  auto* cin = b.input("cond_in");
  auto* s = b.input("s");
  b.output(cin);
  b.output(b.op("SequenceInsert", {s, iter}, "s_out"));
  auto* out = m.value("seq");
  m.node("Loop", {M, nullptr, seq0}, {out})->attrs["body"] = graph_attr(b);
  m.output(out);
  auto r = run_graph(m, {Slot::of(i64s(3))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ((*r)[0].kind, Slot::Kind::kSequence);
  ASSERT_EQ((*r)[0].sequence.size(), 3u);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(*(*r)[0].sequence[i].data<int64_t>(), i);
  EXPECT_EQ((*r)[0].seq_dtype, DataType::kInt64);
}

TEST(ControlLoop, CarriesAnOptionalThatStartsEmpty) {
  // opt0 = Optional() (empty); body: has = OptionalHasElement(opt); opt_out = Optional(SequenceConstruct(iter))
  G m;
  auto* M = m.input("M", tensor_type(DataType::kInt64, {}));
  auto* opt0 = m.op("Optional", {}, "opt0");
  G b(21, m.g.get());
  auto* iter = b.input("iter");
  auto* cin = b.input("cond_in");
  auto* opt = b.input("opt");
  b.output(cin);
  b.output(b.op("Optional", {b.op("SequenceConstruct", {iter}, "seq")}, "opt_out"));
  b.output(b.op("OptionalHasElement", {opt}, "has", "", tensor_type(DataType::kBool, {})));
  std::vector<ir::Value*> outs = {m.value("opt"), m.value("has")};
  m.node("Loop", {M, nullptr, opt0}, outs)->attrs["body"] = graph_attr(b);
  for (auto* o : outs) m.output(o);
  auto r = run_graph(m, {Slot::of(i64s(3))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ((*r)[0].kind, Slot::Kind::kSequence);
  ASSERT_EQ((*r)[0].sequence.size(), 1u);
  EXPECT_EQ(*(*r)[0].sequence[0].data<int64_t>(), 2);
  EXPECT_EQ(values<bool>((*r)[1].tensor), (std::vector<bool>{false, true, true}));
  // Zero iterations: the empty optional comes back empty.
  r = run_graph(m, {Slot::of(i64s(0))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].kind, Slot::Kind::kNone);
  EXPECT_EQ((*r)[1].tensor.shape(), (Shape{0}));
  EXPECT_EQ((*r)[1].tensor.dtype(), DataType::kBool);
}

TEST(ControlLoop, NestedInIfReadsValuesTwoLevelsUp) {
  // main: w = x + x (read only from the loop body, two levels down); tail = x + x (reuses memory).
  // If(c) { Loop M=3 { acc += w } } else { acc0 }
  for (bool middle_lists_capture : {false, true}) {
    G m;
    auto* c = m.input("c", tensor_type(DataType::kBool, {}));
    auto* x = m.input("x", kF2);
    auto* acc0 = m.input("acc0", kF2);
    m.add(x, x, "w", kF2);
    G then_b(21, m.g.get());
    auto* trip = then_b.constant("trip", i64s(3));
    auto* acc0_in = then_b.capture("acc0");
    if (middle_lists_capture) then_b.capture("w");
    G body(21, then_b.g.get());
    body.input("iter");
    auto* cin = body.input("cond_in");
    auto* acc = body.input("acc", kF2);
    body.output(cin);
    body.output(body.add(acc, body.capture("w"), "acc_out", kF2));
    auto* loop_out = then_b.value("loop_out", kF2);
    then_b.node("Loop", {trip, nullptr, acc0_in}, {loop_out})->attrs["body"] = graph_attr(body);
    then_b.output(loop_out);
    G else_b(21, m.g.get());
    else_b.output(else_b.capture("acc0"));
    auto* out = m.value("out", kF2);
    auto* n = m.node("If", {c}, {out});
    n->attrs["then_branch"] = graph_attr(then_b);
    n->attrs["else_branch"] = graph_attr(else_b);
    m.output(out);
    m.output(m.add(x, x, "tail", kF2));
    auto r = run_graph(m, {Slot::of(boolean(true)), Slot::of(f32({2}, {1, 2})), Slot::of(f32({2}, {100, 200}))});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{106, 212}));
    r = run_graph(m, {Slot::of(boolean(false)), Slot::of(f32({2}, {1, 2})), Slot::of(f32({2}, {100, 200}))});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{100, 200}));
  }
}

TEST(ControlLoop, LoweringKeepsNestedCapturesAlive) {
  // The value read only two levels down must be an implicit input of the If step.
  G m;
  auto* c = m.input("c", tensor_type(DataType::kBool, {}));
  auto* x = m.input("x", kF2);
  m.add(x, x, "w", kF2);
  G then_b(21, m.g.get()), else_b(21, m.g.get());
  G body(21, then_b.g.get());
  body.input("iter");
  auto* cin = body.input("cond_in");
  body.output(cin);
  auto* wc = body.capture("w");
  body.output(body.add(wc, wc, "o"));
  auto* lo = then_b.value("lo");
  then_b.node("Loop", {then_b.constant("trip", i64s(1)), nullptr}, {lo})->attrs["body"] = graph_attr(body);
  then_b.output(lo);
  else_b.output(else_b.constant("k", f32({1, 2}, {0, 0})));
  auto* out = m.value("out");
  auto* n = m.node("If", {c}, {out});
  n->attrs["then_branch"] = graph_attr(then_b);
  n->attrs["else_branch"] = graph_attr(else_b);
  m.output(out);
  register_test_kernels();
  auto cg = lower(m.g, LowerOptions{});
  ASSERT_TRUE(cg.ok()) << cg.status().to_string();
  const Step& if_step = (*cg)->steps.back();
  ASSERT_EQ(if_step.implicit_in.size(), 1u);
  EXPECT_EQ((*cg)->values[if_step.implicit_in[0]].name, "w");
}

TEST(ControlLoop, LoweringIgnoresNamesANestedBodyGetsFromTheMiddleGraph) {
  // The then-branch defines its own "w"; the loop body's capture of "w" refers to that one.
  G m;
  auto* c = m.input("c", tensor_type(DataType::kBool, {}));
  auto* x = m.input("x", kF2);
  m.add(x, x, "w", kF2);
  G then_b(21, m.g.get()), else_b(21, m.g.get());
  auto* xc = then_b.capture("x");
  then_b.add(xc, xc, "w");
  G body(21, then_b.g.get());
  body.input("iter");
  auto* cin = body.input("cond_in");
  body.output(cin);
  auto* wc = body.capture("w");
  body.output(body.add(wc, wc, "o"));
  auto* lo = then_b.value("lo");
  then_b.node("Loop", {then_b.constant("trip", i64s(1)), nullptr}, {lo})->attrs["body"] = graph_attr(body);
  then_b.output(lo);
  else_b.output(else_b.constant("k", f32({1, 2}, {0, 0})));
  auto* out = m.value("out");
  auto* n = m.node("If", {c}, {out});
  n->attrs["then_branch"] = graph_attr(then_b);
  n->attrs["else_branch"] = graph_attr(else_b);
  m.output(out);
  register_test_kernels();
  auto cg = lower(m.g, LowerOptions{});
  ASSERT_TRUE(cg.ok()) << cg.status().to_string();
  const Step& if_step = (*cg)->steps.back();
  ASSERT_EQ(if_step.implicit_in.size(), 1u);
  EXPECT_EQ((*cg)->values[if_step.implicit_in[0]].name, "x");
  auto r = run_graph(m, {Slot::of(boolean(true)), Slot::of(f32({2}, {1, 2}))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{4, 8}));
  EXPECT_EQ((*r)[0].tensor.shape(), (Shape{1, 2}));
}

// ---- Scan (opset 9+)

// state sum (f32[2]) and scan input x; body: sum_out = sum + x_t; scan out = sum_out
G scan9_graph(std::vector<int64_t> in_axes, std::vector<int64_t> in_dirs, std::vector<int64_t> out_axes,
              std::vector<int64_t> out_dirs) {
  G m(11);
  auto* s0 = m.input("s0", kF2);
  auto* x = m.input("x");
  G b(11, m.g.get());
  auto* s = b.input("s", kF2);
  auto* xt = b.input("xt", kF2);
  auto* so = b.add(s, xt, "s_out", kF2);
  b.output(so);
  b.output(b.add(so, b.constant("zero", f32({1}, {0})), "y", kF2));
  std::vector<ir::Value*> outs = {m.value("s"), m.value("ys")};
  auto* n = m.node("Scan", {s0, x}, outs);
  n->attrs["body"] = graph_attr(b);
  n->attrs["num_scan_inputs"] = int_attr(1);
  if (!in_axes.empty()) n->attrs["scan_input_axes"] = ints_attr(in_axes);
  if (!in_dirs.empty()) n->attrs["scan_input_directions"] = ints_attr(in_dirs);
  if (!out_axes.empty()) n->attrs["scan_output_axes"] = ints_attr(out_axes);
  if (!out_dirs.empty()) n->attrs["scan_output_directions"] = ints_attr(out_dirs);
  for (auto* o : outs) m.output(o);
  return m;
}

TEST(ControlScan, ForwardCumulativeSum) {
  G m = scan9_graph({}, {}, {}, {});
  auto r = run_graph(m, {Slot::of(f32({2}, {0, 0})), Slot::of(f32({3, 2}, {1, 2, 3, 4, 5, 6}))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{9, 12}));
  EXPECT_EQ((*r)[1].tensor.shape(), (Shape{3, 2}));
  EXPECT_EQ(values<float>((*r)[1].tensor), (std::vector<float>{1, 2, 4, 6, 9, 12}));
}

TEST(ControlScan, ReverseDirectionsAndAxes) {
  // x is [2, T=3] scanned along axis 1 (x_t = x[:, t]), reversed; outputs stacked on axis 1 (-1), reversed.
  const std::vector<float> xv = {1, 2, 3, 10, 20, 30};
  G m = scan9_graph({1}, {1}, {-1}, {1});
  auto r = run_graph(m, {Slot::of(f32({2}, {0, 0})), Slot::of(f32({2, 3}, xv))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // Reference: iteration t reads column T-1-t; its output goes to column T-1-t.
  std::vector<float> sum = {0, 0}, ys(6);
  for (int t = 0; t < 3; ++t) {
    const int col = 2 - t;
    sum[0] += xv[0 * 3 + col], sum[1] += xv[1 * 3 + col];
    ys[0 * 3 + col] = sum[0], ys[1 * 3 + col] = sum[1];
  }
  EXPECT_EQ(values<float>((*r)[0].tensor), sum);
  EXPECT_EQ((*r)[1].tensor.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>((*r)[1].tensor), ys);
}

TEST(ControlScan, EmptySequenceAndMismatchedLengths) {
  G m = scan9_graph({}, {}, {}, {});
  auto r = run_graph(m, {Slot::of(f32({2}, {5, 6})), Slot::of(f32({0, 2}, {}))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{5, 6}));
  EXPECT_EQ((*r)[1].tensor.shape(), (Shape{0, 2}));
  r = run_graph(m, {Slot::of(f32({2}, {5, 6})), Slot::of(f32({3, 2}, {1, 2, 3, 4, 5, 6}))});
  ASSERT_TRUE(r.ok());
  G bad = scan9_graph({2}, {}, {}, {});
  EXPECT_FALSE(run_graph(bad, {Slot::of(f32({2}, {0, 0})), Slot::of(f32({3, 2}, {1, 2, 3, 4, 5, 6}))}).ok());
}

TEST(ControlScan, AttributesPastIntAreNotNarrowed) {
  // scan_output_axes 2^32 was narrowed to int (axis 0) and num_scan_inputs 2^32 + 1 to 1: both ran as
  // if valid. They are out of range now.
  const std::vector<Slot> in = {Slot::of(f32({2}, {0, 0})), Slot::of(f32({3, 2}, {1, 2, 3, 4, 5, 6}))};
  G axis = scan9_graph({}, {}, {int64_t{1} << 32}, {});
  auto r = run_graph(axis, in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("out of range"), std::string::npos) << r.status().to_string();
  G count = scan9_graph({}, {}, {}, {});
  for (ir::Node* n : count.g->nodes())
    if (n->op_type == "Scan") n->attrs["num_scan_inputs"] = int_attr((int64_t{1} << 32) + 1);
  r = run_graph(count, in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("num_scan_inputs"), std::string::npos) << r.status().to_string();
  // In range, the same graph still runs: axis 0 given as -2 (rank 2).
  G ok = scan9_graph({}, {}, {-2}, {});
  r = run_graph(ok, in);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values<float>((*r)[1].tensor), (std::vector<float>{1, 2, 4, 6, 9, 12}));
}

// ---- Scan (opset 8: batch axis, sequence_lens)

TEST(ControlScan8, BatchWithSequenceLensAndReverse) {
  for (int64_t dir : {0, 1}) {
    G m(8);
    auto* lens = m.input("lens", tensor_type(DataType::kInt64, {2}));
    auto* s0 = m.input("s0", tensor_type(DataType::kFloat32, {2, 2}));
    auto* x = m.input("x", tensor_type(DataType::kFloat32, {2, 3, 2}));
    G b(8, m.g.get());
    auto* s = b.input("s", kF2);
    auto* xt = b.input("xt", kF2);
    auto* so = b.add(s, xt, "s_out", kF2);
    b.output(so);
    b.output(b.op("Mul", {so, b.constant("two", f32({1}, {2}))}, "y", "test", kF2));
    std::vector<ir::Value*> outs = {m.value("s"), m.value("ys")};
    auto* n = m.node("Scan", {lens, s0, x}, outs);
    n->attrs["body"] = graph_attr(b);
    n->attrs["num_scan_inputs"] = int_attr(1);
    n->attrs["directions"] = ints_attr({dir});
    for (auto* o : outs) m.output(o);
    const std::vector<float> xv = {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60};
    const std::vector<int64_t> lv = {3, 1};
    auto r = run_graph(m, {Slot::of(i64({2}, lv)), Slot::of(f32({2, 2}, {0, 0, 100, 100})), Slot::of(f32({2, 3, 2}, xv))});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    std::vector<float> state = {0, 0, 100, 100}, ys(12, 0.f);
    for (int bi = 0; bi < 2; ++bi)
      for (int t = 0; t < lv[bi]; ++t) {
        const int src = dir ? static_cast<int>(lv[bi]) - 1 - t : t;
        for (int e = 0; e < 2; ++e) {
          state[bi * 2 + e] += xv[(bi * 3 + src) * 2 + e];
          ys[(bi * 3 + t) * 2 + e] = 2 * state[bi * 2 + e];
        }
      }
    EXPECT_EQ(values<float>((*r)[0].tensor), state);
    EXPECT_EQ((*r)[1].tensor.shape(), (Shape{2, 3, 2}));
    EXPECT_EQ(values<float>((*r)[1].tensor), ys);
  }
}

}  // namespace
