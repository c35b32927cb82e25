// tests/unit/test_reduce_helpers.h — building and running one node eagerly, for the reduce and misc
// kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ir/float_types.h"
#include "ir/graph.h"
#include "runtime/eager.h"

namespace kiln::testing {

template <typename T>
Tensor make_tensor(DataType dt, const Shape& shape, const std::vector<T>& v) {
  Tensor t = Tensor::empty(dt, shape);
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  if constexpr (std::is_same_v<T, std::string>) {
    for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
  } else if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  } else if (!v.empty()) {
    std::memcpy(t.raw(), v.data(), v.size() * sizeof(T));
  }
  return t;
}
inline Tensor f32(const Shape& s, const std::vector<float>& v) { return make_tensor(DataType::kFloat32, s, v); }
inline Tensor i64(const Shape& s, const std::vector<int64_t>& v) { return make_tensor(DataType::kInt64, s, v); }

template <typename T>
std::vector<T> values(const Tensor& t) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<bool> v;
    for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.data<bool>()[i]);
    return v;
  } else {
    return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
  }
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// One node of `op` (opset `opset`) with the given inputs; undefined tensors are omitted inputs.
struct OneNode {
  ir::Graph g;
  ir::Node* node = nullptr;
  std::vector<Slot> in;

  OneNode(const std::string& op, int opset, const std::vector<Tensor>& inputs, int num_outputs = 1) {
    std::vector<ir::Value*> ins, outs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) {
        ins.push_back(nullptr);
        in.push_back(Slot{});
        continue;
      }
      ir::Value* v = g.add_value("in" + std::to_string(i), ir::Type::tensor(inputs[i].dtype(), ir::SymShape::of(inputs[i].shape())));
      ins.push_back(v);
      in.push_back(Slot::of(inputs[i]));
    }
    for (int i = 0; i < num_outputs; ++i) outs.push_back(g.add_value("out" + std::to_string(i)));
    node = g.add_node(op, "", ins, outs, "n");
    node->opset = opset;
  }
  OneNode& i(const std::string& k, int64_t v) {
    ir::Attribute a; a.kind = ir::Attribute::Kind::kInt; a.i = v; node->attrs[k] = a; return *this;
  }
  OneNode& f(const std::string& k, float v) {
    ir::Attribute a; a.kind = ir::Attribute::Kind::kFloat; a.f = v; node->attrs[k] = a; return *this;
  }
  OneNode& s(const std::string& k, const std::string& v) {
    ir::Attribute a; a.kind = ir::Attribute::Kind::kString; a.s = v; node->attrs[k] = a; return *this;
  }
  OneNode& ints(const std::string& k, std::vector<int64_t> v) {
    ir::Attribute a; a.kind = ir::Attribute::Kind::kInts; a.ints = std::move(v); node->attrs[k] = a; return *this;
  }
  OneNode& floats(const std::string& k, std::vector<float> v) {
    ir::Attribute a; a.kind = ir::Attribute::Kind::kFloats; a.floats = std::move(v); node->attrs[k] = a; return *this;
  }
  OneNode& strings(const std::string& k, std::vector<std::string> v) {
    ir::Attribute a; a.kind = ir::Attribute::Kind::kStrings; a.strings = std::move(v); node->attrs[k] = a; return *this;
  }
  Expected<std::vector<Slot>> run() { return run_node_eager(*node, in); }
  // Runs and returns output `k`, failing the test when the node fails.
  Tensor out(int k = 0) {
    auto r = run();
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    return (*r)[k].tensor;
  }
};

}  // namespace kiln::testing
