// tests/unit/test_cuda_util.h — running one node on the CUDA backend in tests (device memory
// through the backend, inputs uploaded, outputs downloaded), or with one named kernel row of any
// backend, plus tensor helpers.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "ir/float_types.h"
#include "ir/graph.h"
#include "runtime/eager.h"

namespace kiln::cudatest {

#define KILN_REQUIRE_GPU() \
  if (!::kiln::cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU"

// A KernelContext whose outputs are device tensors allocated through the backend.
class DeviceContext final : public KernelContext {
 public:
  DeviceContext(Backend& be, const ir::Node& node, std::vector<Slot> in, void* state)
      : be_(be), node_(node), in_(std::move(in)), out_(node.outputs.size()), state_(state) {}
  int num_inputs() const override { return static_cast<int>(in_.size()); }
  int num_outputs() const override { return static_cast<int>(out_.size()); }
  bool has_input(int i) const override { return i < num_inputs() && in_[i].kind != Slot::Kind::kNone; }
  const Slot& input_slot(int i) const override { return in_[i]; }
  bool has_output(int i) const override { return node_.has_output(i); }
  Tensor& output(int i, DataType dtype, const Shape& shape) override {
    auto st = be_.allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
    EXPECT_TRUE(st.ok()) << st.status().to_string();
    out_[i] = Slot::of(Tensor::with_storage(dtype, shape, *st));
    return out_[i].tensor;
  }
  Tensor& output(int i) override { return output(i, shapes.out[i].first, shapes.out[i].second); }
  void* workspace() override { return shapes.workspace_ptr(); }
  const void* shape_state() const override { return shapes.state.get(); }
  Slot& output_slot(int i) override { return out_[i]; }
  Tensor owned_copy(const Tensor& t) override {
    Tensor c = Tensor::with_storage(t.dtype(), t.shape(), *be_.allocate(t.nbytes()));
    EXPECT_TRUE(be_.copy(t, c, state_).ok());
    return c;
  }
  Status run_subgraph(const CompiledGraph&, std::vector<Slot>, std::vector<Slot>&) override {
    return unsupported("no subgraphs in CUDA tests");
  }
  void* device_state() const override { return state_; }
  const ir::Node& node() const override { return node_; }
  std::vector<Slot>& outputs() { return out_; }
  AdHocShapes shapes;

 private:
  Backend& be_;
  const ir::Node& node_;
  std::vector<Slot> in_;
  std::vector<Slot> out_;
  void* state_;
};

// Copies `inputs` into the backend's memory, runs the node with kernel row `def` of backend `be`
// (with `tactic`, or the kernel's own choice), copies every produced output back to the host.
// `tactics`, when given, receives the tactics the kernel offers for them.
inline Expected<std::vector<Tensor>> run_row(Backend* be, const KernelDef* def, const ir::Node& node,
                                             const std::vector<Tensor>& inputs, const std::string& tactic = {},
                                             std::vector<std::string>* tactics = nullptr) {
  if (std::string why = def->rejects(node); !why.empty()) return unsupported(def->name + ": " + why);
  KernelInit init;
  init.device_state = be->build_state();
  KILN_ASSIGN_OR_RETURN(KernelPtr kernel, def->create(node, init));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<void> state, be->create_state());
  std::vector<Slot> dev_in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) {
      dev_in.emplace_back();
      continue;
    }
    // Host inputs (shape operands) stay in host memory, as the lowering keeps them.
    if (def->host_input(static_cast<int>(i))) {
      dev_in.push_back(Slot::of(t));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(auto st, be->allocate(t.nbytes()));
    Tensor d = Tensor::with_storage(t.dtype(), t.shape(), st);
    KILN_RETURN_IF_ERROR(be->copy(t, d, state.get()));
    dev_in.push_back(Slot::of(d));
  }
  DeviceContext ctx(*be, node, dev_in, state.get());
  if (tactics) {
    ReshapeContext rc{node, {}, {}, state.get(), 0, nullptr, {}, {}, -1};
    for (const Slot& s : dev_in) {
      ReshapeContext::In in;
      if (s.kind == Slot::Kind::kTensor) {
        in.present = true;
        in.dtype = s.tensor.dtype();
        in.shape = s.tensor.shape();
      }
      rc.in.push_back(in);
    }
    rc.out.resize(node.outputs.size());
    *tactics = kernel->tactics(rc);
  }
  KILN_RETURN_IF_ERROR(ctx.shapes.prepare(*kernel, ctx, [be](size_t b) { return be->allocate(b); }, tactic));
  KILN_RETURN_IF_ERROR(kernel->run(ctx));
  KILN_RETURN_IF_ERROR(be->synchronize(state.get()));
  std::vector<Tensor> out;
  for (Slot& s : ctx.outputs()) {
    if (s.kind != Slot::Kind::kTensor) {
      out.emplace_back();
      continue;
    }
    Tensor h = Tensor::empty(s.tensor.dtype(), s.tensor.shape());
    KILN_RETURN_IF_ERROR(be->copy(s.tensor, h, state.get()));
    KILN_RETURN_IF_ERROR(be->synchronize(state.get()));
    out.push_back(h);
  }
  return out;
}

// run_row with the CUDA kernel the registry picks for the node.
inline Expected<std::vector<Tensor>> run_cuda(const ir::Node& node, const std::vector<Tensor>& inputs,
                                              const std::string& tactic = {}, std::vector<std::string>* tactics = nullptr) {
  KILN_ASSIGN_OR_RETURN(Backend * be, cuda_backend());
  std::string why;
  const KernelDef* def = be->kernels().find(node, &why);
  if (!def) return unsupported("no CUDA kernel: " + why);
  return run_row(be, def, node, inputs, tactic, tactics);
}

inline Tensor random_tensor(const Shape& shape, std::mt19937& rng, float lo = -2.f, float hi = 2.f) {
  Tensor t = Tensor::empty(DataType::kFloat32, shape);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

inline Tensor int64_tensor(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(DataType::kInt64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

inline Tensor scalar_f32(float v) {
  Tensor t = Tensor::empty(DataType::kFloat32, {});
  t.data<float>()[0] = v;
  return t;
}

// A one-node graph: inputs typed from `inputs` (constants where `constant[i]`), outputs untyped.
struct OneNode {
  ir::Graph g;
  ir::Node* node = nullptr;
  OneNode(const std::string& op, int opset, const std::vector<Tensor>& inputs, int num_outputs = 1,
          const std::vector<bool>& constant = {}) {
    std::vector<ir::Value*> in, out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) {
        in.push_back(nullptr);
        continue;
      }
      ir::Value* v = g.add_value("in" + std::to_string(i),
                                 ir::Type::tensor(inputs[i].dtype(), ir::SymShape::of(inputs[i].shape())));
      if (i < constant.size() && constant[i]) v->constant = inputs[i];
      in.push_back(v);
    }
    for (int i = 0; i < num_outputs; ++i) out.push_back(g.add_value("out" + std::to_string(i)));
    node = g.add_node(op, "", in, out, "n");
    node->opset = opset;
  }
  void set_int(const std::string& k, int64_t v) { attr(k, ir::Attribute::Kind::kInt).i = v; }
  void set_float(const std::string& k, float v) { attr(k, ir::Attribute::Kind::kFloat).f = v; }
  void set_string(const std::string& k, const std::string& v) { attr(k, ir::Attribute::Kind::kString).s = v; }
  void set_ints(const std::string& k, std::vector<int64_t> v) { attr(k, ir::Attribute::Kind::kInts).ints = std::move(v); }
  ir::Attribute& attr(const std::string& k, ir::Attribute::Kind kind) {
    ir::Attribute& a = node->attrs[k];
    a.kind = kind;
    return a;
  }
};

// Elementwise comparison with |got - want| <= atol + rtol·|want| (NaNs must match).
inline void expect_close(const Tensor& got, const Tensor& want, float atol = 1e-5f, float rtol = 1e-5f,
                         const std::string& what = "") {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  int bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    if ((std::isnan(w) && std::isnan(g)) || g == w) continue;  // equal infinities match too
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w;
      ++bad;
    }
  }
}

// Runs the node on CUDA and compares with `want`; also with the CPU kernel when one exists.
inline void check_node(const ir::Node& node, const std::vector<Tensor>& inputs, const Tensor& want,
                       float atol = 1e-5f, float rtol = 1e-5f, const std::string& what = "") {
  auto got = run_cuda(node, inputs);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  expect_close((*got)[0], want, atol, rtol, what + " vs reference");
  std::vector<Slot> cpu_in;
  for (const Tensor& t : inputs) cpu_in.push_back(t.defined() ? Slot::of(t) : Slot{});
  auto cpu = run_node_eager(node, cpu_in);
  if (cpu.ok() && (*cpu)[0].kind == Slot::Kind::kTensor)
    expect_close((*got)[0], (*cpu)[0].tensor, atol, rtol, what + " vs CPU kernel");
}

// Runs the node on the GPU and on the CPU and compares every output the CPU produces.
inline void expect_all_same(const ir::Node& node, const std::vector<Tensor>& in, const std::string& what) {
  auto got = run_cuda(node, in);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  std::vector<Slot> cpu_in;
  for (const Tensor& t : in) cpu_in.push_back(t.defined() ? Slot::of(t) : Slot{});
  auto want = run_node_eager(node, cpu_in);
  ASSERT_TRUE(want.ok()) << what << ": " << want.status().to_string();
  ASSERT_LE(want->size(), got->size()) << what;
  for (size_t k = 0; k < want->size(); ++k) {
    const Tensor& w = (*want)[k].tensor;
    const Tensor& g = (*got)[k];
    const std::string at = what + " output " + std::to_string(k);
    ASSERT_EQ(g.shape(), w.shape()) << at;
    ASSERT_EQ(g.dtype(), w.dtype()) << at;
    if (w.dtype() == DataType::kFloat32) {
      expect_close(g, w, 1e-5f, 1e-5f, at);
    } else if (w.dtype() == DataType::kFloat64) {
      for (int64_t i = 0; i < w.numel(); ++i)
        ASSERT_NEAR(g.data<double>()[i], w.data<double>()[i], 1e-12 + 1e-12 * std::fabs(w.data<double>()[i])) << at << " [" << i << "]";
    } else {
      ASSERT_EQ(std::memcmp(g.raw(), w.raw(), w.nbytes()), 0) << at;
    }
  }
}

// Element i of a tensor as a double (float types, integers, bool), for comparisons.
inline double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kFloat32: return t.data<float>()[i];
    case DataType::kFloat64: return t.data<double>()[i];
    case DataType::kFloat16: return f16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kBFloat16: return bf16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kInt64: return static_cast<double>(t.data<int64_t>()[i]);
    case DataType::kInt32: return t.data<int32_t>()[i];
    case DataType::kInt8: return t.data<int8_t>()[i];
    case DataType::kUInt8: return t.data<uint8_t>()[i];
    case DataType::kBool: return t.data<bool>()[i] ? 1 : 0;
    default: ADD_FAILURE() << "dtype " << dtype_name(t.dtype()); return 0;
  }
}

}  // namespace kiln::cudatest
