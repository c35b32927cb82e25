// kiln's shim of ONNX Runtime's custom-op C API (src/plugins/ort_api.cpp, ort_ops.cpp, #43 step 2): the
// table's functions one by one (status, attributes, strings, type and shape info, an unimplemented slot's
// error naming the function), and tests/plugins/ort_test_ops.c — an ORT custom-op library written
// against ORT's ABI only — loaded unchanged, run against a reference, saved and reloaded, and failing
// with errors that name the op and the API function.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "onnx/onnx.pb.h"
#include "plugins/ort_api.h"

using namespace kiln;
namespace ort = kiln::plugins::ort;

namespace {

// Built beside the tests; KILN_TEST_PLUGIN_DIR names the folder where the binaries were moved (as in
// tests/unit/test_plugins.cpp).
std::string ort_ops_library() {
  const char* moved = std::getenv("KILN_TEST_PLUGIN_DIR");
  return std::string(moved && *moved ? moved : KILN_PLUGIN_DIR) + "/libkiln_test_ort_ops.so";
}
const std::string kOrtOps = ort_ops_library();

// The table's function at `slot`, as type F.
template <typename F>
F fn(size_t slot) {
  const void* table = ort::api_base()->get_api(16);
  return reinterpret_cast<F>(static_cast<void* const*>(table)[slot]);
}

using Status_ = ort::Status;

// A node of kiln_ort_test's op `type` on x (float [batch, 4]) → y, with attribute alpha when given; y
// declared [batch, 4], or float of unknown shape when `declare_y` is false.
std::string one_op_model(const std::string& type, const float* alpha = nullptr, bool declare_y = true) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* o = m.add_opset_import();
  o->set_domain("kiln_ort_test");
  o->set_version(1);
  auto* g = m.mutable_graph();
  g->set_name("g");
  g->add_output()->set_name("y");
  for (auto [v, name] : {std::make_pair(g->add_input(), "x"), std::make_pair(g->mutable_output(0), "y")}) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(1);
    if (!declare_y && std::string(name) == "y") continue;  // no shape: unknown rank
    t->mutable_shape()->add_dim()->set_dim_param("batch");
    t->mutable_shape()->add_dim()->set_dim_value(4);
  }
  auto* n = g->add_node();
  n->set_name("n0");
  n->set_op_type(type);
  n->set_domain("kiln_ort_test");
  n->add_input("x");
  n->add_output("y");
  if (alpha) {
    auto* a = n->add_attribute();
    a->set_name("alpha");
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(*alpha);
  }
  return m.SerializeAsString();
}

Tensor random_x(int64_t batch, unsigned seed) {
  Tensor t = Tensor::empty(DataType::kFloat32, {batch, 4});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-5.f, 5.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

void expect_mentions(const std::string& msg, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

// Runs `engine` once on x; the context lives as long as the outputs are read.
struct OneRun {
  std::unique_ptr<ExecutionContext> ctx;
  Expected<std::vector<Value>> out = internal_error("not run");
};
OneRun run_once(const std::shared_ptr<Engine>& engine, const Tensor& x) {
  OneRun r;
  auto ctx = engine->create_context();
  if (!ctx.ok()) {
    r.out = ctx.status();
    return r;
  }
  r.ctx = std::move(*ctx);
  r.out = r.ctx->run({{"x", Value::of(x)}});
  return r;
}

void load_ort_ops() {
  auto p = load_plugin(kOrtOps);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
}

}  // namespace

TEST(OrtApi, GetApiAnswersSupportedVersionsOnly) {
  const ort::ApiBase* base = ort::api_base();
  EXPECT_NE(base->get_api(1), nullptr);
  EXPECT_EQ(base->get_api(ort::kMaxApiVersion), base->get_api(1));
  EXPECT_EQ(base->get_api(ort::kMaxApiVersion + 1), nullptr);
  EXPECT_EQ(base->get_api(0), nullptr);
  EXPECT_STREQ(base->get_version_string(), ort::kVersionString);
}

TEST(OrtApi, SlotOrderIsOrtsPublicLayout) {
  // Spot checks of the ABI: the index of each function in ORT's table.
  EXPECT_STREQ(ort::slot_name(0), "CreateStatus");
  EXPECT_STREQ(ort::slot_name(28), "AddCustomOpDomain");
  EXPECT_STREQ(ort::slot_name(91), "KernelContext_GetOutput");
  EXPECT_STREQ(ort::slot_name(93), "ReleaseStatus");
  EXPECT_STREQ(ort::slot_name(163), "KernelInfoGetAttributeArray_int64");
  EXPECT_STREQ(ort::slot_name(236), "KernelInfoGetAttribute_tensor");
  EXPECT_STREQ(ort::slot_name(247), "Logger_LogMessage");
  EXPECT_STREQ(ort::slot_name(274), "KernelContext_ParallelFor");
  EXPECT_STREQ(ort::slot_name(ort::kSlotCount), "");
}

TEST(OrtApi, StatusCreateMessageRelease) {
  auto create = fn<Status_* (*)(int32_t, const char*)>(ort::kCreateStatus);
  auto code = fn<int32_t (*)(const Status_*)>(ort::kGetErrorCode);
  auto message = fn<const char* (*)(const Status_*)>(ort::kGetErrorMessage);
  auto release = fn<void (*)(Status_*)>(ort::kReleaseStatus);
  Status_* st = create(ort::kOrtInvalidArgument, "bad alpha");
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(code(st), ort::kOrtInvalidArgument);
  EXPECT_STREQ(message(st), "bad alpha");
  release(st);
  EXPECT_EQ(create(ort::kOrtOk, "fine"), nullptr);  // ORT_OK is no status at all
  release(nullptr);
}

TEST(OrtApi, UnimplementedSlotAnswersAnErrorNamingTheFunction) {
  ort::take_missing_call();
  // An unimplemented slot is one function `void* ()` whatever the API function's type (a foreign C
  // caller passes arguments it ignores); called from here, it is called by its own type, as UBSan's
  // function-type check (the sanitizer job) requires.
  auto session_input_count = fn<void* (*)()>(ort::kSessionGetInputCount);
  Status_* st = static_cast<Status_*>(session_input_count());
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->code, ort::kOrtNotImplemented);
  expect_mentions(st->message, {"SessionGetInputCount", "kiln"});
  delete st;
  EXPECT_EQ(ort::take_missing_call(), "SessionGetInputCount");
  EXPECT_EQ(ort::take_missing_call(), "");  // taken
  // A slot that returns no status (GetBuildInfoString) answers null and is still recorded.
  auto build_info = fn<void* (*)()>(ort::kGetBuildInfoString);
  EXPECT_EQ(build_info(), nullptr);
  EXPECT_EQ(ort::take_missing_call(), "GetBuildInfoString");
}

TEST(OrtApi, KernelInfoAttributes) {
  ort::KernelInfo info;
  ir::Attribute f, i, s, fs, is;
  f.kind = ir::Attribute::Kind::kFloat;
  f.f = 0.25f;
  i.kind = ir::Attribute::Kind::kInt;
  i.i = -7;
  s.kind = ir::Attribute::Kind::kString;
  s.s = "hello";
  fs.kind = ir::Attribute::Kind::kFloats;
  fs.floats = {1.5f, -2.f, 3.f};
  is.kind = ir::Attribute::Kind::kInts;
  is.ints = {4, 5};
  info.attrs = {{"f", f}, {"i", i}, {"s", s}, {"fs", fs}, {"is", is}};
  auto get_f = fn<Status_* (*)(const ort::KernelInfo*, const char*, float*)>(ort::kKernelInfoGetAttribute_float);
  auto get_i = fn<Status_* (*)(const ort::KernelInfo*, const char*, int64_t*)>(ort::kKernelInfoGetAttribute_int64);
  auto get_s = fn<Status_* (*)(const ort::KernelInfo*, const char*, char*, size_t*)>(ort::kKernelInfoGetAttribute_string);
  auto get_fs = fn<Status_* (*)(const ort::KernelInfo*, const char*, float*, size_t*)>(ort::kKernelInfoGetAttributeArray_float);
  auto get_is = fn<Status_* (*)(const ort::KernelInfo*, const char*, int64_t*, size_t*)>(ort::kKernelInfoGetAttributeArray_int64);
  float fv = 0;
  int64_t iv = 0;
  EXPECT_EQ(get_f(&info, "f", &fv), nullptr);
  EXPECT_EQ(fv, 0.25f);
  EXPECT_EQ(get_i(&info, "i", &iv), nullptr);
  EXPECT_EQ(iv, -7);
  // Strings: the size (with the NUL) first, then the text; a buffer too small is an error saying the size.
  size_t size = 0;
  EXPECT_EQ(get_s(&info, "s", nullptr, &size), nullptr);
  EXPECT_EQ(size, 6u);
  char small[3];
  size = sizeof(small);
  Status_* st = get_s(&info, "s", small, &size);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(size, 6u);
  EXPECT_EQ(ort::consume_status(st).empty(), false);
  char buf[6];
  size = sizeof(buf);
  EXPECT_EQ(get_s(&info, "s", buf, &size), nullptr);
  EXPECT_STREQ(buf, "hello");
  size = 0;
  EXPECT_EQ(get_fs(&info, "fs", nullptr, &size), nullptr);
  ASSERT_EQ(size, 3u);
  float fa[3];
  EXPECT_EQ(get_fs(&info, "fs", fa, &size), nullptr);
  EXPECT_EQ(fa[1], -2.f);
  int64_t ia[2];
  size = 2;
  EXPECT_EQ(get_is(&info, "is", ia, &size), nullptr);
  EXPECT_EQ(ia[0], 4);
  EXPECT_EQ(ia[1], 5);
  // Absent, or of another kind: an error naming the attribute (libraries then take their default).
  st = get_f(&info, "missing", &fv);
  ASSERT_NE(st, nullptr);
  expect_mentions(ort::consume_status(st), {"missing"});
  st = get_i(&info, "f", &iv);
  ASSERT_NE(st, nullptr);
  expect_mentions(ort::consume_status(st), {"'f'", "another kind"});
}

TEST(OrtApi, ShapeInferContextAttributes) {
  std::map<std::string, ir::Attribute> attrs;
  ir::Attribute i, fs, s, ss;
  i.kind = ir::Attribute::Kind::kInt;
  i.i = 42;
  fs.kind = ir::Attribute::Kind::kFloats;
  fs.floats = {0.5f, 1.5f};
  s.kind = ir::Attribute::Kind::kString;
  s.s = "abc";
  ss.kind = ir::Attribute::Kind::kStrings;
  ss.strings = {"x", "yz"};
  attrs = {{"i", i}, {"fs", fs}, {"s", s}, {"ss", ss}};
  ort::ShapeInferContext c;
  c.attrs = &attrs;
  using Attr = const void;
  auto get = fn<Status_* (*)(const ort::ShapeInferContext*, const char*, Attr**)>(ort::kShapeInferContext_GetAttribute);
  auto type = fn<Status_* (*)(Attr*, int32_t*)>(ort::kOpAttr_GetType);
  auto name = fn<Status_* (*)(Attr*, const char**)>(ort::kOpAttr_GetName);
  auto read = fn<Status_* (*)(Attr*, int32_t, void*, size_t, size_t*)>(ort::kReadOpAttr);
  Attr* a = nullptr;
  int32_t t = 0;
  size_t n = 0;
  const char* nm = nullptr;
  ASSERT_EQ(get(&c, "i", &a), nullptr);
  EXPECT_EQ(type(a, &t), nullptr);
  EXPECT_EQ(t, 1);  // ORT_OP_ATTR_INT
  EXPECT_EQ(name(a, &nm), nullptr);
  EXPECT_STREQ(nm, "i");
  int64_t iv = 0;
  EXPECT_EQ(read(a, 1, &iv, sizeof(iv), &n), nullptr);
  EXPECT_EQ(iv, 42);
  EXPECT_EQ(n, sizeof(int64_t));
  ASSERT_EQ(get(&c, "fs", &a), nullptr);
  Status_* st = read(a, 4, nullptr, 0, &n);  // the size first
  ASSERT_NE(st, nullptr);
  ort::consume_status(st);
  ASSERT_EQ(n, 2 * sizeof(float));
  float fv[2];
  EXPECT_EQ(read(a, 4, fv, sizeof(fv), &n), nullptr);
  EXPECT_EQ(fv[1], 1.5f);
  ASSERT_EQ(get(&c, "ss", &a), nullptr);
  char buf[16];
  EXPECT_EQ(read(a, 6, buf, sizeof(buf), &n), nullptr);
  EXPECT_EQ(std::string(buf, n), std::string("x\0yz\0", 5));
  st = read(a, 5, buf, sizeof(buf), &n);  // another type
  ASSERT_NE(st, nullptr);
  expect_mentions(ort::consume_status(st), {"ReadOpAttr", "'ss'"});
  st = get(&c, "nope", &a);
  ASSERT_NE(st, nullptr);
  expect_mentions(ort::consume_status(st), {"'nope'"});
}

TEST(OrtApi, TensorTypeAndShapeAndStrings) {
  Tensor t = Tensor::empty(DataType::kString, {3});
  t.data<std::string>()[0] = "ab";
  t.data<std::string>()[1] = "";
  t.data<std::string>()[2] = "cde";
  ort::Value v;
  v.out = &t;
  auto type_shape = fn<Status_* (*)(const ort::Value*, ort::TensorInfo**)>(ort::kGetTensorTypeAndShape);
  auto elem = fn<Status_* (*)(const ort::TensorInfo*, int32_t*)>(ort::kGetTensorElementType);
  auto count = fn<Status_* (*)(const ort::TensorInfo*, size_t*)>(ort::kGetTensorShapeElementCount);
  auto release_info = fn<void (*)(ort::TensorInfo*)>(ort::kReleaseTensorTypeAndShapeInfo);
  ort::TensorInfo* info = nullptr;
  ASSERT_EQ(type_shape(&v, &info), nullptr);
  int32_t e = 0;
  size_t n = 0;
  EXPECT_EQ(elem(info, &e), nullptr);
  EXPECT_EQ(e, ort::kElemString);
  EXPECT_EQ(count(info, &n), nullptr);
  EXPECT_EQ(n, 3u);
  release_info(info);

  auto data_length = fn<Status_* (*)(const ort::Value*, size_t*)>(ort::kGetStringTensorDataLength);
  auto content = fn<Status_* (*)(const ort::Value*, void*, size_t, size_t*, size_t)>(ort::kGetStringTensorContent);
  size_t len = 0;
  EXPECT_EQ(data_length(&v, &len), nullptr);
  ASSERT_EQ(len, 5u);
  char buf[5];
  size_t offsets[3];
  EXPECT_EQ(content(&v, buf, sizeof(buf), offsets, 3), nullptr);
  EXPECT_EQ(std::string(buf, 5), "abcde");
  EXPECT_EQ(offsets[0], 0u);
  EXPECT_EQ(offsets[1], 2u);
  EXPECT_EQ(offsets[2], 2u);
  Status_* st = content(&v, buf, 4, offsets, 3);  // too small
  ASSERT_NE(st, nullptr);
  ort::consume_status(st);

  auto fill = fn<Status_* (*)(ort::Value*, const char* const*, size_t)>(ort::kFillStringTensor);
  auto fill_one = fn<Status_* (*)(ort::Value*, const char*, size_t)>(ort::kFillStringTensorElement);
  const char* words[] = {"x", "yy", "zzz"};
  EXPECT_EQ(fill(&v, words, 3), nullptr);
  EXPECT_EQ(t.data<std::string>()[2], "zzz");
  EXPECT_EQ(fill_one(&v, "w", 1), nullptr);
  EXPECT_EQ(t.data<std::string>()[1], "w");
  st = fill(&v, words, 2);  // count differs from the element count
  ASSERT_NE(st, nullptr);
  ort::consume_status(st);
  // A numeric tensor is not a string tensor.
  Tensor f = Tensor::empty(DataType::kFloat32, {2});
  ort::Value fv;
  fv.out = &f;
  st = data_length(&fv, &len);
  ASSERT_NE(st, nullptr);
  expect_mentions(ort::consume_status(st), {"GetStringTensorDataLength", "not a string tensor"});
}

TEST(OrtApi, AllocatorAndMemoryInfo) {
  auto get = fn<Status_* (*)(ort::Allocator**)>(ort::kGetAllocatorWithDefaultOptions);
  auto alloc = fn<Status_* (*)(ort::Allocator*, size_t, void**)>(ort::kAllocatorAlloc);
  auto free_ = fn<Status_* (*)(ort::Allocator*, void*)>(ort::kAllocatorFree);
  auto create_cpu = fn<Status_* (*)(int32_t, int32_t, ort::MemoryInfo**)>(ort::kCreateCpuMemoryInfo);
  auto name = fn<Status_* (*)(const ort::MemoryInfo*, const char**)>(ort::kMemoryInfoGetName);
  auto release_info = fn<void (*)(ort::MemoryInfo*)>(ort::kReleaseMemoryInfo);
  ort::Allocator* a = nullptr;
  ASSERT_EQ(get(&a), nullptr);
  void* p = nullptr;
  ASSERT_EQ(alloc(a, 100, &p), nullptr);
  std::memset(p, 1, 100);
  EXPECT_EQ(free_(a, p), nullptr);
  ort::MemoryInfo* mi = nullptr;
  ASSERT_EQ(create_cpu(ort::kDeviceAllocator, ort::kMemTypeDefault, &mi), nullptr);
  const char* n = nullptr;
  EXPECT_EQ(name(mi, &n), nullptr);
  EXPECT_STREQ(n, "Cpu");
  release_info(mi);
  // A null where a pointer is required is an error, not a crash.
  Status_* st = get(nullptr);
  ASSERT_NE(st, nullptr);
  expect_mentions(ort::consume_status(st), {"GetAllocatorWithDefaultOptions"});
}

TEST(OrtApi, LibraryLoadsRunsAndMatchesTheReference) {
  load_ort_ops();
  for (float alpha : {2.5f, -0.5f}) {
    auto e = Engine::build_from_bytes(one_op_model("Scale", &alpha));
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    auto ctx = (*e)->create_context();
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    for (int64_t batch : {1, 3, 7}) {  // output shapes known only as the op runs
      const Tensor x = random_x(batch, static_cast<unsigned>(batch));
      auto out = (*ctx)->run({{"x", Value::of(x)}});
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      const Tensor& y = (*out)[0].tensor;
      ASSERT_EQ(y.shape(), x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(y.data<float>()[i], alpha * x.data<float>()[i]) << i;
    }
  }
  // Without the attribute: the library's default (1).
  auto e = Engine::build_from_bytes(one_op_model("Scale"));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const Tensor x = random_x(2, 9);
  OneRun r = run_once(*e, x);
  ASSERT_TRUE(r.out.ok()) << r.out.status().to_string();
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ((*r.out)[0].tensor.data<float>()[i], x.data<float>()[i]);
}

TEST(OrtApi, InferOutputShapeFnGivesBuildTimeShapes) {
  load_ort_ops();
  auto shaped = Engine::build_from_bytes(one_op_model("ScaleShaped", nullptr, false));
  ASSERT_TRUE(shaped.ok()) << shaped.status().to_string();
  const TensorInfo& y = (*shaped)->outputs().at(0);
  EXPECT_EQ(y.dtype, DataType::kFloat32);
  ASSERT_TRUE(y.rank_known);
  ASSERT_EQ(y.shape.size(), 2u);
  EXPECT_EQ(y.shape[1], 4);
  // Without a shape function the shape is known only as the op runs.
  auto plain = Engine::build_from_bytes(one_op_model("Scale", nullptr, false));
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_FALSE((*plain)->outputs().at(0).rank_known);
  EXPECT_EQ((*plain)->outputs().at(0).dtype, DataType::kFloat32);
  // Both run the same.
  const Tensor x = random_x(3, 5);
  OneRun a = run_once(*shaped, x), b = run_once(*plain, x);
  ASSERT_TRUE(a.out.ok() && b.out.ok());
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ((*a.out)[0].tensor.data<float>()[i], (*b.out)[0].tensor.data<float>()[i]);
}

TEST(OrtApi, EngineRecordsTheLibraryAndReloads) {
  load_ort_ops();
  const float alpha = 3.f;
  auto e = Engine::build_from_bytes(one_op_model("Scale", &alpha));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto bytes = (*e)->serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  EXPECT_NE(bytes->find("libkiln_test_ort_ops.so"), std::string::npos);
  auto back = Engine::load_from_bytes(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  const Tensor x = random_x(5, 3);
  OneRun r = run_once(*back, x);
  ASSERT_TRUE(r.out.ok()) << r.out.status().to_string();
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ((*r.out)[0].tensor.data<float>()[i], 3.f * x.data<float>()[i]);
}

TEST(OrtApi, OpCallingAnUnimplementedFunctionFailsNamingIt) {
  load_ort_ops();
  auto e = Engine::build_from_bytes(one_op_model("CallsMissing"));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  OneRun r = run_once(*e, random_x(2, 1));
  ASSERT_FALSE(r.out.ok());
  expect_mentions(r.out.status().message(), {"kiln_ort_test.CallsMissing", "SessionGetInputCount", "libkiln_test_ort_ops.so"});
}

TEST(OrtApi, OpErrorStatusNamesTheOpAndCarriesItsMessage) {
  load_ort_ops();
  auto e = Engine::build_from_bytes(one_op_model("Fails"));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  OneRun r = run_once(*e, random_x(2, 1));
  ASSERT_FALSE(r.out.ok());
  expect_mentions(r.out.status().message(), {"kiln_ort_test.Fails", "Fails: bad input", "node 'n0'"});
}
