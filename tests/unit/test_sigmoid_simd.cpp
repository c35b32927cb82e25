// The fused epilogues' Sigmoid and SiLU (backends/cpu/sigmoid_simd.h through fused::epilogue_rows, which
// takes the AVX-512 or AVX2 copy where the CPU has it) against double references: random values over
// the whole range where the result is neither 0 nor 1 in float32, rows with and without a bias, every
// tail length of a vector, and the special values (NaN, infinities, zeros, values below -87.3).
// scripts/test.sh runs it again under KILN_CPU_ISA=avx2 for the AVX2 copy.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/fused_common.h"

namespace {

using kiln::Activation;
using kiln::ActKind;

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

template <ActKind K>
void check_rows(int64_t rows, int64_t cols, bool with_bias, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-30.f, 30.f);
  std::vector<float> y(rows * cols), bias(cols), x;
  for (auto& v : y) v = u(rng);
  for (auto& v : bias) v = u(rng) * 0.1f;
  x = y;
  Activation act;
  act.kind = K;
  kiln::cpu::fused::epilogue_rows<K>(y.data(), 0, rows, cols, with_bias ? bias.data() : nullptr, act);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double v = static_cast<double>(x[r * cols + c]) + (with_bias ? static_cast<double>(bias[c]) : 0.0);
      // The input of the activation is the float32 sum, as the kernel forms it.
      const double in = static_cast<float>(v);
      const double want = K == ActKind::kSilu ? in * sigmoid_ref(in) : sigmoid_ref(in);
      const double got = y[r * cols + c];
      ASSERT_NEAR(got, want, 4e-7 * std::abs(want) + 1e-30)
          << "x=" << in << " rows=" << rows << " cols=" << cols << " bias=" << with_bias;
    }
}

}  // namespace

TEST(SigmoidSimd, MatchesDoubleReference) {
  std::mt19937 rng(3);
  for (int64_t cols : {1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 100}) {
    for (bool with_bias : {false, true}) {
      check_rows<ActKind::kSilu>(3, cols, with_bias, rng);
      check_rows<ActKind::kSigmoid>(3, cols, with_bias, rng);
    }
  }
}

TEST(SigmoidSimd, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> in = {nan, inf, -inf, 0.0f, -0.0f, -87.0f, -88.0f, -100.0f, 88.0f, 100.0f, 1e-30f, -1e-30f,
                                 nan, -nan, 5.0f, -5.0f, 0.5f};
  Activation act;
  for (ActKind k : {ActKind::kSilu, ActKind::kSigmoid}) {
    std::vector<float> y = in;
    act.kind = k;
    if (k == ActKind::kSilu) kiln::cpu::fused::epilogue_rows<ActKind::kSilu>(y.data(), 0, 1, static_cast<int64_t>(y.size()), nullptr, act);
    else kiln::cpu::fused::epilogue_rows<ActKind::kSigmoid>(y.data(), 0, 1, static_cast<int64_t>(y.size()), nullptr, act);
    for (size_t i = 0; i < in.size(); ++i) {
      const double x = in[i];
      if (std::isnan(x)) {
        EXPECT_TRUE(std::isnan(y[i])) << "NaN in gives NaN out";
        continue;
      }
      double want = std::isinf(x) ? (x > 0 ? 1.0 : 0.0) : sigmoid_ref(x);
      if (k == ActKind::kSilu) want = x * want;  // -inf * 0 is NaN, as the unfused graph's
      // Below float32's exp range the vector copies' sigmoid is 0 (the scalar one's a subnormal).
      const double floor = x < -87 ? 1e-35 : 1e-38;
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[i])) << "x=" << x;
      } else if (std::isinf(want)) {
        EXPECT_EQ(y[i], want) << "x=" << x;
      } else {
        EXPECT_NEAR(y[i], want, 4e-7 * std::abs(want) + floor) << "x=" << x << " kind " << static_cast<int>(k);
      }
    }
  }
}
