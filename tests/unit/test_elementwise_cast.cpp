// Cast and CastLike: small-float bit patterns (checked against onnx's reference, i.e. ml_dtypes),
// integer wrapping, int4/uint4, float16/bfloat16 round trips and string formats.
#include <cmath>
#include <limits>

#include "test_elementwise_util.h"

using namespace kiln;
using namespace kiln::ewtest;

namespace {

Expected<Tensor> cast(const Tensor& x, DataType to, int saturate = -1, int opset = 21) {
  std::map<std::string, ir::Attribute> attrs = {{"to", attr_i(static_cast<int64_t>(to))}};
  if (saturate >= 0) attrs["saturate"] = attr_i(saturate);
  return run("Cast", {x}, attrs, opset);
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
// Inputs of the table below.
const std::vector<float> kVals = {0,    -0.f, kNaN,  kInf,  -kInf, 448,   464,   465,   500,   -1000, 57344, 61440,
                                  61441, 1e6f, 240,   241,   248,   6,     7,     1e-10f, -1e-10f, 0.25f, 0.3f, 100000};

struct Expect8 {
  DataType dt;
  std::vector<uint8_t> plain, sat;
};

// Produced by numpy's astype to ml_dtypes (plain) and np.clip(x, finfo.min, finfo.max).astype (sat),
// exactly what onnx.reference's Cast does.
const std::vector<Expect8> kTable = {
    {DataType::kFloat8E4M3FN,
     {0x0, 0x80, 0x7f, 0x7f, 0xff, 0x7e, 0x7e, 0x7f, 0x7f, 0xff, 0x7f, 0x7f, 0x7f, 0x7f, 0x77, 0x77, 0x78, 0x4c, 0x4e, 0x0, 0x80, 0x28, 0x2a, 0x7f},
     {0x0, 0x80, 0x7f, 0x7e, 0xfe, 0x7e, 0x7e, 0x7e, 0x7e, 0xfe, 0x7e, 0x7e, 0x7e, 0x7e, 0x77, 0x77, 0x78, 0x4c, 0x4e, 0x0, 0x80, 0x28, 0x2a, 0x7e}},
    {DataType::kFloat8E4M3FNUZ,
     {0x0, 0x0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f, 0x7f, 0x80, 0x54, 0x56, 0x0, 0x0, 0x30, 0x32, 0x80},
     {0x0, 0x0, 0x80, 0x7f, 0xff, 0x7f, 0x7f, 0x7f, 0x7f, 0xff, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x54, 0x56, 0x0, 0x0, 0x30, 0x32, 0x7f}},
    {DataType::kFloat8E5M2,
     {0x0, 0x80, 0x7e, 0x7c, 0xfc, 0x5f, 0x5f, 0x5f, 0x60, 0xe4, 0x7b, 0x7c, 0x7c, 0x7c, 0x5c, 0x5c, 0x5c, 0x46, 0x47, 0x0, 0x80, 0x34, 0x35, 0x7c},
     {0x0, 0x80, 0x7e, 0x7b, 0xfb, 0x5f, 0x5f, 0x5f, 0x60, 0xe4, 0x7b, 0x7b, 0x7b, 0x7b, 0x5c, 0x5c, 0x5c, 0x46, 0x47, 0x0, 0x80, 0x34, 0x35, 0x7b}},
    {DataType::kFloat8E5M2FNUZ,
     {0x0, 0x0, 0x80, 0x80, 0x80, 0x63, 0x63, 0x63, 0x64, 0xe8, 0x7f, 0x80, 0x80, 0x80, 0x60, 0x60, 0x60, 0x4a, 0x4b, 0x0, 0x0, 0x38, 0x39, 0x80},
     {0x0, 0x0, 0x80, 0x7f, 0xff, 0x63, 0x63, 0x63, 0x64, 0xe8, 0x7f, 0x7f, 0x7f, 0x7f, 0x60, 0x60, 0x60, 0x4a, 0x4b, 0x0, 0x0, 0x38, 0x39, 0x7f}},
    {DataType::kFloat4E2M1,
     {0x0, 0x8, 0x8, 0x7, 0xf, 0x7, 0x7, 0x7, 0x7, 0xf, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x0, 0x8, 0x0, 0x1, 0x7},
     {0x0, 0x8, 0x8, 0x7, 0xf, 0x7, 0x7, 0x7, 0x7, 0xf, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x0, 0x8, 0x0, 0x1, 0x7}},
};

std::vector<uint8_t> bytes(const Tensor& t) { return values<uint8_t>(t); }

}  // namespace

TEST(CastSmallFloat, KnownBitPatterns) {
  const Shape s = {static_cast<int64_t>(kVals.size())};
  for (const Expect8& e : kTable) {
    auto plain = cast(f32(s, kVals), e.dt, 0, 23);
    auto sat = cast(f32(s, kVals), e.dt, 1, 23);
    ASSERT_TRUE(plain.ok() && sat.ok()) << plain.status().to_string();
    ASSERT_EQ(plain->dtype(), e.dt);
    for (size_t i = 0; i < kVals.size(); ++i) {
      EXPECT_EQ(bytes(*plain)[i], e.plain[i]) << dtype_name(e.dt) << " x=" << kVals[i];
      EXPECT_EQ(bytes(*sat)[i], e.sat[i]) << dtype_name(e.dt) << " saturate x=" << kVals[i];
    }
  }
}

// The branch-free saturating float16 conversion a half engine's constants get (passes/precision.cpp)
// against the scalar path on the clamped value: every 1021st float bit pattern (4.2 million, every
// exponent, the mantissas' low bits included) and the edges by name.
TEST(CastSmallFloat, SaturatedHalfMatchesTheScalarPath) {
  auto scalar = [](float v) {
    if (std::isfinite(v)) v = std::fmin(std::fmax(v, -65504.f), 65504.f);
    return f32_to_f16(v);
  };
  int64_t bad = 0;
  uint32_t first = 0;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 1021) {
    const float v = bits_f32(static_cast<uint32_t>(b));
    if (f32_to_f16_saturated(v) != scalar(v) && bad++ == 0) first = static_cast<uint32_t>(b);
  }
  EXPECT_EQ(bad, 0) << "first at bits 0x" << std::hex << first;
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -1e30f, inf, -inf, std::nanf(""), 5.96e-8f, 2.98e-8f, 2.99e-8f,
                  -6.1e-5f, 6.103515625e-05f, 1e-45f, 0.1f, -2.5f})
    EXPECT_EQ(f32_to_f16_saturated(v), scalar(v)) << v;
  EXPECT_EQ(f32_to_f16_saturated(1e30f), 0x7bff);
  EXPECT_EQ(f32_to_f16_saturated(-inf), 0xfc00);
}

TEST(CastSmallFloat, EveryCodeRoundTrips) {
  for (DataType dt : {DataType::kFloat8E4M3FN, DataType::kFloat8E4M3FNUZ, DataType::kFloat8E5M2,
                      DataType::kFloat8E5M2FNUZ, DataType::kFloat4E2M1}) {
    const int ncodes = dt == DataType::kFloat4E2M1 ? 16 : 256;
    std::vector<uint8_t> codes(ncodes);
    for (int i = 0; i < ncodes; ++i) codes[i] = static_cast<uint8_t>(i);
    auto dec = cast(make(dt, {ncodes}, codes), DataType::kFloat32);
    ASSERT_TRUE(dec.ok()) << dec.status().to_string();
    auto enc = cast(*dec, dt, 0);
    ASSERT_TRUE(enc.ok());
    for (int i = 0; i < ncodes; ++i) {
      const float v = dec->data<float>()[i];
      if (std::isnan(v)) continue;
      if (v == 0 && (dt == DataType::kFloat8E4M3FNUZ || dt == DataType::kFloat8E5M2FNUZ)) continue;
      EXPECT_EQ(bytes(*enc)[i], codes[i]) << dtype_name(dt) << " code " << i << " value " << v;
    }
  }
  // A few decoded values.
  auto d = cast(make<uint8_t>(DataType::kFloat8E4M3FN, {4}, {0x7e, 0x01, 0x38, 0xb8}), DataType::kFloat32);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(values<float>(*d), (std::vector<float>{448.f, 0.001953125f, 1.f, -1.f}));
  auto e = cast(make<uint8_t>(DataType::kFloat8E5M2, {3}, {0x7b, 0x7c, 0x3c}), DataType::kFloat32);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(values<float>(*e), (std::vector<float>{57344.f, kInf, 1.f}));
}

TEST(CastSmallFloat, E8M0RoundingModes) {
  const std::vector<float> x = {0.f, 0.124f, 0.25f, 0.5f, 1.1f, 2.f, 3.f, kNaN, kInf, 3e38f};
  auto up = cast(f32({10}, x), DataType::kFloat8E8M0, 1, 24);
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(bytes(*up), (std::vector<uint8_t>{0x00, 0x7c, 0x7d, 0x7e, 0x80, 0x80, 0x81, 0xff, 0xff, 0xfe}));
  auto back = cast(*up, DataType::kFloat32);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data<float>()[1], 0.125f);
  EXPECT_EQ(back->data<float>()[0], std::ldexp(1.f, -127));
  auto nearest = run("Cast", {f32({3}, {3.f, 2.9f, 1.4f})},
                     {{"to", attr_i(24)}, {"round_mode", attr_s("nearest")}}, 24);
  ASSERT_TRUE(nearest.ok());
  EXPECT_EQ(bytes(*nearest), (std::vector<uint8_t>{0x81, 0x80, 0x7f}));
}

TEST(CastInt4, WrapsLikeReference) {
  const std::vector<float> x = {-9, -8, -7, -1, 0, 7, 8, 15, 16, 3.5f, 2.5f};
  auto i4 = cast(f32({11}, x), DataType::kInt4, -1, 25);
  auto u4 = cast(f32({11}, x), DataType::kUInt4, -1, 25);
  ASSERT_TRUE(i4.ok() && u4.ok());
  EXPECT_EQ(values<int8_t>(*i4), (std::vector<int8_t>{7, -8, -7, -1, 0, 7, -8, -1, 0, 3, 2}));
  EXPECT_EQ(values<uint8_t>(*u4), (std::vector<uint8_t>{7, 8, 9, 15, 0, 7, 8, 15, 0, 3, 2}));
  auto back = cast(*i4, DataType::kInt8, -1, 25);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(values<int8_t>(*back), values<int8_t>(*i4));
}

TEST(CastInt2, WrapsLikeReference) {
  // Expected values from numpy's astype to ml_dtypes.int2 / uint2 (what onnx's reference does).
  const std::vector<float> x = {-5, -3, -2, -1, 0, 1, 2, 3, 4, 1.5f, -1.5f, 2.5f};
  auto i2 = cast(f32({12}, x), DataType::kInt2, -1, 25);
  auto u2 = cast(f32({12}, x), DataType::kUInt2, -1, 25);
  ASSERT_TRUE(i2.ok() && u2.ok()) << i2.status().to_string();
  ASSERT_EQ(i2->dtype(), DataType::kInt2);
  EXPECT_EQ(values<int8_t>(*i2), (std::vector<int8_t>{-1, 1, -2, -1, 0, 1, -2, -1, 0, 1, -1, -2}));
  EXPECT_EQ(values<uint8_t>(*u2), (std::vector<uint8_t>{3, 1, 2, 3, 0, 1, 2, 3, 0, 1, 3, 2}));
  // Back to wider types: int2 sign-extends, uint2 does not; int2 → uint2 wraps.
  auto back = cast(*i2, DataType::kFloat32, -1, 25);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(values<float>(*back), (std::vector<float>{-1, 1, -2, -1, 0, 1, -2, -1, 0, 1, -1, -2}));
  auto u8 = cast(*u2, DataType::kUInt8, -1, 25);
  ASSERT_TRUE(u8.ok());
  EXPECT_EQ(values<uint8_t>(*u8), values<uint8_t>(*u2));
  auto wrapped = cast(*i2, DataType::kUInt2, -1, 25);
  ASSERT_TRUE(wrapped.ok());
  EXPECT_EQ(values<uint8_t>(*wrapped), (std::vector<uint8_t>{3, 1, 2, 3, 0, 1, 2, 3, 0, 1, 3, 2}));
  auto s = cast(*i2, DataType::kString, -1, 25);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->data<std::string>()[2], "-2");
}

TEST(CastNumeric, FloatToIntegerAndBack) {
  auto u8 = cast(f32({5}, {200, 300, -1, 3.7f, -3.7f}), DataType::kUInt8);
  ASSERT_TRUE(u8.ok());
  EXPECT_EQ(values<uint8_t>(*u8), (std::vector<uint8_t>{200, 44, 255, 3, 253}));
  auto i32 = cast(make<double>(DataType::kFloat64, {3}, {-2.9, 2.9, 1e9}), DataType::kInt32);
  ASSERT_TRUE(i32.ok());
  EXPECT_EQ(values<int32_t>(*i32), (std::vector<int32_t>{-2, 2, 1000000000}));
  auto big = cast(make<int64_t>(DataType::kInt64, {2}, {INT64_MAX, -5}), DataType::kUInt64);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(values<uint64_t>(*big), (std::vector<uint64_t>{static_cast<uint64_t>(INT64_MAX), static_cast<uint64_t>(-5)}));
  auto same64 = cast(make<int64_t>(DataType::kInt64, {1}, {INT64_MAX}), DataType::kInt64);
  ASSERT_TRUE(same64.ok());
  EXPECT_EQ(values<int64_t>(*same64)[0], INT64_MAX);
  auto b = cast(f32({3}, {0, -0.5f, kNaN}), DataType::kBool);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(values<bool>(*b), (std::vector<bool>{false, true, true}));
  auto fb = cast(boolean({2}, {true, false}), DataType::kFloat32);
  ASSERT_TRUE(fb.ok());
  EXPECT_EQ(values<float>(*fb), (std::vector<float>{1, 0}));
}

TEST(CastNumeric, Float16AndBFloat16RoundTrips) {
  auto v = random_floats(1000, -1000, 1000, 11);
  v[0] = 65504.f;
  v[1] = 65520.f;  // rounds to inf in float16
  v[2] = 1e-7f;    // float16 subnormal
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    auto h = cast(f32({1000}, v), dt);
    ASSERT_TRUE(h.ok());
    auto back = cast(*h, DataType::kFloat32);
    ASSERT_TRUE(back.ok());
    auto again = cast(*back, dt);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(values<uint16_t>(*again), values<uint16_t>(*h));
    for (int i = 3; i < 1000; ++i) {
      const float got = back->data<float>()[i];
      EXPECT_NEAR(got, v[i], std::fabs(v[i]) * (dt == DataType::kFloat16 ? 1e-3 : 8e-3)) << v[i];
    }
    auto d = cast(*h, DataType::kFloat64);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(static_cast<float>(d->data<double>()[5]), back->data<float>()[5]);
  }
  auto h = cast(f32({3}, {65504.f, 65520.f, 1e-7f}), DataType::kFloat16);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(values<uint16_t>(*h), (std::vector<uint16_t>{0x7bff, 0x7c00, 0x0002}));
}

TEST(CastString, FormatsLikeNumpy) {
  auto s = cast(f32({10}, {0.47892547f, 1.f, 100.f, 1e-5f, 1.5e16f, -2.25f, kNaN, -kInf, 0.0001f, 123456.78f}),
                DataType::kString);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(values<std::string>(*s), (std::vector<std::string>{"0.47892547", "1.0", "100.0", "1e-05", "1.5e+16", "-2.25",
                                                               "nan", "-inf", "1e-04", "123456.78"}));
  auto i = cast(i64({2}, {-42, 7}), DataType::kString);
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(values<std::string>(*i), (std::vector<std::string>{"-42", "7"}));
  Tensor h = Tensor::empty(DataType::kFloat16, {1});
  h.data<uint16_t>()[0] = f32_to_f16(0.1f);
  auto hs = cast(h, DataType::kString);
  ASSERT_TRUE(hs.ok());
  EXPECT_EQ(values<std::string>(*hs)[0], "0.1");
  auto b = cast(boolean({2}, {true, false}), DataType::kString);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(values<std::string>(*b), (std::vector<std::string>{"True", "False"}));
}

TEST(CastString, ParsesNumbers) {
  auto strs = make<std::string>(DataType::kString, {5}, {"0.5", "-1e3", "NaN", "-INF", "+inf"});
  auto f = cast(strs, DataType::kFloat32);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto v = values<float>(*f);
  EXPECT_EQ(v[0], 0.5f);
  EXPECT_EQ(v[1], -1000.f);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[3], -kInf);
  EXPECT_EQ(v[4], kInf);
  auto i = cast(make<std::string>(DataType::kString, {3}, {"12", "-7", "9223372036854775807"}), DataType::kInt64);
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(values<int64_t>(*i), (std::vector<int64_t>{12, -7, INT64_MAX}));
  auto f8 = cast(make<std::string>(DataType::kString, {1}, {"448"}), DataType::kFloat8E4M3FN);
  ASSERT_TRUE(f8.ok());
  EXPECT_EQ(bytes(*f8)[0], 0x7e);
}

TEST(CastLike, TakesTheSecondInputsDtype) {
  auto out = run("CastLike", {f32({3}, {1.5f, -2.f, 3.f}), i32({1}, {0})}, {}, 21);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->dtype(), DataType::kInt32);
  EXPECT_EQ(values<int32_t>(*out), (std::vector<int32_t>{1, -2, 3}));
  auto f8 = run("CastLike", {f32({1}, {1e6f}), make<uint8_t>(DataType::kFloat8E4M3FN, {1}, {0})},
                {{"saturate", attr_i(0)}}, 21);
  ASSERT_TRUE(f8.ok());
  EXPECT_EQ(bytes(*f8)[0], 0x7f);
}
