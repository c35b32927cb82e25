// tests/unit/test_control_util.h — helpers for the control/sequence/optional tests: graph building,
// running a lowered graph through a Frame, and a few tiny "test"-domain kernels (Add, Mul, Less,
// Iota) so bodies can compute without depending on other kernel families.
#pragma once

#include <gtest/gtest.h>

#include <mutex>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "ops/op_table.h"
#include "plan/plan.h"
#include "runtime/eager.h"
#include "runtime/executor.h"

namespace kiln::testing {

inline ir::Type tensor_type(DataType dt, const Shape& s) { return ir::Type::tensor(dt, ir::SymShape::of(s)); }
inline ir::Type seq_type(DataType dt) {
  ir::Type t;
  t.kind = ir::Type::Kind::kSequence;
  t.elem = std::make_shared<ir::Type>(ir::Type::tensor(dt));
  return t;
}

template <typename T>
Tensor make(DataType dt, const Shape& s, std::vector<T> v) {
  Tensor t = Tensor::empty(dt, s);
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = v[i];
  return t;
}
inline Tensor f32(const Shape& s, std::vector<float> v) { return make<float>(DataType::kFloat32, s, std::move(v)); }
inline Tensor i64(const Shape& s, std::vector<int64_t> v) { return make<int64_t>(DataType::kInt64, s, std::move(v)); }
inline Tensor i64s(int64_t v) { return i64({}, {v}); }
inline Tensor boolean(bool b) { return make<bool>(DataType::kBool, {}, {b}); }

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

// ---- test-domain kernels: elementwise on equal shapes or with a one-element right operand.
template <typename T, typename F>
Status binary(KernelContext& ctx, F f) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (b.numel() != 1 && b.shape() != a.shape()) return ctx.error("shape mismatch");
  Tensor& o = ctx.output(0, a.dtype(), a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) o.data<T>()[i] = f(a.data<T>()[i], b.data<T>()[b.numel() == 1 ? 0 : i]);
  return Status::Ok();
}

template <typename F>
KernelFactory binary_factory(F f) {
  return [f](const ir::Node&, KernelInit&) -> Expected<KernelPtr> {
    return make_kernel([f](KernelContext& ctx) {
      if (ctx.input(0).dtype() == DataType::kFloat32) return binary<float>(ctx, f);
      return binary<int64_t>(ctx, f);
    });
  };
}

inline void register_test_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& r = const_cast<KernelRegistry&>(cpu_backend().kernels());
    r.add({"Add", "test", 1, 1 << 30, "test.Add", nullptr, binary_factory([](auto x, auto y) { return x + y; })});
    r.add({"Mul", "test", 1, 1 << 30, "test.Mul", nullptr, binary_factory([](auto x, auto y) { return x * y; })});
    r.add({"Less", "test", 1, 1 << 30, "test.Less", nullptr, [](const ir::Node&, KernelInit&) -> Expected<KernelPtr> {
             return make_kernel([](KernelContext& ctx) {
               Tensor& o = ctx.output(0, DataType::kBool, {});
               *o.data<bool>() = *ctx.input(0).data<int64_t>() < *ctx.input(1).data<int64_t>();
               return Status::Ok();
             });
           }});
    // Iota(n: int64 scalar) → int64 [n] = 0..n-1
    r.add({"Iota", "test", 1, 1 << 30, "test.Iota", nullptr, [](const ir::Node&, KernelInit&) -> Expected<KernelPtr> {
             return make_kernel([](KernelContext& ctx) {
               const int64_t n = *ctx.input(0).data<int64_t>();
               Tensor& o = ctx.output(0, DataType::kInt64, {n});
               for (int64_t i = 0; i < n; ++i) o.data<int64_t>()[i] = i;
               return Status::Ok();
             });
           }});
  });
}

// A graph (or subgraph) under construction.
struct G {
  std::shared_ptr<ir::Graph> g = std::make_shared<ir::Graph>();
  explicit G(int opset = 21, ir::Graph* parent = nullptr) {
    g->opsets[""] = opset;
    g->opsets["test"] = 1;
    g->parent = parent;
    g->name = parent ? "body" : "main";
  }
  ir::Value* input(const std::string& name, ir::Type t = {}) {
    ir::Value* v = g->add_value(name, std::move(t));
    v->is_input = true;
    g->inputs.push_back(v);
    return v;
  }
  ir::Value* capture(const std::string& name, ir::Type t = {}) {
    ir::Value* v = g->add_value(name, std::move(t));
    v->is_capture = true;
    g->captures.push_back(v);
    return v;
  }
  ir::Value* constant(const std::string& name, Tensor t) {
    ir::Value* v = g->add_value(name, tensor_type(t.dtype(), t.shape()));
    v->constant = t;
    return v;
  }
  ir::Value* value(const std::string& name, ir::Type t = {}) { return g->add_value(name, std::move(t)); }
  void output(ir::Value* v) {
    v->is_output = true;
    g->outputs.push_back(v);
  }
  ir::Node* node(const std::string& op, std::vector<ir::Value*> in, std::vector<ir::Value*> out,
                 const std::string& domain = "") {
    return g->add_node(op, domain, std::move(in), std::move(out));
  }
  // A one-output node; returns its output.
  ir::Value* op(const std::string& op, std::vector<ir::Value*> in, const std::string& out, const std::string& domain = "",
                ir::Type t = {}) {
    ir::Value* v = value(out, std::move(t));
    node(op, std::move(in), {v}, domain);
    return v;
  }
  ir::Value* add(ir::Value* a, ir::Value* b, const std::string& out, ir::Type t = {}) {
    return op("Add", {a, b}, out, "test", std::move(t));
  }
};

inline ir::Attribute graph_attr(const G& body) {
  ir::Attribute a;
  a.kind = ir::Attribute::Kind::kGraph;
  a.g = body.g;
  return a;
}
inline ir::Attribute int_attr(int64_t v) {
  ir::Attribute a;
  a.kind = ir::Attribute::Kind::kInt;
  a.i = v;
  return a;
}
inline ir::Attribute ints_attr(std::vector<int64_t> v) {
  ir::Attribute a;
  a.kind = ir::Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}

// Lowers `g` (with memory planning unless told otherwise) and runs it once on `inputs`.
inline Expected<std::vector<Slot>> run_graph(const G& main, std::vector<Slot> inputs, bool plan_memory = true) {
  register_test_kernels();
  KILN_RETURN_IF_ERROR(main.g->verify());
  KILN_RETURN_IF_ERROR(ops::infer_graph(*main.g));
  LowerOptions o;
  o.plan_memory = plan_memory;
  KILN_ASSIGN_OR_RETURN(auto cg, lower(main.g, o));
  ContextResources res;
  if (cg->arena_bytes[0] > 0) {
    KILN_ASSIGN_OR_RETURN(res.arena[0], cpu_backend().allocate(cg->arena_bytes[0]));
  }
  Frame frame(*cg, res, nullptr);
  for (size_t i = 0; i < inputs.size() && i < cg->inputs.size(); ++i) frame.slots[cg->inputs[i]] = inputs[i];
  KILN_RETURN_IF_ERROR(frame.execute());
  std::vector<Slot> out;
  for (int v : cg->outputs) {
    Slot s = frame.slots[v];
    if (s.kind == Slot::Kind::kTensor) s.tensor = s.tensor.clone();
    out.push_back(s);
  }
  return out;
}

// Runs one node eagerly (no subgraphs) on `inputs`.
inline Expected<std::vector<Slot>> run_one(const ir::Node& n, std::vector<Slot> inputs) {
  register_test_kernels();
  return run_node_eager(n, inputs);
}

}  // namespace kiln::testing
