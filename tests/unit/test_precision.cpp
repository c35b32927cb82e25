// The precisions as data (builder/precision.h): one name each, read back by parse_precision; the
// deprecated int8 flag resolved into the int8 precision with its rest; and the 8-bit product rows'
// declarations (KernelDef::quantizes) the 8-bit build asks.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "backends/backend.h"
#include "builder/precision.h"
#include "ir/graph.h"

namespace kiln {
namespace {

TEST(Precision, EveryNameRoundTrips) {
  std::set<std::string> names;
  int32_t value = 0;
  for (const PrecisionRow& r : precision_rows()) {
    EXPECT_EQ(static_cast<int32_t>(r.precision), value++) << r.name << ": rows in enum order";
    EXPECT_TRUE(names.insert(r.name).second) << r.name << " named twice";
    EXPECT_STREQ(precision_name(r.precision), r.name);
    auto back = parse_precision(r.name);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, r.precision) << r.name;
  }
  EXPECT_EQ(names, (std::set<std::string>{"fp32", "fp16", "bf16", "tf32", "best", "fp8", "int8"}));
}

TEST(Precision, AnUnknownNameListsEveryName) {
  auto p = parse_precision("int4");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  for (const PrecisionRow& r : precision_rows())
    EXPECT_NE(p.status().message().find("'" + std::string(r.name) + "'"), std::string::npos) << p.status().message();
}

TEST(Precision, RowsSayWhatABuildDoes) {
  const PrecisionRow& int8 = precision_row(Precision::kInt8);
  const PrecisionRow& fp8 = precision_row(Precision::kFP8);
  EXPECT_EQ(int8.eight_bit, DataType::kInt8);
  EXPECT_EQ(fp8.eight_bit, DataType::kFloat8E4M3FN);
  EXPECT_TRUE(int8.cpu && fp8.cpu && precision_row(Precision::kFloat32).cpu);
  for (Precision p : {Precision::kFloat16, Precision::kBFloat16, Precision::kTF32, Precision::kBest}) {
    EXPECT_FALSE(precision_row(p).cpu) << precision_name(p);
    EXPECT_FALSE(precision_row(p).is_8bit()) << precision_name(p);
    EXPECT_FALSE(check_precision_device(p, DeviceType::kCPU).ok()) << precision_name(p);
    EXPECT_TRUE(check_precision_device(p, DeviceType::kCUDA).ok()) << precision_name(p);
  }
  EXPECT_EQ(precision_row(Precision::kBFloat16).half, DataType::kBFloat16);
  EXPECT_TRUE(precision_row(Precision::kBest).tf32 && precision_row(Precision::kBest).half == DataType::kFloat16);
}

BuildOptions options(DeviceType device, Precision p, bool int8 = false) {
  BuildOptions o;
  o.device = device;
  o.precision = p;
  o.int8 = int8;
  return o;
}

// The deprecated flag means the int8 precision with the rest in `precision`, as it always did;
// the new spelling's rest is the row's own (CUDA float16, CPU float32) unless named.
TEST(Precision, TheInt8FlagIsTheInt8PrecisionWithItsRest) {
  struct Case {
    BuildOptions given;
    Precision rest;
  };
  BuildOptions named = options(DeviceType::kCUDA, Precision::kInt8);
  named.rest_precision = Precision::kBFloat16;
  for (const Case& c : {Case{options(DeviceType::kCUDA, Precision::kFloat32, true), Precision::kFloat32},
                        Case{options(DeviceType::kCUDA, Precision::kFloat16, true), Precision::kFloat16},
                        Case{options(DeviceType::kCPU, Precision::kFloat32, true), Precision::kFloat32},
                        Case{options(DeviceType::kCUDA, Precision::kInt8), Precision::kFloat16},
                        Case{options(DeviceType::kCPU, Precision::kInt8), Precision::kFloat32},
                        Case{options(DeviceType::kCUDA, Precision::kInt8, true), Precision::kFloat16},
                        Case{options(DeviceType::kCUDA, Precision::kFP8), Precision::kFloat16},
                        Case{options(DeviceType::kCPU, Precision::kFP8), Precision::kFloat32}, Case{named, Precision::kBFloat16}}) {
    auto o = resolve_precision(c.given);
    ASSERT_TRUE(o.ok()) << o.status().to_string();
    EXPECT_FALSE(o->int8);
    EXPECT_EQ(o->precision, c.given.precision == Precision::kFP8 ? Precision::kFP8 : Precision::kInt8);
    ASSERT_TRUE(o->rest_precision.has_value());
    EXPECT_EQ(*o->rest_precision, c.rest) << precision_name(c.given.precision);
    EXPECT_EQ(float_precision(*o), c.rest);
  }
  // A float build is left as it is.
  auto f = resolve_precision(options(DeviceType::kCUDA, Precision::kFloat16));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->precision, Precision::kFloat16);
  EXPECT_FALSE(f->rest_precision.has_value());
  EXPECT_EQ(float_precision(*f), Precision::kFloat16);
}

TEST(Precision, WhatCannotBeResolvedSaysWhy) {
  auto error = [](const BuildOptions& o) {
    auto r = resolve_precision(o);
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(error(options(DeviceType::kCUDA, Precision::kFP8, true)).find("INT8 or FP8, not both"), std::string::npos);
  BuildOptions both = options(DeviceType::kCUDA, Precision::kFloat16, true);
  both.rest_precision = Precision::kFloat16;
  EXPECT_NE(error(both).find("precision int8"), std::string::npos);
  BuildOptions float_rest = options(DeviceType::kCUDA, Precision::kFloat16);
  float_rest.rest_precision = Precision::kFloat32;
  EXPECT_NE(error(float_rest).find("8-bit precisions"), std::string::npos);
  BuildOptions fp8_rest = options(DeviceType::kCUDA, Precision::kFP8);
  fp8_rest.rest_precision = Precision::kFloat32;
  EXPECT_NE(error(fp8_rest).find("fp8 engines run the rest in fp16"), std::string::npos);
  BuildOptions eight_rest = options(DeviceType::kCUDA, Precision::kInt8);
  eight_rest.rest_precision = Precision::kFP8;
  EXPECT_NE(error(eight_rest).find("float precision"), std::string::npos);
  EXPECT_NE(error(options(DeviceType::kCPU, Precision::kFloat16, true)).find("GPU engines"), std::string::npos);
}

// A float product with constant weights, as the 8-bit build finds it: MatMul x [4, k] · W [k, n].
struct Product {
  ir::Graph g;
  ir::Node* node = nullptr;
  Product(const char* op, Shape w) {
    ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({4, w[0]})));
    ir::Value* wv = g.add_value("w", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of(w)));
    wv->constant = Tensor::empty(DataType::kFloat32, w);
    node = g.add_node(op, "", {x, wv}, {g.add_value("y")});
  }
};

// Which of the target's rows take `n` quantized to `type` (by name).
std::set<std::string> rows_taking(const KernelRegistry& r, const ir::Node& n, DataType type) {
  std::set<std::string> out;
  for (const KernelDef& d : r.all()) {
    const auto& q = d.quantizes;
    const bool op = std::find(q.ops.begin(), q.ops.end(), n.op_type) != q.ops.end();
    const bool ty = std::find(q.types.begin(), q.types.end(), type) != q.types.end();
    if (op && ty && (!q.check || q.check(n, type).empty())) out.insert(d.name);
  }
  return out;
}

TEST(Precision, EightBitRowsDeclareTheProductsTheyTake) {
  const KernelRegistry& cpu = cpu_backend().kernels();
  Product mm("MatMul", {32, 16}), odd("MatMul", {32, 8});
  EXPECT_EQ(rows_taking(cpu, *mm.node, DataType::kInt8), (std::set<std::string>{"cpu.QMatMul.i8.onednn", "cpu.QMatMul.i8.exact"}));
  EXPECT_EQ(rows_taking(cpu, *mm.node, DataType::kFloat8E4M3FN), (std::set<std::string>{"cpu.F8MatMul.f32.emulated"}));
  // FP8 products need K and N divisible by 16 (cuBLASLt's), on the CPU too: it shows CUDA's accuracy.
  EXPECT_TRUE(rows_taking(cpu, *odd.node, DataType::kFloat8E4M3FN).empty());
  EXPECT_NE(fp8_product_check(*odd.node, DataType::kFloat8E4M3FN).find("divisible by 16"), std::string::npos);
  EXPECT_EQ(rows_taking(cpu, *odd.node, DataType::kInt8).size(), 2u);
  // Every row that declares products is an 8-bit product op's.
  for (const KernelRegistry* r : {&cpu, cuda_kernel_registry()}) {
    if (!r) continue;
    for (const KernelDef& d : r->all())
      if (!d.quantizes.ops.empty()) {
        EXPECT_TRUE(d.domain == "kiln" && (d.op == "QConv" || d.op == "QMatMul" || d.op == "F8MatMul")) << d.name;
        EXPECT_FALSE(d.quantizes.types.empty()) << d.name;
      }
  }
}

// CUDA's QConv row declares the float convolutions it takes (cuda_qconv.cpp qconv_takes): channels-last
// ones (symmetric pads, as passes::symmetric_pads says), group 1, channels divisible by 4, 16 or more
// input channels; FP8 also output channels divisible by 16. Checked from the rows alone (no GPU needed;
// a kiln built without CUDA has no CUDA rows).
TEST(Precision, CudaQConvTakesChannelsLastConvolutions) {
  const KernelRegistry* cuda = cuda_kernel_registry();
  if (!cuda) GTEST_SKIP() << "this kiln was built without CUDA";
  const KernelDef* row = cuda->by_name("cuda.QConv.i8.cudnn");
  ASSERT_NE(row, nullptr);
  ASSERT_TRUE(row->quantizes.check);
  // Conv X [4, C, 8, 8] · W [M, C / group, 3, 3] with the attributes given.
  auto why = [&](int64_t m, int64_t c, DataType type, int64_t group = 1, std::vector<int64_t> pads = {},
                 const std::string& auto_pad = "") {
    ir::Graph g;
    ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({4, c, 8, 8})));
    ir::Value* w = g.add_value("w", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({m, c / group, 3, 3})));
    w->constant = Tensor::empty(DataType::kFloat32, {m, c / group, 3, 3});
    ir::Node* n = g.add_node("Conv", "", {x, w}, {g.add_value("y")});
    n->opset = 17;
    if (group != 1) {
      n->attrs["group"].kind = ir::Attribute::Kind::kInt;
      n->attrs["group"].i = group;
    }
    if (!pads.empty()) {
      n->attrs["pads"].kind = ir::Attribute::Kind::kInts;
      n->attrs["pads"].ints = pads;
    }
    if (!auto_pad.empty()) {
      n->attrs["auto_pad"].kind = ir::Attribute::Kind::kString;
      n->attrs["auto_pad"].s = auto_pad;
    }
    return row->quantizes.check(*n, type);
  };
  EXPECT_EQ(why(32, 16, DataType::kInt8), "");
  EXPECT_EQ(why(32, 16, DataType::kInt8, 1, {1, 1, 1, 1}), "");
  EXPECT_EQ(why(32, 16, DataType::kFloat8E4M3FN, 1, {}, "VALID"), "");
  EXPECT_NE(why(32, 32, DataType::kInt8, 2).find("grouped"), std::string::npos);
  EXPECT_NE(why(30, 16, DataType::kInt8).find("divisible by 4"), std::string::npos);
  EXPECT_NE(why(32, 8, DataType::kInt8).find("fewer than 16 input channels"), std::string::npos);
  EXPECT_NE(why(32, 16, DataType::kInt8, 1, {0, 0, 1, 1}).find("asymmetric pads"), std::string::npos);
  EXPECT_NE(why(32, 16, DataType::kInt8, 1, {}, "SAME_UPPER").find("auto_pad"), std::string::npos);
  EXPECT_EQ(why(36, 16, DataType::kInt8), "");
  EXPECT_NE(why(36, 16, DataType::kFloat8E4M3FN).find("divisible by 16"), std::string::npos);
}

}  // namespace
}  // namespace kiln
