// The dtype-generic CUDA kernels (elementwise, comparison/logic, Where, Cast, data movement with host
// shape operands, reductions, softmax, normalizations) against the CPU kernels on random inputs.
// Reduced-precision runs (float16, bfloat16) take inputs rounded to that type, run the CPU reference
// in float32 on the same values, and compare with a tolerance that fits the type.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "ir/float_types.h"
#include "ops/params_nn.h"
#include "passes/passes.h"
#include "test_cuda_util.h"

using namespace kiln;
using namespace kiln::cudatest;

namespace {

// `x` (float32) converted to `to` (float16/bfloat16 round to nearest even).
Tensor convert(const Tensor& x, DataType to) {
  Tensor y = Tensor::empty(to, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = element(x, i);
    switch (to) {
      case DataType::kFloat32: y.data<float>()[i] = static_cast<float>(v); break;
      case DataType::kFloat16: y.data<uint16_t>()[i] = f32_to_f16(static_cast<float>(v)); break;
      case DataType::kBFloat16: y.data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v)); break;
      case DataType::kInt64: y.data<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DataType::kInt32: y.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DataType::kBool: y.data<bool>()[i] = v != 0; break;
      default: ADD_FAILURE() << "convert to " << dtype_name(to);
    }
  }
  return y;
}

Tensor ints(const Shape& shape, std::mt19937& rng, int64_t lo, int64_t hi, DataType dt = DataType::kInt64) {
  Tensor t = Tensor::empty(DataType::kInt64, shape);
  std::uniform_int_distribution<int64_t> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = d(rng);
  return dt == DataType::kInt64 ? t : convert(t, dt);
}

Tensor scalar_i64(int64_t v) {
  Tensor t = Tensor::empty(DataType::kInt64, {});
  t.data<int64_t>()[0] = v;
  return t;
}

Tensor bools(const Shape& shape, std::mt19937& rng) { return convert(ints(shape, rng, 0, 1), DataType::kBool); }

void expect_near(const Tensor& got, const Tensor& want, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int bad = 0;
  for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
    const double g = element(got, i), w = element(want, i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w;
      ++bad;
    }
  }
}

using Attrs = std::function<void(OneNode&)>;

// Runs `op` on CUDA with `inputs` converted to `dt` where `as_dt[i]` (float inputs), and the CPU kernel
// on the float32 originals; compares every output.
// `dev` run by the CUDA backend on `dev_in` and `ref` by the CPU kernels on `ref_in` (undefined
// tensors are omitted inputs); a failure of either is reported under `label` and leaves ok false.
struct BothRuns {
  bool ok = false;
  std::vector<Tensor> got, want;
};
BothRuns run_both(const ir::Node& dev, const std::vector<Tensor>& dev_in, const ir::Node& ref, const std::vector<Tensor>& ref_in,
                  const std::string& label, const std::string& tactic = {}) {
  BothRuns r;
  auto got = run_cuda(dev, dev_in, tactic);
  if (!got.ok()) {
    ADD_FAILURE() << label << ": " << got.status().to_string();
    return r;
  }
  std::vector<Slot> cpu_in;
  for (const Tensor& t : ref_in) cpu_in.push_back(t.defined() ? Slot::of(t) : Slot{});
  auto want = run_node_eager(ref, cpu_in);
  if (!want.ok()) {
    ADD_FAILURE() << label << ": " << want.status().to_string();
    return r;
  }
  r.got = std::move(*got);
  for (const Slot& s : *want) r.want.push_back(s.tensor);
  r.ok = true;
  return r;
}

void compare(const std::string& op, int opset, const std::vector<Tensor>& inputs, const Attrs& attrs, DataType dt,
             const std::string& what, int outputs = 1, std::vector<bool> as_dt = {}) {
  if (as_dt.empty()) as_dt.assign(inputs.size(), true);
  std::vector<Tensor> ref_in = inputs, dev_in = inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !as_dt[i] || inputs[i].dtype() != DataType::kFloat32 || dt == DataType::kFloat32) continue;
    dev_in[i] = convert(inputs[i], dt);
    ref_in[i] = convert(dev_in[i], DataType::kFloat32);  // the reference sees the rounded values
  }
  OneNode dn(op, opset, dev_in, outputs);
  OneNode rn(op, opset, ref_in, outputs);
  if (attrs) {
    attrs(dn);
    attrs(rn);
  }
  const std::string label = op + " " + dtype_name(dt) + " " + what;
  const BothRuns r = run_both(*dn.node, dev_in, *rn.node, ref_in, label);
  if (!r.ok) return;
  const double tol = dt == DataType::kFloat16 ? 4e-3 : dt == DataType::kBFloat16 ? 2e-2 : 2e-5;
  for (int o = 0; o < outputs; ++o) {
    if (o >= static_cast<int>(r.got.size()) || !r.got[o].defined()) continue;
    // Outputs of the reduced type are compared as float against the float32 reference.
    expect_near(r.got[o], r.want[o], tol, tol, label + " output " + std::to_string(o));
  }
}

constexpr DataType kF32 = DataType::kFloat32, kF16 = DataType::kFloat16, kBF16 = DataType::kBFloat16;

// A causal bool mask [batch, 1, S, T], true where query s may see key t: t <= s + (T - S) (the queries
// are the last S of T positions).
Tensor causal_keep(int64_t batch, int64_t s_len, int64_t t_len) {
  Tensor c = Tensor::empty(DataType::kBool, {batch, 1, s_len, t_len});
  for (int64_t i = 0; i < c.numel(); ++i) {
    const int64_t t = i % t_len, s = (i / t_len) % s_len;
    c.data<bool>()[i] = t <= s + (t_len - s_len);
  }
  return c;
}

}  // namespace

TEST(CudaOps, UnaryFloatTypes) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(11);
  struct Case {
    const char* op;
    int opset;
    float lo, hi;
  };
  const Case cases[] = {
      {"Relu", 14, -3, 3},     {"Sigmoid", 13, -5, 5},    {"Tanh", 13, -3, 3},       {"Exp", 13, -3, 3},
      {"Log", 13, 0.1f, 9},    {"Sqrt", 13, 0, 9},        {"Abs", 13, -3, 3},        {"Neg", 13, -3, 3},
      {"Erf", 13, -3, 3},      {"Reciprocal", 13, 0.5f, 4}, {"Floor", 13, -5, 5},    {"Ceil", 13, -5, 5},
      {"Sin", 7, -3, 3},       {"Cos", 7, -3, 3},         {"Softplus", 1, -5, 5},    {"Softsign", 1, -5, 5},
      {"Elu", 6, -3, 3},       {"Selu", 6, -3, 3},        {"Mish", 18, -3, 3},       {"Sign", 13, -3, 3},
      {"HardSwish", 14, -5, 5}, {"Atan", 7, -3, 3},       {"Sinh", 9, -2, 2},
  };
  for (DataType dt : {kF32, kF16, kBF16})
    for (const Case& c : cases) compare(c.op, c.opset, {random_tensor({3, 33}, rng, c.lo, c.hi)}, nullptr, dt, "");
  // Integer Abs/Neg, bool Not, IsNaN.
  compare("Abs", 13, {ints({40}, rng, -9, 9)}, nullptr, kF32, "int64");
  compare("Neg", 13, {ints({40}, rng, -9, 9, DataType::kInt32)}, nullptr, kF32, "int32");
  compare("Not", 1, {bools({3, 5}, rng)}, nullptr, kF32, "bool");
  Tensor withnan = random_tensor({20}, rng);
  withnan.data<float>()[3] = NAN;
  compare("IsNaN", 13, {withnan}, nullptr, kF32, "");
}

TEST(CudaOps, BinaryBroadcastAllTypes) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(12);
  for (DataType dt : {kF32, kF16, kBF16})
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"})
      compare(op, 14, {random_tensor({2, 1, 5}, rng), random_tensor({3, 1}, rng, 0.5f, 2)}, nullptr, dt, "broadcast");
  compare("Pow", 15, {random_tensor({4, 6}, rng, 0.1f, 3), random_tensor({6}, rng, -2, 2)}, nullptr, kF32, "");
  for (DataType it : {DataType::kInt64, DataType::kInt32})
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"})
      compare(op, 14, {ints({4, 5}, rng, -50, 50, it), ints({5}, rng, 1, 7, it)}, nullptr, kF32, dtype_name(it));
  compare("Mod", 13, {ints({30}, rng, -50, 50), ints({30}, rng, 1, 9)}, nullptr, kF32, "int");
  compare("Mod", 13, {random_tensor({30}, rng, -9, 9), random_tensor({30}, rng, 1, 3)},
          [](OneNode& n) { n.set_int("fmod", 1); }, kF32, "fmod");
  compare("Sum", 13, {random_tensor({2, 3}, rng), random_tensor({3}, rng), random_tensor({2, 1}, rng)}, nullptr, kF16,
          "variadic");
  // Comparisons (bool out) and logic.
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    compare(op, 16, {ints({3, 4}, rng, 0, 3), ints({4}, rng, 0, 3)}, nullptr, kF32, "int64");
    compare(op, 16, {random_tensor({3, 4}, rng), random_tensor({3, 1}, rng)}, nullptr, kF16, "");
  }
  for (const char* op : {"And", "Or", "Xor"}) compare(op, 7, {bools({2, 5}, rng), bools({5}, rng)}, nullptr, kF32, "");
  compare("PRelu", 16, {random_tensor({2, 3, 4}, rng), random_tensor({3, 1}, rng)}, nullptr, kF16, "");
  // Where with three-way broadcasting, float and int64 data.
  compare("Where", 16, {bools({2, 1, 4}, rng), random_tensor({3, 4}, rng), random_tensor({2, 3, 1}, rng)}, nullptr, kF16,
          "", 1, {false, true, true});
  compare("Where", 16, {bools({4}, rng), ints({3, 4}, rng, -5, 5), ints({1}, rng, 7, 7)}, nullptr, kF32, "int64");
}

// Binary ops whose operands are each one contiguous block broadcast along the dims around it (a
// same-shaped operand, a bias [C], a channel scale [C, 1, 1], a scalar) take the walk kernels: 16-byte
// lanes where the sizes and pointers allow, else one element a thread (odd sizes, an inner count not a
// multiple of the lanes); comparisons and integers take the one-element walk.
TEST(CudaOps, BinaryWalksMatchCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(61);
  struct Case {
    Shape a, b;
  };
  const Case cases[] = {{{4, 8, 64}, {4, 8, 64}}, {{3, 7, 5}, {3, 7, 5}},  {{6, 64}, {64}},        {{64}, {6, 64}},
                        {{2, 16, 3, 8}, {16, 1, 1}}, {{3, 5, 7}, {5, 1}}, {{4, 16}, {1}},          {{1}, {4, 16}},
                        {{3, 16, 8}, {1, 16, 1}},   {{2, 3, 4, 16}, {3, 1, 16}}, {{5, 40}, {5, 1}}};
  for (DataType dt : {kF32, kF16, kBF16})
    for (const Case& c : cases)
      for (const char* op : {"Add", "Sub", "Mul", "Div"})
        compare(op, 14, {random_tensor(c.a, rng), random_tensor(c.b, rng, 0.5f, 2)}, nullptr, dt,
                shape_to_string(c.a) + " and " + shape_to_string(c.b));
  for (const Case& c : cases) {
    compare("Less", 13, {random_tensor(c.a, rng), random_tensor(c.b, rng)}, nullptr, kF16, shape_to_string(c.b));
    compare("Add", 14, {ints(c.a, rng, -50, 50, DataType::kInt32), ints(c.b, rng, -50, 50, DataType::kInt32)}, nullptr, kF32,
            "int32 " + shape_to_string(c.b));
  }
}

TEST(CudaOps, CastBetweenTypes) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(13);
  Tensor f = random_tensor({7, 9}, rng, -40, 40);
  for (DataType to : {kF16, kBF16, DataType::kInt64, DataType::kInt32, DataType::kBool, DataType::kFloat64, kF32})
    compare("Cast", 19, {f}, [to](OneNode& n) { n.set_int("to", static_cast<int64_t>(to)); }, kF32,
            std::string("to ") + dtype_name(to));
  for (DataType from : {DataType::kInt64, DataType::kBool, kF16})
    compare("Cast", 19, {from == kF16 ? convert(f, kF16) : from == DataType::kBool ? bools({5, 5}, rng) : ints({30}, rng, -9, 9)},
            [](OneNode& n) { n.set_int("to", static_cast<int64_t>(DataType::kFloat32)); }, kF32,
            std::string("from ") + dtype_name(from));
}

TEST(CudaOps, DataMovementWithHostShapes) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(14);
  Tensor x = random_tensor({2, 3, 4, 5}, rng);
  for (DataType dt : {kF32, kF16}) {
    compare("Reshape", 14, {x, int64_tensor({6, -1, 0})}, nullptr, dt, "", 1, {true, false});
    compare("Expand", 13, {random_tensor({3, 1}, rng), int64_tensor({2, 1, 4})}, nullptr, dt, "", 1, {true, false});
    compare("Slice", 13, {x, int64_tensor({-1, 1}), int64_tensor({-100, 5}), int64_tensor({1, 3}), int64_tensor({-1, 2})},
            nullptr, dt, "negative step", 1, {true, false, false, false, false});
    compare("Slice", 13, {x, int64_tensor({0}), int64_tensor({2}), int64_tensor({-1})}, nullptr, dt, "last axis", 1,
            {true, false, false, false});
    compare("Transpose", 13, {x}, [](OneNode& n) { n.set_ints("perm", {2, 0, 3, 1}); }, dt, "");
    // Copies that keep the last axis contiguous take the rows path (pieces of up to 16 bytes).
    compare("Transpose", 13, {random_tensor({2, 5, 3, 64}, rng)}, [](OneNode& n) { n.set_ints("perm", {0, 2, 1, 3}); }, dt,
            "heads (rows of 64)");
    compare("Transpose", 13, {random_tensor({5, 6, 96}, rng)}, [](OneNode& n) { n.set_ints("perm", {1, 0, 2}); }, dt,
            "sequence-first (rows of 96)");
    compare("Slice", 13, {random_tensor({3, 4, 77}, rng), int64_tensor({0}), int64_tensor({73}), int64_tensor({-1})}, nullptr, dt,
            "last axis, odd rows", 1, {true, false, false, false});
    compare("Slice", 13, {random_tensor({3, 4, 80}, rng), int64_tensor({8}), int64_tensor({72}), int64_tensor({2})}, nullptr, dt,
            "last axis, offset rows", 1, {true, false, false, false});
    // Long rows (512 pieces and more: a block per row): a padded head's column slice, odd and offset.
    compare("Slice", 13, {random_tensor({2, 3, 1208}, rng), int64_tensor({0}), int64_tensor({1201}), int64_tensor({-1})}, nullptr,
            dt, "last axis, long odd rows", 1, {true, false, false, false});
    compare("Slice", 13, {random_tensor({5, 4104}, rng), int64_tensor({1, 8}), int64_tensor({4, 4104}), int64_tensor({0, 1})},
            nullptr, dt, "long offset rows", 1, {true, false, false, false});
    // 8 KiB rows and more, destination rows off 16 bytes (every shift): aligned pieces realigned.
    compare("Slice", 13, {random_tensor({3, 5, 4104}, rng), int64_tensor({0}), int64_tensor({4101}), int64_tensor({-1})}, nullptr,
            dt, "last axis, realigned rows", 1, {true, false, false, false});
    compare("Slice", 13, {random_tensor({7, 4112}, rng), int64_tensor({8}), int64_tensor({4111}), int64_tensor({1})}, nullptr, dt,
            "offset realigned rows", 1, {true, false, false, false});
    compare("Transpose", 13, {random_tensor({3, 2, 4096}, rng)}, [](OneNode& n) { n.set_ints("perm", {1, 0, 2}); }, dt,
            "long rows of 16-byte pieces");
    compare("Unsqueeze", 13, {x, int64_tensor({0, -1})}, nullptr, dt, "", 1, {true, false});
    compare("Squeeze", 13, {random_tensor({3, 1, 4, 1}, rng), int64_tensor({1})}, nullptr, dt, "", 1, {true, false});
    compare("Concat", 13, {random_tensor({2, 3, 4}, rng), random_tensor({2, 1, 4}, rng)},
            [](OneNode& n) { n.set_int("axis", 1); }, dt, "");
    compare("Split", 13, {x, int64_tensor({2, 3})}, [](OneNode& n) { n.set_int("axis", 3); }, dt, "", 2, {true, false});
    compare("Split", 18, {x}, [](OneNode& n) {
      n.set_int("axis", 2);
      n.set_int("num_outputs", 3);
    }, dt, "equal parts", 3);
    // One launch for every part: 16-byte pieces (QKV-like rows), odd widths, more parts than one launch takes.
    compare("Split", 13, {random_tensor({3, 4, 96}, rng), int64_tensor({32, 32, 32})}, [](OneNode& n) { n.set_int("axis", 2); },
            dt, "16-byte rows", 3, {true, false});
    compare("Split", 13, {random_tensor({5, 7}, rng), int64_tensor({1, 2, 0, 4})}, [](OneNode& n) { n.set_int("axis", 1); }, dt,
            "odd widths, an empty part", 4, {true, false});
    compare("Split", 18, {random_tensor({35, 3}, rng)}, [](OneNode& n) { n.set_int("num_outputs", 35); }, dt, "35 parts", 35);
    compare("Gather", 13, {random_tensor({5, 6}, rng), ints({2, 3}, rng, -5, 4)}, nullptr, dt, "axis 0", 1, {true, false});
    compare("Gather", 13, {x, ints({4}, rng, -4, 3, DataType::kInt32)}, [](OneNode& n) { n.set_int("axis", 2); }, dt,
            "axis 2 int32", 1, {true, false});
    // Rows of whole 16-byte words (the vectorized path): ViT's scalar index along axis 0, and a
    // batch of indices (negative ones too) along axis 1.
    compare("Gather", 13, {random_tensor({3, 5, 2, 16}, rng), scalar_i64(-2)}, nullptr, dt, "scalar index, word rows", 1,
            {true, false});
    compare("Gather", 13, {random_tensor({2, 6, 32}, rng), ints({4}, rng, -6, 5, DataType::kInt32)},
            [](OneNode& n) { n.set_int("axis", 1); }, dt, "axis 1, word rows", 1, {true, false});
  }
  compare("Concat", 13, {ints({3}, rng, 0, 9), ints({2}, rng, 0, 9)}, [](OneNode& n) { n.set_int("axis", 0); }, kF32, "int64");
  compare("ConstantOfShape", 20, {int64_tensor({2, 3})}, nullptr, kF32, "", 1, {false});
  compare("Range", 11, {scalar_i64(3), scalar_i64(20), scalar_i64(4)},
          nullptr, kF32, "int64", 1, {false, false, false});
  compare("Range", 11, {scalar_f32(1.5f), scalar_f32(-3.f), scalar_f32(-0.5f)}, nullptr, kF32, "float", 1,
          {false, false, false});
}

TEST(CudaOps, ReductionsAndArgExtremes) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(15);
  Tensor x = random_tensor({3, 4, 70}, rng, 0.2f, 2.f);
  for (DataType dt : {kF32, kF16}) {
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"}) {
      const double scale = std::string(op) == "ReduceProd" ? 0 : 1;
      if (scale == 0 && dt == kF16) continue;  // products of 70 values leave float16's range
      compare(op, 18, {x, int64_tensor({-1})}, nullptr, dt, "last axis", 1, {true, false});
      compare(op, 18, {x, int64_tensor({0, 2})}, [](OneNode& n) { n.set_int("keepdims", 0); }, dt, "axes 0,2", 1,
              {true, false});
    }
    compare("ReduceMean", 13, {x}, [](OneNode& n) { n.set_ints("axes", {1}); }, dt, "opset 13 attribute");
    compare("ReduceSum", 13, {x}, nullptr, dt, "all axes");
  }
  compare("ReduceSum", 13, {ints({4, 6}, rng, -9, 9), int64_tensor({1})}, nullptr, kF32, "int64", 1, {true, false});
  Tensor ties = convert(ints({4, 9}, rng, 0, 3), kF32);
  for (const char* op : {"ArgMax", "ArgMin"})
    for (int64_t last : {0, 1})
      compare(op, 13, {ties}, [last](OneNode& n) {
        n.set_int("axis", 1);
        n.set_int("select_last_index", last);
      }, kF32, last ? "last index" : "first index");
  compare("ArgMax", 13, {x}, [](OneNode& n) { n.set_int("keepdims", 0); }, kF16, "axis 0");
}

TEST(CudaOps, SoftmaxAndNormalizations) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(16);
  for (DataType dt : {kF32, kF16, kBF16}) {
    compare("Softmax", 13, {random_tensor({2, 3, 50}, rng, -6, 6)}, nullptr, dt, "last axis");
    compare("Softmax", 13, {random_tensor({2, 3, 5}, rng, -6, 6)}, [](OneNode& n) { n.set_int("axis", 1); }, dt, "axis 1");
    compare("LogSoftmax", 13, {random_tensor({4, 33}, rng, -6, 6)}, nullptr, dt, "");
    compare("LayerNormalization", 17, {random_tensor({2, 5, 96}, rng), random_tensor({96}, rng), random_tensor({96}, rng)},
            nullptr, dt, "last axis", 3);
    compare("LayerNormalization", 17, {random_tensor({2, 5, 12}, rng), random_tensor({5, 12}, rng)},
            [](OneNode& n) {
              n.set_int("axis", 1);
              n.set_float("epsilon", 1e-3f);
            }, dt, "axis 1, no bias", 3);
    // Rows held in registers by the 16-bit kernels: a group of 8, 16 or 32 lanes per row with 1 to 4
    // vectors per lane up to 1024 values (37 rows: blocks of 16, 8 or 4 rows end part full), a block
    // per row with 2 or 4 vectors per thread up to 4096; and a width left to the generic kernel.
    for (int64_t n : {16, 64, 96, 128, 192, 384, 520, 768, 1024, 1536, 4000, 4104})
      compare("LayerNormalization", 17, {random_tensor({37, n}, rng), random_tensor({n}, rng), random_tensor({n}, rng)},
              nullptr, dt, "width " + std::to_string(n), 3);
  }
  compare("RMSNormalization", 23, {random_tensor({3, 64}, rng), random_tensor({64}, rng)}, nullptr, kF32, "");
  compare("RMSNormalization", 23, {random_tensor({3, 768}, rng), random_tensor({768}, rng)}, nullptr, kF16, "16-bit rows");
}

TEST(CudaOps, SkipLayerNormMatchesCpuFusedKernel) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(17);
  for (const auto& [dt, n] : std::vector<std::pair<DataType, int64_t>>{{kF32, 64}, {kF16, 64}, {kF16, 96}, {kF16, 768}}) {
    const std::vector<Tensor> in = {random_tensor({2, 7, n}, rng), random_tensor({2, 7, n}, rng),
                                    random_tensor({n}, rng), random_tensor({n}, rng)};
    // B full, B one row, B [1, 7, 64] repeated over the batch (BERT's position embeddings), and
    // the same with A the repeated one; then simplified (RMS, no beta) with B full and one row.
    for (int variant = 0; variant < 6; ++variant) {
      const bool simplified = variant >= 4;
      std::vector<Tensor> ins = in;
      if (simplified) ins.pop_back();
      if (variant == 5) ins[1] = random_tensor({n}, rng);
      if (variant == 1) ins[1] = random_tensor({n}, rng);
      if (variant >= 2) ins[1] = random_tensor({1, 7, n}, rng);
      if (variant == 3) std::swap(ins[0], ins[1]);
      // SkipLayerNorm is in kiln's domain: build both nodes by hand.
      std::vector<Tensor> dev = ins, ref = ins;
      if (dt != kF32)
        for (size_t i = 0; i < ins.size(); ++i) {
          dev[i] = convert(ins[i], dt);
          ref[i] = convert(dev[i], kF32);
        }
      OneNode dn("SkipLayerNorm", 1, dev, 2), rn("SkipLayerNorm", 1, ref, 2);
      dn.node->domain = rn.node->domain = "kiln";
      dn.set_float("epsilon", 1e-5f);
      rn.set_float("epsilon", 1e-5f);
      if (simplified) {
        dn.set_int("simplified", 1);
        rn.set_int("simplified", 1);
      }
      auto got = run_cuda(*dn.node, dev);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      std::vector<Slot> cpu_in;
      for (const Tensor& t : ref) cpu_in.push_back(Slot::of(t));
      auto want = run_node_eager(*rn.node, cpu_in);
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      const double tol = dt == kF16 ? 4e-3 : 2e-5;
      for (int o = 0; o < 2; ++o)
        expect_near((*got)[o], (*want)[o].tensor, tol, tol,
                    std::string("SkipLayerNorm variant ") + std::to_string(variant) + " output " + std::to_string(o));
    }
  }
}

// kiln's fused ops on CUDA (the inner Conv/Gemm/MatMul kernel, then bias and activation in one pass)
// against the CPU fused kernels, for several activations and the three float types.
TEST(CudaOps, FusedConvGemmMatMulMatchCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(23);
  auto fused = [](const char* act, std::vector<float> params = {}) {
    return [act, params](OneNode& n) {
      n.node->domain = "kiln";
      n.set_string("activation", act);
      if (!params.empty()) n.attr("activation_params", ir::Attribute::Kind::kFloats).floats = params;
    };
  };
  for (DataType dt : {kF32, kF16, kBF16}) {
    const Tensor x = random_tensor({2, 3, 9, 9}, rng), w = random_tensor({8, 3, 3, 3}, rng, -0.5f, 0.5f);
    const Tensor b = random_tensor({8}, rng);
    compare("FusedConv", 1, {x, w, b}, [&](OneNode& n) {
      fused("Relu")(n);
      n.set_ints("pads", {1, 1, 1, 1});
    }, dt, "relu, bias");
    compare("FusedConv", 1, {x, w}, [&](OneNode& n) {
      fused("LeakyRelu", {0.2f})(n);
      n.set_ints("strides", {2, 2});
    }, dt, "leaky relu, no bias");
    compare("FusedConv", 1, {x, w, b}, fused("HardSwish"), dt, "hard swish");
    compare("FusedConv", 1, {x, w, b, random_tensor({2, 8, 9, 9}, rng)}, [&](OneNode& n) {
      fused("Relu")(n);
      n.set_ints("pads", {1, 1, 1, 1});
    }, dt, "residual, relu");
    const Tensor a = random_tensor({2, 5, 16}, rng), m = random_tensor({16, 24}, rng, -0.5f, 0.5f);
    compare("FusedMatMul", 1, {a, m, random_tensor({24}, rng)}, fused("Gelu"), dt, "gelu, bias");
    // Products over ±10 (half types take gelu_for_half: its tails on both sides).
    compare("FusedMatMul", 1, {random_tensor({2, 5, 16}, rng, -4, 4), m, random_tensor({24}, rng, -3, 3)}, fused("Gelu"), dt,
            "gelu over a wide range, bias");
    compare("FusedMatMul", 1, {a, m}, fused("Sigmoid"), dt, "sigmoid, no bias");
    compare("FusedMatMul", 1, {a, m, random_tensor({24}, rng)}, fused("Clip", {-0.5f, 0.5f}), dt, "clip, bias");
    // The bias (and a ReLU) in cuBLASLt's epilogue: one matrix, and batched operands (strided batch).
    compare("FusedMatMul", 1, {a, m, random_tensor({24}, rng)}, fused("Relu"), dt, "relu, bias (epilogue)");
    compare("FusedMatMul", 1, {a, m, random_tensor({24}, rng)}, fused(""), dt, "bias only (epilogue)");
    compare("FusedMatMul", 1, {a, random_tensor({2, 16, 24}, rng, -0.5f, 0.5f), random_tensor({24}, rng)}, fused("Relu"), dt,
            "batched B, relu, bias (epilogue)");
    const Tensor ga = random_tensor({6, 16}, rng), gb = random_tensor({24, 16}, rng, -0.5f, 0.5f);
    compare("FusedGemm", 1, {ga, gb, random_tensor({24}, rng)}, [&](OneNode& n) {
      fused("Tanh")(n);
      n.set_int("transB", 1);
    }, dt, "tanh, C");
    // A tanh GELU (GPT-2's) and a ReLU join the bias in cuBLASLt's epilogue, for FusedMatMul and
    // FusedGemm (its C): float32's 2e-5 tells the tanh form from the exact one (they differ by ~3e-4).
    compare("FusedMatMul", 1, {a, m, random_tensor({24}, rng)}, fused("GeluTanh"), dt, "tanh gelu, bias (epilogue)");
    compare("FusedGemm", 1, {ga, gb, random_tensor({24}, rng)}, [&](OneNode& n) {
      fused("GeluTanh")(n);
      n.set_int("transB", 1);
    }, dt, "tanh gelu, C (epilogue)");
    compare("FusedGemm", 1, {ga, gb, random_tensor({24}, rng)}, [&](OneNode& n) {
      fused("Relu")(n);
      n.set_int("transB", 1);
    }, dt, "relu, C (epilogue)");
    // output_dtype float32 (passes::products_write_float): half operands, a float32 Y; columns off
    // every alignment (1001).
    const Tensor wide = random_tensor({16, 1001}, rng, -0.5f, 0.5f);
    compare("FusedMatMul", 1, {a, wide}, [&](OneNode& n) {
      fused("")(n);
      n.set_int("output_dtype", static_cast<int64_t>(DataType::kFloat32));
    }, dt, "writes float32");
    if (dt != kF32) {  // and the output is float32 indeed
      const std::vector<Tensor> half_in = {convert(a, dt), convert(wide, dt)};
      OneNode n("FusedMatMul", 1, half_in);
      fused("")(n);
      n.set_int("output_dtype", static_cast<int64_t>(DataType::kFloat32));
      auto got = run_cuda(*n.node, half_in);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ((*got)[0].dtype(), kF32) << dtype_name(dt);
    }
  }
}

// output_dtype float32 with output_columns c (passes::products_write_float, a padded half head): the
// half product's first c columns widened to float32 — every destination alignment (c and the row
// count odd, so rows start at each of the four 4-float offsets; 3 columns, fewer than a piece; 9001
// columns, more pieces than two per thread of the kernel's 1024-thread block), a
// batch of matrices folded into rows, float16 and bfloat16. Reference: the product of the half values in double, rounded to the
// half type (the kernel rounds there before widening), within one accumulation-order rounding.
TEST(CudaOps, HalfProductWidenedIntoLeadingColumns) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(37);
  struct Case { Shape a; int64_t n, columns; };
  for (DataType dt : {kF16, kBF16}) {
    for (const Case& c : {Case{{7, 64}, 1008, 1001}, Case{{2, 5, 32}, 16, 13}, Case{{33, 48}, 2048, 2045},
                          Case{{1, 16}, 1008, 1000}, Case{{9, 16}, 64, 64}, Case{{6, 16}, 8, 3},
                          Case{{5, 16}, 9008, 9001}}) {
      const std::string label = std::string(dtype_name(dt)) + " " + shape_to_string(c.a) + " x " +
                                std::to_string(c.n) + " -> " + std::to_string(c.columns);
      const int64_t k = c.a.back();
      const std::vector<Tensor> in = {convert(random_tensor(c.a, rng), dt), convert(random_tensor({k, c.n}, rng), dt)};
      OneNode n("FusedMatMul", 1, in);
      n.node->domain = "kiln";
      n.set_int("output_dtype", static_cast<int64_t>(DataType::kFloat32));
      n.set_int("output_columns", c.columns);
      auto got = run_cuda(*n.node, in);
      ASSERT_TRUE(got.ok()) << label << ": " << got.status().to_string();
      const Tensor& y = (*got)[0];
      Shape want_shape = c.a;
      want_shape.back() = c.columns;
      ASSERT_EQ(y.dtype(), kF32) << label;
      ASSERT_EQ(y.shape(), want_shape) << label;
      const int64_t rows = shape_numel(c.a) / k;
      const double ulp = dt == kF16 ? 1.0 / 1024 : 1.0 / 128;  // relative spacing of the half type
      int bad = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < c.columns; ++j) {
          double ref = 0;
          for (int64_t t = 0; t < k; ++t) ref += element(in[0], r * k + t) * element(in[1], t * c.n + j);
          const double v = y.data<float>()[r * c.columns + j];
          if (std::abs(v - ref) > ulp * std::abs(ref) + 1e-3 && ++bad <= 5)
            ADD_FAILURE() << label << ": row " << r << " column " << j << ": " << v << " vs " << ref;
        }
      EXPECT_EQ(bad, 0) << label;
    }
  }
  // Refused where it cannot apply: more columns than the product has, a float32 product.
  const std::vector<Tensor> in = {convert(random_tensor({4, 16}, rng), kF16), convert(random_tensor({16, 64}, rng), kF16)};
  OneNode wide("FusedMatMul", 1, in);
  wide.node->domain = "kiln";
  wide.set_int("output_dtype", static_cast<int64_t>(DataType::kFloat32));
  wide.set_int("output_columns", 65);
  EXPECT_FALSE(run_cuda(*wide.node, in).ok());
}

// ResNet-50's first convolution in float16 at batch 64 (3 input channels, 7x7, stride 2): cuDNN's
// heuristic offered an algorithm there that the launch refused (CUDNN_STATUS_BAD_PARAM on the H100).
TEST(CudaOps, HalfConvThreeChannelsBatch64) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(29);
  const Tensor x = random_tensor({64, 3, 224, 224}, rng), w = random_tensor({64, 3, 7, 7}, rng, -0.2f, 0.2f);
  compare("Conv", 11, {x, w, random_tensor({64}, rng)}, [](OneNode& n) {
    n.set_ints("strides", {2, 2});
    n.set_ints("pads", {3, 3, 3, 3});
    n.set_ints("kernel_shape", {7, 7});
  }, kF16, "resnet conv1, batch 64");
}

// kiln.Attention on CUDA (one kernel, online softmax over key tiles) against the CPU kernel: sequence
// lengths off the tile sizes, an additive padding mask, a causal bool mask with its fill, head sizes
// 64 and 40, a value head size other than the key's, every float type.
TEST(CudaOps, AttentionMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(31);
  auto attrs = [](int64_t heads, float scale, bool fill) {
    return [=](OneNode& n) {
      n.node->domain = "kiln";
      n.set_int("num_heads", heads);
      n.set_float("scale", scale);
      if (fill) {
        n.set_float("mask_fill", -1e4f);
        n.set_int("mask_fill_where_true", 0);
      }
    };
  };
  for (DataType dt : {kF32, kF16, kBF16}) {
    // BERT-like: B 2, S = T = 77, 4 heads of 64, additive mask [B, 1, 1, T].
    const int64_t B = 2, S = 77, H = 4, D = 64;
    Tensor mask = random_tensor({B, 1, 1, S}, rng, -1, 0);
    for (int64_t t = 60; t < S; ++t) mask.data<float>()[S + t] = -1e4f;  // padding in the second row
    compare("Attention", 1, {random_tensor({B, S, H * D}, rng), random_tensor({B, S, H * D}, rng),
                             random_tensor({B, S, H * D}, rng), mask},
            attrs(H, 0.125f, false), dt, "additive mask");
    // GPT-2-like causal bool mask [1, 1, S, T] (keep where true), T > S, head size 40, Dv 24.
    const int64_t S2 = 33, T2 = 150;
    const Tensor cond = causal_keep(1, S2, T2);
    compare("Attention", 1, {random_tensor({1, S2, 3 * 40}, rng), random_tensor({1, T2, 3 * 40}, rng),
                             random_tensor({1, T2, 3 * 24}, rng), Tensor(), cond},
            attrs(3, 0.158f, true), dt, "causal bool mask");
    // Head sizes that are multiples of 16 take the tensor-core kernel in float16/bfloat16: the causal
    // case over several key tiles (T 150, S 70 over two query tiles), head size 64, Dv 32; and BERT's
    // shape at batch 3 with an additive padding mask and a bool mask together, head size 128.
    const Tensor cond3 = causal_keep(1, 70, T2);
    compare("Attention", 1, {random_tensor({2, 70, 2 * 64}, rng), random_tensor({2, T2, 2 * 64}, rng),
                             random_tensor({2, T2, 2 * 32}, rng), Tensor(), cond3},
            attrs(2, 0.125f, true), dt, "causal bool mask, head 64");
    // The register-resident kernel (D = Dv = 64) over three key tiles, the last one partial, with a
    // causal mask whose first rows see only part of a tile.
    compare("Attention", 1, {random_tensor({2, 70, 2 * 64}, rng), random_tensor({2, T2, 2 * 64}, rng),
                             random_tensor({2, T2, 2 * 64}, rng), Tensor(), cond3},
            attrs(2, 0.125f, true), dt, "causal bool mask, head 64, Dv 64");
    Tensor mask3 = random_tensor({3, 1, 1, 128}, rng, -1, 0);
    for (int64_t t = 100; t < 128; ++t) mask3.data<float>()[2 * 128 + t] = -1e4f;
    Tensor keep = Tensor::empty(DataType::kBool, {3, 1, 1, 128});
    for (int64_t i = 0; i < keep.numel(); ++i) keep.data<bool>()[i] = (i % 7) != 3;
    compare("Attention", 1, {random_tensor({3, 128, 2 * 128}, rng), random_tensor({3, 128, 2 * 128}, rng),
                             random_tensor({3, 128, 2 * 128}, rng), mask3, keep},
            attrs(2, 0.088f, true), dt, "both masks, head 128");
  }
}

// zero_nan_rows (torch's SDPA export guards fully masked rows with Where(IsNaN(P), 0, P)): rows whose
// additive mask is all -inf give a zero context on CUDA as on the CPU, in each kernel (head size 40:
// the CUDA-core kernel; 64: the register-resident tensor-core kernel; 128 with Dv 32: the shared-memory
// one), for several key tiles; the other rows are unchanged.
TEST(CudaOps, AttentionZeroNanRowsMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(37);
  struct Shape3 {
    int64_t d, dv;
  };
  for (DataType dt : {kF32, kF16, kBF16})
    for (const Shape3 hs : {Shape3{40, 40}, Shape3{64, 64}, Shape3{128, 32}}) {
      const int64_t B = 2, S = 70, T = 150, H = 2;
      Tensor mask = random_tensor({B, 1, S, T}, rng, -1, 0);
      for (int64_t s : {0, 17, 69})  // fully masked query rows, in both batch entries
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < T; ++t) mask.data<float>()[(b * S + s) * T + t] = -INFINITY;
      compare("Attention", 1, {random_tensor({B, S, H * hs.d}, rng), random_tensor({B, T, H * hs.d}, rng),
                               random_tensor({B, T, H * hs.dv}, rng), mask},
              [&](OneNode& n) {
                n.node->domain = "kiln";
                n.set_int("num_heads", H);
                n.set_float("scale", 0.125f);
                n.set_int("zero_nan_rows", 1);
              },
              dt, "zero_nan_rows, head " + std::to_string(hs.d));
    }
}

// packed_qkv (timm's one projection [B, N, 3*H*D], Q, K, V its column blocks read in place) on CUDA
// against the CPU: head sizes 40 (CUDA-core kernel), 64 and 128 (tensor-core kernels in float16 and
// bfloat16), with Swin's relative position bias [H, N, N] as the additive mask.
TEST(CudaOps, PackedQkvAttentionMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(41);
  for (DataType dt : {kF32, kF16, kBF16})
    for (int64_t d : {40, 64, 128}) {
      const int64_t B = 3, N = 97, H = 2;
      Tensor qkv = random_tensor({B, N, 3 * H * d}, rng);
      for (bool bias : {false, true}) {
        std::vector<Tensor> ins = {qkv, qkv, qkv};
        if (bias) ins.push_back(random_tensor({H, N, N}, rng, -2, 2));
        compare("Attention", 1, ins,
                [&](OneNode& n) {
                  n.node->domain = "kiln";
                  n.set_int("num_heads", H);
                  n.set_float("scale", 0.125f);
                  n.set_int("packed_qkv", 1);
                },
                dt, "packed QKV, head " + std::to_string(d) + (bias ? ", bias" : ""));
      }
      // Sequence-first [N, B, 3*H*D] (torch's nn.MultiheadAttention projection read in place).
      Tensor qkv_sf = random_tensor({N, B, 3 * H * d}, rng);
      compare("Attention", 1, {qkv_sf, qkv_sf, qkv_sf},
              [&](OneNode& n) {
                n.node->domain = "kiln";
                n.set_int("num_heads", H);
                n.set_float("scale", 0.125f);
                n.set_int("packed_qkv", 1);
                n.set_int("sequence_first", 1);
              },
              dt, "packed sequence-first QKV, head " + std::to_string(d));
    }
}

namespace {

// The tactics kiln.Attention offers for float16/bfloat16 with head size d, in the order it times them;
// `cudnn`: the case is one cuDNN's fused attention may run (no bool mask, no mask period, an additive
// mask of whole [S, T] rows and zero_nan_rows), so a build with cudnn-frontend offers "cudnn" last.
std::vector<std::string> attention_tactics_for(int64_t d, bool cudnn = false) {
  std::vector<std::string> t;
  if (d == 64 || d == 128) t = {"fp4", "fp2", "fp8", "fa4", "fa2", "fa8", "wmma"};
  if (d == 32) t = {"fp4", "fp2", "fp8", "wmma"};
  // (else the WMMA kernel alone, or the CUDA-core kernel: nothing to time)
#if KILN_EXPECT_CUDNN_ATTENTION
  if (cudnn && !t.empty() && d % 8 == 0 && d <= 128) t.push_back("cudnn");
#else
  (void)cudnn;
#endif
  return t;
}

// kiln.Attention (attributes set by `attrs`) on CUDA, its float32 inputs rounded to `dt`, against the
// CPU kernel on the rounded values, under each tactic the CUDA kernel offers and under its own
// choice. Returns the tactics offered.
std::vector<std::string> expect_attention_tactics_match_cpu(std::vector<Tensor> ref_in, DataType dt, const Attrs& attrs,
                                                            const std::string& label) {
  std::vector<Tensor> dev_in;
  for (Tensor& t : ref_in) {
    const bool rounded = t.defined() && t.dtype() == kF32;
    if (rounded) t = convert(convert(t, dt), kF32);  // the reference sees the rounded values
    dev_in.push_back(rounded ? convert(t, dt) : t);
  }
  OneNode dn("Attention", 1, dev_in, 1), rn("Attention", 1, ref_in, 1);
  for (OneNode* n : {&dn, &rn}) {
    n->node->domain = "kiln";
    attrs(*n);
  }
  std::vector<Slot> cpu_in;
  for (const Tensor& t : ref_in) cpu_in.push_back(t.defined() ? Slot::of(t) : Slot{});
  auto want = run_node_eager(*rn.node, cpu_in);
  std::vector<std::string> tactics;
  if (!want.ok() || !run_cuda(*dn.node, dev_in, {}, &tactics).ok()) {
    ADD_FAILURE() << label << ": " << (want.ok() ? "the CUDA kernel refused it" : want.status().to_string());
    return {};
  }
  const double tol = dt == kF32 ? 1e-4 : dt == kF16 ? 4e-3 : 2e-2;
  std::vector<std::string> run_tactics = tactics;
  run_tactics.push_back("");  // the kernel's own choice
  for (const std::string& t : run_tactics) {
    auto got = run_cuda(*dn.node, dev_in, t);
    if (!got.ok()) {
      ADD_FAILURE() << label << " tactic '" << t << "': " << got.status().to_string();
      continue;
    }
    expect_near((*got)[0], (*want)[0].tensor, tol, tol, label + " tactic '" + t + "'");
  }
  return tactics;
}

}  // namespace

// mask_batch_period (Swin's shifted windows: B = images·nW, the mask [nW, H|1, S, T] read at entry
// b % nW) on CUDA against the CPU, in every kernel: Swin's packed QKV with 49 tokens and head size 32
// (the WMMA kernel in float16/bfloat16), head size 40 (the CUDA-core kernel) with the heads broadcast,
// and head size 64 with each tactic of the register-resident kernels, over several key tiles.
TEST(CudaOps, AttentionMaskBatchPeriodMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(47);
  struct Case {
    int64_t period, images, s, heads, d, mask_heads;
    bool packed;
  };
  const Case cases[] = {{4, 2, 49, 3, 32, 3, true}, {3, 2, 49, 2, 40, 1, false}, {2, 3, 130, 2, 64, 2, false}};
  for (DataType dt : {kF32, kF16, kBF16})
    for (const Case& c : cases) {
      const int64_t B = c.period * c.images, W = c.heads * c.d;
      std::vector<Tensor> in;
      if (c.packed) {
        const Tensor qkv = random_tensor({B, c.s, 3 * W}, rng);
        in = {qkv, qkv, qkv};
      } else {
        in = {random_tensor({B, c.s, W}, rng), random_tensor({B, c.s, W}, rng), random_tensor({B, c.s, W}, rng)};
      }
      // Relative-position-like values, and -100 where a window's tokens come from different regions.
      Tensor mask = random_tensor({c.period, c.mask_heads, c.s, c.s}, rng, -2, 2);
      for (int64_t i = 0; i < mask.numel(); ++i)
        if ((i / c.s + i % c.s + i / (c.s * c.s)) % 5 == 0) mask.data<float>()[i] = -100.f;
      in.push_back(mask);
      auto attrs = [&](OneNode& n) {
        n.set_int("num_heads", c.heads);
        n.set_float("scale", 1.f / std::sqrt(static_cast<float>(c.d)));
        n.set_int("mask_batch_period", c.period);
        if (c.packed) n.set_int("packed_qkv", 1);
      };
      const std::string label = std::string("Attention ") + dtype_name(dt) + " mask period " + std::to_string(c.period) +
                                " head " + std::to_string(c.d);
      const auto tactics = expect_attention_tactics_match_cpu(in, dt, attrs, label);
      if (dt != kF32) EXPECT_EQ(tactics, attention_tactics_for(c.d)) << label;
      // A mask whose first dim is not the period is refused.
      in.back() = random_tensor({c.period + 1, c.mask_heads, c.s, c.s}, rng);
      OneNode bad("Attention", 1, in, 1);
      bad.node->domain = "kiln";
      attrs(bad);
      EXPECT_FALSE(run_cuda(*bad.node, in).ok()) << label << ": a mask of another period";
    }
}

// [A, B, C] float32 as [B, A, C].
Tensor swap01(const Tensor& x) {
  const int64_t A = x.dim(0), Bd = x.dim(1), C = x.dim(2);
  Tensor y = Tensor::empty(DataType::kFloat32, {Bd, A, C});
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < Bd; ++b)
      std::memcpy(y.data<float>() + (b * A + a) * C, x.data<float>() + (a * Bd + b) * C, C * sizeof(float));
  return y;
}

// kiln.Attention over sequence-first tensors (sequence_first = 1: Q [S, B, H*D], K, V [T, B, ...],
// Y [S, B, H*Dv], as torch's nn.MultiheadAttention exports them) on the CPU: the batch-first op on the
// transposed tensors, transposed back.
TEST(FusedAttention, SequenceFirstIsTheBatchFirstOpOnTransposedTensors) {
  std::mt19937 rng(41);
  const int64_t B = 3, S = 37, T = 45, H = 2, D = 16, Dv = 8;
  const Tensor q = random_tensor({S, B, H * D}, rng), k = random_tensor({T, B, H * D}, rng), v = random_tensor({T, B, H * Dv}, rng);
  auto node = [&](const std::vector<Tensor>& in, bool seq_first) {
    auto n = std::make_unique<OneNode>("Attention", 1, in, 1);
    n->node->domain = "kiln";
    n->set_int("num_heads", H);
    n->set_float("scale", 0.25f);
    if (seq_first) n->set_int("sequence_first", 1);
    return n;
  };
  auto sf = node({q, k, v}, true);
  auto bf = node({swap01(q), swap01(k), swap01(v)}, false);
  auto got = run_node_eager(*sf->node, {Slot::of(q), Slot::of(k), Slot::of(v)});
  auto want = run_node_eager(*bf->node, {Slot::of(swap01(q)), Slot::of(swap01(k)), Slot::of(swap01(v))});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ASSERT_EQ((*got)[0].tensor.shape(), (Shape{S, B, H * Dv}));
  expect_near((*got)[0].tensor, swap01((*want)[0].tensor), 1e-6, 1e-5, "sequence-first vs batch-first");
}

// The same on CUDA for every kernel (float32; float16 and bfloat16 with each tactic): ViT's shape
// (197 tokens, head size 64, batch 3) and head size 128 over several key tiles, against the CPU op.
TEST(CudaOps, SequenceFirstAttentionEveryTacticMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(43);
  struct Case {
    int64_t b, s, t, heads, d;
  };
  for (const Case& c : {Case{3, 197, 197, 2, 64}, Case{2, 70, 150, 2, 128}})
    for (DataType dt : {kF32, kF16, kBF16}) {
      const std::vector<Tensor> in = {random_tensor({c.s, c.b, c.heads * c.d}, rng),
                                      random_tensor({c.t, c.b, c.heads * c.d}, rng),
                                      random_tensor({c.t, c.b, c.heads * c.d}, rng)};
      const std::string label = std::string("sequence-first Attention ") + dtype_name(dt) + " head " + std::to_string(c.d);
      const auto tactics = expect_attention_tactics_match_cpu(in, dt,
                                                              [&](OneNode& n) {
                                                                n.set_int("num_heads", c.heads);
                                                                n.set_float("scale", 1.f / std::sqrt(static_cast<float>(c.d)));
                                                                n.set_int("sequence_first", 1);
                                                              },
                                                              label);
      if (dt != kF32) EXPECT_EQ(tactics, attention_tactics_for(c.d, true)) << label;
    }
}

// kiln.Rotary on CUDA against the CPU op: Llama's [B, H, S, D] heads with cos/sin [B, 1, S, D] (head
// size 64), one table [S, D] for every batch (head size 128), and a 3-D x with per-row tables.
TEST(CudaOps, RotaryMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(59);
  struct Case {
    Shape x, table;
  };
  // (Head sizes of multiples of 16 take the 8-pair kernel in the 16-bit types; 24 the one-pair one.)
  for (const Case& c : {Case{{2, 4, 33, 64}, {2, 1, 33, 64}}, Case{{3, 2, 17, 128}, {17, 128}}, Case{{5, 9, 32}, {5, 9, 32}},
                        Case{{2, 3, 33, 24}, {33, 24}}})
    for (DataType dt : {kF32, kF16, kBF16})
      compare("Rotary", 1, {random_tensor(c.x, rng), random_tensor(c.table, rng), random_tensor(c.table, rng)},
              [](OneNode& n) { n.node->domain = "kiln"; }, dt, "x " + shape_to_string(c.x) + " table " + shape_to_string(c.table));
}

// Heads-first tensors (Q [B, H, S, D], K, V [B, Hkv, T, D]: decoder exports after rotary embeddings)
// with grouped K/V heads (kv_num_heads) on CUDA against the CPU op, under every tactic (cuDNN's included
// where it applies: a causal additive mask of whole rows with zero_nan_rows): Llama-like 4 query heads
// on 2 K/V heads of 64 over two query tiles, one K/V head of 128 (multi-query) over several key tiles,
// head size 32 without grouping, and grouped K/V heads in the batch-first layout; float32 in the
// CUDA-core kernel. (H200: every tactic matched the CPU; cuDNN's where T is a multiple of 8.)
TEST(CudaOps, HeadsFirstGroupedAttentionEveryTacticMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(53);
  struct Case {
    int64_t b, s, t, heads, kv_heads, d;
    bool heads_first;
  };
  const Case cases[] = {{2, 136, 136, 4, 2, 64, true}, {1, 70, 150, 6, 1, 128, true}, {3, 49, 49, 2, 2, 32, true},
                        {2, 64, 64, 4, 2, 64, false}};
  for (DataType dt : {kF32, kF16, kBF16})
    for (const Case& c : cases) {
      std::vector<Tensor> in;
      if (c.heads_first)
        in = {random_tensor({c.b, c.heads, c.s, c.d}, rng), random_tensor({c.b, c.kv_heads, c.t, c.d}, rng),
              random_tensor({c.b, c.kv_heads, c.t, c.d}, rng)};
      else
        in = {random_tensor({c.b, c.s, c.heads * c.d}, rng), random_tensor({c.b, c.t, c.kv_heads * c.d}, rng),
              random_tensor({c.b, c.t, c.kv_heads * c.d}, rng)};
      // Causal (query s sees keys up to s + t - s), and batch 0's first query row sees nothing.
      Tensor mask = Tensor::empty(kF32, {c.b, 1, c.s, c.t});
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t i = 0; i < c.s; ++i)
          for (int64_t j = 0; j < c.t; ++j)
            mask.data<float>()[(b * c.s + i) * c.t + j] =
                (j <= i + c.t - c.s && !(b == 0 && i == 0)) ? 0.f : -std::numeric_limits<float>::infinity();
      in.push_back(mask);
      const std::string label = std::string(c.heads_first ? "heads-first" : "batch-first") + " grouped Attention " +
                                dtype_name(dt) + " heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) +
                                " of " + std::to_string(c.d);
      const auto tactics = expect_attention_tactics_match_cpu(in, dt,
                                                              [&](OneNode& n) {
                                                                n.set_int("num_heads", c.heads);
                                                                n.set_int("kv_num_heads", c.kv_heads);
                                                                n.set_float("scale", 1.f / std::sqrt(static_cast<float>(c.d)));
                                                                n.set_int("zero_nan_rows", 1);
                                                                if (c.heads_first) n.set_int("heads_first", 1);
                                                              },
                                                              label);
      // (cuDNN's needs the mask's rows 16-byte aligned: T a multiple of 8)
      if (dt != kF32) EXPECT_EQ(tactics, attention_tactics_for(c.d, c.t % 8 == 0)) << label;
    }
}

// kiln.Attention as passes/attention_op.cpp makes it from ONNX's Attention op: heads-first Q, K, V with
// grouped K/V heads, ONNX's top-left causal mask as a bool mask [S, T] whose false entries are -inf
// (an additive padding mask beside it in one case), every tactic against the CPU kernel.
TEST(CudaOps, OnnxAttentionFormEveryTacticMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(71);
  struct Case {
    int64_t b, s, t, heads, kv_heads, d;
    bool padding;
  };
  const Case cases[] = {{2, 128, 128, 8, 2, 64, false}, {2, 40, 136, 4, 4, 64, true}, {1, 70, 70, 4, 1, 128, false}};
  for (DataType dt : {kF32, kF16, kBF16})
    for (const Case& c : cases) {
      std::vector<Tensor> in = {random_tensor({c.b, c.heads, c.s, c.d}, rng), random_tensor({c.b, c.kv_heads, c.t, c.d}, rng),
                                random_tensor({c.b, c.kv_heads, c.t, c.d}, rng)};
      Tensor keep = Tensor::empty(DataType::kBool, {c.s, c.t});
      for (int64_t i = 0; i < c.s; ++i)
        for (int64_t j = 0; j < c.t; ++j) keep.data<bool>()[i * c.t + j] = j <= i;
      if (c.padding) {
        Tensor pad = Tensor::empty(kF32, {c.b, 1, 1, c.t});
        for (int64_t k = 0; k < pad.numel(); ++k) pad.data<float>()[k] = k % c.t >= c.t - 9 ? -1e4f : 0.f;
        in.push_back(pad);
      } else {
        in.push_back(Tensor());
      }
      in.push_back(keep);
      const std::string label = std::string("ONNX Attention form ") + dtype_name(dt) + " " + std::to_string(c.heads) + "/" +
                                std::to_string(c.kv_heads) + " heads of " + std::to_string(c.d) + ", S " + std::to_string(c.s) +
                                ", T " + std::to_string(c.t);
      expect_attention_tactics_match_cpu(in, dt,
                                         [&](OneNode& n) {
                                           n.set_int("heads_first", 1);
                                           n.set_int("num_heads", c.heads);
                                           if (c.kv_heads != c.heads) n.set_int("kv_num_heads", c.kv_heads);
                                           n.set_float("scale", 1.f / std::sqrt(static_cast<float>(c.d)));
                                           n.set_float("mask_fill", -std::numeric_limits<float>::infinity());
                                         },
                                         label);
    }
}

// Every tactic kiln.Attention offers (the register-resident kernels with 2, 4 and 8 warps per block,
// plain and pipelined, the WMMA kernel) against the CPU kernel, in float16 and bfloat16: BERT's head
// size 64 with a padding mask over two query tiles of the 8-warp variant, head size 128 with a causal
// bool mask over several key tiles, and Swin's head size 32 with a padding mask over three key tiles.
// Float32 and head sizes off 32/64/128 offer none.
TEST(CudaOps, AttentionEveryTacticMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(37);
  struct Case {
    int64_t b, s, t, heads, d;
    bool causal;
  };
  const Case cases[] = {{2, 130, 130, 3, 64, false}, {1, 70, 150, 2, 128, true}, {3, 49, 150, 2, 32, false}};
  for (DataType dt : {kF16, kBF16}) {
    for (const Case& c : cases) {
      std::vector<Tensor> ref_in = {random_tensor({c.b, c.s, c.heads * c.d}, rng), random_tensor({c.b, c.t, c.heads * c.d}, rng),
                                    random_tensor({c.b, c.t, c.heads * c.d}, rng)};
      for (Tensor& t : ref_in) t = convert(convert(t, dt), kF32);  // the reference sees the rounded values
      std::vector<Tensor> dev_in;
      for (const Tensor& t : ref_in) dev_in.push_back(convert(t, dt));
      if (c.causal) {
        const Tensor cond = causal_keep(1, c.s, c.t);
        ref_in.insert(ref_in.end(), {Tensor(), cond});
        dev_in.insert(dev_in.end(), {Tensor(), cond});
      } else {
        Tensor mask = random_tensor({c.b, 1, 1, c.t}, rng, -1, 0);
        for (int64_t t = c.t - 20; t < c.t; ++t) mask.data<float>()[t] = -1e4f;  // padding in the first row
        ref_in.push_back(mask);
        dev_in.push_back(convert(mask, dt));
      }
      OneNode dn("Attention", 1, dev_in, 1), rn("Attention", 1, ref_in, 1);
      for (OneNode* n : {&dn, &rn}) {
        n->node->domain = "kiln";
        n->set_int("num_heads", c.heads);
        n->set_float("scale", 1.f / std::sqrt(static_cast<float>(c.d)));
        if (c.causal) n->set_float("mask_fill", -1e4f);
      }
      const std::string label = std::string("Attention ") + dtype_name(dt) + " head " + std::to_string(c.d);
      std::vector<Slot> cpu_in;
      for (const Tensor& t : ref_in) cpu_in.push_back(t.defined() ? Slot::of(t) : Slot{});
      auto want = run_node_eager(*rn.node, cpu_in);
      ASSERT_TRUE(want.ok()) << label << ": " << want.status().to_string();
      std::vector<std::string> tactics;
      ASSERT_TRUE(run_cuda(*dn.node, dev_in, {}, &tactics).ok()) << label;
      EXPECT_EQ(tactics, attention_tactics_for(c.d)) << label;
      tactics.push_back("");  // the kernel's own choice
      const double tol = dt == kF16 ? 4e-3 : 2e-2;
      for (const std::string& t : tactics) {
        auto got = run_cuda(*dn.node, dev_in, t);
        ASSERT_TRUE(got.ok()) << label << " tactic '" << t << "': " << got.status().to_string();
        expect_near((*got)[0], (*want)[0].tensor, tol, tol, label + " tactic '" + t + "'");
      }
      EXPECT_FALSE(run_cuda(*dn.node, dev_in, "fa16").ok()) << label << ": an unknown tactic is refused";
      // cuDNN's fused attention takes neither a bool mask nor a key-padding mask [B, 1, 1, T]: asked for
      // (an engine tuned at other shapes), the tactic runs kiln's own kernel instead.
      auto fallback = run_cuda(*dn.node, dev_in, "cudnn");
      ASSERT_TRUE(fallback.ok()) << label << ": " << fallback.status().to_string();
      expect_near((*fallback)[0], (*want)[0].tensor, tol, tol, label + " tactic 'cudnn' where it does not apply");
    }
  }
  // No variants to time: float32, and head size 40.
  for (const auto& [dt, d] : {std::pair{kF32, int64_t{64}}, std::pair{kF16, int64_t{40}}}) {
    std::vector<Tensor> in;
    for (int i = 0; i < 3; ++i) in.push_back(convert(random_tensor({1, 16, 2 * d}, rng), dt));
    OneNode n("Attention", 1, in, 1);
    n.node->domain = "kiln";
    n.set_int("num_heads", 2);
    std::vector<std::string> tactics = {"x"};
    ASSERT_TRUE(run_cuda(*n.node, in, {}, &tactics).ok());
    EXPECT_TRUE(tactics.empty()) << dtype_name(dt) << " head " << d;
  }
}

// Masks the pipelined kernels stage in shared memory (contiguous keys, T a multiple of 8 for a
// 2-byte additive mask, of 16 for a bool one) against the CPU under every tactic, and masks beside
// them that stay on the per-score path: GPT-2's causal additive mask of 0 and -inf with left padding
// and its NaN guard (whole query rows masked; warps past the diagonal skip their tiles), a causal bool
// mask with a fill of -inf over a query count off the block size (rows past S), the same with a finite
// fill (nothing skipped), key counts off the tile size (T 200 additive, T 144 bool filled where true),
// a finite fill over whole warps of fully masked rows (their output is V's mean: no tile may be
// skipped), a finite additive bias per head and row [1,H,S,T] (with zero_nan_rows: cuDNN's tactic
// too), and BERT's key-padding masks [B,1,1,T], additive and bool, T = 136 (rows that repeat: per score).
TEST(CudaOps, AttentionStagedMaskMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(41);
  for (DataType dt : {kF16, kBF16}) {
    // GPT-2: [B, 1, S, T] of 0 / -inf, batch entry 1 left-padded by 3 keys (its first 3 rows see nothing).
    {
      const int64_t B = 2, S = 192, H = 2, D = 64;
      Tensor mask = Tensor::empty(kF32, {B, 1, S, S});
      for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < S; ++s)
          for (int64_t t = 0; t < S; ++t)
            mask.data<float>()[(b * S + s) * S + t] = t <= s && !(b == 1 && t < 3) ? 0.f : -INFINITY;
      const std::string label = std::string("causal additive -inf, zero_nan_rows, ") + dtype_name(dt);
      const auto tactics = expect_attention_tactics_match_cpu(
          {random_tensor({B, S, H * D}, rng), random_tensor({B, S, H * D}, rng), random_tensor({B, S, H * D}, rng), mask}, dt,
          [&](OneNode& n) {
            n.set_int("num_heads", H);
            n.set_float("scale", 0.125f);
            n.set_int("zero_nan_rows", 1);
          },
          label);
      EXPECT_EQ(tactics, attention_tactics_for(D, true)) << label;
    }
    // Causal bool masks, keep where true, S = 100 (the second block's rows past S), T = 128, head
    // size 128 with a fill of -inf and 32 with a finite fill.
    for (const float fill : {-INFINITY, -1e4f}) {
      const int64_t S = 100, T = 128, H = 2, D = fill == -INFINITY ? 128 : 32;
      const std::string label = std::string("causal bool, fill ") + std::to_string(fill) + ", " + dtype_name(dt);
      const auto tactics = expect_attention_tactics_match_cpu(
          {random_tensor({2, S, H * D}, rng), random_tensor({2, T, H * D}, rng), random_tensor({2, T, H * D}, rng), Tensor(),
           causal_keep(1, S, T)},
          dt,
          [&](OneNode& n) {
            n.set_int("num_heads", H);
            n.set_float("scale", 1.f / std::sqrt(static_cast<float>(D)));
            n.set_float("mask_fill", fill);
            n.set_int("mask_fill_where_true", 0);
          },
          label);
      EXPECT_EQ(tactics, attention_tactics_for(D)) << label;
    }
    // Key counts off the 64-key tile (the last tile partial; a copy past T is zero-filled, not read):
    // an additive causal mask with T = 200 and, head size 64, a bool one with T = 144 whose fill
    // applies where the mask is true (mask_fill_where_true 1).
    for (const bool by_cond : {false, true}) {
      const int64_t S = 70, T = by_cond ? 144 : 200, H = 2, D = 64;
      std::vector<Tensor> in = {random_tensor({2, S, H * D}, rng), random_tensor({2, T, H * D}, rng),
                                random_tensor({2, T, H * D}, rng)};
      Tensor c = causal_keep(2, S, T);  // then true = hidden (filled)
      Tensor add = Tensor::empty(kF32, {2, 1, S, T});
      for (int64_t i = 0; i < c.numel(); ++i) {
        c.data<bool>()[i] = !c.data<bool>()[i];
        add.data<float>()[i] = c.data<bool>()[i] ? -INFINITY : 0.f;
      }
      if (by_cond)
        in.insert(in.end(), {Tensor(), c});
      else
        in.push_back(add);
      const std::string label = std::string(by_cond ? "bool, fill where true, T 144, " : "additive, T 200, ") + dtype_name(dt);
      EXPECT_EQ(expect_attention_tactics_match_cpu(in, dt,
                                                   [&](OneNode& n) {
                                                     n.set_int("num_heads", H);
                                                     n.set_float("scale", 0.125f);
                                                     if (by_cond) {
                                                       n.set_float("mask_fill", -INFINITY);
                                                       n.set_int("mask_fill_where_true", 1);
                                                     }
                                                   },
                                                   label),
                attention_tactics_for(D))  // (no zero_nan_rows: not cuDNN's)
          << label;
    }
    // A finite fill over whole warps of rows: rows 0-31 see no key (each gives the plain mean of V, not
    // a skipped tile), the others a random half of the keys; T = 128.
    {
      const int64_t S = 64, T = 128, H = 2, D = 64;
      Tensor keep = Tensor::empty(DataType::kBool, {1, 1, S, T});
      std::uniform_int_distribution<int> coin(0, 1);
      for (int64_t i = 0; i < keep.numel(); ++i) keep.data<bool>()[i] = i / T >= 32 && coin(rng);
      const std::string label = std::string("finite fill, fully masked warps, ") + dtype_name(dt);
      EXPECT_EQ(expect_attention_tactics_match_cpu({random_tensor({2, S, H * D}, rng), random_tensor({2, T, H * D}, rng),
                                                    random_tensor({2, T, H * D}, rng), Tensor(), keep},
                                                   dt,
                                                   [&](OneNode& n) {
                                                     n.set_int("num_heads", H);
                                                     n.set_float("scale", 0.125f);
                                                     n.set_float("mask_fill", -1e4f);
                                                     n.set_int("mask_fill_where_true", 0);
                                                   },
                                                   label),
                attention_tactics_for(D))
          << label;
    }
    // A relative-position-like bias [1, H, S, T] over two query blocks and two key tiles.
    {
      const int64_t S = 128, H = 2, D = 64;
      const std::string label = std::string("bias per head and row, ") + dtype_name(dt);
      EXPECT_EQ(expect_attention_tactics_match_cpu({random_tensor({2, S, H * D}, rng), random_tensor({2, S, H * D}, rng),
                                                    random_tensor({2, S, H * D}, rng), random_tensor({1, H, S, S}, rng, -2, 2)},
                                                   dt,
                                                   [&](OneNode& n) {
                                                     n.set_int("num_heads", H);
                                                     n.set_float("scale", 0.125f);
                                                     n.set_int("zero_nan_rows", 1);
                                                   },
                                                   label),
                attention_tactics_for(D, true))
          << label;
    }
    // BERT's key-padding mask [B, 1, 1, T], T = 136, additive and bool.
    {
      const int64_t B = 3, S = 136, H = 2, D = 64;
      Tensor mask = random_tensor({B, 1, 1, S}, rng, -1, 0);
      for (int64_t t = 100; t < S; ++t) mask.data<float>()[2 * S + t] = -1e4f;
      Tensor keep = Tensor::empty(DataType::kBool, {B, 1, 1, S});
      for (int64_t i = 0; i < keep.numel(); ++i) keep.data<bool>()[i] = (i % 9) != 4;
      auto attrs = [&](OneNode& n) {
        n.set_int("num_heads", H);
        n.set_float("scale", 0.125f);
        n.set_float("mask_fill", -INFINITY);
        n.set_int("mask_fill_where_true", 0);
      };
      const std::vector<Tensor> qkv = {random_tensor({B, S, H * D}, rng), random_tensor({B, S, H * D}, rng),
                                       random_tensor({B, S, H * D}, rng)};
      std::vector<Tensor> additive = qkv, cond = qkv;
      additive.push_back(mask);
      cond.insert(cond.end(), {Tensor(), keep});
      EXPECT_EQ(expect_attention_tactics_match_cpu(additive, dt, attrs, std::string("key padding, additive, ") + dtype_name(dt)),
                attention_tactics_for(D));
      EXPECT_EQ(expect_attention_tactics_match_cpu(cond, dt, attrs, std::string("key padding, bool, ") + dtype_name(dt)),
                attention_tactics_for(D));
    }
  }
}

namespace {

// An [A,B,C,D] tensor with its dims reordered by `perm` (4-D, any element type).
Tensor permuted(const Tensor& t, const std::array<int, 4>& perm) {
  const Shape& s = t.shape();
  Shape out(4);
  for (int i = 0; i < 4; ++i) out[i] = s[perm[i]];
  Tensor r = Tensor::empty(t.dtype(), out);
  const size_t e = dtype_size(t.dtype());
  int64_t stride[4] = {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(r.raw());
  int64_t o = 0;
  for (int64_t a = 0; a < out[0]; ++a)
    for (int64_t b = 0; b < out[1]; ++b)
      for (int64_t c = 0; c < out[2]; ++c)
        for (int64_t d = 0; d < out[3]; ++d, ++o) {
          const int64_t idx[4] = {a, b, c, d};
          int64_t off = 0;
          for (int i = 0; i < 4; ++i) off += idx[i] * stride[perm[i]];
          std::memcpy(dst + o * e, src + off * e, e);
        }
  return r;
}

}  // namespace

// kiln.FusedConv with channels_last = 1 (made by passes/channels_last.cpp for half-precision GPU
// engines) against the CPU's channels-first FusedConv: X, W, Y permuted; 3x3 with pads, bias and
// ReLU; a strided 1x1 without bias; a depthwise 3x3; a 7x7 stem with 3 input channels; batch 64 of a
// ResNet bottleneck shape.
TEST(CudaOps, ChannelsLastFusedConvMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(37);
  struct Case {
    Shape x, w;
    std::vector<int64_t> pads, strides;
    int64_t group;
    const char* act;
    bool bias;
    bool residual = false;
  };
  const Case cases[] = {
      {{2, 16, 8, 8}, {16, 16, 3, 3}, {1, 1, 1, 1}, {1, 1}, 1, "Relu", true, true},
      {{2, 16, 9, 9}, {32, 16, 3, 3}, {1, 1, 1, 1}, {1, 1}, 1, "Relu", true},
      {{3, 32, 8, 8}, {64, 32, 1, 1}, {0, 0, 0, 0}, {2, 2}, 1, "", false},
      {{2, 24, 7, 7}, {24, 1, 3, 3}, {1, 1, 1, 1}, {1, 1}, 24, "HardSwish", true},
      {{4, 3, 32, 32}, {16, 3, 7, 7}, {3, 3, 3, 3}, {2, 2}, 1, "Relu", true},
      {{64, 64, 14, 14}, {256, 64, 1, 1}, {0, 0, 0, 0}, {1, 1}, 1, "", true},
  };
  const std::array<int, 4> to_nhwc = {0, 2, 3, 1}, to_nchw = {0, 3, 1, 2};
  for (DataType dt : {kF16, kBF16}) {
    for (const Case& c : cases) {
      const Tensor x = convert(random_tensor(c.x, rng), dt), w = convert(random_tensor(c.w, rng, -0.3f, 0.3f), dt);
      const Tensor b = convert(random_tensor({c.w[0]}, rng), dt);
      auto attrs = [&](OneNode& n, bool last) {
        n.node->domain = "kiln";
        n.set_string("activation", c.act);
        n.set_ints("pads", c.pads);
        n.set_ints("strides", c.strides);
        n.set_int("group", c.group);
        if (last) n.set_int("channels_last", 1);
      };
      std::vector<Tensor> dev_in = {permuted(x, to_nhwc), permuted(w, to_nhwc)};
      std::vector<Tensor> ref_in = {convert(x, kF32), convert(w, kF32)};
      if (c.bias || c.residual) {
        dev_in.push_back(c.bias ? b : Tensor());
        ref_in.push_back(c.bias ? convert(b, kF32) : Tensor());
      }
      if (c.residual) {  // of Y's shape: [N, M, OH, OW] here (stride 1, same pads)
        const Tensor z = convert(random_tensor({c.x[0], c.w[0], c.x[2], c.x[3]}, rng), dt);
        dev_in.push_back(permuted(z, to_nhwc));
        ref_in.push_back(convert(z, kF32));
      }
      OneNode dn("FusedConv", 1, dev_in, 1);
      OneNode rn("FusedConv", 1, ref_in, 1);
      attrs(dn, true);
      attrs(rn, false);
      const std::string label = std::string("channels-last FusedConv ") + dtype_name(dt) + " " + shape_to_string(c.x) +
                                " * " + shape_to_string(c.w);
      const BothRuns r = run_both(*dn.node, dev_in, *rn.node, ref_in, label);
      ASSERT_TRUE(r.ok) << label;
      const double tol = dt == kF16 ? 4e-3 : 2e-2;
      expect_near(permuted(r.got[0], to_nchw), r.want[0], tol, tol, label);
    }
  }
}

// Depthwise channels-last kiln.FusedConv run by kiln's own kernel (the tactic "dw"; 7x7 and up take it
// by default) against the CPU's channels-first FusedConv: ConvNeXt's 7x7, bias + residual + ReLU (the
// epilogue in the kernel), stride 2 and dilation 2, channels that are no multiple of the vector width,
// float32, float16 and bfloat16.
TEST(CudaOps, DepthwiseChannelsLastMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(41);
  struct Case {
    Shape x;
    int64_t k, pad, stride, dilation;
    const char* act;
    bool bias, residual;
    const char* tactic;
  };
  const Case cases[] = {
      {{2, 96, 14, 14}, 7, 3, 1, 1, "", true, false, ""},
      {{2, 32, 9, 11}, 7, 3, 1, 1, "Relu", true, true, ""},
      {{3, 24, 10, 10}, 3, 1, 1, 1, "Relu", true, false, "dw"},
      {{2, 40, 13, 13}, 5, 2, 2, 1, "", true, false, "dw"},
      {{2, 16, 12, 12}, 3, 2, 1, 2, "", false, false, "dw"},
      {{2, 20, 8, 9}, 7, 3, 1, 1, "", true, false, ""},  // 20 channels: no 8-wide vectors
      {{2, 32, 8, 8}, 7, 3, 1, 1, "", true, true, ""},    // bias and residual, no activation
      {{2, 32, 8, 8}, 5, 2, 1, 1, "Relu", false, false, "dw"},  // ReLU without a bias: the caller's
  };
  const std::array<int, 4> to_nhwc = {0, 2, 3, 1}, to_nchw = {0, 3, 1, 2};
  for (DataType dt : {kF32, kF16, kBF16}) {
    for (const Case& c : cases) {
      const int64_t ch = c.x[1];
      const Tensor x = convert(random_tensor(c.x, rng), dt), w = convert(random_tensor({ch, 1, c.k, c.k}, rng, -0.3f, 0.3f), dt);
      const Tensor b = convert(random_tensor({ch}, rng), dt);
      auto attrs = [&](OneNode& n, bool last) {
        n.node->domain = "kiln";
        n.set_string("activation", c.act);
        n.set_ints("pads", {c.pad, c.pad, c.pad, c.pad});
        n.set_ints("strides", {c.stride, c.stride});
        n.set_ints("dilations", {c.dilation, c.dilation});
        n.set_int("group", ch);
        if (last) n.set_int("channels_last", 1);
      };
      std::vector<Tensor> dev_in = {permuted(x, to_nhwc), permuted(w, to_nhwc)};
      std::vector<Tensor> ref_in = {convert(x, kF32), convert(w, kF32)};
      if (c.bias || c.residual) {
        dev_in.push_back(c.bias ? b : Tensor());
        ref_in.push_back(c.bias ? convert(b, kF32) : Tensor());
      }
      if (c.residual) {  // stride 1, same pads: Y has X's shape
        const Tensor z = convert(random_tensor(c.x, rng), dt);
        dev_in.push_back(permuted(z, to_nhwc));
        ref_in.push_back(convert(z, kF32));
      }
      OneNode dn("FusedConv", 1, dev_in, 1);
      OneNode rn("FusedConv", 1, ref_in, 1);
      attrs(dn, true);
      attrs(rn, false);
      const std::string label = std::string("depthwise ") + dtype_name(dt) + " " + shape_to_string(c.x) + " k" +
                                std::to_string(c.k) + " s" + std::to_string(c.stride) + " d" + std::to_string(c.dilation);
      const BothRuns r = run_both(*dn.node, dev_in, *rn.node, ref_in, label, c.tactic);
      ASSERT_TRUE(r.ok) << label;
      std::vector<std::string> offered;  // kiln's kernel is a tactic of these layers
      ASSERT_TRUE(run_cuda(*dn.node, dev_in, "dw", &offered).ok()) << label;
      EXPECT_NE(std::find(offered.begin(), offered.end(), "dw"), offered.end()) << label;
      const double tol = dt == kF32 ? 1e-4 : dt == kF16 ? 4e-3 : 2e-2;
      expect_near(permuted(r.got[0], to_nchw), r.want[0], tol, tol, label);
    }
  }
}

// kiln.ChannelsLastPool (made by passes/channels_last.cpp) on NHWC tensors against the CPU's
// channels-first pools: max and average (pads, strides, count_include_pad, ceil_mode) and the
// global pools, among them a 112x112 plane whose reduction is split over blocks.
TEST(CudaOps, ChannelsLastPoolsMatchCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(43);
  struct Case {
    const char* op;
    Shape x;  // NCHW
    std::vector<int64_t> kernel, strides, pads;
    int64_t include_pad = 0, ceil = 0;
  };
  const Case cases[] = {
      {"MaxPool", {2, 16, 15, 15}, {3, 3}, {2, 2}, {1, 1, 1, 1}},
      {"MaxPool", {1, 8, 9, 9}, {2, 2}, {2, 2}, {0, 0, 0, 0}, 0, 1},
      {"MaxPool", {2, 6, 9, 9}, {3, 3}, {1, 1}, {1, 1, 1, 1}},  // 6 channels: not 16-byte vectors
      {"AveragePool", {2, 24, 10, 10}, {3, 3}, {1, 1}, {1, 1, 1, 1}, 0},
      {"AveragePool", {2, 24, 10, 10}, {3, 3}, {1, 1}, {1, 1, 1, 1}, 1},
      {"GlobalAveragePool", {3, 40, 7, 7}, {}, {}, {}},
      {"GlobalMaxPool", {2, 33, 5, 6}, {}, {}, {}},
      {"GlobalAveragePool", {2, 32, 112, 112}, {}, {}, {}},
  };
  const std::array<int, 4> to_nhwc = {0, 2, 3, 1}, to_nchw = {0, 3, 1, 2};
  for (DataType dt : {kF32, kF16}) {
    for (const Case& c : cases) {
      const Tensor x = convert(random_tensor(c.x, rng), dt);
      std::vector<Tensor> dev_in = {permuted(x, to_nhwc)}, ref_in = {convert(x, kF32)};
      OneNode dn("ChannelsLastPool", 1, dev_in, 1), rn(c.op, 13, ref_in, 1);
      dn.node->domain = "kiln";
      dn.set_string("op", c.op);
      for (OneNode* n : {&dn, &rn}) {
        if (c.kernel.empty()) continue;
        n->set_ints("kernel_shape", c.kernel);
        n->set_ints("strides", c.strides);
        n->set_ints("pads", c.pads);
        n->set_int("ceil_mode", c.ceil);
        if (std::string(c.op) == "AveragePool") n->set_int("count_include_pad", c.include_pad);
      }
      const std::string label = std::string("ChannelsLastPool ") + c.op + " " + dtype_name(dt) + " " + shape_to_string(c.x);
      const BothRuns r = run_both(*dn.node, dev_in, *rn.node, ref_in, label);
      ASSERT_TRUE(r.ok) << label;
      const double tol = dt == kF16 ? 4e-3 : 2e-5;
      expect_near(permuted(r.got[0], to_nchw), r.want[0], tol, tol, label);
    }
  }
}

// kiln.FusedConv with a bias and ReLU (or no activation) offers cuDNN's fused convolution (bias,
// residual and ReLU in the convolution's epilogue: tactics "fused<N>") beside the plain convolution
// and kiln's epilogue pass ("algo<N>"). Every tactic, in float32 and float16, channels-first and
// channels-last, matches the CPU's FusedConv.
TEST(CudaOps, FusedConvEveryTacticMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(29);
  struct Case {
    Shape x, w;
    int64_t pad;
    const char* act;
    bool residual;
    bool last;
    int64_t stride = 1;
  };
  const Case cases[] = {
      {{2, 16, 10, 10}, {32, 16, 3, 3}, 1, "Relu", true, false},
      {{2, 32, 7, 7}, {64, 32, 1, 1}, 0, "", true, false},
      {{3, 8, 9, 9}, {16, 8, 3, 3}, 1, "Relu", false, false},
      {{2, 16, 8, 8}, {32, 16, 3, 3}, 1, "Relu", true, true},
      {{4, 32, 7, 7}, {64, 32, 1, 1}, 0, "", true, true},
      // ResNet's stem on 70 RGB images: channels padded to 8, or to 4 in batch chunks (18, 18, 18, 16
      // images: the "c4.*" tactics' workspace bound) — a tail chunk included.
      {{70, 3, 224, 224}, {64, 3, 7, 7}, 3, "Relu", false, true, 2},
  };
  const std::array<int, 4> to_nhwc = {0, 2, 3, 1}, to_nchw = {0, 3, 1, 2};
  for (DataType dt : {kF32, kF16}) {
    for (const Case& c : cases) {
      if (c.last && dt == kF32) continue;  // channels-last convolutions are made for half types
      const Tensor x = convert(random_tensor(c.x, rng), dt), w = convert(random_tensor(c.w, rng, -0.3f, 0.3f), dt);
      const Tensor b = convert(random_tensor({c.w[0]}, rng), dt);
      const Shape ys = {c.x[0], c.w[0], (c.x[2] + 2 * c.pad - c.w[2]) / c.stride + 1,
                        (c.x[3] + 2 * c.pad - c.w[3]) / c.stride + 1};
      const Tensor z = convert(random_tensor(ys, rng), dt);
      std::vector<Tensor> dev_in = {c.last ? permuted(x, to_nhwc) : x, c.last ? permuted(w, to_nhwc) : w, b};
      std::vector<Tensor> ref_in = {convert(x, kF32), convert(w, kF32), convert(b, kF32)};
      if (c.residual) {
        dev_in.push_back(c.last ? permuted(z, to_nhwc) : z);
        ref_in.push_back(convert(z, kF32));
      }
      OneNode dn("FusedConv", 1, dev_in, 1), rn("FusedConv", 1, ref_in, 1);
      for (OneNode* n : {&dn, &rn}) {
        n->node->domain = "kiln";
        n->set_string("activation", c.act);
        n->set_ints("pads", {c.pad, c.pad, c.pad, c.pad});
        n->set_ints("strides", {c.stride, c.stride});
      }
      if (c.last) dn.set_int("channels_last", 1);
      const std::string label = std::string("FusedConv ") + dtype_name(dt) + " " + shape_to_string(c.x) + " * " +
                                shape_to_string(c.w) + " act '" + c.act + "'" + (c.residual ? " + residual" : "") +
                                (c.last ? " channels-last" : "");
      std::vector<Slot> cpu_in;
      for (const Tensor& t : ref_in) cpu_in.push_back(Slot::of(t));
      auto want = run_node_eager(*rn.node, cpu_in);
      ASSERT_TRUE(want.ok()) << label << ": " << want.status().to_string();
      std::vector<std::string> tactics;
      auto first = run_cuda(*dn.node, dev_in, {}, &tactics);
      ASSERT_TRUE(first.ok()) << label << ": " << first.status().to_string();
      int fused = 0, plain = 0;
      for (const std::string& t : tactics) (t.rfind("fused", 0) == 0 ? fused : plain) += 1;
      EXPECT_GE(fused, 1) << label << ": no fused tactic";
      EXPECT_GE(plain, 1) << label << ": no plain tactic";
      if (c.x[1] == 3 && dt == kF16)
        EXPECT_TRUE(std::any_of(tactics.begin(), tactics.end(), [](const std::string& t) { return t.rfind("c4.", 0) == 0; }))
            << label << ": no 4-channel tactic";
      tactics.push_back("");  // the kernel's own choice
      const double tol = dt == kF16 ? 4e-3 : 2e-5;
      for (const std::string& t : tactics) {
        auto got = run_cuda(*dn.node, dev_in, t);
        ASSERT_TRUE(got.ok()) << label << " tactic '" << t << "': " << got.status().to_string();
        expect_near(c.last ? permuted((*got)[0], to_nchw) : (*got)[0], (*want)[0].tensor, tol, tol,
                    label + " tactic '" + t + "'");
      }
    }
  }
}

// kiln.ConvPool (a stem in one kernel: convolution of 1-4 channels into 64, bias, ReLU, max pool,
// QuantizeLinear) against the steps it replaces on the CPU: FusedConv in float32 on the float16-rounded
// input, MaxPool, and QuantizeLinear in double (a float16 output: the convolution's output rounded to
// float16 first, as the unfused engine's cuDNN step wrote it). Odd image sides (partial tiles), every input form (float32/float16,
// channels-first/-last; float32 channels-first rows staged in 16-byte chunks when their width allows,
// else read directly), both outputs, 1, 3 and 4 channels (3 at stride 1: a padding channel).
TEST(CudaOps, ConvPoolMatchesTheStepsItReplaces) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(31);
  struct Case {
    int64_t n, c, h, w, k, stride, pad, pk, ps, pp;
    DataType x_type;
    bool x_first, relu, int8_out;
  };
  const Case cases[] = {
      {3, 3, 67, 60, 7, 2, 3, 3, 2, 1, kF32, true, true, true},    // ResNet's stem, the model's float32 input
      {2, 3, 61, 61, 7, 2, 3, 3, 2, 1, kF32, true, true, true},    // the same, rows not in 16-byte chunks
      {2, 4, 32, 28, 3, 1, 1, 2, 2, 0, kF32, true, false, true},   // 4 channels from float32, staged
      {2, 3, 45, 50, 7, 2, 3, 3, 2, 1, kF16, false, true, false},  // channels-last float16 in and out
      {2, 4, 33, 29, 3, 1, 1, 2, 2, 0, kF16, true, false, true},   // 4 channels, no activation, a 2x2 pool
      {2, 1, 40, 37, 7, 2, 3, 3, 2, 1, kF32, true, true, false},   // one channel
      {2, 3, 30, 31, 5, 1, 2, 3, 2, 1, kF32, false, true, true},   // 3 channels at stride 1 (a zero channel)
  };
  const std::array<int, 4> to_nhwc = {0, 2, 3, 1}, to_nchw = {0, 3, 1, 2};
  for (const Case& c : cases) {
    const std::string label = "ConvPool " + std::to_string(c.c) + "ch " + std::to_string(c.k) + "x" + std::to_string(c.k) +
                              "/" + std::to_string(c.stride) + " pool " + std::to_string(c.pk) + "/" + std::to_string(c.ps) +
                              (c.int8_out ? " int8" : " float16");
    const Tensor x16 = convert(random_tensor({c.n, c.c, c.h, c.w}, rng), kF16);  // the values both sides read
    const Tensor w16 = convert(random_tensor({64, c.c, c.k, c.k}, rng, -0.3f, 0.3f), kF16);
    const Tensor b16 = convert(random_tensor({64}, rng), kF16);
    const float ys = 0.05f;
    const int zp = -3;
    // Device node.
    Tensor x = c.x_type == kF32 ? convert(x16, kF32) : x16;
    if (!c.x_first) x = permuted(x, to_nhwc);
    std::vector<Tensor> dev_in = {x, permuted(w16, to_nhwc), b16};
    std::vector<bool> constant = {false, true, true};
    if (c.int8_out) {
      Tensor s = Tensor::empty(kF32, {});
      s.data<float>()[0] = ys;
      Tensor z = Tensor::empty(DataType::kInt8, {});
      z.data<int8_t>()[0] = static_cast<int8_t>(zp);
      dev_in.insert(dev_in.end(), {s, z});
      constant.insert(constant.end(), {true, true});
    }
    OneNode dn("ConvPool", 1, dev_in, 1, constant);
    dn.node->domain = "kiln";
    dn.set_ints("kernel_shape", {c.k, c.k});
    dn.set_ints("strides", {c.stride, c.stride});
    dn.set_ints("pads", {c.pad, c.pad, c.pad, c.pad});
    dn.set_string("activation", c.relu ? "Relu" : "");
    dn.set_int("x_channels_first", c.x_first ? 1 : 0);
    dn.set_ints("pool_kernel", {c.pk, c.pk});
    dn.set_ints("pool_strides", {c.ps, c.ps});
    dn.set_ints("pool_pads", {c.pp, c.pp, c.pp, c.pp});
    dn.node->outputs[0]->type = ir::Type::tensor(c.int8_out ? DataType::kInt8 : kF16);
    auto got = run_cuda(*dn.node, dev_in);
    ASSERT_TRUE(got.ok()) << label << ": " << got.status().to_string();
    // The CPU's steps.
    const std::vector<Tensor> ref_in = {convert(x16, kF32), convert(w16, kF32), convert(b16, kF32)};
    OneNode conv("FusedConv", 1, ref_in, 1);
    conv.node->domain = "kiln";
    conv.set_string("activation", c.relu ? "Relu" : "");
    conv.set_ints("pads", {c.pad, c.pad, c.pad, c.pad});
    conv.set_ints("strides", {c.stride, c.stride});
    auto y = run_node_eager(*conv.node, {Slot::of(ref_in[0]), Slot::of(ref_in[1]), Slot::of(ref_in[2])});
    ASSERT_TRUE(y.ok()) << label << ": " << y.status().to_string();
    // A float16 output is the convolution's rounded to float16 (as the unfused engine's was); an int8
    // one is quantized from the float32 sum.
    const Tensor yr = c.int8_out ? (*y)[0].tensor : convert(convert((*y)[0].tensor, kF16), kF32);
    OneNode pool("MaxPool", 12, {yr}, 1);
    pool.set_ints("kernel_shape", {c.pk, c.pk});
    pool.set_ints("strides", {c.ps, c.ps});
    pool.set_ints("pads", {c.pp, c.pp, c.pp, c.pp});
    auto pooled = run_node_eager(*pool.node, {Slot::of(yr)});
    ASSERT_TRUE(pooled.ok()) << label << ": " << pooled.status().to_string();
    const Tensor& want = (*pooled)[0].tensor;
    const Tensor out = permuted((*got)[0], to_nchw);
    ASSERT_EQ(out.shape(), want.shape()) << label;
    if (!c.int8_out) {
      ASSERT_EQ(out.dtype(), kF16) << label;
      expect_near(out, want, 4e-3, 4e-3, label);
      continue;
    }
    ASSERT_EQ(out.dtype(), DataType::kInt8) << label;
    // QuantizeLinear: rne(v / y_scale) + zero point, saturated; one step apart (a sum added in another
    // order, a product for the quotient) in at most 1% of the values.
    int64_t off_by_one = 0, worse = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double q = std::clamp(std::nearbyint(static_cast<double>(want.data<float>()[i] / ys)) + zp, -128.0, 127.0);
      const double d = std::fabs(out.data<int8_t>()[i] - q);
      off_by_one += d == 1;
      if (d > 1 && worse++ < 5) ADD_FAILURE() << label << " element " << i << ": got " << int(out.data<int8_t>()[i]) << ", want " << q;
    }
    EXPECT_LE(off_by_one, want.numel() / 100) << label << ": values one step off";
  }
}

// The row's static check (placement reads it with or without a GPU): 64 output channels from 1-4
// input channels, constant float16 weights, int8 output with one scale or float16.
TEST(CudaOps, ConvPoolRowTakesStemsOnly) {
  const KernelRegistry* cuda = cuda_kernel_registry();
  if (!cuda) GTEST_SKIP() << "built without CUDA";
  const KernelDef* row = cuda->by_name("cuda.kiln.ConvPool");
  ASSERT_NE(row, nullptr);
  std::mt19937 rng(32);
  auto make = [&](int64_t m, int64_t ch, DataType x_type) {
    auto n = std::make_unique<OneNode>("ConvPool", 1,
                                       std::vector<Tensor>{convert(random_tensor({2, ch, 32, 32}, rng), x_type),
                                                           convert(random_tensor({m, 7, 7, ch}, rng), kF16),
                                                           convert(random_tensor({m}, rng), kF16)},
                                       1, std::vector<bool>{false, true, true});
    n->node->domain = "kiln";
    n->set_ints("kernel_shape", {7, 7});
    n->set_ints("strides", {2, 2});
    n->set_ints("pads", {3, 3, 3, 3});
    n->set_string("activation", "Relu");
    n->set_int("x_channels_first", 1);
    n->set_ints("pool_kernel", {3, 3});
    n->set_ints("pool_strides", {2, 2});
    n->set_ints("pool_pads", {1, 1, 1, 1});
    n->node->outputs[0]->type = ir::Type::tensor(kF16);
    return n;
  };
  EXPECT_EQ(row->rejects(*make(64, 3, kF32)->node), "");
  EXPECT_EQ(row->rejects(*make(64, 4, kF16)->node), "");
  EXPECT_NE(row->rejects(*make(32, 3, kF32)->node).find("64 output channels"), std::string::npos);
  EXPECT_NE(row->rejects(*make(64, 8, kF32)->node).find("1-4 input channels"), std::string::npos);
  auto gelu = make(64, 3, kF32);
  gelu->set_string("activation", "Gelu");
  EXPECT_NE(row->rejects(*gelu->node).find("Relu"), std::string::npos);
  auto pads = make(64, 3, kF32);
  pads->set_ints("pool_pads", {3, 3, 3, 3});  // a window wholly in the padding
  EXPECT_NE(row->rejects(*pads->node).find("out of range"), std::string::npos);
}

// TF32 engines (passes::allow_tf32): float32 convolutions and GEMMs with the attribute run on TF32
// tensor cores, within TF32's rounding (10-bit mantissa products) of the CPU's FP32 result; without
// it they stay true FP32.
TEST(CudaOps, Tf32ConvolutionsAndGemms) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(41);
  // A ResNet-50 stage-1 convolution: big enough that cuDNN's heuristic takes a tensor-core algorithm
  // when allowed (a small one may keep an FMA kernel, and the same bits).
  const Tensor x = random_tensor({2, 64, 56, 56}, rng), w = random_tensor({64, 64, 3, 3}, rng, -0.1f, 0.1f);
  const Tensor a = random_tensor({3, 40, 256}, rng), m = random_tensor({256, 96}, rng, -0.2f, 0.2f);
  const Tensor ga = random_tensor({40, 256}, rng), gb = random_tensor({256, 96}, rng, -0.2f, 0.2f), gc = random_tensor({96}, rng);
  struct Case {
    const char* op;
    int opset;
    std::vector<Tensor> in;
  };
  const Case cases[] = {{"Conv", 11, {x, w}}, {"MatMul", 13, {a, m}}, {"Gemm", 13, {ga, gb, gc}}};
  for (const Case& c : cases) {
    std::vector<Tensor> results;
    for (bool tf32 : {true, false}) {
      OneNode dn(c.op, c.opset, c.in, 1);
      OneNode rn(c.op, c.opset, c.in, 1);
      if (std::string(c.op) == "Conv") {
        dn.set_ints("pads", {1, 1, 1, 1});
        rn.set_ints("pads", {1, 1, 1, 1});
      }
      if (tf32) dn.set_int(ops::kTF32Attr, 1);
      const std::string label = std::string(c.op) + (tf32 ? " tf32" : " fp32");
      const BothRuns r = run_both(*dn.node, c.in, *rn.node, c.in, label);
      ASSERT_TRUE(r.ok) << label;
      const double tol = tf32 ? 5e-3 : 2e-5;
      expect_near(r.got[0], r.want[0], tol, tol, label);
      results.push_back(r.got[0]);
    }
    // The attribute took effect: TF32's rounding shows in the result.
    double diff = 0;
    for (int64_t i = 0; i < results[0].numel(); ++i)
      diff = std::max(diff, std::fabs(double(results[0].data<float>()[i]) - results[1].data<float>()[i]));
    EXPECT_GT(diff, 1e-5) << c.op << ": the TF32 and FP32 results are the same";
  }
}

// kiln.ChannelAffine on CUDA against its CPU kernel (float32, on the half-rounded X; scale and shift
// are float32 in every case): channels
// first and last, 16 channels (the 8-wide vector path for half types) and 12 (one value a thread),
// no activation, ReLU and HardSwish, in float32, float16 and bfloat16.
TEST(CudaOps, ChannelAffineMatchesCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(61);
  for (DataType dt : {kF32, kF16, kBF16})
    for (bool last : {false, true})
      for (int64_t c : {int64_t{16}, int64_t{12}})
        for (const char* act : {"", "Relu", "HardSwish"}) {
          const Shape xs = last ? Shape{3, 5, 7, c} : Shape{3, c, 5, 7};
          std::vector<Tensor> ref_in = {random_tensor(xs, rng), random_tensor({c}, rng), random_tensor({c}, rng)};
          ref_in[0] = convert(convert(ref_in[0], dt), kF32);
          std::vector<Tensor> dev_in = {convert(ref_in[0], dt), ref_in[1], ref_in[2]};  // scale and shift float32
          OneNode dn("ChannelAffine", 1, dev_in), rn("ChannelAffine", 1, ref_in);
          for (OneNode* n : {&dn, &rn}) {
            n->node->domain = "kiln";
            n->set_int("channels_last", last ? 1 : 0);
            if (*act) n->set_string("activation", act);
          }
          const std::string label = std::string("ChannelAffine ") + dtype_name(dt) + (last ? " last " : " first ") +
                                    std::to_string(c) + " '" + act + "'";
          auto want = run_node_eager(*rn.node, {Slot::of(ref_in[0]), Slot::of(ref_in[1]), Slot::of(ref_in[2])});
          ASSERT_TRUE(want.ok()) << label << ": " << want.status().to_string();
          auto got = run_cuda(*dn.node, dev_in);
          ASSERT_TRUE(got.ok()) << label << ": " << got.status().to_string();
          const float tol = dt == kF32 ? 1e-5f : dt == kF16 ? 4e-3f : 1e-2f;
          expect_close(convert((*got)[0], kF32), (*want)[0].tensor, tol, tol, label);
        }
}
