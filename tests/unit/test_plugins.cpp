// Plugins (#43, include/kiln/plugin.h): the example plugin (examples/plugins/leaky_hard_tanh.c) builds,
// tunes, runs, saves and reloads; engines record it and refuse another; and the misbehaving plugins of
// tests/plugins/test_plugins.c are refused or fail with errors naming them. Plugins stay loaded for
// the process, so no test here loads one that overrides a built-in op (tests/python/test_plugins.py
// does, in a process of its own).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln/plugin.hpp"
#include "onnx/onnx.pb.h"

using namespace kiln;

std::string reseal(std::string bytes);  // tests/unit/test_runtime.cpp

namespace {

// The test plugins are built beside the tests; KILN_TEST_PLUGIN_DIR points elsewhere when the binaries
// were moved (the GPU machine runs a packed copy). It only chooses which test libraries load.
std::string plugin_dir() {
  const char* moved = std::getenv("KILN_TEST_PLUGIN_DIR");
  return moved && *moved ? moved : KILN_PLUGIN_DIR;
}
const std::string kDir = plugin_dir();
const std::string kExample = kDir + "/libkiln_example_plugin.so";

struct Op {
  std::string domain, type;
  std::vector<std::pair<std::string, float>> float_attrs;
  std::vector<std::pair<std::string, int64_t>> int_attrs;
};

// x (float [batch, 8]) → ops in a chain → y; each domain imported at version 1.
std::string chain_model(const std::vector<Op>& ops) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  std::vector<std::string> domains;
  for (const Op& op : ops)
    if (!op.domain.empty() && std::find(domains.begin(), domains.end(), op.domain) == domains.end()) domains.push_back(op.domain);
  for (const std::string& d : domains) {
    auto* o = m.add_opset_import();
    o->set_domain(d);
    o->set_version(1);
  }
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto io = [](::onnx::ValueInfoProto* v, const std::string& name) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(1);
    t->mutable_shape()->add_dim()->set_dim_param("batch");
    t->mutable_shape()->add_dim()->set_dim_value(8);
  };
  io(g->add_input(), "x");
  io(g->add_output(), "y");
  std::string prev = "x";
  for (size_t i = 0; i < ops.size(); ++i) {
    auto* n = g->add_node();
    n->set_name("n" + std::to_string(i));
    n->set_op_type(ops[i].type);
    n->set_domain(ops[i].domain);
    n->add_input(prev);
    prev = i + 1 == ops.size() ? "y" : "t" + std::to_string(i);
    n->add_output(prev);
    for (const auto& [k, v] : ops[i].float_attrs) {
      auto* a = n->add_attribute();
      a->set_name(k);
      a->set_type(::onnx::AttributeProto::FLOAT);
      a->set_f(v);
    }
    for (const auto& [k, v] : ops[i].int_attrs) {
      auto* a = n->add_attribute();
      a->set_name(k);
      a->set_type(::onnx::AttributeProto::INT);
      a->set_i(v);
    }
  }
  return m.SerializeAsString();
}

Op leaky(float lo, float hi, float slope) {
  return {"kiln_example", "LeakyHardTanh", {{"min_val", lo}, {"max_val", hi}, {"slope", slope}}, {}};
}

float leaky_ref(float x, float lo, float hi, float slope) {
  if (x > hi) return hi + slope * (x - hi);
  if (x < lo) return lo + slope * (x - lo);
  return x;
}

Tensor random_input(int64_t batch, unsigned seed) {
  Tensor t = Tensor::empty(DataType::kFloat32, {batch, 8});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

// Runs the engine on x and checks y against the chain of two LeakyHardTanh of the reference.
void expect_matches_reference(const Engine& e, int64_t batch) {
  auto ctx = e.create_context();
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  const Tensor x = random_input(batch, static_cast<unsigned>(batch));
  auto out = (*ctx)->run({{"x", Value::of(x)}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const Tensor& y = (*out)[0].tensor;
  ASSERT_EQ(y.shape(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float want = leaky_ref(leaky_ref(x.data<float>()[i], -1.f, 1.f, 0.1f), -0.5f, 2.f, 0.25f);
    ASSERT_NEAR(y.data<float>()[i], want, 1e-6f) << "element " << i;
  }
}

// Every part appears in the message.
void expect_mentions(const std::string& msg, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

std::string two_leaky_model() { return chain_model({leaky(-1.f, 1.f, 0.1f), leaky(-0.5f, 2.f, 0.25f)}); }

}  // namespace

TEST(Plugins, UnknownOpsAreAllListedWithTheHint) {
  auto e = Engine::build_from_bytes(chain_model({{"kiln_nowhere", "Foo", {}, {}}, {"kiln_nowhere", "Bar", {}, {}}}));
  ASSERT_FALSE(e.ok());
  const std::string msg = e.status().message();
  expect_mentions(msg, {"kiln_nowhere.Foo", "kiln_nowhere.Bar", "--plugin", "register_custom_ops_library"});
}

TEST(Plugins, WrongAbiVersionIsRefused) {
  auto p = load_plugin(kDir + "/libkiln_test_wrong_abi.so");
  ASSERT_FALSE(p.ok());
  const std::string msg = p.status().message();
  EXPECT_EQ(p.status().code(), StatusCode::kEngineMismatch);
  expect_mentions(msg, {"libkiln_test_wrong_abi.so", "ABI version 999", "expects version " + std::to_string(KILN_PLUGIN_ABI_VERSION)});
}

TEST(Plugins, OnnxRuntimeLibraryRegisteringNoOpIsRefused) {
  // Loaded through kiln's shim of ORT's API (tests/unit/test_ort_api.cpp), it adds no op.
  auto p = load_plugin(kDir + "/libkiln_test_ort_like.so");
  ASSERT_FALSE(p.ok());
  const std::string msg = p.status().message();
  expect_mentions(msg, {"ONNX Runtime custom-op library", "libkiln_test_ort_like.so", "registered no CPU op"});
}

TEST(Plugins, InvalidDeclarationIsRefusedWhole) {
  auto p = load_plugin(kDir + "/libkiln_test_invalid.so");
  ASSERT_FALSE(p.ok());
  expect_mentions(p.status().message(), {"libkiln_test_invalid.so", "kiln_test.NoKernel", "no CPU kernel"});
  auto e = Engine::build_from_bytes(chain_model({{"kiln_test", "NoKernel", {}, {}}}));
  ASSERT_FALSE(e.ok());  // nothing of it was added
  expect_mentions(e.status().message(), {"kiln has no op kiln_test.NoKernel"});
}

TEST(Plugins, MissingLibraryNamesTheSearch) {
  auto p = load_plugin("kiln_no_such_plugin");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("KILN_PLUGIN_PATH"), std::string::npos) << p.status().message();
}

TEST(Plugins, OverridingABuiltInOpNeedsToBeAsked) {
  auto p = load_plugin(kDir + "/libkiln_test_override.so");
  ASSERT_FALSE(p.ok());
  const std::string msg = p.status().message();
  expect_mentions(msg, {"Relu", "built into kiln", "--plugin-override"});
  // Nothing of it was added: kiln's Relu still runs.
  auto e = Engine::build_from_bytes(chain_model({{"", "Relu", {}, {}}}));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto ctx = (*e)->create_context();
  Tensor x = random_input(2, 7);
  auto out = (*ctx)->run({{"x", Value::of(x)}});
  ASSERT_TRUE(out.ok());
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ((*out)[0].tensor.data<float>()[i], std::max(0.f, x.data<float>()[i]));
}

TEST(Plugins, ExampleBuildsTunesRunsSavesAndReloads) {
  auto p = load_plugin(kExample);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->name, "kiln_example");
  EXPECT_EQ(p->ops, std::vector<std::string>{"kiln_example.LeakyHardTanh"});
  BuildOptions o;
  o.tune = 1;  // the two tactics are timed
  o.tune_layer_seconds = 0.2;
  auto e = Engine::build_from_bytes(two_leaky_model(), o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  expect_matches_reference(**e, 3);
  expect_matches_reference(**e, 65);  // a second shape signature: reshape again
  auto bytes = (*e)->serialize();
  ASSERT_TRUE(bytes.ok());
  auto again = Engine::load_from_bytes(*bytes);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ((*again)->metadata()["format_version"], "4");
  expect_mentions((*again)->metadata()["plugins"], {"kiln_example.LeakyHardTanh from libkiln_example_plugin.so (kiln_example 1.0.0"});
  expect_matches_reference(**again, 17);
}

TEST(Plugins, BuildOptionsLoadThePlugin) {
  BuildOptions o;
  o.plugins = {kExample};
  auto e = Engine::build_from_bytes(two_leaky_model(), o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  expect_matches_reference(**e, 4);
  // Loading it again gives the first load's library, once.
  const size_t before = loaded_plugins().size();
  auto p = load_plugin(kExample);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->library, "libkiln_example_plugin.so");
  EXPECT_EQ(loaded_plugins().size(), before);
}

TEST(Plugins, BareNamesAreFoundInThePluginPath) {
  ::setenv("KILN_PLUGIN_PATH", ("/nonexistent:" + kDir).c_str(), 1);
  auto p = load_plugin("kiln_example_plugin");
  ::unsetenv("KILN_PLUGIN_PATH");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->library, "libkiln_example_plugin.so");
}

TEST(Plugins, EngineRefusesAnotherPluginNamingOpAndLibraries) {
  ASSERT_TRUE(load_plugin(kExample).ok());
  auto e = Engine::build_from_bytes(two_leaky_model());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto bytes = (*e)->serialize();
  ASSERT_TRUE(bytes.ok());
  // The engine as if built with version 9.9.9 of the plugin (same length, resealed).
  std::string edited = *bytes;
  const size_t at = edited.find("1.0.0");
  ASSERT_NE(at, std::string::npos);
  edited.replace(at, 5, "9.9.9");
  auto other = Engine::load_from_bytes(reseal(edited));
  ASSERT_FALSE(other.ok());
  const std::string msg = other.status().message();
  EXPECT_EQ(other.status().code(), StatusCode::kEngineMismatch);
  expect_mentions(msg, {"kiln_example.LeakyHardTanh", "9.9.9", "1.0.0", "libkiln_example_plugin.so"});
  // One built with a library of another name, not loaded here.
  edited = *bytes;
  const size_t lib = edited.find("libkiln_example_plugin.so");
  ASSERT_NE(lib, std::string::npos);
  edited.replace(lib, 7, "libkiwi");
  auto missing = Engine::load_from_bytes(reseal(edited));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("libkiwi_example_plugin.so"), std::string::npos) << missing.status().message();
  EXPECT_NE(missing.status().message().find("loaded one is library 'libkiln_example_plugin.so'"), std::string::npos)
      << missing.status().message();
}

TEST(Plugins, ShapeFunctionAndKernelErrorsNameThePlugin) {
  auto p = load_plugin(kDir + "/libkiln_test_bad_shape.so");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto e = Engine::build_from_bytes(chain_model({{"kiln_test", "BadShape", {}, {}}}));
  ASSERT_FALSE(e.ok());
  std::string msg = e.status().message();
  expect_mentions(msg, {"kiln_test_bad_shape", "BadShape refuses every shape", "infer"});
  // With fail=0 its shape function passes and its kernel fails at run time, named likewise.
  auto ok = Engine::build_from_bytes(chain_model({{"kiln_test", "BadShape", {}, {{"fail", 0}}}}));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  auto ctx = (*ok)->create_context();
  auto out = (*ctx)->run({{"x", Value::of(random_input(2, 1))}});
  ASSERT_FALSE(out.ok());
  msg = out.status().message();
  expect_mentions(msg, {"kiln_test_bad_shape", "fails on purpose"});
  // With fail=2 its reshape gives a shape infer did not promise: refused before anything runs.
  auto lying = Engine::build_from_bytes(chain_model({{"kiln_test", "BadShape", {}, {{"fail", 2}}}}));
  ASSERT_TRUE(lying.ok()) << lying.status().to_string();
  auto lctx = (*lying)->create_context();
  out = (*lctx)->run({{"x", Value::of(random_input(2, 1))}});
  ASSERT_FALSE(out.ok());
  expect_mentions(out.status().message(), {"kiln_test_bad_shape", "reshape gave output 0", "rank differs"});
}

// The C++ wrappers turn exceptions into a status and message, never letting one cross the C ABI.
TEST(Plugins, CppWrapperGuardCatchesExceptions) {
  char text[64] = {0};
  KilnError err{text, sizeof(text)};
  EXPECT_EQ(kiln_plugin::guard(&err, [] {}), KILN_STATUS_OK);
  EXPECT_EQ(kiln_plugin::guard(&err, [] { throw kiln_plugin::Error(KILN_STATUS_UNSUPPORTED, "no such mode"); }),
            KILN_STATUS_UNSUPPORTED);
  EXPECT_STREQ(text, "no such mode");
  EXPECT_EQ(kiln_plugin::guard(&err, [] { throw std::runtime_error("boom"); }), KILN_STATUS_RUNTIME_ERROR);
  EXPECT_STREQ(text, "boom");
  EXPECT_EQ(kiln_plugin::guard(&err, [] { throw 42; }), KILN_STATUS_RUNTIME_ERROR);
}

// A plugin written with kiln/plugin.hpp: typed attributes, a kernel class, and an exception thrown in
// its constructor reported as the plugin's error.
TEST(Plugins, CppWrapperPluginRuns) {
  auto p = load_plugin(kDir + "/libkiln_test_cpp.so");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto e = Engine::build_from_bytes(chain_model({{"kiln_test", "Scale", {{"alpha", 2.5f}}, {}}}));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto ctx = (*e)->create_context();
  const Tensor x = random_input(3, 5);
  auto out = (*ctx)->run({{"x", Value::of(x)}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ((*out)[0].tensor.data<float>()[i], 2.5f * x.data<float>()[i]);
  auto zero = Engine::build_from_bytes(chain_model({{"kiln_test", "Scale", {{"alpha", 0.f}}, {}}}));
  ASSERT_FALSE(zero.ok());
  expect_mentions(zero.status().message(), {"kiln_test_cpp", "create failed", "alpha must not be 0"});
  auto missing = Engine::build_from_bytes(chain_model({{"kiln_test", "Scale", {}, {}}}));
  ASSERT_FALSE(missing.ok());
  expect_mentions(missing.status().message(), {"attribute 'alpha' is required"});
}
