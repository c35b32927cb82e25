// Helpers for the shape-family unit tests: build one node, run it eagerly, compare to naive references.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op_table.h"
#include "runtime/eager.h"

namespace kiln::shape_test {

using Attrs = std::map<std::string, ir::Attribute>;

inline ir::Attribute ai(int64_t v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kInt; a.i = v; return a; }
inline ir::Attribute af(float v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kFloat; a.f = v; return a; }
inline ir::Attribute as(std::string v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kString; a.s = std::move(v); return a; }
inline ir::Attribute ais(std::vector<int64_t> v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kInts; a.ints = std::move(v); return a; }
inline ir::Attribute afs(std::vector<float> v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kFloats; a.floats = std::move(v); return a; }
inline ir::Attribute astrs(std::vector<std::string> v) { ir::Attribute a; a.kind = ir::Attribute::Kind::kStrings; a.strings = std::move(v); return a; }
inline ir::Attribute at(Tensor t) { ir::Attribute a; a.kind = ir::Attribute::Kind::kTensor; a.t = std::move(t); return a; }

template <typename T>
Tensor make(DataType dt, const Shape& shape, const std::vector<T>& v) {
  Tensor t = Tensor::empty(dt, shape);
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
  return t;
}
inline Tensor f32(const Shape& s, const std::vector<float>& v) { return make<float>(DataType::kFloat32, s, v); }
inline Tensor i64(const Shape& s, const std::vector<int64_t>& v) { return make<int64_t>(DataType::kInt64, s, v); }
inline Tensor i32(const Shape& s, const std::vector<int32_t>& v) { return make<int32_t>(DataType::kInt32, s, v); }
inline Tensor strs(const Shape& s, const std::vector<std::string>& v) { return make<std::string>(DataType::kString, s, v); }
inline Tensor bools(const Shape& s, const std::vector<bool>& v) {
  Tensor t = Tensor::empty(DataType::kBool, s);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

inline Tensor rand_f32(const Shape& s, std::mt19937& rng) {
  Tensor t = Tensor::empty(DataType::kFloat32, s);
  std::uniform_real_distribution<float> d(-10, 10);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}
// Distinct values 0..n-1 as int64, so any misplaced element shows.
inline Tensor iota_i64(const Shape& s) {
  Tensor t = Tensor::empty(DataType::kInt64, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = i;
  return t;
}
inline Tensor iota_str(const Shape& s) {
  Tensor t = Tensor::empty(DataType::kString, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<std::string>()[i] = "s" + std::to_string(i) + std::string(i % 3 * 9, 'x');
  return t;
}

// Runs one node. Undefined tensors in `ins` are omitted inputs.
inline Expected<std::vector<Tensor>> try_run(const std::string& op, const std::vector<Tensor>& ins, Attrs attrs = {},
                                             int n_out = 1, int opset = 18) {
  ir::Graph g;
  std::vector<ir::Value*> in_vals, out_vals;
  std::vector<Slot> slots;
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!ins[i].defined()) {
      in_vals.push_back(nullptr);
      slots.emplace_back();
      continue;
    }
    in_vals.push_back(g.add_value("in" + std::to_string(i), ir::Type::tensor(ins[i].dtype(), ir::SymShape::of(ins[i].shape()))));
    slots.push_back(Slot::of(ins[i]));
  }
  for (int i = 0; i < n_out; ++i) out_vals.push_back(g.add_value("out" + std::to_string(i)));
  ir::Node* n = g.add_node(op, "", in_vals, out_vals, "n");
  n->attrs = std::move(attrs);
  n->opset = opset;
  auto r = run_node_eager(*n, slots);
  if (!r.ok()) return r.status();
  std::vector<Tensor> outs;
  for (auto& s : *r) outs.push_back(s.tensor);
  return outs;
}

inline std::vector<Tensor> run(const std::string& op, const std::vector<Tensor>& ins, Attrs attrs = {}, int n_out = 1,
                               int opset = 18) {
  auto r = try_run(op, ins, std::move(attrs), n_out, opset);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return std::vector<Tensor>(n_out);
  return *r;
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

inline std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t o = 0;
  for (size_t d = 0; d < s.size(); ++d) o = o * s[d] + idx[d];
  return o;
}

inline Shape rand_shape(std::mt19937& rng, int rank, int max_dim = 5) {
  Shape s(rank);
  for (auto& d : s) d = std::uniform_int_distribution<int>(1, max_dim)(rng);
  return s;
}

}  // namespace kiln::shape_test
