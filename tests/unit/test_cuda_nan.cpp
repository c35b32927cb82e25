// NaN and ±inf through the CUDA activations (issue 50, item 4): each op on float32, float16,
// bfloat16 (and float64 where CUDA has it) inputs holding NaN, ±inf, ±0 and ordinary values, against
// the CPU kernels on the same values. Where the CPU gives NaN the GPU must too, an infinity must be
// the same infinity, and every other value finite and within the dtype's tolerance. The CPU's
// results are the ONNX reference's (tests/unit/test_untrusted_files.cpp, UntrustedNumbers).
#include <cmath>
#include <limits>

#include "ir/float_types.h"
#include "test_cuda_util.h"

using namespace kiln;
using namespace kiln::cudatest;

namespace {

constexpr DataType kF32 = DataType::kFloat32, kF16 = DataType::kFloat16, kBF16 = DataType::kBFloat16,
                   kF64 = DataType::kFloat64;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();
// Both sides of every activation's bends (0, ±0.5, ±1, ±3) and the values that have none.
const std::vector<float> kSpecial = {kNaN, kInf, -kInf, 0.0f, -0.0f, -1.0f, 2.0f, 0.3f, -0.3f, 5.0f, -5.0f, 0.75f};

// A `dt` tensor of `shape` holding `v` (float16/bfloat16 rounded to nearest even).
Tensor make(DataType dt, const Shape& shape, const std::vector<float>& v) {
  Tensor t = Tensor::empty(dt, shape);
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (dt) {
      case DataType::kFloat32: t.data<float>()[i] = v[i]; break;
      case DataType::kFloat64: t.data<double>()[i] = v[i]; break;
      case DataType::kFloat16: t.data<uint16_t>()[i] = f32_to_f16(v[i]); break;
      case DataType::kBFloat16: t.data<uint16_t>()[i] = f32_to_bf16(v[i]); break;
      default: ADD_FAILURE() << "dtype " << dtype_name(dt);
    }
  }
  return t;
}

// `t`'s values as float32 (exact for the 16-bit types).
Tensor widened(const Tensor& t) {
  std::vector<float> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(static_cast<float>(element(t, i)));
  return make(kF32, t.shape(), v);
}

std::vector<float> uniform(int64_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

double tolerance(DataType dt) {
  return dt == kF16 ? 4e-3 : dt == kBF16 ? 2e-2 : dt == kF64 ? 1e-12 : 2e-5;
}

// `got` (the GPU's) against `want` (the CPU's): NaN where `want` is NaN, the same infinity where it
// is infinite, else within tol (which a NaN never is).
void expect_same_specials(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = element(got, i), w = element(want, i);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " [" << i << "]: got " << g << ", the CPU gives NaN";
    } else if (std::isinf(w)) {
      EXPECT_EQ(g, w) << what << " [" << i << "]";
    } else {
      EXPECT_NEAR(g, w, tol + tol * std::fabs(w)) << what << " [" << i << "]";
    }
  }
}

// The node's first output from the CPU kernels.
Expected<Tensor> on_cpu(const ir::Node& node, const std::vector<Tensor>& inputs) {
  std::vector<Slot> in;
  for (const Tensor& t : inputs) in.push_back(t.defined() ? Slot::of(t) : Slot{});
  KILN_ASSIGN_OR_RETURN(std::vector<Slot> out, run_node_eager(node, in));
  if (out.empty() || out[0].kind != Slot::Kind::kTensor) return internal_error("the CPU kernel gave no tensor");
  return out[0].tensor;
}

// Runs `node` on the GPU and on the CPU with the same inputs and compares.
void expect_gpu_like_cpu(const ir::Node& node, const std::vector<Tensor>& inputs, double tol, const std::string& what) {
  auto got = run_cuda(node, inputs);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  auto want = on_cpu(node, inputs);
  ASSERT_TRUE(want.ok()) << what << ": " << want.status().to_string();
  expect_same_specials((*got)[0], *want, tol, what);
}

}  // namespace

// The elementwise kernels (apply_unary in float, apply_unary_f64): Relu, HardSigmoid, HardSwish and
// Celu keep NaN (fmaxf/fminf and `x > 0 ? x : 0` made it 0 or 1), Sign too; the others already did
// (or give 0 for NaN as the reference does: Shrink, ThresholdedRelu) and stay here as guards.
TEST(CudaNaN, ActivationsKeepNaNAndInfAsTheCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    const char* op;
    int opset;
    std::vector<std::pair<const char*, float>> attrs;
  };
  const std::vector<Case> cases = {
      {"Relu", 14, {}},
      {"HardSigmoid", 6, {}},
      {"HardSigmoid", 6, {{"alpha", 0.5f}, {"beta", 0.25f}}},
      {"HardSwish", 14, {}},
      {"Celu", 12, {}},
      {"Celu", 12, {{"alpha", 2.0f}}},
      {"Sign", 13, {}},
      {"LeakyRelu", 16, {{"alpha", 0.1f}}},
      {"Elu", 6, {}},
      {"Selu", 6, {}},
      {"ThresholdedRelu", 10, {}},
      {"Shrink", 9, {{"lambd", 0.5f}, {"bias", 0.1f}}},
  };
  for (DataType dt : {kF32, kF16, kBF16, kF64}) {
    const Tensor x = make(dt, {static_cast<int64_t>(kSpecial.size())}, kSpecial);
    for (const Case& c : cases) {
      OneNode n(c.op, c.opset, {x});
      std::string label = std::string(c.op) + " " + dtype_name(dt);
      for (const auto& [k, v] : c.attrs) {
        n.set_float(k, v);
        label += std::string(" ") + k + "=" + std::to_string(v);
      }
      expect_gpu_like_cpu(*n.node, {x}, tolerance(dt), label);
    }
  }
}

// Clip keeps NaN with any bounds; an absent bound is the compute type's lowest/max on both backends
// (float32 Clip(+inf) = FLT_MAX; float16/bfloat16 round that back to inf).
TEST(CudaNaN, ClipKeepsNaNAndClampsAsTheCpu) {
  KILN_REQUIRE_GPU();
  for (DataType dt : {kF32, kF16, kBF16, kF64}) {
    const Tensor x = make(dt, {static_cast<int64_t>(kSpecial.size())}, kSpecial);
    const Tensor lo = make(dt, {}, {-0.5f}), hi = make(dt, {}, {0.5f});
    const std::string d = dtype_name(dt);
    {
      OneNode n("Clip", 13, {x, lo, hi}, 1, {false, true, true});
      expect_gpu_like_cpu(*n.node, {x, lo, hi}, tolerance(dt), "Clip [-0.5, 0.5] " + d);
    }
    {
      OneNode n("Clip", 13, {x, hi, lo}, 1, {false, true, true});
      expect_gpu_like_cpu(*n.node, {x, hi, lo}, tolerance(dt), "Clip min > max " + d);
    }
    {
      OneNode n("Clip", 13, {x});
      expect_gpu_like_cpu(*n.node, {x}, tolerance(dt), "Clip unbounded " + d);
    }
    {
      OneNode n("Clip", 13, {x, lo}, 1, {false, true});
      expect_gpu_like_cpu(*n.node, {x, lo}, tolerance(dt), "Clip min only " + d);
    }
    {
      OneNode n("Clip", 13, {x, Tensor(), hi}, 1, {false, false, true});
      expect_gpu_like_cpu(*n.node, {x, Tensor(), hi}, tolerance(dt), "Clip max only " + d);
    }
    {
      OneNode n("Clip", 6, {x});
      n.set_float("min", -0.5f);
      n.set_float("max", 0.5f);
      expect_gpu_like_cpu(*n.node, {x}, tolerance(dt), "Clip-6 attributes " + d);
    }
    {
      OneNode n("Clip", 6, {x});
      expect_gpu_like_cpu(*n.node, {x}, tolerance(dt), "Clip-6 no attributes " + d);
    }
  }
}

// kiln's fused ops on CUDA (bias_act after the inner kernel; cuDNN's fused convolution-bias-ReLU
// where the plan takes it) against the CPU's unfused Conv or MatMul followed by the CPU's activation
// node. The specials come in through the convolution's bias (a NaN or infinite channel) and through
// single elements of MatMul's A (a NaN or infinite row): no convolution algorithm or GEMM spreads
// them further than the reference does. Left out: FusedMatMul with a bias and Relu, which cuBLASLt's
// RELU_BIAS epilogue applies (its NaN handling is cuBLASLt's, not kiln's).
TEST(CudaNaN, FusedEpiloguesKeepNaNAsTheCpuActivations) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(50);
  struct Act {
    const char* name;
    std::vector<float> params;
  };
  const std::vector<Act> acts = {{"Relu", {}}, {"Clip", {-0.5f, 0.5f}}, {"HardSigmoid", {0.2f, 0.5f}}, {"HardSwish", {}}};
  // The CPU's activation node applied to y (float32).
  auto activated = [](const Act& a, const Tensor& y) -> Expected<Tensor> {
    const std::string op = a.name;
    if (op == "Clip") {
      const Tensor lo = make(kF32, {}, {a.params[0]}), hi = make(kF32, {}, {a.params[1]});
      OneNode n("Clip", 13, {y, lo, hi}, 1, {false, true, true});
      return on_cpu(*n.node, {y, lo, hi});
    }
    OneNode n(op, op == "HardSigmoid" ? 6 : 14, {y});
    if (op == "HardSigmoid") {
      n.set_float("alpha", a.params[0]);
      n.set_float("beta", a.params[1]);
    }
    return on_cpu(*n.node, {y});
  };
  auto fused = [](OneNode& n, const Act& a) {
    n.node->domain = "kiln";
    n.set_string("activation", a.name);
    if (!a.params.empty()) n.attr("activation_params", ir::Attribute::Kind::kFloats).floats = a.params;
  };
  const std::vector<float> x_v = uniform(2 * 3 * 4 * 4, rng, -1, 1), w_v = uniform(8 * 3, rng, -0.5f, 0.5f);
  const std::vector<float> bias_v(kSpecial.begin(), kSpecial.begin() + 8);  // NaN, ±inf, ±0, -1, 2, 0.3
  std::vector<float> a_v = uniform(2 * 4 * 8, rng, -1, 1);
  a_v[3] = kNaN;            // row 0
  a_v[1 * 8 + 5] = kInf;    // row 1
  a_v[6 * 8 + 0] = -kInf;   // row 6
  const std::vector<float> m_v = uniform(8 * 16, rng, -0.5f, 0.5f), mb_v = uniform(16, rng, -1, 1);
  for (DataType dt : {kF32, kF16, kBF16}) {
    const std::string d = dtype_name(dt);
    // FusedConv, 1x1, bias [8] holding the specials.
    const Tensor x = make(dt, {2, 3, 4, 4}, x_v), w = make(dt, {8, 3, 1, 1}, w_v), b = make(dt, {8}, bias_v);
    const Tensor rx = widened(x), rw = widened(w), rb = widened(b);
    OneNode conv("Conv", 11, {rx, rw, rb});
    auto y = on_cpu(*conv.node, {rx, rw, rb});
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    for (const Act& a : acts) {
      const std::string label = std::string("FusedConv ") + a.name + " " + d;
      OneNode n("FusedConv", 1, {x, w, b});
      fused(n, a);
      auto got = run_cuda(*n.node, {x, w, b});
      ASSERT_TRUE(got.ok()) << label << ": " << got.status().to_string();
      auto want = activated(a, *y);
      ASSERT_TRUE(want.ok()) << label << ": " << want.status().to_string();
      expect_same_specials((*got)[0], *want, tolerance(dt), label);
    }
    // FusedMatMul [2, 4, 8] x [8, 16], with a bias [16] (all but Relu) and without (Relu too).
    const Tensor a = make(dt, {2, 4, 8}, a_v), m = make(dt, {8, 16}, m_v), mb = make(dt, {16}, mb_v);
    const Tensor ra = widened(a), rm = widened(m), rmb = widened(mb);
    OneNode mm("MatMul", 13, {ra, rm});
    auto prod = on_cpu(*mm.node, {ra, rm});
    ASSERT_TRUE(prod.ok()) << prod.status().to_string();
    Tensor biased = widened(*prod);
    for (int64_t i = 0; i < biased.numel(); ++i) biased.data<float>()[i] += rmb.data<float>()[i % 16];
    for (const Act& act : acts) {
      for (bool with_bias : {false, true}) {
        if (with_bias && std::string(act.name) == "Relu") continue;  // cuBLASLt's epilogue (see above)
        const std::string label = std::string("FusedMatMul ") + act.name + (with_bias ? " +bias " : " ") + d;
        const std::vector<Tensor> in = with_bias ? std::vector<Tensor>{a, m, mb} : std::vector<Tensor>{a, m};
        OneNode n("FusedMatMul", 1, in);
        fused(n, act);
        auto got = run_cuda(*n.node, in);
        ASSERT_TRUE(got.ok()) << label << ": " << got.status().to_string();
        auto want = activated(act, with_bias ? biased : *prod);
        ASSERT_TRUE(want.ok()) << label << ": " << want.status().to_string();
        expect_same_specials((*got)[0], *want, tolerance(dt), label);
      }
    }
  }
}
