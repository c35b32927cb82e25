// CUDA Cast to and from the small types (float8 variants, float4e2m1, float8e8m0, int4/uint4,
// int2/uint2) against the CPU kernel, which passes onnx's cast tests: outputs must be identical
// bytes (any NaN equal to any NaN), saturate on and off, every e8m0 rounding mode.
#include <gtest/gtest.h>

#include <cstring>

#include "ir/float_types.h"
#include "test_cuda_util.h"

namespace kiln::cudatest {
namespace {

using D = DataType;

bool is_nan_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case D::kFloat32: return std::isnan(t.data<float>()[i]);
    case D::kFloat16: return std::isnan(f16_to_f32(t.data<uint16_t>()[i]));
    default: return false;
  }
}

// Values that exercise rounding, saturation, NaN and infinities (float sources), or every code.
Tensor source(D dt, std::mt19937& rng) {
  const int64_t n = 512;
  Tensor t = Tensor::empty(dt, {n});
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t i = 0; i < n; ++i) {
    float v = u(rng) * std::ldexp(1.f, static_cast<int>(i % 40) - 20);
    if (i % 97 == 0) v = NAN;
    if (i % 101 == 0) v = i % 2 ? INFINITY : -INFINITY;
    if (i % 89 == 0) v = 1e6f;
    switch (dt) {
      case D::kFloat32: t.data<float>()[i] = v; break;
      case D::kFloat16: t.data<uint16_t>()[i] = f32_to_f16(v); break;
      case D::kInt8: t.data<int8_t>()[i] = static_cast<int8_t>(byte(rng)); break;
      case D::kUInt8: t.data<uint8_t>()[i] = static_cast<uint8_t>(byte(rng)); break;
      case D::kInt4: t.data<int8_t>()[i] = static_cast<int8_t>(byte(rng) % 16 - 8); break;
      case D::kInt2: t.data<int8_t>()[i] = static_cast<int8_t>(byte(rng) % 4 - 2); break;
      case D::kUInt4: t.data<uint8_t>()[i] = static_cast<uint8_t>(byte(rng) % 16); break;
      case D::kUInt2: t.data<uint8_t>()[i] = static_cast<uint8_t>(byte(rng) % 4); break;
      case D::kFloat4E2M1: t.data<uint8_t>()[i] = static_cast<uint8_t>(byte(rng) % 16); break;
      default: t.data<uint8_t>()[i] = static_cast<uint8_t>(i % 256); break;  // every float8 code
    }
  }
  return t;
}

TEST(CudaCast, SmallTypesMatchTheCpuKernel) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(31);
  const std::vector<D> common = {D::kFloat32, D::kFloat16, D::kInt8, D::kUInt8};
  const std::vector<D> small = {D::kFloat8E4M3FN, D::kFloat8E4M3FNUZ, D::kFloat8E5M2, D::kFloat8E5M2FNUZ,
                                D::kFloat4E2M1,   D::kFloat8E8M0,     D::kInt4,       D::kUInt4,
                                D::kInt2,         D::kUInt2};
  int pairs = 0;
  for (D a : common)
    for (D b : small)
      for (int dir = 0; dir < 2; ++dir)
        for (int saturate = 0; saturate < 2; ++saturate)
          for (const char* round : {"up", "down", "nearest"}) {
            const D from = dir ? b : a, to = dir ? a : b;
            if (std::string(round) != "up" && to != D::kFloat8E8M0) continue;
            Tensor x = source(from, rng);
            OneNode n("Cast", 24, {x});
            n.set_int("to", static_cast<int>(to));
            n.set_int("saturate", saturate);
            n.set_string("round_mode", round);
            const std::string what = std::string(dtype_name(from)) + " -> " + dtype_name(to) + " saturate " +
                                     std::to_string(saturate) + " round " + round;
            auto got = run_cuda(*n.node, {x});
            ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
            auto want = run_node_eager(*n.node, {Slot::of(x)});
            ASSERT_TRUE(want.ok()) << what << ": " << want.status().to_string();
            const Tensor& g = (*got)[0];
            const Tensor& w = (*want)[0].tensor;
            ASSERT_EQ(g.dtype(), w.dtype()) << what;
            ASSERT_EQ(g.shape(), w.shape()) << what;
            const size_t es = dtype_size(w.dtype());
            int bad = 0;
            for (int64_t i = 0; i < w.numel() && bad < 3; ++i) {
              const auto* gp = static_cast<const uint8_t*>(g.raw()) + i * es;
              const auto* wp = static_cast<const uint8_t*>(w.raw()) + i * es;
              if (std::memcmp(gp, wp, es) == 0 || (is_nan_at(g, i) && is_nan_at(w, i))) continue;
              ADD_FAILURE() << what << ": element " << i << " differs";
              ++bad;
            }
            ++pairs;
          }
  EXPECT_GE(pairs, 160);
}

}  // namespace
}  // namespace kiln::cudatest
