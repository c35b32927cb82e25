// com.microsoft MatMulNBits on CUDA (cuda_nbits.cu, cuda_gemm.cpp) against a naive reference in double
// (the layout as the CPU kernel reads it, which test_contrib_quant.cpp and tests/python/
// test_contrib_quant.py check against a reference and onnxruntime) on random 4-bit weights: float32,
// float16 and bfloat16; packed, float and no zero points; a bias or none; K not a multiple of 16, 32 or
// of the block; the fused rows (M <= 8; rows of W a multiple of 16 bytes or not) and the dequantizing GEMM past them
// (each of cuBLASLt's candidates). Reduced-precision runs round A, scales, float zero points and bias
// to the type first and give the reference the rounded values; past 8 rows the reference rounds W to
// the type too, as the GEMM path multiplies W in it (the fused rows dequantize in float32).
#include <cmath>
#include <random>

#include "backends/cuda/cuda_nbits.h"  // kNBitsFusedRows
#include "ir/float_types.h"
#include "test_cuda_util.h"

using namespace kiln;
using namespace kiln::cudatest;

namespace {

enum class Zp { kNone, kPacked, kFloat };

struct Case {
  int64_t M, K, N, block;
  Zp zp;
  bool bias;
};

Tensor bytes(const Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(DataType::kUInt8, shape);
  std::uniform_int_distribution<int> d(0, 255);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(d(rng));
  return t;
}

// x (float32) rounded to `dt` (float32: itself), and back to float32 into `rounded`.
Tensor as_type(const Tensor& x, DataType dt, Tensor& rounded) {
  if (dt == DataType::kFloat32) {
    rounded = x;
    return x;
  }
  Tensor y = Tensor::empty(dt, x.shape());
  rounded = Tensor::empty(DataType::kFloat32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data<float>()[i];
    const uint16_t h = dt == DataType::kFloat16 ? f32_to_f16(v) : f32_to_bf16(v);
    y.data<uint16_t>()[i] = h;
    rounded.data<float>()[i] = dt == DataType::kFloat16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
  return y;
}

struct Node {
  OneNode one;
  Node(const std::vector<Tensor>& in, const Case& c) : one("MatMulNBits", 1, in) {
    one.node->domain = "com.microsoft";
    one.set_int("K", c.K);
    one.set_int("N", c.N);
    one.set_int("bits", 4);
    one.set_int("block_size", c.block);
  }
};

double round_to(double v, DataType dt) {
  if (dt == DataType::kFloat16) return f16_to_f32(f32_to_f16(static_cast<float>(v)));
  if (dt == DataType::kBFloat16) return bf16_to_f32(f32_to_bf16(static_cast<float>(v)));
  return static_cast<float>(v);
}

// Y [M, N] in double from the float32 (rounded) inputs: W = (q - z) · s, rounded to `w_type`.
std::vector<double> reference(const Case& c, const std::vector<Tensor>& in, DataType w_type) {
  const int64_t blocks = (c.K + c.block - 1) / c.block, zp_row = (blocks + 1) / 2;
  const uint8_t* q = in[1].data<uint8_t>();
  const float* s = in[2].data<float>();
  std::vector<double> y(c.M * c.N);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t k = 0; k < c.K; ++k) {
      const int64_t blk = k / c.block;
      const uint8_t byte = q[n * blocks * (c.block / 2) + k / 2];
      const double v = (k % 2 == 0) ? (byte & 15) : (byte >> 4);
      double z = 8;
      if (c.zp == Zp::kPacked) z = (in[3].data<uint8_t>()[n * zp_row + blk / 2] >> ((blk % 2) * 4)) & 15;
      if (c.zp == Zp::kFloat) z = in[3].data<float>()[n * blocks + blk];
      const double w = round_to((v - z) * s[n * blocks + blk], w_type);
      for (int64_t m = 0; m < c.M; ++m) y[m * c.N + n] += w * in[0].data<float>()[m * c.K + k];
    }
  if (c.bias)
    for (int64_t i = 0; i < c.M * c.N; ++i) y[i] += in[5].data<float>()[i % c.N];
  return y;
}

// Runs the case on CUDA in `dt` (with `tactic`) and compares with the reference.
void check(const Case& c, DataType dt, std::mt19937& rng, const std::string& tactic = {}) {
  const int64_t blocks = (c.K + c.block - 1) / c.block;
  std::vector<Tensor> cpu(3), dev(3);
  Tensor a = random_tensor({c.M, c.K}, rng, -1.f, 1.f);
  dev[0] = as_type(a, dt, cpu[0]);
  dev[1] = cpu[1] = bytes({c.N, blocks, c.block / 2}, rng);
  dev[2] = as_type(random_tensor({c.N * blocks}, rng, 0.01f, 0.2f), dt, cpu[2]);
  if (c.zp != Zp::kNone || c.bias) {
    cpu.resize(4), dev.resize(4);
    if (c.zp == Zp::kPacked) dev[3] = cpu[3] = bytes({c.N * ((blocks + 1) / 2)}, rng);
    if (c.zp == Zp::kFloat) dev[3] = as_type(random_tensor({c.N, blocks}, rng, 0.f, 15.f), dt, cpu[3]);
  }
  if (c.bias) {
    cpu.resize(6), dev.resize(6);
    dev[5] = as_type(random_tensor({c.N}, rng), dt, cpu[5]);
  }
  const std::string label = std::string(dtype_name(dt)) + " M " + std::to_string(c.M) + " K " + std::to_string(c.K) + " N " +
                            std::to_string(c.N) + " block " + std::to_string(c.block) + " zp " +
                            std::to_string(static_cast<int>(c.zp)) + (c.bias ? " bias" : "") + (tactic.empty() ? "" : " " + tactic);
  Node dn(dev, c);
  auto got = run_cuda(*dn.one.node, dev, tactic);
  ASSERT_TRUE(got.ok()) << label << ": " << got.status().to_string();
  const std::vector<double> want = reference(c, cpu, c.M > cuda::kNBitsFusedRows ? dt : DataType::kFloat32);
  const Tensor& g = (*got)[0];
  ASSERT_EQ(g.dtype(), dt) << label;
  ASSERT_EQ(g.shape(), (Shape{c.M, c.N})) << label;
  // float32 sums of K products (values up to ~3), and half outputs rounded once at the end.
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  const double tol = dt == DataType::kFloat32 ? 2e-5 : dt == DataType::kFloat16 ? 2e-3 : 1e-2;
  int bad = 0;
  for (int64_t i = 0; i < g.numel() && bad < 5; ++i) {
    const double gv = element(g, i), wv = want[i];
    if (!(std::fabs(gv - wv) <= tol * (std::fabs(wv) + 0.01 * scale))) {
      ADD_FAILURE() << label << " element " << i << ": got " << gv << ", want " << wv;
      ++bad;
    }
  }
}

}  // namespace

TEST(CudaNBits, MatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(7);
  const Case cases[] = {
      // The fused rows: M 1..8, rows of W a multiple of 16 bytes or not (block 16 with an odd number of
      // blocks), A's rows a multiple of 4 values or not, K past one slice of 1024, N not a multiple of
      // a block's 16 rows, blocks of 16 to 256.
      {1, 64, 40, 32, Zp::kPacked, false},  {2, 64, 40, 16, Zp::kFloat, true},    {3, 72, 33, 32, Zp::kPacked, true},
      {4, 50, 20, 16, Zp::kNone, false},    {5, 33, 17, 16, Zp::kPacked, false},  {1, 512, 600, 128, Zp::kNone, true},
      {7, 200, 70, 64, Zp::kFloat, false},  {8, 1024, 96, 256, Zp::kPacked, true}, {1, 4096, 257, 32, Zp::kPacked, false},
      {6, 1100, 9, 16, Zp::kNone, false},   {3, 2085, 31, 32, Zp::kFloat, true},   {8, 3000, 50, 16, Zp::kPacked, true},
      // The dequantizing GEMM: M 9 and more, K a multiple of 16 or not.
      {9, 48, 31, 16, Zp::kNone, true},     {12, 96, 40, 32, Zp::kPacked, true},   {16, 1040, 65, 64, Zp::kFloat, false},
      {17, 600, 37, 32, Zp::kPacked, true}, {65, 130, 259, 128, Zp::kFloat, false}, {33, 1024, 512, 64, Zp::kNone, true},
      {20, 64, 2049, 32, Zp::kPacked, false}};
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16})
    for (const Case& c : cases) check(c, dt, rng);
}

TEST(CudaNBits, EveryGemmTacticMatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(11);
  const Case c{40, 256, 96, 32, Zp::kPacked, true};
  Tensor rounded;  // the probe has the case's inputs (zero points, bias): the plan its tactics come from
  const int64_t blocks = c.K / c.block;
  std::vector<Tensor> probe = {as_type(random_tensor({c.M, c.K}, rng), DataType::kFloat16, rounded),
                               bytes({c.N, blocks, c.block / 2}, rng),
                               as_type(random_tensor({c.N * blocks}, rng), DataType::kFloat16, rounded),
                               bytes({c.N * ((blocks + 1) / 2)}, rng),
                               Tensor(),
                               as_type(random_tensor({c.N}, rng), DataType::kFloat16, rounded)};
  Node n(probe, c);
  std::vector<std::string> tactics;
  ASSERT_TRUE(run_cuda(*n.one.node, probe, {}, &tactics).ok());
  ASSERT_FALSE(tactics.empty()) << "the GEMM path offers cuBLASLt's candidates";
  for (const std::string& t : tactics) check(c, DataType::kFloat16, rng, t);
}

TEST(CudaNBits, BadInputsAreClearErrors) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(3);
  const Case c{2, 64, 8, 32, Zp::kNone, false};
  std::vector<Tensor> in = {random_tensor({2, 64}, rng), bytes({8, 2, 15}, rng), random_tensor({16}, rng)};
  Node n(in, c);
  auto r = run_cuda(*n.one.node, in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("B must have 256 elements"), std::string::npos) << r.status().to_string();
  in = {random_tensor({2, 64}, rng), bytes({8, 2, 16}, rng), Tensor::empty(DataType::kFloat16, {16})};
  Node m(in, c);
  r = run_cuda(*m.one.node, in);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("scales has dtype float16"), std::string::npos) << r.status().to_string();
}
