// The "dw-direct" channels-last depthwise convolution (backends/cpu/dw_conv.h) against a double
// reference of act(dwconv(X, W) + B + Z): channel counts that fill whole vector blocks, 8-channel
// blocks and single channels (C = 5 .. 1152), output rows narrower than the 4-pixel block, windows
// wider than the input, the sliding 3/5/7-wide interior at strides 1 and 2 and the generic one,
// strides, dilations, padding on every side (and more than the window), batch
// 2, each epilogue (none, Relu, Silu, Clip), with and without bias and residual, few rows split
// into channel chunks among threads; 1 and 2 threads give the same bits.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/dw_conv.h"
#include "conv_test_util.h"

namespace {

using kiln::Activation;
using kiln::ActKind;
using kiln::cpu::DwConvGeometry;

struct Case {
  int64_t N, H, W, C, kh, kw, stride, dil, pad_top, pad_left, pad_bottom, pad_right;
};

DwConvGeometry geometry(const Case& c) { return kiln::test::conv_window_geometry<DwConvGeometry>(c); }

}  // namespace

TEST(DwConv, MatchesDoubleReference) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const Case cases[] = {
      {1, 9, 11, 32, 3, 3, 1, 1, 1, 1, 1, 1},        // one 32-channel block; 11 columns: 2 blocks of 4 + edges
      {2, 12, 13, 96, 3, 3, 2, 1, 1, 1, 1, 1},       // stride 2, two images
      {1, 14, 14, 40, 5, 5, 1, 1, 2, 2, 2, 2},       // 40 = 32 + 8 channels, 5x5
      {1, 7, 7, 1152, 5, 5, 1, 1, 2, 2, 2, 2},       // EfficientNet's last stage: 7 rows, chunked channels
      {1, 10, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1},         // fewer channels than a vector: single channels only
      {1, 9, 10, 77, 3, 3, 1, 2, 2, 2, 2, 2},        // dilation 2; 77 = 64 + 8 + 5
      {1, 11, 12, 24, 3, 3, 2, 1, 0, 0, 1, 1},       // padding on the bottom and right only (TF's SAME)
      {1, 3, 4, 16, 5, 5, 1, 1, 2, 2, 2, 2},         // a window wider and taller than the image
      {1, 5, 6, 48, 3, 3, 1, 1, 4, 3, 4, 3},         // padding beyond the window: rows and columns of bias only
      {1, 8, 30, 144, 7, 7, 1, 1, 3, 3, 3, 3},       // 7x7 (ConvNeXt), 144 = 4x32 + 16
      {1, 6, 6, 16, 1, 1, 1, 1, 0, 0, 0, 0},         // a 1x1 window
      {1, 15, 27, 40, 5, 5, 2, 1, 2, 2, 2, 2},       // 5x5 stride 2: the sliding interior
      {2, 20, 31, 24, 7, 7, 2, 1, 3, 3, 3, 3},       // 7x7 stride 2
      {1, 9, 40, 72, 3, 3, 2, 1, 1, 1, 1, 1},        // 3x3 stride 2 on a wide row
      {1, 6, 25, 16, 4, 4, 1, 1, 1, 2, 2, 1},        // an even window: the generic 4-pixel path
  };
  const Activation acts[] = {Activation{}, Activation{ActKind::kRelu}, Activation{ActKind::kSilu},
                             Activation{ActKind::kClip, -0.3f, 0.4f}};
  for (const Case& cs : cases) {
    const DwConvGeometry g = geometry(cs);
    ASSERT_TRUE(kiln::cpu::dw_conv_eligible(g));
    const int64_t taps = g.kh * g.kw, outs = g.N * g.OH * g.OW * g.C;
    std::vector<float> x(g.N * g.H * g.W * g.C), w(g.C * taps), bias(g.C), z(outs);
    for (auto& v : x) v = u(rng);
    for (auto& v : w) v = u(rng);
    for (auto& v : bias) v = u(rng);
    for (auto& v : z) v = u(rng);
    auto packed = kiln::cpu::pack_dw_conv(g, w.data());
    ASSERT_TRUE(packed.ok()) << packed.status().message();
    for (int variant = 0; variant < 8; ++variant) {
      const bool with_bias = variant & 1, with_z = variant & 2;
      const Activation act = acts[(variant / 2 + cs.C) % 4];
      // The reference in double, the window's taps in any order.
      std::vector<double> ref(outs);
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t oh = 0; oh < g.OH; ++oh)
          for (int64_t ow = 0; ow < g.OW; ++ow)
            for (int64_t c = 0; c < g.C; ++c) {
              double s = with_bias ? bias[c] : 0.0;
              for (int64_t i = 0; i < g.kh; ++i)
                for (int64_t j = 0; j < g.kw; ++j) {
                  const int64_t ih = oh * g.stride_h - g.pad_top + i * g.dil_h, iw = ow * g.stride_w - g.pad_left + j * g.dil_w;
                  if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                  s += static_cast<double>(x[((n * g.H + ih) * g.W + iw) * g.C + c]) * w[c * taps + i * g.kw + j];
                }
              const int64_t o = ((n * g.OH + oh) * g.OW + ow) * g.C + c;
              if (with_z) s += z[o];
              ref[o] = kiln::test::activate_ref(s, act);
            }
      std::vector<float> y1(outs, -7.f), y2(outs, 7.f);
      const int saved = omp_get_max_threads();
      omp_set_num_threads(1);
      kiln::cpu::dw_conv(**packed, x.data(), with_bias ? bias.data() : nullptr, with_z ? z.data() : nullptr, act, y1.data());
      omp_set_num_threads(2);
      kiln::cpu::dw_conv(**packed, x.data(), with_bias ? bias.data() : nullptr, with_z ? z.data() : nullptr, act, y2.data());
      omp_set_num_threads(saved);
      const std::string what = "C=" + std::to_string(g.C) + " " + std::to_string(g.kh) + "x" + std::to_string(g.kw) +
                               " stride " + std::to_string(cs.stride) + " variant " + std::to_string(variant);
      for (int64_t i = 0; i < outs; ++i) {
        ASSERT_NEAR(y1[i], ref[i], 1e-5 * (taps + 2)) << what << " at " << i;
        ASSERT_EQ(y1[i], y2[i]) << what << ": 1 and 2 threads differ at " << i;
      }
    }
  }
}

TEST(DwConv, RefusesWhatItDoesNotTake) {
  DwConvGeometry g;
  g.N = 1, g.H = g.W = 20, g.C = 8, g.kh = g.kw = 9, g.OH = g.OW = 12;
  EXPECT_FALSE(kiln::cpu::dw_conv_eligible(g));  // 81 taps
  g.kh = g.kw = 3;
  EXPECT_TRUE(kiln::cpu::dw_conv_eligible(g));
  g.stride_w = 0;
  EXPECT_FALSE(kiln::cpu::dw_conv_eligible(g));
  std::vector<float> w(8 * 9);
  EXPECT_FALSE(kiln::cpu::pack_dw_conv(g, w.data()).ok());
}
