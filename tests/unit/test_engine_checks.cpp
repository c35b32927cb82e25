// Engine files are untrusted (#50 items 2 and 3): a file edited and re-sealed past its checksum is
// refused at load by the same per-node checks as the equivalent .onnx at import, weights must be what
// their graph says they are, and long kernels and builds stop at their deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine_generated.h"
#include "kiln/kiln.h"
#include "onnx/onnx.pb.h"

using namespace kiln;

// The engine's FlatBuffer with its checksum trailer recomputed, as someone who edits a file would
// (tests/unit/test_runtime.cpp).
std::string reseal(std::string bytes);

namespace {

struct Input {
  std::string name;
  int elem_type;
  std::vector<int64_t> shape;
};

// A model of one node named "victim" whose inputs are graph inputs (so nothing folds it away) or the
// given initializers; its one output "y" has no declared type.
::onnx::ModelProto one_node(const std::string& op, const std::vector<Input>& inputs,
                            const std::function<void(::onnx::NodeProto&)>& attrs,
                            const std::vector<::onnx::TensorProto>& inits = {}) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("victim");
  for (const Input& in : inputs) {
    n->add_input(in.name);
    auto* vi = g->add_input();
    vi->set_name(in.name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(in.elem_type);
    for (int64_t d : in.shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  for (const auto& t : inits) {
    n->add_input(t.name());
    *g->add_initializer() = t;
  }
  n->add_output("y");
  attrs(*n);
  g->add_output()->set_name("y");
  return m;
}

void set_ints(::onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

void set_int(::onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

std::string built_engine(const ::onnx::ModelProto& m) {
  auto e = Engine::build_from_bytes(m.SerializeAsString());
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (!e.ok()) return {};
  auto b = (*e)->serialize();
  EXPECT_TRUE(b.ok());
  return b.ok() ? *b : std::string();
}

// The stored attribute `name` of the graph's node "victim", for editing in place.
fb::Attr* victim_attr(std::string& bytes, const std::string& name) {
  auto* nodes = fb::GetMutableEngineFile(bytes.data())->mutable_graph()->mutable_nodes();
  for (flatbuffers::uoffset_t i = 0; i < nodes->size(); ++i) {
    auto* n = nodes->GetMutableObject(i);
    if (!n->name() || n->name()->str() != "victim") continue;
    for (flatbuffers::uoffset_t k = 0; n->attrs() && k < n->attrs()->size(); ++k) {
      auto* a = n->mutable_attrs()->GetMutableObject(k);
      if (a->name() && a->name()->str() == name) return a;
    }
  }
  return nullptr;
}

// The stored weight that input `input` of node "victim" reads (the optimizer may have renamed or
// transposed it); `name` gets its name.
fb::TensorData* victim_weight(std::string& bytes, int input, std::string* name) {
  auto* graph = fb::GetMutableEngineFile(bytes.data())->mutable_graph();
  for (flatbuffers::uoffset_t i = 0; i < graph->nodes()->size(); ++i) {
    const auto* n = graph->nodes()->Get(i);
    if (!n->name() || n->name()->str() != "victim" || !n->inputs() || n->inputs()->size() <= static_cast<size_t>(input)) continue;
    auto* v = graph->mutable_values()->GetMutableObject(static_cast<flatbuffers::uoffset_t>(n->inputs()->Get(input)));
    *name = v->name()->str();
    return v->mutable_constant();
  }
  return nullptr;
}

// Loading `bytes` fails and the message holds every one of `want`.
void expect_refused(const std::string& bytes, const std::vector<std::string>& want) {
  auto e = Engine::load_from_bytes(bytes);
  ASSERT_FALSE(e.ok()) << "a tampered engine loaded";
  for (const std::string& w : want) EXPECT_NE(e.status().message().find(w), std::string::npos) << e.status().message();
}

::onnx::ModelProto depth_to_space() {
  return one_node("DepthToSpace", {{"x", ::onnx::TensorProto::FLOAT, {1, 4, 2, 2}}},
                  [](::onnx::NodeProto& n) { set_int(n, "blocksize", 2); });
}

::onnx::ModelProto max_unpool() {
  return one_node("MaxUnpool", {{"x", ::onnx::TensorProto::FLOAT, {1, 1, 2, 2}}, {"i", ::onnx::TensorProto::INT64, {1, 1, 2, 2}}},
                  [](::onnx::NodeProto& n) {
                    set_ints(n, "kernel_shape", {2, 2});
                    set_ints(n, "strides", {2, 2});
                    set_ints(n, "pads", {0, 0, 0, 0});
                  });
}

}  // namespace

// The untampered engines load: the checks refuse edits, not engines.
TEST(EngineChecks, UntamperedEnginesLoad) {
  for (const auto& m : {depth_to_space(), max_unpool()}) {
    const std::string b = built_engine(m);
    ASSERT_FALSE(b.empty());
    auto e = Engine::load_from_bytes(reseal(b));
    EXPECT_TRUE(e.ok()) << e.status().to_string();
  }
}

// A DepthToSpace blocksize of 2^40 (a SIGFPE in the kernel of a release build) is refused at load as at
// import, naming the node and the attribute.
TEST(EngineChecks, HugeDepthToSpaceBlocksizeIsRefusedAtLoadAsAtImport) {
  ::onnx::ModelProto bad = depth_to_space();
  bad.mutable_graph()->mutable_node(0)->mutable_attribute(0)->set_i(int64_t{1} << 40);
  auto imported = Engine::build_from_bytes(bad.SerializeAsString());
  ASSERT_FALSE(imported.ok());
  EXPECT_NE(imported.status().message().find("blocksize"), std::string::npos) << imported.status().message();

  std::string b = built_engine(depth_to_space());
  fb::Attr* a = victim_attr(b, "blocksize");
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->mutate_i(int64_t{1} << 40));
  expect_refused(reseal(b), {"node 'victim' (DepthToSpace)", "blocksize"});
  // A blocksize of 0 too (a division by zero).
  ASSERT_TRUE(a->mutate_i(0));
  expect_refused(reseal(b), {"node 'victim' (DepthToSpace)", "blocksize"});
}

// MaxUnpool strides/pads edits (a heap read past the end in the kernel before #49's own checks) are
// refused at load: a stride of 0 by the attribute rule, others because the stored output shape no
// longer follows from the stored inputs and attributes.
TEST(EngineChecks, MaxUnpoolStridesAndPadsEditsAreRefusedAtLoad) {
  const std::string good = built_engine(max_unpool());
  ASSERT_FALSE(good.empty());
  struct Edit {
    const char* attr;
    size_t index;
    int64_t value;
  };
  for (const Edit& edit : {Edit{"strides", 0, 0}, Edit{"strides", 1, 3}, Edit{"pads", 0, 100}, Edit{"pads", 3, -5},
                           Edit{"kernel_shape", 1, 0}}) {
    std::string b = good;
    fb::Attr* a = victim_attr(b, edit.attr);
    ASSERT_NE(a, nullptr) << edit.attr;
    ASSERT_NE(a->mutable_ints(), nullptr);
    a->mutable_ints()->Mutate(static_cast<flatbuffers::uoffset_t>(edit.index), edit.value);
    SCOPED_TRACE(std::string(edit.attr) + "[" + std::to_string(edit.index) + "] = " + std::to_string(edit.value));
    expect_refused(reseal(b), {"node 'victim' (MaxUnpool)"});
  }
}

// A weight whose stored dtype or shape is not its value's type is refused naming the weight; one whose
// bytes do not fill dtype x shape was refused before. (Its values cannot be checked: any bytes are
// some weight, and a hash stored in the same file would be re-sealed with it.)
TEST(EngineChecks, WeightsInconsistentWithTheirGraphAreRefused) {
  ::onnx::TensorProto w;
  w.set_name("w");
  w.set_data_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : {2, 1, 3, 3}) w.add_dims(d);
  for (int i = 0; i < 18; ++i) w.add_float_data(0.1f * static_cast<float>(i));
  const auto m = one_node("Conv", {{"x", ::onnx::TensorProto::FLOAT, {1, 1, 5, 5}}},
                          [](::onnx::NodeProto& n) { set_ints(n, "kernel_shape", {3, 3}); }, {w});
  const std::string good = built_engine(m);
  ASSERT_FALSE(good.empty());
  std::string name;
  {
    std::string b = good;
    fb::TensorData* t = victim_weight(b, 1, &name);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->shape() && t->shape()->size() == 4);
    // Same element count, another shape: the dims reversed ([2,1,3,3], or channels-last [2,3,3,1]).
    std::vector<int64_t> dims(t->shape()->begin(), t->shape()->end());
    for (flatbuffers::uoffset_t i = 0; i < 4; ++i) t->mutable_shape()->Mutate(i, dims[3 - i]);
    expect_refused(reseal(b), {"weight '" + name + "'"});
  }
  {
    std::string b = good;
    fb::TensorData* t = victim_weight(b, 1, &name);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->mutate_dtype(static_cast<int32_t>(DataType::kInt32)));  // same byte count
    expect_refused(reseal(b), {"weight '" + name + "'"});
  }
  {
    std::string b = good;
    fb::TensorData* t = victim_weight(b, 1, &name);
    ASSERT_NE(t, nullptr);
    t->mutable_shape()->Mutate(0, t->shape()->Get(0) + 1);  // more elements claimed than stored
    expect_refused(reseal(b), {"bytes"});
  }
}

namespace {

// A TfIdfVectorizer counting one bigram at every skip distance of a row of `c` items: about c^2 / 2 map
// look-ups (hours for c = 200,000), bounded by the data, not by the output's size.
::onnx::ModelProto slow_tfidf(int64_t c, bool constant_input) {
  std::vector<Input> inputs;
  std::vector<::onnx::TensorProto> inits;
  if (constant_input) {
    ::onnx::TensorProto x;
    x.set_name("x");
    x.set_data_type(::onnx::TensorProto::INT64);
    x.add_dims(1);
    x.add_dims(c);
    for (int64_t i = 0; i < c; ++i) x.add_int64_data(i % 7);
    inits.push_back(x);
  } else {
    inputs.push_back({"x", ::onnx::TensorProto::INT64, {1, c}});
  }
  return one_node("TfIdfVectorizer", inputs, [](::onnx::NodeProto& n) {
    auto* mode = n.add_attribute();
    mode->set_name("mode");
    mode->set_type(::onnx::AttributeProto::STRING);
    mode->set_s("TF");
    set_int(n, "min_gram_length", 2);
    set_int(n, "max_gram_length", 2);
    set_int(n, "max_skip_count", int64_t{1} << 40);
    set_ints(n, "ngram_counts", {0, 0});
    set_ints(n, "ngram_indexes", {0});
    set_ints(n, "pool_int64s", {1, 2});
  }, inits);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// A run's time limit stops a kernel inside its long loop, not only between steps: the whole run is one
// step here.
TEST(EngineChecks, RunTimeoutStopsALongTfIdfVectorizer) {
  constexpr int64_t kItems = 200000;
  auto e = Engine::build_from_bytes(slow_tfidf(kItems, false).SerializeAsString());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto ctx = (*e)->create_context();
  ASSERT_TRUE(ctx.ok());
  (*ctx)->set_run_timeout(0.5);
  Tensor x = Tensor::empty(DataType::kInt64, {1, kItems});
  for (int64_t i = 0; i < kItems; ++i) x.data<int64_t>()[i] = i % 7;
  const auto start = std::chrono::steady_clock::now();
  auto r = (*ctx)->run({{"x", Value::of(x)}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().to_string();
  EXPECT_NE(r.status().message().find("time limit"), std::string::npos) << r.status().message();
  EXPECT_LT(seconds_since(start), 10.0);
}

// A build's time limit stops constant folding inside the folded kernel's loop, and the build ends with
// an error instead of running for hours.
TEST(EngineChecks, BuildTimeoutStopsConstantFolding) {
  BuildOptions o;
  o.timeout_s = 0.5;
  const auto start = std::chrono::steady_clock::now();
  auto e = Engine::build_from_bytes(slow_tfidf(200000, true).SerializeAsString(), o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kCancelled) << e.status().to_string();
  EXPECT_NE(e.status().message().find("time limit"), std::string::npos) << e.status().message();
  EXPECT_LT(seconds_since(start), 10.0);
  // Without a limit nothing changes for a quick build.
  EXPECT_TRUE(Engine::build_from_bytes(slow_tfidf(16, true).SerializeAsString()).ok());
}
