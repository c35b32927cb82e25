// Normalizations, softmax family and Dropout against naive references.
#include "test_nn_util.h"

using namespace nntest;

namespace {

// Normalizes x over [0, len) groups: returns (v - mean) / sqrt(var + eps).
std::vector<double> normalize(const std::vector<double>& v, double eps, double* mean_out = nullptr, double* inv_out = nullptr) {
  double m = 0, q = 0;
  for (double a : v) m += a;
  m /= v.size();
  for (double a : v) q += (a - m) * (a - m);
  q /= v.size();
  std::vector<double> r;
  for (double a : v) r.push_back((a - m) / std::sqrt(q + eps));
  if (mean_out) *mean_out = m;
  if (inv_out) *inv_out = 1 / std::sqrt(q + eps);
  return r;
}

}  // namespace

TEST(NnNorm, BatchNormInference) {
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
    Tensor x = random(dt, {2, 3, 4, 5}), s = random(dt, {3}), b = random(dt, {3});
    Tensor mean = random(dt, {3}), var = random(dt, {3}, 0.5, 2);
    std::vector<double> want;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t c = (i / 20) % 3;
      want.push_back((get(x, i) - get(mean, c)) / std::sqrt(get(var, c) + 1e-3) * get(s, c) + get(b, c));
    }
    auto y = run("BatchNormalization", 15, {x, s, b, mean, var}, {{"epsilon", float_attr(1e-3f)}});
    expect_close(y[0], x.shape(), want, dt == DataType::kFloat16 ? 1e-2 : 1e-5, dt == DataType::kFloat16 ? 1e-2 : 1e-5);
  }
}

TEST(NnNorm, BatchNormTraining) {
  Tensor x = random(DataType::kFloat32, {3, 2, 4}), s = random(DataType::kFloat32, {2}), b = random(DataType::kFloat32, {2});
  Tensor mean = random(DataType::kFloat32, {2}), var = random(DataType::kFloat32, {2}, 0.5, 2);
  std::vector<double> want(24), rm, rv;
  for (int64_t c = 0; c < 2; ++c) {
    std::vector<double> v;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 4; ++i) v.push_back(get(x, (n * 2 + c) * 4 + i));
    double bm, binv;
    auto z = normalize(v, 1e-5, &bm, &binv);
    const double bvar = 1 / (binv * binv) - 1e-5;
    for (int64_t n = 0; n < 3; ++n)
      for (int64_t i = 0; i < 4; ++i) want[(n * 2 + c) * 4 + i] = z[n * 4 + i] * get(s, c) + get(b, c);
    rm.push_back(get(mean, c) * 0.8 + bm * 0.2);
    rv.push_back(get(var, c) * 0.8 + bvar * 0.2);
  }
  auto y = run("BatchNormalization", 15, {x, s, b, mean, var}, {{"momentum", float_attr(0.8f)}, {"training_mode", int_attr(1)}}, 3);
  expect_close(y[0], x.shape(), want);
  expect_close(y[1], {2}, rm);
  expect_close(y[2], {2}, rv);
}

TEST(NnNorm, InstanceAndGroup) {
  Tensor x = random(DataType::kFloat32, {2, 4, 3, 2}), s = random(DataType::kFloat32, {4}), b = random(DataType::kFloat32, {4});
  // Instance: each (n, c) plane separately.
  std::vector<double> want;
  for (int64_t p = 0; p < 8; ++p) {
    std::vector<double> v;
    for (int64_t i = 0; i < 6; ++i) v.push_back(get(x, p * 6 + i));
    for (double z : normalize(v, 1e-5)) want.push_back(z * get(s, p % 4) + get(b, p % 4));
  }
  expect_close(run("InstanceNormalization", 6, {x, s, b}, {})[0], x.shape(), want);
  // Group (opset 21, per-channel scale) with 2 groups of 2 channels; opset 18 per-group scale.
  Tensor gs = random(DataType::kFloat32, {2}), gb = random(DataType::kFloat32, {2});
  for (bool per_channel : {true, false}) {
    std::vector<double> w2;
    for (int64_t ng = 0; ng < 4; ++ng) {
      std::vector<double> v;
      for (int64_t i = 0; i < 12; ++i) v.push_back(get(x, ng * 12 + i));
      auto z = normalize(v, 1e-5);
      for (int64_t i = 0; i < 12; ++i) {
        const int64_t c = (ng % 2) * 2 + i / 6, g = ng % 2;
        w2.push_back(per_channel ? z[i] * get(s, c) + get(b, c) : z[i] * get(gs, g) + get(gb, g));
      }
    }
    auto y = run("GroupNormalization", per_channel ? 21 : 18, {x, per_channel ? s : gs, per_channel ? b : gb},
                 {{"num_groups", int_attr(2)}});
    expect_close(y[0], x.shape(), w2);
  }
}

TEST(NnNorm, LayerNormAxes) {
  Tensor x = random(DataType::kFloat32, {2, 3, 4});
  for (int64_t axis : {-1, 1, 0, -2}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    const int64_t a = axis < 0 ? axis + 3 : axis;
    Shape inner(x.shape().begin() + a, x.shape().end());
    const int64_t D = numel(inner), outer = 24 / D;
    Tensor s = random(DataType::kFloat32, inner), b = random(DataType::kFloat32, inner);
    std::vector<double> want, means, invs;
    for (int64_t r = 0; r < outer; ++r) {
      std::vector<double> v;
      for (int64_t i = 0; i < D; ++i) v.push_back(get(x, r * D + i));
      double m, inv;
      auto z = normalize(v, 1e-3, &m, &inv);
      for (int64_t i = 0; i < D; ++i) want.push_back(z[i] * get(s, i) + get(b, i));
      means.push_back(m);
      invs.push_back(inv);
    }
    auto y = run("LayerNormalization", 17, {x, s, b}, {{"axis", int_attr(axis)}, {"epsilon", float_attr(1e-3f)}}, 3);
    expect_close(y[0], x.shape(), want);
    Shape stat(x.shape().begin(), x.shape().begin() + a);
    stat.resize(3, 1);
    expect_close(y[1], stat, means);
    expect_close(y[2], stat, invs);
  }
  // Scale broadcast from a smaller shape, no bias.
  Tensor s1 = random(DataType::kFloat32, {4});
  auto y = run("LayerNormalization", 17, {x, s1}, {{"axis", int_attr(1)}});
  std::vector<double> want;
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<double> v;
    for (int64_t i = 0; i < 12; ++i) v.push_back(get(x, r * 12 + i));
    auto z = normalize(v, 1e-5);
    for (int64_t i = 0; i < 12; ++i) want.push_back(z[i] * get(s1, i % 4));
  }
  expect_close(y[0], x.shape(), want);
}

TEST(NnNorm, RmsNorm) {
  Tensor x = random(DataType::kFloat32, {3, 5}), s = random(DataType::kFloat32, {5});
  std::vector<double> want;
  for (int64_t r = 0; r < 3; ++r) {
    double q = 0;
    for (int64_t i = 0; i < 5; ++i) q += get(x, r * 5 + i) * get(x, r * 5 + i);
    for (int64_t i = 0; i < 5; ++i) want.push_back(get(x, r * 5 + i) / std::sqrt(q / 5 + 1e-5) * get(s, i));
  }
  expect_close(run("RMSNormalization", 23, {x, s}, {})[0], x.shape(), want);
}

TEST(NnNorm, Lrn) {
  Tensor x = random(DataType::kFloat32, {2, 5, 3, 2});
  for (int64_t size : {3, 4}) {
    std::vector<double> want;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t n = i / 30, c = (i / 6) % 5, sp = i % 6;
      double sq = 0;
      for (int64_t k = std::max<int64_t>(0, c - (size - 1) / 2); k <= std::min<int64_t>(4, c + size / 2); ++k)
        sq += std::pow(get(x, (n * 5 + k) * 6 + sp), 2);
      want.push_back(get(x, i) / std::pow(2.0 + 0.1 / size * sq, 0.6));
    }
    auto y = run("LRN", 13, {x}, {{"size", int_attr(size)}, {"alpha", float_attr(0.1f)}, {"beta", float_attr(0.6f)},
                                  {"bias", float_attr(2.0f)}});
    expect_close(y[0], x.shape(), want);
  }
}

TEST(NnNorm, MeanVarianceNormalization) {
  Tensor x = random(DataType::kFloat32, {2, 3, 2, 2});
  std::vector<double> want(24);
  for (int64_t c = 0; c < 3; ++c) {
    std::vector<double> v;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 4; ++i) v.push_back(get(x, (n * 3 + c) * 4 + i));
    auto z = normalize(v, 0);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 4; ++i) want[(n * 3 + c) * 4 + i] = z[n * 4 + i];
  }
  expect_close(run("MeanVarianceNormalization", 13, {x}, {})[0], x.shape(), want, 1e-4, 1e-4);
}

namespace {

// Softmax-family reference over `len` elements at stride `inner`.
std::vector<double> ref_soft(const std::string& op, const Tensor& x, int64_t outer, int64_t len, int64_t inner) {
  std::vector<double> y(static_cast<size_t>(x.numel()));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t k) { return (o * len + k) * inner + in; };
      double mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t k = 0; k < len; ++k)
        if (get(x, at(k)) > mx) { mx = get(x, at(k)); arg = k; }
      double s = 0;
      for (int64_t k = 0; k < len; ++k) s += std::exp(get(x, at(k)) - mx);
      for (int64_t k = 0; k < len; ++k) {
        if (op == "Softmax") y[at(k)] = std::exp(get(x, at(k)) - mx) / s;
        else if (op == "LogSoftmax") y[at(k)] = get(x, at(k)) - mx - std::log(s);
        else y[at(k)] = k == arg ? 1 : 0;
      }
    }
  return y;
}

}  // namespace

TEST(NnSoftmax, AlongAxisOpset13) {
  Tensor x = random(DataType::kFloat32, {2, 3, 4}, -1000, 1000);  // large values: must not overflow
  for (std::string op : {"Softmax", "LogSoftmax", "Hardmax"})
    for (int64_t axis : {0, 1, 2, -1, -2}) {
      SCOPED_TRACE(op + " axis " + std::to_string(axis));
      const int64_t a = axis < 0 ? axis + 3 : axis;
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < a; ++d) outer *= x.dim(static_cast<int>(d));
      for (int64_t d = a + 1; d < 3; ++d) inner *= x.dim(static_cast<int>(d));
      auto y = run(op, 13, {x}, {{"axis", int_attr(axis)}});
      expect_close(y[0], x.shape(), ref_soft(op, x, outer, x.dim(static_cast<int>(a)), inner), 1e-4, 1e-5);
    }
}

TEST(NnSoftmax, CoercedTo2DBeforeOpset13) {
  Tensor x = random(DataType::kFloat32, {2, 3, 4}, -5, 5);
  for (std::string op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    expect_close(run(op, 11, {x}, {})[0], x.shape(), ref_soft(op, x, 2, 12, 1));  // default axis 1
    expect_close(run(op, 11, {x}, {{"axis", int_attr(0)}})[0], x.shape(), ref_soft(op, x, 1, 24, 1));
    expect_close(run(op, 13, {x}, {})[0], x.shape(), ref_soft(op, x, 6, 4, 1));  // default axis -1
  }
}

TEST(NnSoftmax, DtypesAndEmpty) {
  Tensor x = random(DataType::kFloat64, {3, 5}, -50, 50);
  expect_close(run("Softmax", 13, {x}, {})[0], x.shape(), ref_soft("Softmax", x, 3, 5, 1), 1e-12, 1e-14);
  Tensor h = random(DataType::kFloat16, {3, 5}, -4, 4);
  expect_close(run("LogSoftmax", 13, {h}, {})[0], h.shape(), ref_soft("LogSoftmax", h, 3, 5, 1), 1e-2, 1e-2);
  auto e = run("Softmax", 13, {random(DataType::kFloat32, {0, 5})}, {});
  EXPECT_EQ(shape_to_string(e[0].shape()), shape_to_string({0, 5}));
  // Hardmax ties pick the first.
  expect_close(run("Hardmax", 13, {from(DataType::kFloat32, {1, 3}, {2, 2, 1})}, {})[0], {1, 3}, {1, 0, 0});
}

TEST(NnDropout, InferenceIsIdentity) {
  Tensor x = random(DataType::kFloat32, {3, 4});
  auto y = run("Dropout", 13, {x, from(DataType::kFloat32, {}, {0.7})}, {}, 2);
  expect_close(y[0], x.shape(), values(x), 0, 0);
  EXPECT_EQ(y[1].dtype(), DataType::kBool);
  for (int64_t i = 0; i < 12; ++i) EXPECT_TRUE(y[1].data<bool>()[i]);
  auto old = run("Dropout", 7, {x}, {{"ratio", float_attr(0.3f)}}, 2);
  expect_close(old[0], x.shape(), values(x), 0, 0);
  EXPECT_EQ(old[1].dtype(), DataType::kFloat32);
}

TEST(NnDropout, TrainingDropsAndScales) {
  Tensor x = random(DataType::kFloat32, {100, 100}, 1, 2);
  Tensor training = Tensor::empty(DataType::kBool, {});
  training.data<bool>()[0] = true;
  auto y = run("Dropout", 13, {x, from(DataType::kFloat32, {}, {0.25}), training}, {{"seed", int_attr(3)}}, 2);
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = y[1].data<bool>()[i];
    kept += keep;
    EXPECT_NEAR(get(y[0], i), keep ? get(x, i) / 0.75 : 0.0, 1e-5);
  }
  EXPECT_NEAR(kept / 10000.0, 0.75, 0.03);
  // ratio 0 in training: identity.
  auto z = run("Dropout", 13, {x, from(DataType::kFloat32, {}, {0.0}), training}, {}, 2);
  expect_close(z[0], x.shape(), values(x), 0, 0);
}
