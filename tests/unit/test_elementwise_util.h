// Helpers for the elementwise tests: build one node, run it eagerly on the CPU.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "ir/float_types.h"
#include "ir/graph.h"
#include "runtime/eager.h"

namespace kiln::ewtest {

template <typename T>
Tensor make(DataType dt, const Shape& shape, const std::vector<T>& v) {
  Tensor t = Tensor::empty(dt, shape);
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
  return t;
}

inline Tensor f32(const Shape& s, const std::vector<float>& v) { return make(DataType::kFloat32, s, v); }
inline Tensor i64(const Shape& s, const std::vector<int64_t>& v) { return make(DataType::kInt64, s, v); }
inline Tensor i32(const Shape& s, const std::vector<int32_t>& v) { return make(DataType::kInt32, s, v); }
inline Tensor boolean(const Shape& s, const std::vector<bool>& v) {
  Tensor t = Tensor::empty(DataType::kBool, s);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

inline ir::Attribute attr_i(int64_t v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kInt; a.i = v; return a; }
inline ir::Attribute attr_f(float v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kFloat; a.f = v; return a; }
inline ir::Attribute attr_s(const std::string& v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kString; a.s = v; return a; }

// Runs `op` on the inputs (an undefined Tensor is an omitted input) and returns its slots.
inline Expected<std::vector<Slot>> run_slots(const std::string& op, const std::vector<Slot>& inputs,
                                             const std::map<std::string, ir::Attribute>& attrs = {}, int opset = 21) {
  ir::Graph g;
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].kind == Slot::Kind::kNone) {
      ins.push_back(nullptr);
      continue;
    }
    ir::Value* v = g.add_value("in" + std::to_string(i));
    if (inputs[i].kind == Slot::Kind::kTensor) v->type = ir::Type::tensor(inputs[i].tensor.dtype(), ir::SymShape::of(inputs[i].tensor.shape()));
    v->is_input = true;
    g.inputs.push_back(v);
    ins.push_back(v);
  }
  ir::Value* out = g.add_value("out");
  ir::Node* n = g.add_node(op, "", ins, {out}, "n");
  n->opset = opset;
  n->attrs = attrs;
  return run_node_eager(*n, inputs);
}

inline Expected<Tensor> run(const std::string& op, const std::vector<Tensor>& inputs,
                            const std::map<std::string, ir::Attribute>& attrs = {}, int opset = 21) {
  std::vector<Slot> slots;
  for (const Tensor& t : inputs) slots.push_back(t.defined() ? Slot::of(t) : Slot{});
  auto r = run_slots(op, slots, attrs, opset);
  if (!r.ok()) return r.status();
  return (*r)[0].tensor;
}

template <typename T> std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Index of the broadcast source element of `in` for flat output index `o` (naive reference).
inline int64_t bcast_index(const Shape& out, const Shape& in, int64_t o) {
  int64_t idx = 0, stride = 1;
  for (int i = static_cast<int>(out.size()) - 1, j = static_cast<int>(in.size()) - 1; i >= 0; --i, --j) {
    const int64_t c = o % out[i];
    o /= out[i];
    if (j >= 0) {
      if (in[j] != 1) idx += c * stride;
      stride *= in[j];
    }
  }
  return idx;
}

}  // namespace kiln::ewtest
