// Tests of the ONNX importer: models are built as ModelProtos here, serialized and imported.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <cstdio>
#include <random>

#include "ir/float_types.h"
#include "onnx/importer.h"
#include "onnx/proto_nesting.h"
#include "onnx/onnx.pb.h"
#include "onnx/sha256.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// ---- Building models

::onnx::ModelProto make_model(int opset = 17) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("kiln-test");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("main");
  return m;
}

void set_type(::onnx::ValueInfoProto* vi, int elem, const std::vector<std::string>& dims) {
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  auto* shape = tt->mutable_shape();
  for (const auto& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
    else if (!d.empty()) dim->set_dim_param(d);
  }
}

void add_input(::onnx::GraphProto* g, const std::string& name, int elem = 1, std::vector<std::string> dims = {"N", "4"}) {
  auto* vi = g->add_input();
  vi->set_name(name);
  set_type(vi, elem, dims);
}

void add_output(::onnx::GraphProto* g, const std::string& name, int elem = 1) {
  auto* vi = g->add_output();
  vi->set_name(name);
  if (elem) vi->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
}

::onnx::NodeProto* add_node(::onnx::GraphProto* g, const std::string& op, std::vector<std::string> ins,
                            std::vector<std::string> outs, const std::string& name = {}) {
  auto* n = g->add_node();
  n->set_op_type(op);
  if (!name.empty()) n->set_name(name);
  for (auto& i : ins) n->add_input(i);
  for (auto& o : outs) n->add_output(o);
  return n;
}

::onnx::TensorProto* add_init(::onnx::GraphProto* g, const std::string& name, int dtype, std::vector<int64_t> dims) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(dtype);
  for (auto d : dims) t->add_dims(d);
  return t;
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A model with one float initializer `w` feeding Add(x, w) → y.
::onnx::ModelProto add_model() {
  auto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x", 1, {"2"});
  add_output(g, "y");
  add_node(g, "Add", {"x", "w"}, {"y"}, "add");
  return m;
}

Expected<ir::Model> import(const ::onnx::ModelProto& m, const std::string& base_dir = {}) {
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  kiln::onnx::ImportOptions opt;
  opt.source_name = "test.onnx";
  opt.base_dir = base_dir;
  return kiln::onnx::import_bytes(bytes, opt);
}

// Imports a model whose only content of interest is initializer `w`; returns its constant.
Tensor import_initializer(const ::onnx::ModelProto& m) {
  auto r = import(m);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  ir::Value* w = r->graph->find_value("w");
  EXPECT_TRUE(w && w->constant);
  return w && w->constant ? *w->constant : Tensor();
}

void expect_error(const Expected<ir::Model>& r, StatusCode code, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const auto& p : parts) EXPECT_NE(r.status().message().find(p), std::string::npos)
      << "'" << p << "' not in: " << r.status().message();
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("kiln_import_" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  void write(const std::string& name, const std::string& data) const {
    fs::create_directories((path / name).parent_path());
    std::ofstream(path / name, std::ios::binary) << data;
  }
};

int count_ops(const ir::Graph& g, const std::string& op) {
  int k = 0;
  for (const ir::Node* n : g.nodes()) k += n->op_type == op;
  return k;
}

}  // namespace

// ---- SHA-256

TEST(OnnxImportSha256, KnownVectors) {
  EXPECT_EQ(kiln::onnx::sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(kiln::onnx::sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(kiln::onnx::sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces to exercise the buffering.
  kiln::onnx::Sha256 h;
  const std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left) {
    const size_t n = std::min(left, chunk.size());
    h.update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// The CPU's SHA extensions (where it has them) and the portable rounds give the same digest on random
// bytes of every length around the block size and on long inputs fed in random pieces. (On a CPU
// without them both hashers run the portable rounds, and the known vectors above check those.)
TEST(OnnxImportSha256, AcceleratedMatchesPortable) {
  std::mt19937 rng(5);
  std::vector<uint8_t> data(300000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t n : {size_t{0}, size_t{1}, size_t{55}, size_t{56}, size_t{63}, size_t{64}, size_t{65}, size_t{127}, size_t{128},
                   size_t{129}, size_t{1000}, size_t{4096}, data.size()}) {
    kiln::onnx::Sha256 fast, plain(/*portable=*/true);
    fast.update(data.data(), n);
    plain.update(data.data(), n);
    EXPECT_EQ(fast.hex_digest(), plain.hex_digest()) << n << " bytes";
  }
  kiln::onnx::Sha256 fast, plain(/*portable=*/true);
  for (size_t at = 0; at < data.size();) {
    const size_t n = std::min<size_t>(data.size() - at, rng() % 700);
    fast.update(data.data() + at, n);
    plain.update(data.data() + at, n);
    at += n;
  }
  EXPECT_EQ(fast.hex_digest(), plain.hex_digest());
  std::printf("[ info ] SHA extensions used: %s\n", kiln::onnx::Sha256::accelerated() ? "yes" : "no");
}

// ---- Initializers: raw vs typed, every storage form

TEST(OnnxImportTensor, FloatRawAndTyped) {
  const std::vector<float> v = {1.5f, -2.25f};
  auto raw = add_model();
  add_init(raw.mutable_graph(), "w", 1, {2})->set_raw_data(bytes_of(v));
  auto typed = add_model();
  auto* t = add_init(typed.mutable_graph(), "w", 1, {2});
  for (float f : v) t->add_float_data(f);
  for (const auto& m : {raw, typed}) {
    Tensor w = import_initializer(m);
    ASSERT_EQ(w.dtype(), DataType::kFloat32);
    ASSERT_EQ(w.shape(), Shape({2}));
    EXPECT_EQ(w.data<float>()[0], 1.5f);
    EXPECT_EQ(w.data<float>()[1], -2.25f);
  }
}

TEST(OnnxImportTensor, Int64RawAndTyped) {
  const std::vector<int64_t> v = {-(int64_t{1} << 40), 7, 0};
  auto raw = add_model();
  add_init(raw.mutable_graph(), "w", 7, {3})->set_raw_data(bytes_of(v));
  auto typed = add_model();
  auto* t = add_init(typed.mutable_graph(), "w", 7, {3});
  for (auto x : v) t->add_int64_data(x);
  for (const auto& m : {raw, typed}) {
    Tensor w = import_initializer(m);
    ASSERT_EQ(w.dtype(), DataType::kInt64);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(w.data<int64_t>()[i], v[i]);
  }
}

TEST(OnnxImportTensor, Float16RawAndTypedBits) {
  const std::vector<uint16_t> bits = {f32_to_f16(1.0f), f32_to_f16(-0.5f), f32_to_f16(65504.0f)};
  auto raw = add_model();
  add_init(raw.mutable_graph(), "w", 10, {3})->set_raw_data(bytes_of(bits));
  auto typed = add_model();
  auto* t = add_init(typed.mutable_graph(), "w", 10, {3});
  for (auto b : bits) t->add_int32_data(b);  // float16 bits live in int32_data
  for (const auto& m : {raw, typed}) {
    Tensor w = import_initializer(m);
    ASSERT_EQ(w.dtype(), DataType::kFloat16);
    EXPECT_EQ(f16_to_f32(w.data<uint16_t>()[0]), 1.0f);
    EXPECT_EQ(f16_to_f32(w.data<uint16_t>()[1]), -0.5f);
    EXPECT_EQ(f16_to_f32(w.data<uint16_t>()[2]), 65504.0f);
  }
}

TEST(OnnxImportTensor, BoolRawAndTyped) {
  auto raw = add_model();
  add_init(raw.mutable_graph(), "w", 9, {3})->set_raw_data(std::string("\x01\x00\x01", 3));
  auto typed = add_model();
  auto* t = add_init(typed.mutable_graph(), "w", 9, {3});
  t->add_int32_data(1);
  t->add_int32_data(0);
  t->add_int32_data(1);
  for (const auto& m : {raw, typed}) {
    Tensor w = import_initializer(m);
    ASSERT_EQ(w.dtype(), DataType::kBool);
    EXPECT_EQ(w.data<uint8_t>()[0], 1);
    EXPECT_EQ(w.data<uint8_t>()[1], 0);
    EXPECT_EQ(w.data<uint8_t>()[2], 1);
  }
}

TEST(OnnxImportTensor, StringTypedAndRawRefused) {
  auto m = add_model();
  auto* t = add_init(m.mutable_graph(), "w", 8, {2});
  t->add_string_data("hello");
  t->add_string_data(std::string("a\0b", 3));
  Tensor w = import_initializer(m);
  ASSERT_EQ(w.dtype(), DataType::kString);
  EXPECT_EQ(w.data<std::string>()[0], "hello");
  EXPECT_EQ(w.data<std::string>()[1], std::string("a\0b", 3));

  auto bad = add_model();
  add_init(bad.mutable_graph(), "w", 8, {1})->set_raw_data("x");
  expect_error(import(bad), StatusCode::kInvalidModel, {"'w'", "string_data"});
}

TEST(OnnxImportTensor, Int4UnpackedAndSignExtended) {
  // Elements 1, -2, 7, -8, 3 (odd count: the last byte's high nibble is padding).
  const std::vector<int> want = {1, -2, 7, -8, 3};
  std::string packed;
  for (size_t i = 0; i < want.size(); i += 2) {
    const uint8_t lo = want[i] & 0xf;
    const uint8_t hi = i + 1 < want.size() ? (want[i + 1] & 0xf) : 0;
    packed += static_cast<char>(lo | hi << 4);
  }
  auto raw = add_model();
  add_init(raw.mutable_graph(), "w", 22, {5})->set_raw_data(packed);
  auto typed = add_model();
  auto* t = add_init(typed.mutable_graph(), "w", 22, {5});
  for (char c : packed) t->add_int32_data(static_cast<uint8_t>(c));  // two elements per int32
  for (const auto& m : {raw, typed}) {
    Tensor w = import_initializer(m);
    ASSERT_EQ(w.dtype(), DataType::kInt4);
    ASSERT_EQ(w.numel(), 5);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(w.data<int8_t>()[i], want[i]) << i;
  }
  // uint4 keeps the nibbles unsigned.
  auto u = add_model();
  add_init(u.mutable_graph(), "w", 21, {2})->set_raw_data(std::string(1, static_cast<char>(0xE9)));
  Tensor w = import_initializer(u);
  ASSERT_EQ(w.dtype(), DataType::kUInt4);
  EXPECT_EQ(w.data<uint8_t>()[0], 9);
  EXPECT_EQ(w.data<uint8_t>()[1], 14);
  // Packed size is checked: 5 int4 need 3 bytes.
  auto bad = add_model();
  add_init(bad.mutable_graph(), "w", 22, {5})->set_raw_data(std::string(2, '\0'));
  expect_error(import(bad), StatusCode::kInvalidModel, {"'w'", "raw_data has 2 bytes, expected 3"});
}

TEST(OnnxImportTensor, Int2AndUInt2Unpacked) {
  // int2 elements 1, -2, -1, 0, 1 → 2-bit codes 01 10 11 00 | 01, lowest bits first.
  const std::vector<int> want = {1, -2, -1, 0, 1};
  std::string packed(2, '\0');
  for (size_t i = 0; i < want.size(); ++i) packed[i / 4] |= static_cast<char>((want[i] & 3) << (2 * (i % 4)));
  auto raw = add_model();
  add_init(raw.mutable_graph(), "w", 26, {5})->set_raw_data(packed);
  auto typed = add_model();
  auto* t = add_init(typed.mutable_graph(), "w", 26, {5});
  for (char c : packed) t->add_int32_data(static_cast<uint8_t>(c));  // four elements per int32
  for (const auto& m : {raw, typed}) {
    Tensor w = import_initializer(m);
    ASSERT_EQ(w.dtype(), DataType::kInt2);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(w.data<int8_t>()[i], want[i]) << i;
  }
  auto u = add_model();
  add_init(u.mutable_graph(), "w", 25, {4})->set_raw_data(std::string(1, static_cast<char>(0xE4)));  // 0,1,2,3
  Tensor w = import_initializer(u);
  ASSERT_EQ(w.dtype(), DataType::kUInt2);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w.data<uint8_t>()[i], i);
  auto bad = add_model();
  add_init(bad.mutable_graph(), "w", 26, {5})->set_raw_data(std::string(1, '\0'));
  expect_error(import(bad), StatusCode::kInvalidModel, {"'w'", "raw_data has 1 bytes, expected 2"});
}

TEST(OnnxImportTensor, OtherTypedFields) {
  auto m = add_model();
  auto* g = m.mutable_graph();
  auto* d = add_init(g, "d", 11, {2});
  d->add_double_data(0.125);
  d->add_double_data(-3);
  auto* u = add_init(g, "u", 13, {1});
  u->add_uint64_data(~uint64_t{0});
  auto* u32 = add_init(g, "u32", 12, {1});
  u32->add_uint64_data(4000000000u);
  auto* i8 = add_init(g, "i8", 3, {2});
  i8->add_int32_data(-128);
  i8->add_int32_data(127);
  auto* c = add_init(g, "c", 14, {1});  // complex64: real, imaginary
  c->add_float_data(1);
  c->add_float_data(2);
  add_init(g, "w", 1, {2})->set_raw_data(bytes_of(std::vector<float>{0, 0}));
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto val = [&](const char* n) { return *r->graph->find_value(n)->constant; };
  EXPECT_EQ(val("d").data<double>()[0], 0.125);
  EXPECT_EQ(val("d").data<double>()[1], -3.0);
  EXPECT_EQ(val("u").data<uint64_t>()[0], ~uint64_t{0});
  EXPECT_EQ(val("u32").data<uint32_t>()[0], 4000000000u);
  EXPECT_EQ(val("i8").data<int8_t>()[0], -128);
  EXPECT_EQ(val("i8").data<int8_t>()[1], 127);
  EXPECT_EQ(val("c").data<float>()[1], 2.0f);
  EXPECT_EQ(val("c").nbytes(), 8u);
}

TEST(OnnxImportTensor, SizeChecks) {
  {  // too few typed values
    auto m = add_model();
    add_init(m.mutable_graph(), "w", 1, {3})->add_float_data(1);
    expect_error(import(m), StatusCode::kInvalidModel, {"test.onnx", "initializer 'w'", "float_data holds 1 values, expected 3"});
  }
  {  // raw byte count wrong
    auto m = add_model();
    add_init(m.mutable_graph(), "w", 1, {2})->set_raw_data(std::string(7, '\0'));
    expect_error(import(m), StatusCode::kInvalidModel, {"'w'", "7 bytes, expected 8"});
  }
  {  // negative dim
    auto m = add_model();
    add_init(m.mutable_graph(), "w", 1, {-1})->set_raw_data("");
    expect_error(import(m), StatusCode::kInvalidModel, {"'w'", "negative dimension"});
  }
  {  // element count overflows int64
    auto m = add_model();
    add_init(m.mutable_graph(), "w", 1, {int64_t{1} << 40, int64_t{1} << 40})->set_raw_data("");
    expect_error(import(m), StatusCode::kInvalidModel, {"'w'"});
  }
  {  // giant dims with no data: refused before anything is allocated
    auto m = add_model();
    add_init(m.mutable_graph(), "w", 1, {int64_t{1} << 20, int64_t{1} << 20});
    expect_error(import(m), StatusCode::kInvalidModel, {"'w'", "float_data holds 0 values"});
  }
  {  // unknown dtype code
    auto m = add_model();
    add_init(m.mutable_graph(), "w", 99, {1});
    expect_error(import(m), StatusCode::kInvalidModel, {"'w'", "99"});
  }
  {  // zero-sized tensors are fine
    auto m = add_model();
    add_init(m.mutable_graph(), "w", 1, {0, 5});
    Tensor w = import_initializer(m);
    EXPECT_EQ(w.shape(), Shape({0, 5}));
  }
}

// ---- External data

namespace {
::onnx::ModelProto external_model(const std::string& location, int64_t offset, int64_t length) {
  auto m = add_model();
  auto* t = add_init(m.mutable_graph(), "w", 1, {2});
  t->set_data_location(::onnx::TensorProto_DataLocation_EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  if (offset >= 0) add("offset", std::to_string(offset));
  if (length >= 0) add("length", std::to_string(length));
  return m;
}

Expected<ir::Model> import_from_dir(const TempDir& dir, const ::onnx::ModelProto& m, const std::string& file = "model.onnx") {
  std::string bytes;
  m.SerializeToString(&bytes);
  dir.write(file, bytes);
  return kiln::onnx::import_file((dir.path / file).string());
}
}  // namespace

TEST(OnnxImportExternal, HappyPathWithOffset) {
  TempDir dir;
  const std::vector<float> v = {3.0f, -4.0f};
  dir.write("weights/w.bin", std::string(16, 'x') + bytes_of(v) + "tail");
  auto r = import_from_dir(dir, external_model("weights/w.bin", 16, 8));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Tensor& w = *r->graph->find_value("w")->constant;
  EXPECT_EQ(w.data<float>()[0], 3.0f);
  EXPECT_EQ(w.data<float>()[1], -4.0f);
  // Without a length the rest of the file is taken.
  dir.write("exact.bin", bytes_of(v));
  auto r2 = import_from_dir(dir, external_model("exact.bin", -1, -1));
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  EXPECT_EQ(r2->graph->find_value("w")->constant->data<float>()[1], -4.0f);
}

TEST(OnnxImportExternal, RefusesAbsoluteAndEscapingPaths) {
  TempDir dir;
  TempDir outside;
  const std::vector<float> v = {1, 2};
  outside.write("w.bin", bytes_of(v));
  dir.write("sub/model.onnx", "");
  expect_error(import_from_dir(dir, external_model((outside.path / "w.bin").string(), -1, -1)),
               StatusCode::kInvalidModel, {"'w'", "absolute"});
  expect_error(import_from_dir(dir, external_model("../" + outside.path.filename().string() + "/w.bin", -1, -1)),
               StatusCode::kInvalidModel, {"'w'", ".."});
  // A model in sub/ may not reach its parent folder either.
  dir.write("w.bin", bytes_of(v));
  expect_error(import_from_dir(dir, external_model("../w.bin", -1, -1), "sub/model.onnx"), StatusCode::kInvalidModel,
               {".."});
  // A symlink inside the folder that points outside is caught by the canonical-path check.
  std::error_code ec;
  fs::create_symlink(outside.path / "w.bin", dir.path / "link.bin", ec);
  if (!ec)
    expect_error(import_from_dir(dir, external_model("link.bin", -1, -1)), StatusCode::kInvalidModel,
                 {"outside the model's folder"});
  // Bytes without a folder cannot use external data at all.
  expect_error(import(external_model("w.bin", -1, -1)), StatusCode::kInvalidModel, {"'w'", "import_file"});
}

TEST(OnnxImportExternal, MissingFileAndBadRanges) {
  TempDir dir;
  expect_error(import_from_dir(dir, external_model("nope.bin", -1, -1)), StatusCode::kNotFound, {"'w'", "nope.bin"});
  dir.write("w.bin", std::string(8, '\0'));
  expect_error(import_from_dir(dir, external_model("w.bin", 9, -1)), StatusCode::kInvalidModel,
               {"'w'", "offset 9", "past the end"});
  expect_error(import_from_dir(dir, external_model("w.bin", 4, 8)), StatusCode::kInvalidModel, {"'w'", "past the end"});
  expect_error(import_from_dir(dir, external_model("w.bin", 0, 4)), StatusCode::kInvalidModel,
               {"'w'", "4 bytes, expected 8"});
  expect_error(import_from_dir(dir, external_model("", 0, -1)), StatusCode::kInvalidModel, {"'w'", "location"});
}

// ---- Weights read from the model's bytes (onnx/proto_nesting.h, model_without_weights)

namespace {

void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out += static_cast<char>((v & 0x7F) | 0x80);
  out += static_cast<char>(v);
}
void put_bytes_field(std::string& out, uint32_t field, const std::string& body) {
  put_varint(out, uint64_t{field} << 3 | 2);
  put_varint(out, body.size());
  out += body;
}

// Every constant of the model's main graph: name → dtype, shape and bytes.
std::map<std::string, std::string> constants_of(const ir::Model& m) {
  std::map<std::string, std::string> out;
  for (const ir::Value* v : m.graph->values())
    if (v->constant)
      out[v->name] = std::string(dtype_name(v->constant->dtype())) + shape_to_string(v->constant->shape()) + ":" +
                     std::string(static_cast<const char*>(v->constant->raw()), v->constant->nbytes());
  return out;
}

}  // namespace

// Large initializers' raw_data are taken out before protobuf parses the model and read straight from
// its bytes: the imported constants are the ones protobuf's own parse gives, byte for byte — large
// and small raw_data, typed fields, a raw_data given twice in one tensor (the last one counts), float16
// and int8 — and a raw_data of the wrong size is refused with the same words. The rewrite leaves a
// model with two graph fields (which protobuf merges) alone, and flipped bytes never crash it.
TEST(OnnxImport, WeightsReadAsideMatchTheParsedModel) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  auto m = add_model();
  auto* g = m.mutable_graph();
  std::vector<float> w(2), big(5000);
  for (auto& x : w) x = u(rng);
  for (auto& x : big) x = u(rng);
  add_init(g, "w", 1, {2})->set_raw_data(bytes_of(w));
  add_init(g, "big", 1, {50, 100})->set_raw_data(bytes_of(big));
  auto* typed = add_init(g, "typed", 7, {3});
  for (int64_t v : {4, -5, 6}) typed->add_int64_data(v);
  add_init(g, "half", 10, {4})->set_raw_data(std::string("\x00\x3c\x00\xc0\x00\x38\x00\x00", 8));
  add_init(g, "bytes", 3, {5})->set_raw_data(std::string("\x01\xff\x02\xfe\x7f", 5));
  // "twice": a tensor whose raw_data field appears twice (protobuf keeps the last).
  ::onnx::TensorProto twice;
  twice.set_name("twice");
  twice.set_data_type(1);
  twice.add_dims(3);
  std::string twice_bytes;
  twice.SerializeToString(&twice_bytes);
  std::vector<float> first{9, 9, 9, 9, 9}, last{1.5f, -2.5f, 3.5f};
  put_bytes_field(twice_bytes, 9, bytes_of(first));
  put_bytes_field(twice_bytes, 9, bytes_of(last));
  ::onnx::ModelProto no_graph = m;
  no_graph.clear_graph();
  std::string graph_bytes, model_bytes;
  g->SerializeToString(&graph_bytes);
  put_bytes_field(graph_bytes, 5, twice_bytes);
  no_graph.SerializeToString(&model_bytes);
  put_bytes_field(model_bytes, 7, graph_bytes);

  kiln::onnx::ImportOptions aside, parsed;
  aside.weights_aside_min_bytes = 1;
  parsed.weights_aside_min_bytes = SIZE_MAX;
  std::vector<std::string_view> raw;
  ASSERT_FALSE(kiln::onnx::model_without_weights(model_bytes, 1, raw).empty());
  EXPECT_EQ(raw.size(), 6u);  // one view per initializer, empty for "typed"
  auto a = kiln::onnx::import_bytes(model_bytes, aside);
  auto b = kiln::onnx::import_bytes(model_bytes, parsed);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const auto ca = constants_of(*a), cb = constants_of(*b);
  EXPECT_EQ(ca, cb);
  ASSERT_TRUE(ca.count("twice"));
  EXPECT_EQ(ca.at("twice").substr(ca.at("twice").find(':') + 1), bytes_of(last));
  EXPECT_EQ(ca.at("big").substr(ca.at("big").find(':') + 1), bytes_of(big));

  // The wrong size, refused alike.
  auto bad = m;
  add_init(bad.mutable_graph(), "short", 1, {4})->set_raw_data(bytes_of(std::vector<float>{1, 2, 3}));
  std::string bad_bytes;
  bad.SerializeToString(&bad_bytes);
  auto ea = kiln::onnx::import_bytes(bad_bytes, aside), eb = kiln::onnx::import_bytes(bad_bytes, parsed);
  ASSERT_FALSE(ea.ok());
  ASSERT_FALSE(eb.ok());
  EXPECT_EQ(ea.status().message(), eb.status().message());
  EXPECT_NE(ea.status().message().find("raw_data has 12 bytes, expected 16"), std::string::npos) << ea.status().message();

  // Two graph fields (protobuf merges them): not rewritten.
  std::string two = model_bytes;
  put_bytes_field(two, 7, std::string());
  EXPECT_TRUE(kiln::onnx::model_without_weights(two, 1, raw).empty());
  EXPECT_TRUE(raw.empty());
  // Flipped bytes through the rewrite: errors or models, never a crash.
  for (size_t i = 0; i < model_bytes.size(); ++i) {
    std::string f = model_bytes;
    f[i] = static_cast<char>(f[i] ^ (1 + rng() % 255));
    auto r = kiln::onnx::import_bytes(f, aside);
    (void)r;
  }
}

// ---- Hostile bytes

TEST(OnnxImportHostile, TruncatedModelAndGarbage) {
  auto m = add_model();
  add_init(m.mutable_graph(), "w", 1, {2})->set_raw_data(bytes_of(std::vector<float>{1, 2}));
  std::string bytes;
  m.SerializeToString(&bytes);
  kiln::onnx::ImportOptions opt;
  opt.source_name = "half.onnx";
  auto r = kiln::onnx::import_bytes(bytes.substr(0, bytes.size() / 2), opt);
  expect_error(r, StatusCode::kInvalidModel, {"half.onnx", "not a valid ONNX model"});

  TempDir dir;
  dir.write("half.onnx", bytes.substr(0, bytes.size() / 2));
  expect_error(kiln::onnx::import_file((dir.path / "half.onnx").string()), StatusCode::kInvalidModel, {"half.onnx"});

  std::mt19937 rng(7);
  for (int k = 0; k < 200; ++k) {
    std::string junk(rng() % 512, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    auto g = kiln::onnx::import_bytes(junk, opt);  // must not crash; an error or (rarely) a model is fine
    (void)g;
  }
  // Mutations of a valid model: each byte flipped in turn.
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string b = bytes;
    b[i] = static_cast<char>(b[i] ^ (1 + rng() % 255));
    auto g = kiln::onnx::import_bytes(b, opt);
    (void)g;
  }
}

// The wire-format check before protobuf (onnx/proto_nesting.h): a model followed by junk, and each
// kind of broken structure, is refused naming the byte offset where the structure breaks and the
// message it is in; a sound model (with an unknown group field, which protobuf keeps) still imports.
TEST(OnnxImportHostile, BrokenStructureNamesTheByteOffset) {
  auto m = add_model();
  add_init(m.mutable_graph(), "w", 1, {2})->set_raw_data(bytes_of(std::vector<float>{1, 2}));
  std::string bytes;
  m.SerializeToString(&bytes);
  const std::string n = std::to_string(bytes.size());
  kiln::onnx::ImportOptions opt;
  opt.source_name = "m.onnx";
  ASSERT_TRUE(kiln::onnx::import_bytes(bytes, opt).ok());
  EXPECT_EQ(kiln::onnx::model_wire_error(bytes), "");
  // Trailing zeros (a model padded by a broken copy), then other junk after the model.
  expect_error(kiln::onnx::import_bytes(bytes + std::string(4096, '\0'), opt), StatusCode::kInvalidModel,
               {"m.onnx", "at byte " + n + " (ModelProto, top level)", "zero byte"});
  expect_error(kiln::onnx::import_bytes(bytes + "\x0f", opt), StatusCode::kInvalidModel, {"at byte " + n, "wire type 7"});
  expect_error(kiln::onnx::import_bytes(bytes + "\x3a\x7f", opt), StatusCode::kInvalidModel,
               {"at byte " + n, "field 7 declares 127 bytes; 0 remain"});
  expect_error(kiln::onnx::import_bytes(bytes + "\x08\xff\xff", opt), StatusCode::kInvalidModel,
               {"at byte " + n, "varint runs past the end"});
  expect_error(kiln::onnx::import_bytes(bytes + "\x9c\x01", opt), StatusCode::kInvalidModel,
               {"at byte " + n, "end-group tag of field 19"});
  expect_error(kiln::onnx::import_bytes(bytes + "\x9b\x01", opt), StatusCode::kInvalidModel, {"group of field 19 is not closed"});
  // A closed group of an unknown field is sound: protobuf keeps it as an unknown field.
  EXPECT_EQ(kiln::onnx::model_wire_error(bytes + "\x9b\x01\x08\x01\x9c\x01"), "");
  EXPECT_TRUE(kiln::onnx::import_bytes(bytes + "\x9b\x01\x08\x01\x9c\x01", opt).ok());
  // Inside the graph: a node whose attribute list claims more bytes than the node has. The message
  // and the fields leading to it are named (ModelProto.graph = 7, GraphProto.node = 1).
  ::onnx::ModelProto m2 = add_model();
  m2.mutable_graph()->mutable_node(0)->set_doc_string("DOC");
  std::string b2;
  m2.SerializeToString(&b2);
  const size_t doc = b2.find("DOC");
  ASSERT_NE(doc, std::string::npos);
  b2[doc - 2] = static_cast<char>((5 << 3) | 2);  // the doc_string's tag becomes an attribute (field 5)
  b2[doc - 1] = 100;                               // of 100 bytes, past the node's end
  expect_error(kiln::onnx::import_bytes(b2, opt), StatusCode::kInvalidModel,
               {"at byte " + std::to_string(doc - 2), "(NodeProto, reached by fields 7.1 from byte", "field 5 declares 100 bytes"});
}

TEST(OnnxImportHostile, MissingGraphAndFile) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  expect_error(import(m), StatusCode::kInvalidModel, {"no graph"});
  expect_error(kiln::onnx::import_file("/nonexistent/dir/model.onnx"), StatusCode::kIoError, {"model.onnx"});
}

// ---- Graph structure

TEST(OnnxImportGraph, BasicStructureTypesAndHash) {
  auto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x", 1, {"batch", "4"});
  add_output(g, "z");
  add_node(g, "Relu", {"x"}, {"y"});  // unnamed: gets "Relu_0"
  add_node(g, "Identity", {"y"}, {"z"}, "id");
  auto* vi = g->add_value_info();
  vi->set_name("y");
  set_type(vi, 1, {"batch", "4"});
  auto* seq = g->add_input();
  seq->set_name("s");
  seq->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(7);
  TempDir dir;
  std::string bytes;
  m.SerializeToString(&bytes);
  dir.write("m.onnx", bytes);
  auto r = kiln::onnx::import_file((dir.path / "m.onnx").string());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Graph& graph = *r->graph;
  EXPECT_EQ(r->source_hash, kiln::onnx::sha256_hex(bytes.data(), bytes.size()));
  EXPECT_EQ(r->producer_name, "kiln-test");
  EXPECT_EQ(graph.opsets.at(""), 17);
  ASSERT_EQ(graph.nodes().size(), 2u);
  EXPECT_EQ(graph.nodes()[0]->name, "Relu_0");
  EXPECT_EQ(graph.nodes()[0]->opset, 17);
  const ir::Value* x = graph.inputs[0];
  EXPECT_EQ(x->type.dtype, DataType::kFloat32);
  ASSERT_EQ(x->type.shape.rank(), 2);
  EXPECT_EQ(x->type.shape.dims[0].symbol, "batch");
  EXPECT_EQ(x->type.shape.dims[1].value, 4);
  EXPECT_EQ(graph.find_value("y")->type.shape.dims[0].symbol, "batch");
  EXPECT_EQ(graph.inputs[1]->type.kind, ir::Type::Kind::kSequence);
  EXPECT_EQ(graph.inputs[1]->type.elem->dtype, DataType::kInt64);
  EXPECT_TRUE(graph.outputs[0]->is_output);
}

TEST(OnnxImportGraph, InitializerListedAsInputIsInputWithDefault) {
  auto m = add_model();
  m.set_ir_version(3);
  add_init(m.mutable_graph(), "w", 1, {2})->set_raw_data(bytes_of(std::vector<float>{1, 2}));
  add_input(m.mutable_graph(), "w", 1, {"2"});
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Value* w = r->graph->find_value("w");
  EXPECT_TRUE(w->is_input);
  EXPECT_TRUE(w->constant.has_value());
  EXPECT_FALSE(w->is_constant());
  EXPECT_EQ(r->graph->inputs.size(), 2u);
}

TEST(OnnxImportGraph, DanglingInputNamesNodeOpAndValue) {
  auto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x");
  add_output(g, "y");
  add_node(g, "Add", {"x", "ghost"}, {"y"}, "adder");
  expect_error(import(m), StatusCode::kInvalidModel, {"test.onnx", "adder", "Add", "'ghost'", "dangling"});
}

TEST(OnnxImportGraph, CycleIsReported) {
  auto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x");
  add_output(g, "c");
  add_node(g, "Add", {"x", "c"}, {"b"}, "n1");
  add_node(g, "Relu", {"b"}, {"c"}, "n2");
  expect_error(import(m), StatusCode::kInvalidModel, {"cycle"});
}

TEST(OnnxImportGraph, NodesOutOfOrderAreSorted) {
  auto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x");
  add_output(g, "c");
  add_node(g, "Relu", {"b"}, {"c"}, "second");
  add_node(g, "Relu", {"x"}, {"b"}, "first");
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->graph->nodes()[0]->name, "first");
}

TEST(OnnxImportGraph, DuplicateNamesRefused) {
  {
    auto m = make_model();
    auto* g = m.mutable_graph();
    add_input(g, "x");
    add_output(g, "y");
    add_node(g, "Relu", {"x"}, {"y"}, "a");
    add_node(g, "Neg", {"x"}, {"y"}, "b");
    expect_error(import(m), StatusCode::kInvalidModel, {"duplicate", "'y'", "'a'", "'b'"});
  }
  {
    auto m = make_model();
    auto* g = m.mutable_graph();
    add_input(g, "x");
    add_output(g, "y");
    add_output(g, "y");
    add_node(g, "Relu", {"x"}, {"y"}, "a");
    expect_error(import(m), StatusCode::kInvalidModel, {"duplicate graph output 'y'"});
  }
  {  // a node may not redefine a graph input
    auto m = make_model();
    auto* g = m.mutable_graph();
    add_input(g, "x");
    add_output(g, "x");
    add_node(g, "Relu", {"x"}, {"x"}, "a");
    expect_error(import(m), StatusCode::kInvalidModel, {"duplicate", "'x'"});
  }
}

TEST(OnnxImportGraph, OmittedOptionalInputsAndOutputs) {
  auto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x");
  add_output(g, "y");
  add_node(g, "Clip", {"x", "", "hi"}, {"y"}, "clip");
  add_init(g, "hi", 1, {})->add_float_data(6);
  add_node(g, "Dropout", {"x"}, {"d", ""}, "drop");
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Node* clip = r->graph->nodes()[0]->op_type == "Clip" ? r->graph->nodes()[0] : r->graph->nodes()[1];
  ASSERT_EQ(clip->inputs.size(), 3u);
  EXPECT_EQ(clip->inputs[1], nullptr);
  EXPECT_TRUE(clip->inputs[2]->is_constant());
  const ir::Node* drop = r->graph->find_value("d")->producer;
  ASSERT_EQ(drop->outputs.size(), 2u);
  EXPECT_EQ(drop->outputs[1], nullptr);
}

TEST(OnnxImportGraph, OpsetRange) {
  for (int bad : {kiln::onnx::max_supported_opset() + 1, 1000}) {
    auto m = add_model();
    m.mutable_opset_import(0)->set_version(bad);
    add_init(m.mutable_graph(), "w", 1, {2})->set_raw_data(bytes_of(std::vector<float>{1, 2}));
    expect_error(import(m), StatusCode::kUnsupported,
                 {std::to_string(bad), "[1, " + std::to_string(kiln::onnx::max_supported_opset()) + "]"});
  }
  // Old opsets (1..6) are accepted; their nodes carry the model's version.
  for (int old : {1, 6}) {
    auto m = make_model(old);
    add_input(m.mutable_graph(), "x");
    add_output(m.mutable_graph(), "y");
    add_node(m.mutable_graph(), "Relu", {"x"}, {"y"}, "relu");
    auto r = import(m);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->graph->find_value("y")->producer->opset, old);
  }
  // A model from before opset_import (IR version < 3) is ai.onnx opset 1.
  {
    auto m = make_model();
    m.clear_opset_import();
    m.set_ir_version(2);
    add_input(m.mutable_graph(), "x");
    add_output(m.mutable_graph(), "y");
    add_node(m.mutable_graph(), "Relu", {"x"}, {"y"}, "relu");
    auto r = import(m);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->graph->find_value("y")->producer->opset, 1);
  }
  // Other domains keep their own versions; "ai.onnx" is the default domain.
  auto m = add_model();
  m.mutable_opset_import(0)->set_domain("ai.onnx");
  auto* ms = m.add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  add_init(m.mutable_graph(), "w", 1, {2})->set_raw_data(bytes_of(std::vector<float>{1, 2}));
  add_node(m.mutable_graph(), "FusedGelu", {"y"}, {"z"}, "g")->set_domain("com.microsoft");
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->graph->opsets.at(""), 17);
  EXPECT_EQ(r->graph->find_value("z")->producer->opset, 1);
  EXPECT_EQ(r->graph->find_value("y")->producer->opset, 17);
}

TEST(OnnxImportGraph, LegacyCastTypeName) {
  // Cast before opset 6 names its target type; the importer rewrites it to the TensorProto code.
  auto m = make_model(5);
  add_input(m.mutable_graph(), "x");
  add_output(m.mutable_graph(), "y", 7);
  auto* cast = add_node(m.mutable_graph(), "Cast", {"x"}, {"y"}, "cast");
  auto* to = cast->add_attribute();
  to->set_name("to");
  to->set_type(::onnx::AttributeProto::STRING);
  to->set_s("int64");
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Node* n = r->graph->find_value("y")->producer;
  EXPECT_EQ(n->attr("to")->kind, ir::Attribute::Kind::kInt);
  EXPECT_EQ(n->attr_int("to", 0), 7);
  EXPECT_EQ(r->graph->find_value("y")->type.dtype, DataType::kInt64);
  to->set_s("QUATERNION");
  expect_error(import(m), StatusCode::kInvalidModel, {"cast", "QUATERNION"});
}

TEST(OnnxImportGraph, MissingDefaultOpsetImport) {
  auto m = add_model();
  m.mutable_opset_import(0)->set_domain("ai.onnx.ml");
  m.mutable_opset_import(0)->set_version(3);
  add_init(m.mutable_graph(), "w", 1, {2})->set_raw_data(bytes_of(std::vector<float>{1, 2}));
  expect_error(import(m), StatusCode::kInvalidModel, {"'add'", "does not import the ai.onnx opset"});
  // Only ai.onnx.ml nodes: fine without an ai.onnx import.
  m.mutable_graph()->mutable_node(0)->set_domain("ai.onnx.ml");
  m.mutable_graph()->mutable_node(0)->set_op_type("Binarizer");
  m.mutable_graph()->mutable_node(0)->mutable_input()->RemoveLast();  // Binarizer takes one input
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->graph->nodes()[0]->opset, 3);
}

TEST(OnnxImportGraph, AttributesOfEveryKind) {
  auto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "x");
  add_output(g, "y");
  auto* n = add_node(g, "Custom", {"x"}, {"y"}, "c");
  n->set_domain("test");
  auto* o = m.add_opset_import();
  o->set_domain("test");
  o->set_version(1);
  using AP = ::onnx::AttributeProto;
  auto attr = [&](const char* name, AP::AttributeType t) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(t);
    return a;
  };
  attr("f", AP::FLOAT)->set_f(0.5f);
  attr("i", AP::INT)->set_i(-3);
  attr("s", AP::STRING)->set_s("same");
  auto* ts = attr("t", AP::TENSOR)->mutable_t();
  ts->set_data_type(7);
  ts->add_dims(1);
  ts->add_int64_data(42);
  auto* fl = attr("fs", AP::FLOATS);
  fl->add_floats(1);
  fl->add_floats(2);
  auto* is = attr("is", AP::INTS);
  is->add_ints(4);
  auto* ss = attr("ss", AP::STRINGS);
  ss->add_strings("a");
  auto* tl = attr("ts", AP::TENSORS)->add_tensors();
  tl->set_data_type(1);
  tl->add_float_data(9);
  auto* sp = attr("sp", AP::SPARSE_TENSOR)->mutable_sparse_tensor();
  sp->add_dims(4);
  sp->mutable_values()->set_data_type(1);
  sp->mutable_values()->add_dims(1);
  sp->mutable_values()->add_float_data(5);
  sp->mutable_indices()->set_data_type(7);
  sp->mutable_indices()->add_dims(1);
  sp->mutable_indices()->add_int64_data(2);
  attr("tp", AP::TYPE_PROTO)->mutable_tp()->mutable_tensor_type()->set_elem_type(10);
  attr("tps", AP::TYPE_PROTOS)->add_type_protos()->mutable_tensor_type()->set_elem_type(1);
  auto* legacy = n->add_attribute();  // type left unset: inferred from the field
  legacy->set_name("legacy");
  legacy->add_ints(1);
  legacy->add_ints(2);
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Node* c = r->graph->nodes()[0];
  EXPECT_EQ(c->attr_float("f", 0), 0.5f);
  EXPECT_EQ(c->attr_int("i", 0), -3);
  EXPECT_EQ(c->attr_string("s", ""), "same");
  EXPECT_EQ(c->attr("t")->t.data<int64_t>()[0], 42);
  EXPECT_EQ(c->attr_floats("fs"), std::vector<float>({1, 2}));
  EXPECT_EQ(c->attr_ints("is"), std::vector<int64_t>({4}));
  EXPECT_EQ(c->attr("ss")->strings[0], "a");
  EXPECT_EQ(c->attr("ts")->tensors[0].data<float>()[0], 9.0f);
  const ir::Attribute* spa = c->attr("sp");
  EXPECT_EQ(spa->kind, ir::Attribute::Kind::kSparseTensor);
  ASSERT_EQ(spa->t.shape(), Shape({4}));
  EXPECT_EQ(spa->t.data<float>()[2], 5.0f);
  EXPECT_EQ(spa->t.data<float>()[0], 0.0f);
  EXPECT_EQ(c->attr("tp")->types[0].dtype, DataType::kFloat16);
  EXPECT_EQ(c->attr("tps")->kind, ir::Attribute::Kind::kTypeProtos);
  EXPECT_EQ(c->attr_ints("legacy"), std::vector<int64_t>({1, 2}));
  EXPECT_EQ(c->opset, 1);

  // ref_attr_name outside a function is refused.
  auto* ref = n->add_attribute();
  ref->set_name("r");
  ref->set_ref_attr_name("alpha");
  ref->set_type(AP::FLOAT);
  expect_error(import(m), StatusCode::kInvalidModel, {"'r'", "only valid inside a function"});
}

// ---- Sparse initializers

TEST(OnnxImportSparse, LinearAndCoordinateIndices) {
  for (bool coords : {false, true}) {
    auto m = add_model();
    auto* sp = m.mutable_graph()->add_sparse_initializer();
    sp->add_dims(2);
    sp->add_dims(3);
    auto* vals = sp->mutable_values();
    vals->set_name("w");
    vals->set_data_type(1);
    vals->add_dims(2);
    vals->add_float_data(7);
    vals->add_float_data(8);
    auto* idx = sp->mutable_indices();
    idx->set_data_type(7);
    if (coords) {  // [NNZ, rank]: (0,1) and (1,2)
      idx->add_dims(2);
      idx->add_dims(2);
      for (int64_t v : {0, 1, 1, 2}) idx->add_int64_data(v);
    } else {  // linearized: 1 and 5
      idx->add_dims(2);
      idx->add_int64_data(1);
      idx->add_int64_data(5);
    }
    Tensor w = import_initializer(m);
    ASSERT_EQ(w.shape(), Shape({2, 3}));
    const std::vector<float> want = {0, 7, 0, 0, 0, 8};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(w.data<float>()[i], want[i]) << coords << " " << i;
    // An index out of range is an error, not a write past the end.
    idx->set_int64_data(idx->int64_data_size() - 1, coords ? 3 : 6);
    expect_error(import(m), StatusCode::kInvalidModel, {"sparse initializer 'w'", "out of range"});
  }
}

// ---- Subgraphs

namespace {
// then/else branches of an If returning `value` through Identity.
void add_if(::onnx::GraphProto* g, const std::string& cond, const std::string& out, const std::string& then_value,
            const std::string& else_value, const std::string& name) {
  auto* n = add_node(g, "If", {cond}, {out}, name);
  for (auto [branch, value] : {std::pair{"then_branch", then_value}, std::pair{"else_branch", else_value}}) {
    auto* a = n->add_attribute();
    a->set_name(branch);
    a->set_type(::onnx::AttributeProto::GRAPH);
    auto* sg = a->mutable_g();
    sg->set_name(name + "_" + branch);
    add_node(sg, "Identity", {value}, {std::string(branch) + "_out"});
    add_output(sg, std::string(branch) + "_out");
  }
}
}  // namespace

TEST(OnnxImportSubgraph, NestedIfInLoopCapturesTopLevelValue) {
  auto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "trip", 7, {});
  add_input(g, "cond", 9, {});
  add_input(g, "y0", 1, {"4"});
  add_input(g, "top", 1, {"4"});
  add_output(g, "y_final");
  auto* loop = add_node(g, "Loop", {"trip", "cond", "y0"}, {"y_final"}, "loop");
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(::onnx::AttributeProto::GRAPH);
  auto* body = a->mutable_g();
  body->set_name("body");
  add_input(body, "i", 7, {});
  add_input(body, "c_in", 9, {});
  add_input(body, "y_in", 1, {"4"});
  add_node(body, "Identity", {"c_in"}, {"c_out"});
  // The If's branches use `top` (only defined at the top level) and `y_in` (the loop body's).
  add_if(body, "c_in", "picked", "top", "y_in", "inner_if");
  add_node(body, "Add", {"y_in", "picked"}, {"y_out"});
  add_output(body, "c_out", 9);
  add_output(body, "y_out");
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();

  const ir::Graph& main = *r->graph;
  const ir::Node* l = main.nodes()[0];
  ASSERT_EQ(l->op_type, "Loop");
  const ir::Graph& b = *l->attr("body")->g;
  EXPECT_EQ(b.parent, &main);
  ASSERT_EQ(b.captures.size(), 1u);  // the body re-captures `top` for its If
  EXPECT_EQ(b.captures[0]->name, "top");
  EXPECT_TRUE(b.captures[0]->is_capture);
  const ir::Node* inner = nullptr;
  for (const ir::Node* n : b.nodes())
    if (n->op_type == "If") inner = n;
  ASSERT_NE(inner, nullptr);
  const ir::Graph& then_g = *inner->attr("then_branch")->g;
  const ir::Graph& else_g = *inner->attr("else_branch")->g;
  EXPECT_EQ(then_g.parent, &b);
  ASSERT_EQ(then_g.captures.size(), 1u);
  EXPECT_EQ(then_g.captures[0]->name, "top");
  ASSERT_EQ(else_g.captures.size(), 1u);
  EXPECT_EQ(else_g.captures[0]->name, "y_in");
  EXPECT_EQ(then_g.captures[0]->type.dtype, DataType::kFloat32);
  EXPECT_TRUE(main.find_value("top")->is_input);
}

TEST(OnnxImportSubgraph, DanglingNameInSubgraph) {
  auto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "cond", 9, {});
  add_input(g, "x");
  add_output(g, "r");
  add_if(g, "cond", "r", "x", "nowhere", "my_if");
  expect_error(import(m), StatusCode::kInvalidModel, {"dangling", "'nowhere'", "my_if"});
}

TEST(OnnxImportSubgraph, CaptureOfLaterValueIsReported) {
  auto m = make_model();
  auto* g = m.mutable_graph();
  add_input(g, "cond", 9, {});
  add_input(g, "x");
  add_output(g, "r");
  add_if(g, "cond", "r", "late", "x", "my_if");
  add_node(g, "Relu", {"r"}, {"late"}, "relu");  // depends on the If, which captures its output
  expect_error(import(m), StatusCode::kInvalidModel, {"my_if", "'late'"});
}

// ---- Functions

namespace {
// custom.Scale(X) = Mul(X, alpha) + beta, with alpha required and beta defaulting to 10.
::onnx::FunctionProto* add_scale_function(::onnx::ModelProto& m) {
  auto* f = m.add_functions();
  f->set_name("Scale");
  f->set_domain("custom");
  f->add_input("X");
  f->add_output("Y");
  f->add_attribute("alpha");
  auto* beta = f->add_attribute_proto();
  beta->set_name("beta");
  beta->set_type(::onnx::AttributeProto::FLOAT);
  beta->set_f(10);
  auto* o = f->add_opset_import();
  o->set_domain("");
  o->set_version(13);
  auto const_node = [&](const char* out, const char* ref) {
    auto* n = f->add_node();
    n->set_op_type("Constant");
    n->add_output(out);
    auto* a = n->add_attribute();
    a->set_name("value_float");
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_ref_attr_name(ref);
  };
  const_node("a", "alpha");
  const_node("b", "beta");
  auto* mul = f->add_node();
  mul->set_op_type("Mul");
  mul->add_input("X");
  mul->add_input("a");
  mul->add_output("t");
  auto* add = f->add_node();
  add->set_op_type("Add");
  add->add_input("t");
  add->add_input("b");
  add->add_output("Y");
  return f;
}

void set_float_attr(::onnx::NodeProto* n, const char* name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
}  // namespace

TEST(OnnxImportFunction, InlinedWithAttributeReferenceAndDefault) {
  auto m = make_model();
  auto* o = m.add_opset_import();
  o->set_domain("custom");
  o->set_version(1);
  add_scale_function(m);
  auto* g = m.mutable_graph();
  add_input(g, "x");
  add_output(g, "z");
  auto* c1 = add_node(g, "Scale", {"x"}, {"y"}, "call1");
  c1->set_domain("custom");
  set_float_attr(c1, "alpha", 2);
  auto* c2 = add_node(g, "Scale", {"y"}, {"z"}, "call2");
  c2->set_domain("custom");
  set_float_attr(c2, "alpha", 3);
  set_float_attr(c2, "beta", -1);
  // A name the function body also uses ("t") must not clash with the inlined copies.
  add_node(g, "Identity", {"x"}, {"t"}, "keep_t");
  add_output(g, "t");
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Graph& graph = *r->graph;
  EXPECT_EQ(count_ops(graph, "Scale"), 0);
  EXPECT_EQ(count_ops(graph, "Constant"), 4);
  EXPECT_EQ(count_ops(graph, "Mul"), 2);
  EXPECT_EQ(count_ops(graph, "Add"), 2);
  std::vector<float> alphas, betas;
  for (const ir::Node* n : graph.nodes()) {
    if (n->op_type != "Constant") continue;
    ASSERT_NE(n->attr("value_float"), nullptr) << n->name;
    EXPECT_EQ(n->opset, 13);  // the function's own opset import
    const float v = n->attr_float("value_float", 0);
    (n->name.find("/a") != std::string::npos || n->outputs[0]->name.find("/a") != std::string::npos ? alphas : betas)
        .push_back(v);
  }
  std::sort(alphas.begin(), alphas.end());
  std::sort(betas.begin(), betas.end());
  EXPECT_EQ(alphas, std::vector<float>({2, 3}));
  EXPECT_EQ(betas, std::vector<float>({-1, 10}));  // call1 took the default
  // The calls' actual values are bound: y links the two inlined bodies, z is the graph output.
  EXPECT_EQ(graph.find_value("y")->producer->op_type, "Add");
  EXPECT_EQ(graph.find_value("z")->producer->op_type, "Add");
  EXPECT_EQ(graph.find_value("t")->producer->op_type, "Identity");
  EXPECT_EQ(graph.find_value("x")->uses.size(), 2u);  // Mul of call1 and keep_t
}

TEST(OnnxImportFunction, NestedCallsAndRecursion) {
  auto m = make_model();
  auto* o = m.add_opset_import();
  o->set_domain("custom");
  o->set_version(1);
  add_scale_function(m);
  // custom.Twice(X) = Scale<alpha=attr k>(Scale<alpha=1>(X))
  auto* f = m.add_functions();
  f->set_name("Twice");
  f->set_domain("custom");
  f->add_input("X");
  f->add_output("Y");
  f->add_attribute("k");
  auto* fo = f->add_opset_import();
  fo->set_domain("custom");
  fo->set_version(1);
  auto* n1 = f->add_node();
  n1->set_op_type("Scale");
  n1->set_domain("custom");
  n1->add_input("X");
  n1->add_output("m");
  set_float_attr(n1, "alpha", 1);
  auto* n2 = f->add_node();
  n2->set_op_type("Scale");
  n2->set_domain("custom");
  n2->add_input("m");
  n2->add_output("Y");
  auto* ref = n2->add_attribute();
  ref->set_name("alpha");
  ref->set_type(::onnx::AttributeProto::FLOAT);
  ref->set_ref_attr_name("k");
  auto* g = m.mutable_graph();
  add_input(g, "x");
  add_output(g, "y");
  auto* call = add_node(g, "Twice", {"x"}, {"y"}, "tw");
  call->set_domain("custom");
  set_float_attr(call, "k", 5);
  auto r = import(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(count_ops(*r->graph, "Mul"), 2);
  EXPECT_EQ(count_ops(*r->graph, "Constant"), 4);
  std::vector<float> vals;
  for (const ir::Node* n : r->graph->nodes())
    if (n->op_type == "Constant") vals.push_back(n->attr_float("value_float", 0));
  std::sort(vals.begin(), vals.end());
  EXPECT_EQ(vals, std::vector<float>({1, 5, 10, 10}));

  // A function calling itself is refused, not expanded forever.
  auto* self = f->add_node();
  self->set_op_type("Twice");
  self->set_domain("custom");
  self->add_input("X");
  self->add_output("unused");
  expect_error(import(m), StatusCode::kInvalidModel, {"Twice", "recursion"});
}

TEST(OnnxImportFunction, FunctionOpsetOutOfRangeAndBadBody) {
  auto m = make_model();
  auto* f = add_scale_function(m);
  f->mutable_opset_import(0)->set_version(kiln::onnx::max_supported_opset() + 1);
  add_input(m.mutable_graph(), "x");
  expect_error(import(m), StatusCode::kUnsupported,
               {"function", "opset " + std::to_string(kiln::onnx::max_supported_opset() + 1)});
  f->mutable_opset_import(0)->set_version(13);
  f->mutable_node(2)->set_input(0, "undefined_in_body");
  auto* call = add_node(m.mutable_graph(), "Scale", {"x"}, {"y"}, "call");
  call->set_domain("custom");
  expect_error(import(m), StatusCode::kInvalidModel, {"'undefined_in_body'", "Scale"});
}

// ---- Real models from onnx's backend test data

namespace {
fs::path node_test_dir() {
  if (const char* env = std::getenv("KILN_ONNX_NODE_TEST_DIR")) return env;
#ifdef KILN_ONNX_NODE_TEST_DIR
  return KILN_ONNX_NODE_TEST_DIR;
#else
  return {};
#endif
}
}  // namespace

TEST(OnnxImportBackendModels, KnownModels) {
  const fs::path dir = node_test_dir();
  if (dir.empty() || !fs::exists(dir / "test_if" / "model.onnx")) GTEST_SKIP() << "onnx backend test data not found";
  auto load = [&](const char* name) {
    auto r = kiln::onnx::import_file((dir / name / "model.onnx").string());
    EXPECT_TRUE(r.ok()) << name << ": " << r.status().to_string();
    return r;
  };
  {
    auto r = load("test_conv_with_strides_padding");
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->graph->nodes().size(), 1u);
    EXPECT_EQ(r->graph->nodes()[0]->op_type, "Conv");
    EXPECT_EQ(r->graph->nodes()[0]->attr_ints("strides"), std::vector<int64_t>({2, 2}));
    EXPECT_EQ(r->graph->inputs.size(), 2u);
    EXPECT_EQ(r->source_hash.size(), 64u);
  }
  {
    auto r = load("test_if");
    ASSERT_TRUE(r.ok());
    const ir::Node* n = r->graph->nodes()[0];
    EXPECT_EQ(n->op_type, "If");
    EXPECT_EQ(n->opset, 11);
    EXPECT_EQ(count_ops(*n->attr("then_branch")->g, "Constant"), 1);
    EXPECT_EQ(count_ops(*n->attr("else_branch")->g, "Constant"), 1);
  }
  {
    auto r = load("test_loop11");
    ASSERT_TRUE(r.ok());
    const ir::Node* n = r->graph->nodes()[0];
    EXPECT_EQ(n->op_type, "Loop");
    const ir::Graph& body = *n->attr("body")->g;
    EXPECT_EQ(body.nodes().size(), 9u);
    EXPECT_EQ(body.inputs.size(), 3u);
    EXPECT_EQ(body.outputs.size(), 3u);
    EXPECT_TRUE(body.captures.empty());
  }
  for (const char* name : {"test_scan_sum", "test_scan9_sum"}) {
    auto r = load(name);
    ASSERT_TRUE(r.ok());
    const ir::Node* n = r->graph->nodes()[0];
    EXPECT_EQ(n->op_type, "Scan");
    EXPECT_EQ(count_ops(*n->attr("body")->g, "Add"), 1);
    EXPECT_EQ(r->graph->outputs.size(), 2u);
  }
  {
    auto r = load("test_sequence_map_identity_1_sequence");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->graph->inputs[0]->type.kind, ir::Type::Kind::kSequence);
  }
}

// Every model of the backend suite imports, or fails with a clean Status (never a crash, never an
// internal error).
TEST(OnnxImportBackendModels, WholeSuiteImportsOrFailsCleanly) {
  const fs::path dir = node_test_dir();
  if (dir.empty() || !fs::exists(dir)) GTEST_SKIP() << "onnx backend test data not found";
  int ok = 0, failed = 0;
  std::string failures;
  for (const auto& e : fs::directory_iterator(dir)) {
    const fs::path model = e.path() / "model.onnx";
    if (!fs::exists(model)) continue;
    auto r = kiln::onnx::import_file(model.string());
    if (r.ok()) {
      ++ok;
      continue;
    }
    ++failed;
    EXPECT_NE(r.status().code(), StatusCode::kInternal) << r.status().to_string();
    if (failures.size() < 4000) failures += e.path().filename().string() + ": " + r.status().to_string() + "\n";
  }
  EXPECT_GT(ok, 1000);
  std::cout << "[ imported " << ok << ", refused " << failed << " ]\n" << failures;
}

// ---- Mutation fuzzing of a model that uses every feature (subgraphs, captures, functions, sparse)

TEST(OnnxImportHostile, MutatedRichModel) {
  auto m = make_model();
  auto* o = m.add_opset_import();
  o->set_domain("custom");
  o->set_version(1);
  add_scale_function(m);
  auto* g = m.mutable_graph();
  add_input(g, "trip", 7, {});
  add_input(g, "cond", 9, {});
  add_input(g, "y0", 1, {"4"});
  add_output(g, "y_final");
  add_init(g, "top", 1, {4})->set_raw_data(bytes_of(std::vector<float>{1, 2, 3, 4}));
  auto* sp = g->add_sparse_initializer();
  sp->add_dims(4);
  sp->mutable_values()->set_name("sparse");
  sp->mutable_values()->set_data_type(1);
  sp->mutable_values()->add_dims(1);
  sp->mutable_values()->add_float_data(1);
  sp->mutable_indices()->set_data_type(7);
  sp->mutable_indices()->add_dims(1);
  sp->mutable_indices()->add_int64_data(3);
  auto* loop = add_node(g, "Loop", {"trip", "cond", "y0"}, {"y_loop"}, "loop");
  auto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(::onnx::AttributeProto::GRAPH);
  auto* body = a->mutable_g();
  add_input(body, "i", 7, {});
  add_input(body, "c_in", 9, {});
  add_input(body, "y_in", 1, {"4"});
  add_node(body, "Identity", {"c_in"}, {"c_out"});
  add_if(body, "c_in", "picked", "top", "sparse", "inner_if");
  add_node(body, "Add", {"y_in", "picked"}, {"y_out"});
  add_output(body, "c_out", 9);
  add_output(body, "y_out");
  auto* call = add_node(g, "Scale", {"y_loop"}, {"y_final"}, "call");
  call->set_domain("custom");
  set_float_attr(call, "alpha", 2);
  std::string bytes;
  m.SerializeToString(&bytes);
  kiln::onnx::ImportOptions opt;
  opt.source_name = "rich.onnx";
  auto r = kiln::onnx::import_bytes(bytes, opt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(count_ops(*r->graph, "Mul"), 1);

  std::mt19937 rng(11);
  int still_ok = 0;
  for (size_t len = 0; len < bytes.size(); ++len) still_ok += kiln::onnx::import_bytes(bytes.substr(0, len), opt).ok();
  for (int k = 0; k < 3000; ++k) {
    std::string b = bytes;
    const int edits = 1 + rng() % 4;
    for (int e = 0; e < edits; ++e) b[rng() % b.size()] = static_cast<char>(rng());
    auto x = kiln::onnx::import_bytes(b, opt);
    if (!x.ok()) EXPECT_NE(x.status().code(), StatusCode::kInternal) << x.status().to_string();
    still_ok += x.ok();
  }
  std::cout << "[ " << still_ok << " mutants still imported ]\n";
}
