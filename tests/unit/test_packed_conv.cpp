// The "packed-direct" channels-last convolution (backends/cpu/packed_conv.h) against a double
// reference of act(conv(X, W) + B + Z): pixel tiles that are not a multiple of 6, output channels
// that are not a multiple of 16 (the partial last panel), strides, dilations, padding on every side,
// one and several tap blocks (C = 8 .. 300), patch rows (stems: few channels, many taps), each epilogue path (in the tile: none / Relu / Clip;
// after it: Sigmoid), with and without bias and residual, grouped convolutions (blocks of 4, 2 and 1
// groups, several column chunks); 1 and 2 threads give the same bits.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/packed_conv.h"
#include "conv_test_util.h"

namespace {

using kiln::Activation;
using kiln::ActKind;
using kiln::cpu::PackedConvGeometry;

struct Case {
  int64_t N, H, W, C, M, kh, kw, stride, dil, pad_top, pad_left, pad_bottom, pad_right;
  int64_t group = 1;
};

PackedConvGeometry geometry(const Case& c) {
  PackedConvGeometry g = kiln::test::conv_window_geometry<PackedConvGeometry>(c);
  g.M = c.M;
  g.group = c.group;
  return g;
}

}  // namespace

TEST(PackedConv, MatchesDoubleReference) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const Case cases[] = {
      {1, 7, 9, 8, 5, 3, 3, 1, 1, 1, 1, 1, 1},         // M < 16: one partial panel
      {2, 11, 10, 19, 37, 3, 3, 2, 1, 1, 0, 0, 1},     // stride 2, uneven padding, two images
      {1, 9, 9, 64, 48, 3, 3, 1, 2, 2, 2, 2, 2},       // dilation 2
      {1, 6, 5, 300, 33, 3, 3, 1, 1, 1, 1, 1, 1},      // one tap per block (300 channels)
      {1, 14, 13, 40, 64, 5, 5, 1, 1, 2, 2, 2, 2},     // 25 taps
      {1, 4, 4, 16, 20, 2, 2, 2, 1, 0, 0, 0, 0},       // a patchify-like window
      {1, 3, 3, 8, 16, 3, 3, 1, 1, 3, 3, 3, 3},        // taps that read only padding
      {3, 17, 23, 24, 130, 3, 3, 1, 1, 1, 1, 1, 1},    // many pixel blocks and column chunks
      {1, 13, 11, 128, 128, 3, 3, 1, 1, 1, 1, 1, 1, 32},  // groups of 4 (ResNeXt's first stage): 4 per block
      {2, 9, 10, 64, 64, 3, 3, 2, 1, 1, 1, 1, 1, 8},      // groups of 8, stride 2: 2 per block
      {1, 7, 7, 96, 192, 3, 3, 1, 1, 1, 1, 1, 1, 6},      // 16 inputs, 32 outputs a group: 1 per block
      {1, 8, 9, 48, 48, 3, 3, 1, 1, 1, 1, 1, 1, 4},       // groups of 12: 4 per block, 48-wide blocks
      {1, 23, 21, 3, 20, 11, 11, 4, 1, 2, 2, 2, 2},       // by patches: AlexNet's stem (K = 363)
      {2, 15, 16, 3, 64, 7, 7, 2, 1, 3, 3, 3, 3},         // by patches: ResNet's stem (K = 147)
      {1, 9, 8, 5, 7, 3, 3, 1, 2, 2, 1, 2, 1},            // by patches: 5 channels, dilation 2, M < 16
      {1, 12, 10, 16, 24, 6, 6, 1, 1, 2, 3, 3, 2},        // by patches: 36 taps (K = 576)
  };
  for (const Case& cs : cases) {
    const PackedConvGeometry g = geometry(cs);
    ASSERT_TRUE(kiln::cpu::packed_conv_eligible(g) || !kiln::cpu::packed_gemm_available());
    if (!kiln::cpu::packed_gemm_available()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
    const int64_t taps = g.kh * g.kw, pixels = g.N * g.OH * g.OW, cg = g.C / g.group, mg = g.M / g.group;
    std::vector<float> x(g.N * g.H * g.W * g.C), w(g.M * taps * cg), bias(g.M), z(pixels * g.M);
    for (auto& v : x) v = u(rng);
    for (auto& v : w) v = u(rng);
    for (auto& v : bias) v = u(rng);
    for (auto& v : z) v = u(rng);
    auto pc = kiln::cpu::pack_conv(g, w.data());
    ASSERT_TRUE(pc.ok());
    // The reference sums, before bias, residual and activation.
    std::vector<double> ref(pixels * g.M, 0.0);
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow)
          for (int64_t m = 0; m < g.M; ++m) {
            double s = 0;
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t ih = oh * g.stride_h - g.pad_top + i * g.dil_h, iw = ow * g.stride_w - g.pad_left + j * g.dil_w;
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                for (int64_t c = 0; c < cg; ++c)
                  s += static_cast<double>(x[((n * g.H + ih) * g.W + iw) * g.C + m / mg * cg + c]) *
                       w[((m * g.kh + i) * g.kw + j) * cg + c];
              }
            ref[((n * g.OH + oh) * g.OW + ow) * g.M + m] = s;
          }
    Activation relu{ActKind::kRelu}, clip{ActKind::kClip, -0.5f, 0.75f}, sigmoid{ActKind::kSigmoid}, none{};
    for (const Activation& act : {none, relu, clip, sigmoid})
      for (bool with_bias : {false, true})
        for (bool with_z : {false, true}) {
          SCOPED_TRACE("case C " + std::to_string(g.C) + " M " + std::to_string(g.M) + " group " + std::to_string(g.group) +
                       " taps " + std::to_string(taps) +
                       " act " + std::to_string(static_cast<int>(act.kind)) + (with_bias ? " bias" : "") +
                       (with_z ? " residual" : ""));
          std::vector<float> y1(pixels * g.M, -7.f), y2(pixels * g.M, -9.f);
          omp_set_num_threads(1);
          kiln::cpu::packed_conv(**pc, x.data(), with_bias ? bias.data() : nullptr, with_z ? z.data() : nullptr, act, y1.data());
          omp_set_num_threads(2);
          kiln::cpu::packed_conv(**pc, x.data(), with_bias ? bias.data() : nullptr, with_z ? z.data() : nullptr, act, y2.data());
          ASSERT_EQ(y1, y2) << "the result depends on the thread count";
          double worst = 0;
          for (int64_t p = 0; p < pixels; ++p)
            for (int64_t m = 0; m < g.M; ++m) {
              const int64_t i = p * g.M + m;
              const double want = kiln::test::activate_ref(ref[i] + (with_bias ? bias[m] : 0.0) + (with_z ? z[i] : 0.0), act);
              worst = std::max(worst, std::abs(y1[i] - want) / (1.0 + std::abs(want)));
            }
          EXPECT_LT(worst, 1e-5 * std::sqrt(static_cast<double>(taps * cg + 1)));
        }
  }
}

TEST(PackedConv, Eligibility) {
  PackedConvGeometry g = geometry({1, 8, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1});
  EXPECT_EQ(kiln::cpu::packed_conv_eligible(g), kiln::cpu::packed_gemm_available());
  EXPECT_FALSE(kiln::cpu::packed_conv_by_patches(g));
  g.C = 3;  // an RGB stem: three channels per tap are too short a dot product tap by tap: by patches
  EXPECT_EQ(kiln::cpu::packed_conv_eligible(g), kiln::cpu::packed_gemm_available());
  EXPECT_TRUE(kiln::cpu::packed_conv_by_patches(g));
  g = geometry({1, 20, 20, 16, 16, 7, 7, 1, 1, 3, 3, 3, 3});  // 49 taps: by patches, K = 784
  EXPECT_EQ(kiln::cpu::packed_conv_eligible(g), kiln::cpu::packed_gemm_available());
  EXPECT_TRUE(kiln::cpu::packed_conv_by_patches(g));
  g.C = 64;  // K = 3136: past the patch rows' size
  EXPECT_FALSE(kiln::cpu::packed_conv_eligible(g));
  g = geometry({1, 8, 8, 2, 16, 2, 1, 1, 1, 0, 0, 0, 0});  // K = 4: too short a dot product either way
  EXPECT_FALSE(kiln::cpu::packed_conv_eligible(g));
  const bool avx2 = kiln::cpu::packed_gemm_available();
  g = geometry({1, 8, 8, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 8});  // groups of 4: blocks of 4 groups, 16 channels
  EXPECT_EQ(kiln::cpu::packed_conv_eligible(g), avx2);
  EXPECT_EQ(kiln::cpu::packed_conv_blocks(g).per_block, 4);
  g.group = 32;  // depthwise: 16 groups a block would be 16x the work
  EXPECT_FALSE(kiln::cpu::packed_conv_eligible(g));
  g = geometry({1, 8, 8, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 8});  // 2 outputs a group
  EXPECT_FALSE(kiln::cpu::packed_conv_eligible(g));
  g = geometry({1, 8, 8, 40, 40, 3, 3, 1, 1, 1, 1, 1, 1, 10});  // 10 groups of 4: no whole blocks of 4
  EXPECT_FALSE(kiln::cpu::packed_conv_eligible(g));
  g = geometry({1, 8, 8, 48, 48, 3, 3, 1, 1, 1, 1, 1, 1, 3});  // groups of 16 channels and outputs
  EXPECT_EQ(kiln::cpu::packed_conv_eligible(g), avx2);
}
