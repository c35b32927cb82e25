// Tests for the sequence and optional operators (single nodes run eagerly, SequenceMap through a
// lowered graph), compared with hand-computed results.
#include <numeric>

#include "test_control_util.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

// A single node with `n_in` inputs (nullptr where `absent[i]`) and `n_out` outputs.
struct One {
  G m;
  ir::Node* n;
  One(const std::string& op, int n_in, int n_out = 1, std::vector<bool> absent = {}) {
    std::vector<ir::Value*> in, out;
    for (int i = 0; i < n_in; ++i)
      in.push_back(i < static_cast<int>(absent.size()) && absent[i] ? nullptr : m.input("i" + std::to_string(i)));
    for (int i = 0; i < n_out; ++i) out.push_back(m.value("o" + std::to_string(i)));
    n = m.node(op, in, out);
  }
  Expected<std::vector<Slot>> run(std::vector<Slot> in) { return run_one(*n, std::move(in)); }
};

Slot seq_of(std::vector<Tensor> ts, DataType dt = DataType::kFloat32) { return Slot::of_sequence(std::move(ts), dt); }
Slot sc(Tensor t) { return Slot::of(std::move(t)); }

std::vector<float> seq_firsts(const Slot& s) {
  std::vector<float> r;
  for (const Tensor& t : s.sequence) r.push_back(t.data<float>()[0]);
  return r;
}

Slot abc() { return seq_of({f32({1}, {1}), f32({1}, {2}), f32({1}, {3})}); }

TEST(SequenceConstruct, CopiesInputsAndKeepsDtype) {
  One o("SequenceConstruct", 2);
  const Tensor a = i64({2}, {1, 2}), b = i64({1}, {3});
  auto r = o.run({sc(a), sc(b)});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Slot& s = (*r)[0];
  ASSERT_EQ(s.kind, Slot::Kind::kSequence);
  EXPECT_EQ(s.seq_dtype, DataType::kInt64);
  ASSERT_EQ(s.sequence.size(), 2u);
  EXPECT_EQ(values<int64_t>(s.sequence[0]), (std::vector<int64_t>{1, 2}));
  EXPECT_NE(s.sequence[0].raw(), a.raw());
  EXPECT_FALSE(o.run({sc(a), sc(f32({1}, {1}))}).ok());  // mixed dtypes
}

TEST(SequenceEmpty, DtypeFromAttributeDefaultsToFloat) {
  One o("SequenceEmpty", 0);
  auto r = o.run({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].seq_dtype, DataType::kFloat32);
  EXPECT_TRUE((*r)[0].sequence.empty());
  o.n->attrs["dtype"] = int_attr(static_cast<int>(DataType::kInt32));
  r = o.run({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].seq_dtype, DataType::kInt32);
  ASSERT_TRUE(ops::infer_node(*o.n).ok());
  EXPECT_EQ(o.n->outputs[0]->type.kind, ir::Type::Kind::kSequence);
  EXPECT_EQ(o.n->outputs[0]->type.elem->dtype, DataType::kInt32);
}

TEST(SequenceAt, PositiveNegativeAndOutOfRange) {
  One o("SequenceAt", 2);
  for (auto [pos, want] : {std::pair{0, 1.f}, {2, 3.f}, {-1, 3.f}, {-3, 1.f}}) {
    auto r = o.run({abc(), sc(i64s(pos))});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{want})) << pos;
  }
  auto r32 = o.run({abc(), sc(make<int32_t>(DataType::kInt32, {}, {1}))});
  ASSERT_TRUE(r32.ok());
  EXPECT_EQ(values<float>((*r32)[0].tensor), (std::vector<float>{2}));
  EXPECT_FALSE(o.run({abc(), sc(i64s(3))}).ok());
  EXPECT_FALSE(o.run({abc(), sc(i64s(-4))}).ok());
  EXPECT_FALSE(o.run({seq_of({}), sc(i64s(0))}).ok());
}

TEST(SequenceInsert, DefaultAppendsAndPositionsMayBeNegative) {
  One app("SequenceInsert", 2);
  auto r = app.run({abc(), sc(f32({1}, {9}))});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(seq_firsts((*r)[0]), (std::vector<float>{1, 2, 3, 9}));
  One at("SequenceInsert", 3);
  struct Case { int64_t pos; std::vector<float> want; };
  for (const Case& c : {Case{0, {9, 1, 2, 3}}, Case{3, {1, 2, 3, 9}}, Case{-1, {1, 2, 9, 3}}, Case{-3, {9, 1, 2, 3}},
                        Case{1, {1, 9, 2, 3}}}) {
    r = at.run({abc(), sc(f32({1}, {9})), sc(i64s(c.pos))});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(seq_firsts((*r)[0]), c.want) << c.pos;
  }
  EXPECT_FALSE(at.run({abc(), sc(f32({1}, {9})), sc(i64s(4))}).ok());
  EXPECT_FALSE(at.run({abc(), sc(f32({1}, {9})), sc(i64s(-4))}).ok());
  EXPECT_FALSE(app.run({abc(), sc(i64({1}, {9}))}).ok());  // dtype differs from the sequence's
  // Into an empty sequence; the input sequence is left unchanged.
  Slot empty = seq_of({});
  r = app.run({empty, sc(f32({2}, {4, 5}))});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ((*r)[0].sequence.size(), 1u);
  EXPECT_EQ(values<float>((*r)[0].sequence[0]), (std::vector<float>{4, 5}));
  EXPECT_TRUE(empty.sequence.empty());
}

TEST(SequenceErase, DefaultErasesLastAndPositionsMayBeNegative) {
  One last("SequenceErase", 1);
  auto r = last.run({abc()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(seq_firsts((*r)[0]), (std::vector<float>{1, 2}));
  EXPECT_FALSE(last.run({seq_of({})}).ok());
  One at("SequenceErase", 2);
  for (auto [pos, want] : {std::pair{0, std::vector<float>{2, 3}}, {-3, {2, 3}}, {-2, {1, 3}}, {2, {1, 2}}}) {
    r = at.run({abc(), sc(i64s(pos))});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(seq_firsts((*r)[0]), want) << pos;
  }
  EXPECT_FALSE(at.run({abc(), sc(i64s(3))}).ok());
  EXPECT_FALSE(at.run({abc(), sc(i64s(-4))}).ok());
}

TEST(SequenceLength, CountsElementsAsInt64Scalar) {
  One o("SequenceLength", 1);
  for (auto [s, n] : {std::pair{abc(), 3}, {seq_of({}), 0}}) {
    auto r = o.run({s});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)[0].tensor.dtype(), DataType::kInt64);
    EXPECT_EQ((*r)[0].tensor.rank(), 0);
    EXPECT_EQ(*(*r)[0].tensor.data<int64_t>(), n);
  }
  ASSERT_TRUE(ops::infer_node(*o.n).ok());
  EXPECT_EQ(o.n->outputs[0]->type.dtype, DataType::kInt64);
  EXPECT_EQ(o.n->outputs[0]->type.shape.rank(), 0);
}

// Reference split of x [2, 5] (values 0..9) along `axis` into pieces of `sizes`.
std::vector<std::vector<float>> ref_split(int axis, const std::vector<int64_t>& sizes) {
  std::vector<std::vector<float>> out;
  int64_t start = 0;
  for (int64_t sz : sizes) {
    std::vector<float> p;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 5; ++j) {
        const int k = axis == 0 ? i : j;
        if (k >= start && k < start + sz) p.push_back(static_cast<float>(i * 5 + j));
      }
    out.push_back(p);
    start += sz;
  }
  return out;
}

Tensor x25() {
  std::vector<float> v(10);
  std::iota(v.begin(), v.end(), 0.f);
  return f32({2, 5}, v);
}

TEST(SequenceSplit, WithoutSplitKeepdimsOrNot) {
  for (int keep : {1, 0}) {
    One o("SplitToSequence", 1);
    o.n->attrs["axis"] = int_attr(-1);
    o.n->attrs["keepdims"] = int_attr(keep);
    auto r = o.run({sc(x25())});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const auto want = ref_split(1, {1, 1, 1, 1, 1});
    ASSERT_EQ((*r)[0].sequence.size(), 5u);
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(values<float>((*r)[0].sequence[k]), want[k]);
      EXPECT_EQ((*r)[0].sequence[k].shape(), keep ? Shape({2, 1}) : Shape({2}));
    }
  }
}

TEST(SequenceSplit, ScalarSplitLeavesAShorterLastPiece) {
  One o("SplitToSequence", 2);
  o.n->attrs["axis"] = int_attr(1);
  o.n->attrs["keepdims"] = int_attr(0);  // ignored when split is given
  auto r = o.run({sc(x25()), sc(i64s(2))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto want = ref_split(1, {2, 2, 1});
  ASSERT_EQ((*r)[0].sequence.size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(values<float>((*r)[0].sequence[k]), want[k]);
  EXPECT_EQ((*r)[0].sequence[2].shape(), (Shape{2, 1}));
  EXPECT_FALSE(o.run({sc(x25()), sc(i64s(0))}).ok());
}

TEST(SequenceSplit, OneDimensionalSplitWithZeroSizedPieces) {
  One o("SplitToSequence", 2);
  auto r = o.run({sc(x25()), sc(i64({3}, {0, 2, 0}))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ((*r)[0].sequence.size(), 3u);
  EXPECT_EQ((*r)[0].sequence[0].shape(), (Shape{0, 5}));
  EXPECT_EQ(values<float>((*r)[0].sequence[1]), ref_split(0, {2})[0]);
  One o1("SplitToSequence", 2);
  o1.n->attrs["axis"] = int_attr(1);
  r = o1.run({sc(x25()), sc(make<int32_t>(DataType::kInt32, {2}, {3, 2}))});
  ASSERT_TRUE(r.ok());
  const auto want = ref_split(1, {3, 2});
  EXPECT_EQ(values<float>((*r)[0].sequence[0]), want[0]);
  EXPECT_EQ(values<float>((*r)[0].sequence[1]), want[1]);
  EXPECT_FALSE(o1.run({sc(x25()), sc(i64({2}, {3, 3}))}).ok());  // sum differs from the axis
}

TEST(SequenceConcat, ConcatAlongAnAxis) {
  One o("ConcatFromSequence", 1);
  o.n->attrs["axis"] = int_attr(-1);
  auto r = o.run({seq_of({f32({2, 1}, {1, 2}), f32({2, 2}, {3, 4, 5, 6})})});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].tensor.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{1, 3, 4, 2, 5, 6}));
  EXPECT_FALSE(o.run({seq_of({f32({2, 1}, {1, 2}), f32({3, 1}, {3, 4, 5})})}).ok());
  EXPECT_FALSE(o.run({seq_of({})}).ok());
}

TEST(SequenceConcat, NewAxisStacks) {
  One o("ConcatFromSequence", 1);
  o.n->attrs["axis"] = int_attr(-1);  // with new_axis, -1 means after the last dim
  o.n->attrs["new_axis"] = int_attr(1);
  auto r = o.run({seq_of({f32({2}, {1, 2}), f32({2}, {3, 4}), f32({2}, {5, 6})})});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].tensor.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{1, 3, 5, 2, 4, 6}));
  o.n->attrs["axis"] = int_attr(0);
  r = o.run({seq_of({f32({2}, {1, 2}), f32({2}, {3, 4})})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].tensor.shape(), (Shape{2, 2}));
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{1, 2, 3, 4}));
  o.n->attrs["axis"] = int_attr(2);
  EXPECT_FALSE(o.run({seq_of({f32({2}, {1, 2})})}).ok());
}

TEST(SequenceConcat, StringsRoundTripThroughSplit) {
  Tensor s = Tensor::empty(DataType::kString, {4});
  for (int i = 0; i < 4; ++i) s.data<std::string>()[i] = std::string(i + 1, 'a' + i);
  One split("SplitToSequence", 1);
  auto parts = split.run({sc(s)});
  ASSERT_TRUE(parts.ok());
  One cat("ConcatFromSequence", 1);
  cat.n->attrs["axis"] = int_attr(0);
  auto r = cat.run({(*parts)[0]});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ((*r)[0].tensor.numel(), 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ((*r)[0].tensor.data<std::string>()[i], s.data<std::string>()[i]);
}

// SequenceMap through a lowered graph: body(elem, extra) = elem + extra, and a second output elem * elem.
G seqmap_graph(int n_extra_seq) {
  G m(17);
  auto* seq = m.input("seq");
  auto* extra = m.input("extra");
  G b(17, m.g.get());
  auto* e = b.input("e", tensor_type(DataType::kFloat32, {}));
  auto* x = b.input("x", tensor_type(DataType::kFloat32, {}));
  b.output(b.add(e, x, "sum", tensor_type(DataType::kFloat32, {})));
  b.output(b.op("Mul", {e, e}, "sq", "test", tensor_type(DataType::kFloat32, {})));
  std::vector<ir::Value*> outs = {m.value("sums"), m.value("squares")};
  m.node("SequenceMap", {seq, extra}, outs)->attrs["body"] = graph_attr(b);
  for (auto* o : outs) m.output(o);
  (void)n_extra_seq;
  return m;
}

TEST(SequenceMap, OneSequenceAndOneTensor) {
  G m = seqmap_graph(0);
  auto r = run_graph(m, {abc(), sc(f32({1}, {10}))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(seq_firsts((*r)[0]), (std::vector<float>{11, 12, 13}));
  EXPECT_EQ(seq_firsts((*r)[1]), (std::vector<float>{1, 4, 9}));
  const ir::Type& t = m.g->find_value("sums")->type;
  EXPECT_EQ(t.kind, ir::Type::Kind::kSequence);
}

TEST(SequenceMap, TwoSequencesElementwiseAndLengthMismatch) {
  G m = seqmap_graph(1);
  auto r = run_graph(m, {abc(), seq_of({f32({1}, {100}), f32({1}, {200}), f32({1}, {300})})});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(seq_firsts((*r)[0]), (std::vector<float>{101, 202, 303}));
  EXPECT_FALSE(run_graph(m, {abc(), seq_of({f32({1}, {100})})}).ok());
}

TEST(SequenceMap, EmptySequenceGivesEmptySequencesTypedFromBody) {
  G m = seqmap_graph(0);
  auto r = run_graph(m, {seq_of({}), sc(f32({1}, {10}))});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ((*r)[0].kind, Slot::Kind::kSequence);
  EXPECT_TRUE((*r)[0].sequence.empty());
  EXPECT_EQ((*r)[0].seq_dtype, DataType::kFloat32);
}

// ---- Optionals

TEST(OptionalOp, WrapsItsInputOrIsEmpty) {
  One with("Optional", 1);
  const Tensor x = f32({2}, {1, 2});
  auto r = with.run({sc(x)});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ((*r)[0].kind, Slot::Kind::kTensor);
  EXPECT_EQ(values<float>((*r)[0].tensor), (std::vector<float>{1, 2}));
  EXPECT_NE((*r)[0].tensor.raw(), x.raw());
  r = with.run({abc()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].kind, Slot::Kind::kSequence);
  One none("Optional", 0);
  ir::Attribute type;
  type.kind = ir::Attribute::Kind::kTypeProto;
  type.types = {ir::Type::tensor(DataType::kInt64)};
  none.n->attrs["type"] = type;
  r = none.run({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].kind, Slot::Kind::kNone);
  ASSERT_TRUE(ops::infer_node(*none.n).ok());
  const ir::Type& t = none.n->outputs[0]->type;
  EXPECT_EQ(t.kind, ir::Type::Kind::kOptional);
  EXPECT_EQ(t.elem->dtype, DataType::kInt64);
}

TEST(OptionalHasElement, EveryKindOfInput) {
  One o("OptionalHasElement", 1);
  struct Case { Slot in; bool want; };
  for (const Case& c : {Case{Slot(), false}, Case{sc(f32({0}, {})), true}, Case{abc(), true}, Case{seq_of({}), true}}) {
    auto r = o.run({c.in});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)[0].tensor.dtype(), DataType::kBool);
    EXPECT_EQ((*r)[0].tensor.rank(), 0);
    EXPECT_EQ(*(*r)[0].tensor.data<bool>(), c.want);
  }
  One missing("OptionalHasElement", 1, 1, {true});  // opset 18: no input at all → false
  auto r = missing.run({Slot()});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*(*r)[0].tensor.data<bool>());
}

TEST(OptionalGetElement, UnwrapsTensorsAndSequencesAndFailsWhenEmpty) {
  One o("OptionalGetElement", 1);
  auto r = o.run({sc(i64({2}, {7, 8}))});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(values<int64_t>((*r)[0].tensor), (std::vector<int64_t>{7, 8}));
  r = o.run({abc()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(seq_firsts((*r)[0]), (std::vector<float>{1, 2, 3}));
  EXPECT_FALSE(o.run({Slot()}).ok());
  // Types: optional(seq(float)) → seq(float); a plain tensor type passes through.
  o.n->inputs[0]->type.kind = ir::Type::Kind::kOptional;
  o.n->inputs[0]->type.elem = std::make_shared<ir::Type>(seq_type(DataType::kFloat32));
  ASSERT_TRUE(ops::infer_node(*o.n).ok());
  EXPECT_EQ(o.n->outputs[0]->type.kind, ir::Type::Kind::kSequence);
}

}  // namespace
