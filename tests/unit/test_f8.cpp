// kiln.F8MatMul (FP8 E4M3 products of `--precision fp8` builds): the CPU kernel (the reference and
// the CPU emulation) against a double-precision computation, and the CUDA kernel (cuBLASLt FP8 on
// Hopper) against both; skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "ir/float_types.h"
#include "test_cuda_util.h"

namespace kiln {
namespace {

using cudatest::OneNode;

struct F8Case {
  Tensor a, b8, bias;
  float a_scale = 1, b_scale = 1;
  bool gelu = false;  // the activation fuse-activation gives BERT's FFN: Gelu (erf)
};

// A [rows..., K] random in [-2, 2) with a few values past the E4M3 range (saturation), B8 [N, K]
// random codes (every finite E4M3 value but NaN), bias [N] when asked.
F8Case make_case(const Shape& a_shape, int64_t n, bool bias, std::mt19937& rng) {
  F8Case c;
  const int64_t k = a_shape.back();
  c.a = cudatest::random_tensor(a_shape, rng);
  c.a_scale = 2.0f / 448.0f;
  c.a.data<float>()[0] = 5.0f;    // past 448 · a_scale: saturates
  c.a.data<float>()[1] = -9.0f;
  c.b8 = Tensor::empty(DataType::kFloat8E4M3FN, {n, k});
  std::uniform_int_distribution<int> code(0, 255);
  for (int64_t i = 0; i < n * k; ++i) {
    int v = code(rng);
    if ((v & 0x7f) == 0x7f) v &= 0xfe;  // no NaN codes
    static_cast<uint8_t*>(c.b8.raw())[i] = static_cast<uint8_t>(v);
  }
  c.b_scale = 0.01f;
  if (bias) c.bias = cudatest::random_tensor({n}, rng);
  return c;
}

// Y = a_scale · b_scale · Σ E4M3(a · (1 / a_scale)) · B8 + bias, summed in double.
Tensor reference(const F8Case& c) {
  const int64_t k = c.a.shape().back(), n = c.b8.shape()[0], m = c.a.numel() / k;
  Shape ys = c.a.shape();
  ys.back() = n;
  Tensor y = Tensor::empty(DataType::kFloat32, ys);
  const float inv = 1.0f / c.a_scale;
  std::vector<double> aq(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m * k; ++i)
    aq[i] = mini_to_f32(f32_to_mini(c.a.data<float>()[i] * inv, MiniFloat::kE4M3FN, true), MiniFloat::kE4M3FN);
  const auto* b = static_cast<const uint8_t*>(c.b8.raw());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t i = 0; i < k; ++i) s += aq[r * k + i] * mini_to_f32(b[j * k + i], MiniFloat::kE4M3FN);
      s *= static_cast<double>(c.a_scale) * c.b_scale;
      if (c.bias.defined()) s += c.bias.data<float>()[j];
      if (c.gelu) s = 0.5 * s * (1 + std::erf(s / std::sqrt(2.0)));
      y.data<float>()[r * n + j] = static_cast<float>(s);
    }
  return y;
}

std::unique_ptr<OneNode> f8_node(const F8Case& c) {
  std::vector<Tensor> ins = {c.a, c.b8};
  if (c.bias.defined()) ins.push_back(c.bias);
  auto n = std::make_unique<OneNode>("F8MatMul", 1, ins, 1, std::vector<bool>{false, true, true});
  n->node->domain = "kiln";
  n->set_float("a_scale", c.a_scale);
  n->set_float("b_scale", c.b_scale);
  if (c.gelu) n->set_string("activation", "Gelu");
  return n;
}

std::vector<Tensor> inputs_of(const F8Case& c) {
  std::vector<Tensor> ins = {c.a, c.b8};
  if (c.bias.defined()) ins.push_back(c.bias);
  return ins;
}

// The largest |want| (the scale the tolerance is relative to: the sums cancel, so per-element relative
// errors are meaningless near zero).
float max_abs(const Tensor& t) {
  float m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.data<float>()[i]));
  return m;
}

// The case's node run by the CPU kernel.
Expected<std::vector<Slot>> run_cpu(const F8Case& c) {
  auto node = f8_node(c);
  std::vector<Slot> in;
  for (const Tensor& t : inputs_of(c)) in.push_back(Slot::of(t));
  return run_node_eager(*node->node, in);
}

// The CPU kernel refuses the case with an error that says `what`.
void expect_error(const F8Case& c, const std::string& what) {
  auto got = run_cpu(c);
  ASSERT_FALSE(got.ok()) << what;
  EXPECT_NE(got.status().message().find(what), std::string::npos) << got.status().to_string();
}

TEST(F8MatMul, CpuKernelMatchesDoubleReference) {
  std::mt19937 rng(7);
  for (int variant = 0; variant < 3; ++variant) {
    F8Case c = make_case({3, 5, 64}, 48, variant > 0, rng);
    c.gelu = variant == 2;
    auto got = run_cpu(c);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    const Tensor want = reference(c);
    ASSERT_EQ((*got)[0].tensor.shape(), (Shape{3, 5, 48}));
    cudatest::expect_close((*got)[0].tensor, want, 1e-5f * max_abs(want), 0, "variant " + std::to_string(variant));
  }
}

TEST(F8MatMul, BadScalesAndShapesAreErrors) {
  std::mt19937 rng(8);
  F8Case z = make_case({4, 16}, 16, false, rng);
  z.a = Tensor::empty(DataType::kFloat32, {4, 0});
  z.b8 = Tensor::empty(DataType::kFloat8E4M3FN, {16, 0});
  expect_error(z, "K and N positive");  // an error, not a division by zero
  F8Case c = make_case({4, 32}, 16, false, rng);
  c.a_scale = 0;
  expect_error(c, "a_scale and b_scale must be positive");
  F8Case d = make_case({4, 32}, 16, false, rng);
  d.a = cudatest::random_tensor({4, 30}, rng);  // K differs from B8's
  expect_error(d, "B8's K");
}

TEST(CudaF8MatMul, MatchesReferenceEveryTactic) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(9);
  for (bool bias : {false, true}) {
    const F8Case c = make_case({2, 40, 128}, 96, bias, rng);
    auto node = f8_node(c);
    const Tensor want = reference(c);
    std::vector<std::string> tactics;
    auto got = cudatest::run_cuda(*node->node, inputs_of(c), {}, &tactics);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    // Products of two E4M3 values are exact, but Hopper's FP8 tensor cores add them in fewer bits than
    // float32 (about 14; cuBLASLt promotes the partial sums to float32 only every so many k steps):
    // errors of about 1e-4 of the largest output were measured (H200, K = 128). The tolerance,
    // 1e-3 of it, still catches any wrong scale, index or rounding (errors of whole E4M3 steps).
    const float tol = 1e-3f * max_abs(want);
    cudatest::expect_close((*got)[0], want, tol, 0, "own choice");
    // cuBLASLt's candidates with and without FP8 fast accumulation.
    EXPECT_TRUE(std::any_of(tactics.begin(), tactics.end(), [](const std::string& t) { return t.rfind("heur", 0) == 0; }));
    EXPECT_TRUE(std::any_of(tactics.begin(), tactics.end(), [](const std::string& t) { return t.rfind("fast", 0) == 0; }));
    for (const std::string& t : tactics) {
      auto g = cudatest::run_cuda(*node->node, inputs_of(c), t);
      ASSERT_TRUE(g.ok()) << t << ": " << g.status().to_string();
      cudatest::expect_close((*g)[0], want, tol, 0, "tactic " + t);
    }
  }
}

TEST(CudaF8MatMul, HalfInputsBiasAndGelu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(10);
  F8Case c = make_case({7, 48}, 32, true, rng);
  c.gelu = true;
  // A and the bias rounded to float16 first: the reference sees exactly what the kernel reads.
  Tensor a16 = Tensor::empty(DataType::kFloat16, c.a.shape()), b16 = Tensor::empty(DataType::kFloat16, c.bias.shape());
  for (int64_t i = 0; i < c.a.numel(); ++i) {
    a16.data<uint16_t>()[i] = f32_to_f16(c.a.data<float>()[i]);
    c.a.data<float>()[i] = f16_to_f32(a16.data<uint16_t>()[i]);
  }
  for (int64_t i = 0; i < c.bias.numel(); ++i) {
    b16.data<uint16_t>()[i] = f32_to_f16(c.bias.data<float>()[i]);
    c.bias.data<float>()[i] = f16_to_f32(b16.data<uint16_t>()[i]);
  }
  const Tensor want = reference(c);
  F8Case h = c;
  h.a = a16;
  h.bias = b16;
  auto node = f8_node(h);
  auto got = cudatest::run_cuda(*node->node, inputs_of(h));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ((*got)[0].dtype(), DataType::kFloat16);
  Tensor y = Tensor::empty(DataType::kFloat32, (*got)[0].shape());
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = f16_to_f32((*got)[0].data<uint16_t>()[i]);
  // float16 output: one rounding of the result (2^-11 relative) on top of the FP8 sums' error (see
  // MatchesReferenceEveryTactic).
  cudatest::expect_close(y, want, 1e-3f * max_abs(want), 1.0f / 1024, "float16");
}

}  // namespace
}  // namespace kiln
