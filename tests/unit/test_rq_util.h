// Shared helpers for the quant/rnn/loss/roi/training unit tests: run one node eagerly (any domain),
// build tensors of any numeric dtype, compare with tolerances.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ir/float_types.h"
#include "ir/graph.h"
#include "runtime/eager.h"

namespace rqtest {

using namespace kiln;
using Attrs = std::map<std::string, ir::Attribute>;

inline ir::Attribute attr_int(int64_t v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kInt; a.i = v; return a; }
inline ir::Attribute attr_float(float v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kFloat; a.f = v; return a; }
inline ir::Attribute attr_str(std::string v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kString; a.s = std::move(v); return a; }
inline ir::Attribute attr_ints(std::vector<int64_t> v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kInts; a.ints = std::move(v); return a; }
inline ir::Attribute attr_floats(std::vector<float> v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kFloats; a.floats = std::move(v); return a; }
inline ir::Attribute attr_strs(std::vector<std::string> v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kStrings; a.strings = std::move(v); return a; }

// Runs `op` (in `domain`) at `opset`; an undefined input tensor is an omitted input; `out_mask`
// says which of `num_outputs` outputs the node uses (all by default).
inline Expected<std::vector<Tensor>> try_run(const std::string& op, int opset, const std::vector<Tensor>& inputs,
                                             const Attrs& attrs, int num_outputs = 1, std::vector<bool> out_mask = {},
                                             const std::string& domain = "") {
  ir::Graph g;
  std::vector<ir::Value*> ins;
  std::vector<Slot> slots;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      ins.push_back(nullptr);
      slots.push_back(Slot{});
      continue;
    }
    ins.push_back(g.add_value("in" + std::to_string(i), ir::Type::tensor(inputs[i].dtype(), ir::SymShape::of(inputs[i].shape()))));
    slots.push_back(Slot::of(inputs[i]));
  }
  std::vector<ir::Value*> outs;
  for (int i = 0; i < num_outputs; ++i)
    outs.push_back(out_mask.empty() || out_mask[i] ? g.add_value("out" + std::to_string(i)) : nullptr);
  ir::Node* n = g.add_node(op, domain, ins, outs, "n");
  n->opset = opset;
  n->attrs = attrs;
  auto r = run_node_eager(*n, slots);
  if (!r.ok()) return r.status();
  std::vector<Tensor> res;
  for (auto& s : *r) res.push_back(s.tensor);
  return res;
}

inline std::vector<Tensor> run(const std::string& op, int opset, const std::vector<Tensor>& inputs, const Attrs& attrs,
                               int num_outputs = 1, std::vector<bool> out_mask = {}, const std::string& domain = "") {
  auto r = try_run(op, opset, inputs, attrs, num_outputs, out_mask, domain);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return std::vector<Tensor>(num_outputs);
  return *r;
}

inline std::mt19937& rng() {
  static std::mt19937 g(4321);
  return g;
}

// Element access in double for the plain numeric dtypes (4-bit integers as their byte).
inline double get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kFloat32: return t.data<float>()[i];
    case DataType::kFloat64: return t.data<double>()[i];
    case DataType::kFloat16: return f16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kBFloat16: return bf16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kInt8: case DataType::kInt4: case DataType::kInt2: return t.data<int8_t>()[i];
    case DataType::kUInt8: case DataType::kUInt4: case DataType::kUInt2: return t.data<uint8_t>()[i];
    case DataType::kInt16: return t.data<int16_t>()[i];
    case DataType::kUInt16: return t.data<uint16_t>()[i];
    case DataType::kInt32: return t.data<int32_t>()[i];
    case DataType::kInt64: return static_cast<double>(t.data<int64_t>()[i]);
    case DataType::kBool: return t.data<bool>()[i];
    default: ADD_FAILURE() << "get: dtype " << dtype_name(t.dtype()); return 0;
  }
}

inline void set(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DataType::kFloat32: t.data<float>()[i] = static_cast<float>(v); break;
    case DataType::kFloat64: t.data<double>()[i] = v; break;
    case DataType::kFloat16: t.data<uint16_t>()[i] = f32_to_f16(static_cast<float>(v)); break;
    case DataType::kBFloat16: t.data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v)); break;
    case DataType::kInt8: case DataType::kInt4: case DataType::kInt2: t.data<int8_t>()[i] = static_cast<int8_t>(v); break;
    case DataType::kUInt8: case DataType::kUInt4: case DataType::kUInt2: t.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt16: t.data<int16_t>()[i] = static_cast<int16_t>(v); break;
    case DataType::kUInt16: t.data<uint16_t>()[i] = static_cast<uint16_t>(v); break;
    case DataType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: t.data<int64_t>()[i] = static_cast<int64_t>(v); break;
    case DataType::kBool: t.data<bool>()[i] = v != 0; break;
    default: ADD_FAILURE() << "set: dtype " << dtype_name(t.dtype());
  }
}

inline Tensor from(DataType dt, const Shape& s, const std::vector<double>& v) {
  Tensor t = Tensor::empty(dt, s);
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  for (int64_t i = 0; i < t.numel(); ++i) set(t, i, v[i]);
  return t;
}

// Uniform values in [lo, hi] (rounded for integer dtypes).
inline Tensor random(DataType dt, const Shape& s, double lo = -1, double hi = 1) {
  Tensor t = Tensor::empty(dt, s);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = u(rng());
    if (dtype_is_integer(dt)) v = std::round(v);
    set(t, i, v);
  }
  return t;
}

inline std::vector<double> values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = get(t, i);
  return v;
}

// |got - want| <= atol + rtol * |want| elementwise (NaN matches NaN), and equal shapes.
inline void expect_close(const Tensor& got, const Shape& shape, const std::vector<double>& want, double rtol = 1e-5,
                         double atol = 1e-6) {
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(shape_to_string(got.shape()), shape_to_string(shape));
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size());
  int bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = get(got, i), w = want[i];
    if ((std::isnan(w) && std::isnan(g)) || g == w) continue;
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w)))
      if (++bad <= 5) ADD_FAILURE() << "element " << i << ": got " << g << ", want " << w;
  }
  EXPECT_EQ(bad, 0);
}

inline void expect_equal(const Tensor& got, const Shape& shape, const std::vector<double>& want) {
  expect_close(got, shape, want, 0, 0);
}

}  // namespace rqtest
