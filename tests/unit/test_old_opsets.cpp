// Ops of ai.onnx opsets 1..6 whose semantics differ from later versions: PRelu's per-channel slope,
// Concat's default axis, BatchNormalization / Dropout `is_test`, Gemm's `broadcast`. Each is run at
// the old opset against a naive reference (and, where it matters, at a newer opset to show the
// difference).
#include <cmath>
#include <memory>

#include "test_reduce_helpers.h"

using namespace kiln;
using namespace kiln::testing;

TEST(OldOpsets, PReluSlopePerChannelBeforeOpset7) {
  const auto x = random_floats(24, 1);
  const std::vector<float> slope = {0.1f, 0.2f, 0.3f};
  Tensor y = OneNode("PRelu", 6, {f32({2, 3, 4}, x), f32({3}, slope)}).out();
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  for (int i = 0; i < 24; ++i) {
    const float s = slope[(i / 4) % 3];
    EXPECT_FLOAT_EQ(y.data<float>()[i], x[i] < 0 ? s * x[i] : x[i]) << i;
  }
  // A single slope is shared; from opset 7 a [4] slope broadcasts numpy-style over the last axis.
  Tensor one = OneNode("PRelu", 6, {f32({2, 3, 4}, x), f32({1}, {0.5f})}).out();
  for (int i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(one.data<float>()[i], x[i] < 0 ? 0.5f * x[i] : x[i]);
  const std::vector<float> last = {0.1f, 0.2f, 0.3f, 0.4f};
  Tensor y9 = OneNode("PRelu", 9, {f32({2, 3, 4}, x), f32({4}, last)}).out();
  for (int i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(y9.data<float>()[i], x[i] < 0 ? last[i % 4] * x[i] : x[i]);
}

TEST(OldOpsets, ConcatDefaultAxisBeforeOpset4) {
  const Tensor a = f32({2, 1}, {1, 2}), b = f32({2, 2}, {3, 4, 5, 6});
  Tensor y = OneNode("Concat", 3, {a, b}).out();  // no axis: 1
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(y), (std::vector<float>{1, 3, 4, 2, 5, 6}));
  OneNode n4("Concat", 4, {f32({1, 2}, {1, 2}), b});
  n4.i("axis", 0);
  EXPECT_EQ(n4.out().shape(), (Shape{3, 2}));
}

TEST(OldOpsets, BatchNormIsTest) {
  const auto x = random_floats(2 * 3 * 5, 2);
  const std::vector<float> s = {1, 2, 0.5f}, b = {0, 1, -1}, mean = {0.1f, -0.2f, 0.3f}, var = {1, 0.5f, 2};
  auto make = [&](int64_t is_test) {
    auto n = std::make_unique<OneNode>("BatchNormalization", 6,
                                       std::vector<Tensor>{f32({2, 3, 5}, x), f32({3}, s), f32({3}, b), f32({3}, mean), f32({3}, var)});
    n->i("is_test", is_test).f("epsilon", 1e-3f).i("spatial", 1);
    return n;
  };
  Tensor y = make(1)->out();
  for (int i = 0; i < 30; ++i) {
    const int c = (i / 5) % 3;
    EXPECT_NEAR(y.data<float>()[i], (x[i] - mean[c]) / std::sqrt(var[c] + 1e-3) * s[c] + b[c], 1e-5) << i;
  }
  // is_test=0 (the old default) is training: refused rather than run as inference.
  EXPECT_FALSE(make(0)->run().ok());
}

TEST(OldOpsets, DropoutIsTestAndGemmBroadcast) {
  const auto x = random_floats(6, 3);
  OneNode d("Dropout", 6, {f32({2, 3}, x)});
  d.i("is_test", 1).f("ratio", 0.5f);
  EXPECT_EQ(values<float>(d.out()), x);
  OneNode train("Dropout", 6, {f32({2, 3}, x)});
  EXPECT_FALSE(train.run().ok());
  // Gemm opset 6 with broadcast=1: C [N] is added to every row.
  const auto a = random_floats(6, 4), w = random_floats(12, 5);
  const std::vector<float> c = {1, 2, 3, 4};
  OneNode g("Gemm", 6, {f32({2, 3}, a), f32({4, 3}, w), f32({4}, c)});
  g.i("broadcast", 1).i("transB", 1).f("alpha", 2.0f);
  Tensor y = g.out();
  ASSERT_EQ(y.shape(), (Shape{2, 4}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      double acc = 0;
      for (int k = 0; k < 3; ++k) acc += a[i * 3 + k] * w[j * 3 + k];
      EXPECT_NEAR(y.data<float>()[i * 4 + j], 2 * acc + c[j], 1e-5);
    }
}
