// Unit tests of Resize / Upsample against hand-computed small examples.
#include <cmath>

#include "test_reduce_helpers.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

Tensor resize(const Tensor& x, const std::vector<float>& scales, const std::vector<int64_t>& sizes,
              const std::string& mode, const std::string& ctm, std::vector<float> roi = {},
              std::function<void(OneNode&)> more = {}) {
  Tensor r = roi.empty() ? Tensor() : f32({(int64_t)roi.size()}, roi);
  Tensor s = scales.empty() ? Tensor() : f32({(int64_t)scales.size()}, scales);
  Tensor z = sizes.empty() ? Tensor() : i64({(int64_t)sizes.size()}, sizes);
  OneNode n("Resize", 19, {x, r, s, z});
  n.s("mode", mode).s("coordinate_transformation_mode", ctm);
  if (more) more(n);
  return n.out();
}

void expect_floats(const Tensor& t, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(t.data<float>()[i], want[i], tol) << "at " << i;
}

}  // namespace

TEST(MiscResize, NearestAsymmetric2x) {
  Tensor y = resize(f32({1, 1, 2, 2}, {1, 2, 3, 4}), {1, 1, 2, 2}, {}, "nearest", "asymmetric");
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  expect_floats(y, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
}

TEST(MiscResize, NearestModes) {
  Tensor x = f32({4}, {0, 1, 2, 3});
  auto run = [&](const std::string& nm, int64_t out) {
    return resize(x, {}, {out}, "nearest", "asymmetric", {}, [&](OneNode& n) { n.s("nearest_mode", nm); });
  };
  // scale 1.25: x_ori = 0, .8, 1.6, 2.4, 3.2
  expect_floats(run("floor", 5), {0, 0, 1, 2, 3});
  expect_floats(run("ceil", 5), {0, 1, 2, 3, 3});
  // scale 2: x_ori = 0, .5, 1, 1.5, ... exercises the tie rule
  expect_floats(run("round_prefer_floor", 8), {0, 0, 1, 1, 2, 2, 3, 3});
  expect_floats(run("round_prefer_ceil", 8), {0, 1, 1, 2, 2, 3, 3, 3});
}

TEST(MiscResize, LinearCoordinateModes) {
  Tensor x = f32({2}, {0, 10});
  // half_pixel: x_ori = -.25, .25, .75, 1.25, clamped at the edges
  expect_floats(resize(x, {2}, {}, "linear", "half_pixel"), {0, 2.5, 7.5, 10});
  expect_floats(resize(x, {}, {3}, "linear", "align_corners"), {0, 5, 10});
  expect_floats(resize(x, {2}, {}, "linear", "asymmetric"), {0, 5, 10, 10});
  // pytorch_half_pixel with a single output pixel samples at -0.5 → the first element.
  expect_floats(resize(x, {}, {1}, "linear", "pytorch_half_pixel"), {0});
  // half_pixel with one output pixel samples the center.
  expect_floats(resize(x, {}, {1}, "linear", "half_pixel"), {5});
  // 2-D bilinear, half_pixel, 2x2 → 4x4: corners stay, centre rows mix
  Tensor y = resize(f32({2, 2}, {0, 4, 8, 12}), {2, 2}, {}, "linear", "half_pixel");
  expect_floats(y, {0, 1, 3, 4, 2, 3, 5, 6, 6, 7, 9, 10, 8, 9, 11, 12});
}

TEST(MiscResize, CubicAndExcludeOutside) {
  Tensor x = f32({4}, {0, 1, 2, 3});
  // At x_ori = 0.5 (A = -0.75): weights -0.09375, 0.59375, 0.59375, -0.09375 over clamped 0,0,1,2.
  Tensor y = resize(x, {2}, {}, "cubic", "asymmetric");
  EXPECT_NEAR(y.data<float>()[1], 0.40625f, 1e-5);
  EXPECT_NEAR(y.data<float>()[2], 1.0f, 1e-5);
  EXPECT_NEAR(y.data<float>()[3], 1.5f, 1e-5);
  // exclude_outside drops the out-of-range tap and renormalizes: (0.59375*0 + 0.59375*1 - 0.09375*2) / 1.09375
  Tensor z = resize(x, {2}, {}, "cubic", "asymmetric", {}, [](OneNode& n) { n.i("exclude_outside", 1); });
  EXPECT_NEAR(z.data<float>()[1], 0.40625f / 1.09375f, 1e-5);
}

TEST(MiscResize, TfCropAndResizeExtrapolation) {
  Tensor x = f32({4}, {0, 10, 20, 30});
  // x_ori = 1.5, 3, 4.5 → 15, 30, extrapolated
  Tensor y = resize(x, {}, {3}, "linear", "tf_crop_and_resize", {0.5f, 1.5f},
                    [](OneNode& n) { n.f("extrapolation_value", -1.f); });
  expect_floats(y, {15, 30, -1});
}

TEST(MiscResize, AntialiasLinearDownsample) {
  std::vector<float> v(8);
  for (int i = 0; i < 8; ++i) v[i] = static_cast<float>(i);
  // scale 0.5: taps at offsets -1..2 with weights 1/8, 3/8, 3/8, 1/8 (edge-clamped)
  Tensor y = resize(f32({8}, v), {0.5f}, {}, "linear", "half_pixel", {}, [](OneNode& n) { n.i("antialias", 1); });
  expect_floats(y, {0.625f, 2.5f, 4.5f, 6.375f});
}

TEST(MiscResize, AxesAndKeepAspectRatio) {
  Tensor x = f32({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto run = [&](const std::string& policy) {
    return resize(x, {}, {4, 4}, "nearest", "asymmetric", {}, [&](OneNode& n) {
      n.ints("axes", {2, 3}).s("keep_aspect_ratio_policy", policy);
    });
  };
  EXPECT_EQ(run("stretch").shape(), (Shape{1, 1, 4, 4}));
  Tensor nl = run("not_larger");
  EXPECT_EQ(nl.shape(), (Shape{1, 1, 2, 4}));
  expect_floats(nl, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(run("not_smaller").shape(), (Shape{1, 1, 4, 8}));
}

TEST(MiscResize, IntegerRoundsAndUpsample) {
  Tensor x = make_tensor<uint8_t>(DataType::kUInt8, {2}, {0, 255});
  OneNode n("Resize", 13, {x, Tensor(), f32({1}, {2}), Tensor()});
  n.s("mode", "linear");
  Tensor y = n.out();
  ASSERT_EQ(y.dtype(), DataType::kUInt8);
  // 0, 63.75, 191.25, 255 → rounded
  EXPECT_EQ(values<uint8_t>(y), (std::vector<uint8_t>{0, 64, 191, 255}));

  OneNode u("Upsample", 9, {f32({1, 2}, {1, 2}), f32({2}, {2, 3})});
  u.s("mode", "nearest");
  Tensor z = u.out();
  EXPECT_EQ(z.shape(), (Shape{2, 6}));
  expect_floats(z, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
  OneNode u7("Upsample", 7, {f32({2}, {0, 10})});
  u7.s("mode", "linear").floats("scales", {2});
  expect_floats(u7.out(), {0, 5, 10, 10});
}

TEST(MiscResize, BadInputsAreErrors) {
  Tensor x = f32({2}, {0, 10});
  OneNode both("Resize", 19, {x, Tensor(), f32({1}, {2}), i64({1}, {4})});
  EXPECT_FALSE(both.run().ok());
  OneNode none("Resize", 19, {x, Tensor(), Tensor(), Tensor()});
  EXPECT_FALSE(none.run().ok());
  OneNode wrong("Resize", 19, {x, Tensor(), f32({2}, {2, 2}), Tensor()});
  EXPECT_FALSE(wrong.run().ok());
}

// The float32 row path (last two axes resized) computes the generic path's sums in the generic path's
// order: its results equal, bit for bit, the float64 generic path's results rounded to float32.
TEST(MiscResize, Float32RowPathEqualsTheGenericPathBitForBit) {
  std::vector<float> v(2 * 3 * 7 * 9);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  const Tensor x32 = f32({2, 3, 7, 9}, v);
  Tensor x64 = Tensor::empty(DataType::kFloat64, {2, 3, 7, 9});
  for (size_t i = 0; i < v.size(); ++i) x64.data<double>()[i] = v[i];
  struct Case {
    const char* mode;
    const char* ctm;
    std::vector<int64_t> sizes;
    bool antialias;
  };
  const Case cases[] = {{"linear", "half_pixel", {2, 3, 28, 36}, false}, {"linear", "align_corners", {2, 3, 5, 20}, false},
                        {"cubic", "pytorch_half_pixel", {2, 3, 13, 4}, false}, {"nearest", "asymmetric", {2, 3, 14, 9}, false},
                        {"linear", "half_pixel", {2, 3, 3, 4}, true}, {"cubic", "half_pixel", {2, 3, 7, 30}, false},
                        {"linear", "pytorch_half_pixel", {2, 3, 56, 72}, false}};
  for (const Case& c : cases) {
    auto more = [&](OneNode& n) { n.i("antialias", c.antialias ? 1 : 0); };
    const Tensor y32 = resize(x32, {}, c.sizes, c.mode, c.ctm, {}, more);
    const Tensor y64 = resize(x64, {}, c.sizes, c.mode, c.ctm, {}, more);
    ASSERT_EQ(y32.shape(), y64.shape()) << c.mode;
    for (int64_t i = 0; i < y32.numel(); ++i)
      ASSERT_EQ(y32.data<float>()[i], static_cast<float>(y64.data<double>()[i])) << c.mode << " " << c.ctm << " at " << i;
  }
}
