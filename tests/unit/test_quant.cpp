// QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear against naive references.
#include "test_rq_util.h"

using namespace rqtest;

namespace {

struct IntRange { DataType dt; double lo, hi; };
const IntRange kIntTypes[] = {{DataType::kUInt8, 0, 255},      {DataType::kInt8, -128, 127},
                              {DataType::kUInt16, 0, 65535},   {DataType::kInt16, -32768, 32767},
                              {DataType::kUInt4, 0, 15},       {DataType::kInt4, -8, 7},
                              {DataType::kUInt2, 0, 3},        {DataType::kInt2, -2, 1}};

// Reference: round half to even of x/s in float, plus zero point, saturated.
double ref_quant(double x, double s, double zp, double lo, double hi) {
  const float q = static_cast<float>(x) / static_cast<float>(s);
  return std::clamp(std::nearbyint(static_cast<double>(q)) + zp, lo, hi);
}

// Scale index of element i of x (shape `xs`) for per-axis (block 0) or blocked quantization.
int64_t scale_index(int64_t i, const Shape& xs, int64_t axis, int64_t block) {
  int64_t inner = 1;
  for (size_t d = axis + 1; d < xs.size(); ++d) inner *= xs[d];
  const int64_t len = xs[axis], d = (i / inner) % len;
  if (block == 0) return d;
  const int64_t blocks = (len + block - 1) / block, o = i / (inner * len);
  return (o * blocks + d / block) * inner + i % inner;
}

}  // namespace

TEST(Quant, PerTensorIntegerTypes) {
  for (const IntRange& r : kIntTypes) {
    Tensor x = random(DataType::kFloat32, {3, 7}, -40, 40);
    Tensor s = from(DataType::kFloat32, {}, {0.37});
    const double zpv = r.lo < 0 ? -1 : 3;
    Tensor zp = from(r.dt, {}, {zpv});
    std::vector<double> want;
    for (int64_t i = 0; i < x.numel(); ++i) want.push_back(ref_quant(get(x, i), 0.37, zpv, r.lo, r.hi));
    auto y = run("QuantizeLinear", 21, {x, s, zp}, {});
    EXPECT_EQ(y[0].dtype(), r.dt) << dtype_name(r.dt);
    expect_equal(y[0], x.shape(), want);
  }
}

TEST(Quant, RoundsHalfToEvenAndSaturates) {
  Tensor x = from(DataType::kFloat32, {10}, {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1000, -1000, 126.5, 127.5});
  Tensor s = from(DataType::kFloat32, {}, {1});
  auto y = run("QuantizeLinear", 13, {x, s, from(DataType::kInt8, {}, {0})}, {});
  expect_equal(y[0], {10}, {0, 2, 2, 0, -2, -2, 127, -128, 126, 127});
  // No zero point: uint8.
  auto u = run("QuantizeLinear", 13, {x, s}, {});
  EXPECT_EQ(u[0].dtype(), DataType::kUInt8);
  expect_equal(u[0], {10}, {0, 2, 2, 0, 0, 0, 255, 0, 126, 128});
}

TEST(Quant, Int4Saturation) {
  Tensor x = from(DataType::kFloat32, {8}, {-100, -8.6, -8.4, -0.5, 0.5, 6.5, 7.6, 100});
  Tensor s = from(DataType::kFloat32, {}, {1});
  auto i4 = run("QuantizeLinear", 21, {x, s, from(DataType::kInt4, {}, {0})}, {});
  EXPECT_EQ(i4[0].dtype(), DataType::kInt4);
  expect_equal(i4[0], {8}, {-8, -8, -8, 0, 0, 6, 7, 7});
  auto u4 = run("QuantizeLinear", 21, {x, s, from(DataType::kUInt4, {}, {2})}, {});
  expect_equal(u4[0], {8}, {0, 0, 0, 2, 2, 8, 10, 15});
  // output_dtype attribute without zero point.
  auto o = run("QuantizeLinear", 21, {x, s}, {{"output_dtype", attr_int(static_cast<int>(DataType::kInt4))}});
  EXPECT_EQ(o[0].dtype(), DataType::kInt4);
  expect_equal(o[0], {8}, {-8, -8, -8, 0, 0, 6, 7, 7});
}

TEST(Quant, SubByteInputsReadTheirLowBits) {
  // int4 -4 may arrive sign-extended (0xfc) or as a bare nibble (0x0c); both mean -4.
  Tensor x = Tensor::empty(DataType::kInt4, {3});
  x.data<uint8_t>()[0] = 0xfc;
  x.data<uint8_t>()[1] = 0x0c;
  x.data<uint8_t>()[2] = 0x07;
  auto y = run("DequantizeLinear", 21, {x, from(DataType::kFloat32, {}, {2})}, {});
  expect_equal(y[0], {3}, {-8, -8, 14});
  Tensor x2 = Tensor::empty(DataType::kInt2, {3});
  x2.data<uint8_t>()[0] = 0x02;  // -2
  x2.data<uint8_t>()[1] = 0xff;  // -1
  x2.data<uint8_t>()[2] = 0x01;
  auto y2 = run("DequantizeLinear", 21, {x2, from(DataType::kFloat32, {}, {1}), from(DataType::kInt2, {}, {1})}, {});
  expect_equal(y2[0], {3}, {-3, -2, 0});
}

TEST(Quant, PerAxisNegativeAxis) {
  const Shape xs = {2, 3, 4};
  Tensor x = random(DataType::kFloat32, xs, -10, 10);
  Tensor s = random(DataType::kFloat32, {3}, 0.05, 0.2);
  Tensor zp = random(DataType::kInt8, {3}, -5, 5);
  std::vector<double> want;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t k = scale_index(i, xs, 1, 0);
    want.push_back(ref_quant(get(x, i), get(s, k), get(zp, k), -128, 127));
  }
  auto y = run("QuantizeLinear", 13, {x, s, zp}, {{"axis", attr_int(-2)}});
  expect_equal(y[0], xs, want);
  // And back: DequantizeLinear with the same per-axis parameters.
  std::vector<double> deq;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t k = scale_index(i, xs, 1, 0);
    deq.push_back((static_cast<float>(want[i]) - static_cast<float>(get(zp, k))) * static_cast<float>(get(s, k)));
  }
  auto d = run("DequantizeLinear", 13, {y[0], s, zp}, {{"axis", attr_int(-2)}});
  expect_close(d[0], xs, deq);
}

TEST(Quant, BlockedWithRemainderBlock) {
  const Shape xs = {2, 5, 3};
  for (const IntRange& r : {kIntTypes[1], kIntTypes[3], kIntTypes[5]}) {
    Tensor x = random(DataType::kFloat32, xs, -10, 10);
    Tensor s = random(DataType::kFloat32, {2, 3, 3}, 0.5, 2);  // ceil(5 / 2) = 3 blocks
    Tensor zp = random(r.dt, {2, 3, 3}, -2, 2);
    std::vector<double> want;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t k = scale_index(i, xs, 1, 2);
      want.push_back(ref_quant(get(x, i), get(s, k), get(zp, k), r.lo, r.hi));
    }
    const Attrs attrs = {{"axis", attr_int(1)}, {"block_size", attr_int(2)}};
    auto y = run("QuantizeLinear", 21, {x, s, zp}, attrs);
    expect_equal(y[0], xs, want);
    std::vector<double> deq;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t k = scale_index(i, xs, 1, 2);
      deq.push_back((want[i] - get(zp, k)) * static_cast<float>(get(s, k)));
    }
    auto d = run("DequantizeLinear", 21, {y[0], s, zp}, attrs);
    expect_close(d[0], xs, deq);
  }
  // A scale whose blocked dim is not ceil(5 / 2) is refused.
  auto bad = try_run("QuantizeLinear", 21, {random(DataType::kFloat32, xs), random(DataType::kFloat32, {2, 2, 3}, 1, 2)},
                     {{"axis", attr_int(1)}, {"block_size", attr_int(2)}});
  EXPECT_FALSE(bad.ok());
}

TEST(Quant, DequantizeTypesAndOutputDtype) {
  for (const IntRange& r : kIntTypes) {
    Tensor x = random(r.dt, {4, 5}, r.lo, r.hi);
    Tensor zp = random(r.dt, {5}, r.lo / 2, r.hi / 2);
    Tensor s = random(DataType::kFloat32, {5}, 0.01, 1);
    std::vector<double> want;
    for (int64_t i = 0; i < x.numel(); ++i)
      want.push_back((static_cast<float>(get(x, i)) - static_cast<float>(get(zp, i % 5))) * static_cast<float>(get(s, i % 5)));
    auto y = run("DequantizeLinear", 21, {x, s, zp}, {{"axis", attr_int(1)}});
    EXPECT_EQ(y[0].dtype(), DataType::kFloat32);
    expect_close(y[0], {4, 5}, want);
  }
  // float16 scale gives float16 output; output_dtype overrides (opset 23).
  Tensor x = from(DataType::kUInt8, {4}, {0, 3, 128, 255});
  Tensor s16 = from(DataType::kFloat16, {}, {2});
  Tensor zp = from(DataType::kUInt8, {}, {128});
  auto h = run("DequantizeLinear", 21, {x, s16, zp}, {});
  EXPECT_EQ(h[0].dtype(), DataType::kFloat16);
  expect_equal(h[0], {4}, {-256, -250, 0, 254});
  auto f = run("DequantizeLinear", 23, {x, s16, zp}, {{"output_dtype", attr_int(1)}});
  EXPECT_EQ(f[0].dtype(), DataType::kFloat32);
  expect_equal(f[0], {4}, {-256, -250, 0, 254});
  // int32 input without zero point.
  auto i32 = run("DequantizeLinear", 13, {from(DataType::kInt32, {3}, {-70000, 0, 123456}), from(DataType::kFloat32, {}, {0.5})}, {});
  expect_equal(i32[0], {3}, {-35000, 0, 61728});
}

TEST(Quant, Float16AndBFloat16Inputs) {
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    Tensor x = random(dt, {16}, -20, 20);
    Tensor s = from(DataType::kFloat32, {}, {0.25});
    std::vector<double> want;
    for (int64_t i = 0; i < x.numel(); ++i) want.push_back(ref_quant(get(x, i), 0.25, 0, -128, 127));
    auto y = run("QuantizeLinear", 21, {x, s, from(DataType::kInt8, {}, {0})}, {});
    expect_equal(y[0], {16}, want);
  }
}

TEST(Quant, EmptyInputAndErrors) {
  auto y = run("QuantizeLinear", 21, {Tensor::empty(DataType::kFloat32, {0, 3}), from(DataType::kFloat32, {3}, {1, 2, 3})},
               {{"axis", attr_int(1)}});
  EXPECT_EQ(shape_to_string(y[0].shape()), shape_to_string({0, 3}));
  auto d = run("DequantizeLinear", 21, {Tensor::empty(DataType::kInt8, {2, 0}), from(DataType::kFloat32, {}, {1})}, {});
  EXPECT_EQ(d[0].numel(), 0);
  // output_dtype disagrees with the zero point.
  EXPECT_FALSE(try_run("QuantizeLinear", 21, {from(DataType::kFloat32, {1}, {1}), from(DataType::kFloat32, {}, {1}),
                                              from(DataType::kUInt8, {}, {0})},
                       {{"output_dtype", attr_int(3)}}).ok());
  // per-axis scale of the wrong length.
  EXPECT_FALSE(try_run("QuantizeLinear", 13, {random(DataType::kFloat32, {2, 3}), from(DataType::kFloat32, {2}, {1, 1})},
                       {{"axis", attr_int(1)}}).ok());
  // zero point with a different dtype than x.
  EXPECT_FALSE(try_run("DequantizeLinear", 13, {from(DataType::kInt8, {1}, {1}), from(DataType::kFloat32, {}, {1}),
                                                from(DataType::kUInt8, {}, {0})}, {}).ok());
}

// ---- float8 / float4

namespace {

struct SmallFmt {
  DataType dt;
  int mbits, bias;
  uint8_t sign, max_mag;
  bool fnuz;
};
const SmallFmt kSmall[] = {{DataType::kFloat8E4M3FN, 3, 7, 0x80, 0x7e, false},
                           {DataType::kFloat8E4M3FNUZ, 3, 8, 0x80, 0x7f, true},
                           {DataType::kFloat8E5M2, 2, 15, 0x80, 0x7b, false},
                           {DataType::kFloat8E5M2FNUZ, 2, 16, 0x80, 0x7f, true},
                           {DataType::kFloat4E2M1, 1, 1, 0x08, 0x07, false}};

// Value of a non-negative magnitude code (codes up to max_mag + 1, the latter "one step past max").
double mag_value(const SmallFmt& f, int code) {
  const int e = code >> f.mbits, m = code & ((1 << f.mbits) - 1);
  return e == 0 ? std::ldexp(m, 1 - f.bias - f.mbits) : std::ldexp(m + (1 << f.mbits), e - f.bias - f.mbits);
}

// Reference encoder by brute force: nearest code, ties to the even code; one step past the
// largest finite value means overflow.
uint8_t ref_encode(const SmallFmt& f, double x, bool saturate) {
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  const bool beyond = a >= mag_value(f, f.max_mag + 1);
  int best = beyond ? f.max_mag + 1 : 0;
  for (int c = 1; c <= f.max_mag + 1 && !beyond; ++c) {
    const double dc = std::fabs(mag_value(f, c) - a), db = std::fabs(mag_value(f, best) - a);
    if (dc < db || (dc == db && c % 2 == 0)) best = c;
  }
  const uint8_t sign = neg ? f.sign : 0;
  if (best == f.max_mag + 1) {
    if (saturate || f.dt == DataType::kFloat4E2M1) return sign | f.max_mag;
    if (f.fnuz) return 0x80;
    return sign | (f.dt == DataType::kFloat8E5M2 ? 0x7c : 0x7f);
  }
  if (best == 0 && f.fnuz) return 0;
  return static_cast<uint8_t>(sign | best);
}

Tensor codes(DataType dt, const std::vector<uint8_t>& c) {
  Tensor t = Tensor::empty(dt, {static_cast<int64_t>(c.size())});
  for (size_t i = 0; i < c.size(); ++i) t.data<uint8_t>()[i] = c[i];
  return t;
}

}  // namespace

TEST(Quant, SmallFloatKnownValues) {
  struct Known { DataType dt; uint8_t code; double value; };
  const Known known[] = {
      {DataType::kFloat8E4M3FN, 0x7e, 448},     {DataType::kFloat8E4M3FN, 0x38, 1},          {DataType::kFloat8E4M3FN, 0x01, std::ldexp(1, -9)},
      {DataType::kFloat8E4M3FN, 0xb8, -1},      {DataType::kFloat8E4M3FNUZ, 0x7f, 240},      {DataType::kFloat8E4M3FNUZ, 0x40, 1},
      {DataType::kFloat8E5M2, 0x7b, 57344},     {DataType::kFloat8E5M2, 0x3c, 1},            {DataType::kFloat8E5M2, 0x01, std::ldexp(1, -16)},
      {DataType::kFloat8E5M2, 0x7c, INFINITY},  {DataType::kFloat8E5M2FNUZ, 0x40, 1},        {DataType::kFloat8E5M2FNUZ, 0x7f, 57344},
      {DataType::kFloat4E2M1, 0x07, 6},         {DataType::kFloat4E2M1, 0x01, 0.5},          {DataType::kFloat4E2M1, 0x0d, -3},
      {DataType::kFloat8E4M3FN, 0x7f, NAN},     {DataType::kFloat8E4M3FNUZ, 0x80, NAN},      {DataType::kFloat8E5M2FNUZ, 0x80, NAN}};
  for (const Known& k : known) {
    auto y = run("DequantizeLinear", 21, {codes(k.dt, {k.code}), from(DataType::kFloat32, {}, {1})}, {});
    expect_equal(y[0], {1}, {k.value});
  }
}

TEST(Quant, SmallFloatRoundTripAllCodes) {
  for (const SmallFmt& f : kSmall) {
    const int n = f.dt == DataType::kFloat4E2M1 ? 16 : 256;
    std::vector<uint8_t> all;
    for (int c = 0; c < n; ++c) all.push_back(static_cast<uint8_t>(c));
    auto d = run("DequantizeLinear", 21, {codes(f.dt, all), from(DataType::kFloat32, {}, {1})}, {});
    ASSERT_EQ(d[0].numel(), n);
    // Magnitudes increase strictly with the code up to max.
    for (int c = 1; c <= f.max_mag; ++c) EXPECT_LT(get(d[0], c - 1), get(d[0], c)) << dtype_name(f.dt) << " code " << c;
    auto q = run("QuantizeLinear", 21, {d[0], from(DataType::kFloat32, {}, {1}), codes(f.dt, {0}).reshaped({})}, {});
    for (int c = 0; c < n; ++c) {
      const double v = get(d[0], c);
      const uint8_t back = q[0].data<uint8_t>()[c];
      if (std::isnan(v)) continue;
      if (f.fnuz && c == 0x80) continue;
      if (std::isinf(v)) { EXPECT_EQ(back, (c & f.sign) | f.max_mag); continue; }  // saturates
      // ±0 keeps its sign, except float4 which adds the zero point like the reference (-0 + 0 = +0)
      if (f.dt == DataType::kFloat4E2M1 && c == 0x8) { EXPECT_EQ(back, 0); continue; }
      EXPECT_EQ(back, c) << dtype_name(f.dt) << " value " << v;
    }
  }
}

TEST(Quant, SmallFloatRoundingAndSaturation) {
  std::uniform_real_distribution<double> expo(-20, 18), unit(0, 1);
  for (const SmallFmt& f : kSmall) {
    std::vector<double> xs;
    for (int i = 0; i < 400; ++i) xs.push_back((unit(rng()) < 0.5 ? -1 : 1) * std::ldexp(1 + unit(rng()), static_cast<int>(expo(rng()))));
    // exact midpoints between neighbouring codes (ties), and just past the largest value
    for (int c = 0; c < f.max_mag; ++c) xs.push_back((mag_value(f, c) + mag_value(f, c + 1)) / 2);
    xs.push_back((mag_value(f, f.max_mag) + mag_value(f, f.max_mag + 1)) / 2);
    xs.push_back(1e30);
    xs.push_back(-INFINITY);
    std::vector<double> xf;
    for (double v : xs) xf.push_back(static_cast<float>(v));
    Tensor x = from(DataType::kFloat32, {static_cast<int64_t>(xf.size())}, xf);
    for (bool sat : {true, false}) {
      auto y = run("QuantizeLinear", 21, {x, from(DataType::kFloat32, {}, {1}), codes(f.dt, {0}).reshaped({})},
                   {{"saturate", attr_int(sat)}});
      int bad = 0;
      for (size_t i = 0; i < xf.size(); ++i) {
        const uint8_t want = ref_encode(f, xf[i], sat), got = y[0].data<uint8_t>()[i];
        if (want != got && ++bad <= 5)
          ADD_FAILURE() << dtype_name(f.dt) << " saturate=" << sat << " x=" << xf[i] << ": got " << int(got) << " want " << int(want);
      }
    }
  }
}

TEST(Quant, Float8WithScaleAndFloat16Scale) {
  // x / 2 then e4m3fn (saturating): the onnx example.
  Tensor x = from(DataType::kFloat32, {5}, {0, 1, 2, 100000, 200});
  auto y = run("QuantizeLinear", 21, {x, from(DataType::kFloat32, {}, {2}), codes(DataType::kFloat8E4M3FN, {0})}, {});
  auto back = run("DequantizeLinear", 21, {y[0], from(DataType::kFloat16, {}, {2})}, {});
  EXPECT_EQ(back[0].dtype(), DataType::kFloat16);
  expect_equal(back[0], {5}, {0, 1, 2, 896, 192});
}

TEST(Quant, DynamicQuantizeLinear) {
  auto ref = [](const std::vector<float>& x, std::vector<double>& y, float& scale, float& zp) {
    float mx = 0, mn = 0;
    for (float v : x) { mx = std::max(mx, v); mn = std::min(mn, v); }
    scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
    zp = std::nearbyint(std::clamp(-mn / scale, 0.0f, 255.0f));
    y.clear();
    for (float v : x) y.push_back(std::clamp(std::nearbyint(v / scale) + zp, 0.0f, 255.0f));
  };
  const std::vector<std::vector<float>> cases = {{0, 2, -3, -2.5f, 1.34f, 0.5f},
                                                 {-1, -2.1f, -1.3f, -2.5f, -3.34f, -4},
                                                 {1, 2.1f, 1.3f, 2.5f, 3.34f, 4},
                                                 {0, 0, 0}};
  for (const auto& xv : cases) {
    std::vector<double> xd(xv.begin(), xv.end()), want;
    float scale, zp;
    ref(xv, want, scale, zp);
    auto r = run("DynamicQuantizeLinear", 11, {from(DataType::kFloat32, {static_cast<int64_t>(xv.size())}, xd)}, {}, 3);
    expect_equal(r[0], {static_cast<int64_t>(xv.size())}, want);
    expect_equal(r[1], {}, {scale});
    expect_equal(r[2], {}, {zp});
  }
  // The onnx example's exact outputs.
  auto r = run("DynamicQuantizeLinear", 11, {from(DataType::kFloat32, {6}, {0, 2, -3, -2.5, 1.34, 0.5})}, {}, 3);
  expect_equal(r[0], {6}, {153, 255, 0, 26, 221, 179});
  expect_equal(r[2], {}, {153});
  // Random larger input.
  Tensor big = random(DataType::kFloat32, {7, 33}, -3, 5);
  std::vector<float> bv;
  for (int64_t i = 0; i < big.numel(); ++i) bv.push_back(big.data<float>()[i]);
  std::vector<double> want;
  float scale, zp;
  ref(bv, want, scale, zp);
  auto rb = run("DynamicQuantizeLinear", 11, {big}, {}, 3);
  expect_equal(rb[0], {7, 33}, want);
}
