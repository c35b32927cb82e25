// FlexAttention (ai.onnx.preview) against a naive reference, with and without score_mod/prob_mod
// subgraphs (run through a lowered graph, since modifiers need a subgraph runner).
#include <cmath>
#include <random>

#include "test_control_util.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

Tensor rand_tensor(DataType dt, const Shape& s, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor t = Tensor::empty(dt, s);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DataType::kFloat64) t.data<double>()[i] = u(rng);
    else t.data<float>()[i] = static_cast<float>(u(rng));
  }
  return t;
}

double at(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kFloat64 ? t.data<double>()[i] : t.data<float>()[i];
}

// Y = (prob_mul * softmax(scale * Q K^T + bias)) V with K/V heads shared by groups of Q heads.
std::vector<double> flex_ref(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor* bias,
                             double prob_mul) {
  const int64_t B = q.dim(0), Hq = q.dim(1), L = q.dim(2), E = q.dim(3), Hkv = k.dim(1), S = k.dim(2), Ev = v.dim(3);
  std::vector<double> y;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / (Hq / Hkv);
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> s(S);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          double x = 0;
          for (int64_t e = 0; e < E; ++e) x += at(q, ((b * Hq + h) * L + i) * E + e) * at(k, ((b * Hkv + hk) * S + j) * E + e);
          s[j] = x * scale + (bias ? at(*bias, ((b * Hq + h) * L + i) * S + j) : 0.0);
          mx = std::max(mx, s[j]);
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < Ev; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < S; ++j) acc += prob_mul * s[j] / sum * at(v, ((b * Hkv + hk) * S + j) * Ev + d);
          y.push_back(acc);
        }
      }
    }
  return y;
}

void expect_near_all(const Tensor& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_NEAR(at(got, i), want[i], tol) << i;
}

ir::Attribute float_attr(float f) {
  ir::Attribute a;
  a.kind = ir::Attribute::Kind::kFloat;
  a.f = f;
  return a;
}

}  // namespace

TEST(FlexAttention, EagerWithoutModifiers) {
  std::mt19937 rng(7);
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64})
    for (bool scaled : {false, true}) {
      Tensor q = rand_tensor(dt, {2, 4, 3, 5}, rng), k = rand_tensor(dt, {2, 2, 6, 5}, rng), v = rand_tensor(dt, {2, 2, 6, 7}, rng);
      ir::Graph g;
      std::vector<ir::Value*> ins{g.add_value("q", tensor_type(dt, q.shape())), g.add_value("k", tensor_type(dt, k.shape())),
                                  g.add_value("v", tensor_type(dt, v.shape()))};
      ir::Node* n = g.add_node("FlexAttention", "ai.onnx.preview", ins, {g.add_value("y")}, "flex");
      n->opset = 1;
      if (scaled) n->attrs["scale"] = float_attr(0.25f);
      auto r = run_node_eager(*n, {Slot::of(q), Slot::of(k), Slot::of(v)});
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ((*r)[0].tensor.shape(), (Shape{2, 4, 3, 7}));
      expect_near_all((*r)[0].tensor, flex_ref(q, k, v, scaled ? 0.25 : 1 / std::sqrt(5.0), nullptr, 1.0),
                      dt == DataType::kFloat64 ? 1e-12 : 1e-5);
    }
}

TEST(FlexAttention, ScoreAndProbModifiers) {
  std::mt19937 rng(11);
  const DataType dt = DataType::kFloat32;
  Tensor q = rand_tensor(dt, {1, 2, 3, 4}, rng), k = rand_tensor(dt, {1, 1, 5, 4}, rng), v = rand_tensor(dt, {1, 1, 5, 3}, rng);
  Tensor bias = rand_tensor(dt, {1, 2, 3, 5}, rng);
  G m(21);
  ir::Value* qv = m.input("q", tensor_type(dt, q.shape()));
  ir::Value* kv = m.input("k", tensor_type(dt, k.shape()));
  ir::Value* vv = m.input("v", tensor_type(dt, v.shape()));
  m.g->opsets["ai.onnx.preview"] = 1;
  G score(21, m.g.get());
  ir::Value* s_in = score.input("scores", tensor_type(dt, {1, 2, 3, 5}));
  ir::Value* s_out = score.op("Add", {s_in, score.constant("bias", bias)}, "scores_out", "", tensor_type(dt, {1, 2, 3, 5}));
  s_out->producer->opset = 14;
  score.output(s_out);
  G prob(21, m.g.get());
  ir::Value* p_in = prob.input("probs", tensor_type(dt, {1, 2, 3, 5}));
  ir::Value* p_out = prob.op("Mul", {p_in, prob.constant("two", f32({}, {2.0f}))}, "probs_out", "", tensor_type(dt, {1, 2, 3, 5}));
  p_out->producer->opset = 14;
  prob.output(p_out);
  ir::Value* y = m.value("y");
  ir::Node* n = m.node("FlexAttention", {qv, kv, vv}, {y}, "ai.onnx.preview");
  n->opset = 1;
  n->attrs["score_mod"] = graph_attr(score);
  n->attrs["prob_mod"] = graph_attr(prob);
  m.output(y);
  auto r = run_graph(m, {Slot::of(q), Slot::of(k), Slot::of(v)});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_near_all((*r)[0].tensor, flex_ref(q, k, v, 0.5, &bias, 2.0), 1e-5);
}
