// com.microsoft MatMulNBits (backends/cpu/contrib_quant.cpp) against a naive reference on random 4-bit
// weights: packed and float zero points, none, a bias, K not a multiple of the block, N across several of
// the kernel's chunks, few rows of A (the fused pass) and more (the panel GEMM); and clear errors for inputs of the wrong size. (The QLinear ops are lowered to
// ai.onnx ops and checked against onnxruntime in tests/python/test_contrib_quant.py.)
#include "test_rq_util.h"

using namespace rqtest;

namespace {

enum class Zp { kNone, kPacked, kFloat };

struct NBitsCase {
  int64_t M, K, N, block;
  Zp zp;
  bool bias;
};

Attrs nbits_attrs(int64_t K, int64_t N, int64_t block) {
  return {{"K", attr_int(K)}, {"N", attr_int(N)}, {"bits", attr_int(4)}, {"block_size", attr_int(block)}};
}

// The inputs of a random case, and the reference Y = A · Wᵀ (+ bias) in double.
std::vector<Tensor> nbits_inputs(const NBitsCase& c, std::vector<double>& want) {
  const int64_t blocks = (c.K + c.block - 1) / c.block, blob = c.block / 2, zp_row = (blocks + 1) / 2;
  Tensor a = random(DataType::kFloat32, {c.M, c.K});
  Tensor b = random(DataType::kUInt8, {c.N, blocks, blob}, 0, 255);
  Tensor s = random(DataType::kFloat32, {c.N * blocks}, 0.01, 0.2);
  Tensor zp;
  if (c.zp == Zp::kPacked) zp = random(DataType::kUInt8, {c.N * zp_row}, 0, 255);
  if (c.zp == Zp::kFloat) zp = random(DataType::kFloat32, {c.N, blocks}, 0, 15);
  Tensor bias = c.bias ? random(DataType::kFloat32, {c.N}) : Tensor();
  want.assign(static_cast<size_t>(c.M * c.N), 0.0);
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t k = 0; k < c.K; ++k) {
      const int64_t blk = k / c.block, j = k % c.block;
      const int byte = static_cast<int>(get(b, (n * blocks + blk) * blob + j / 2));
      const int q = j % 2 ? byte >> 4 : byte & 15;
      double z = 8;
      if (c.zp == Zp::kPacked) {
        const int zb = static_cast<int>(get(zp, n * zp_row + blk / 2));
        z = blk % 2 ? zb >> 4 : zb & 15;
      }
      if (c.zp == Zp::kFloat) z = get(zp, n * blocks + blk);
      const double w = (q - z) * get(s, n * blocks + blk);
      for (int64_t m = 0; m < c.M; ++m) want[m * c.N + n] += get(a, m * c.K + k) * w;
    }
  if (c.bias)
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) want[m * c.N + n] += get(bias, n);
  return {a, b, s, zp, Tensor(), bias};
}

}  // namespace

TEST(ContribQuant, MatMulNBitsMatchesReference) {
  const NBitsCase cases[] = {{1, 64, 40, 32, Zp::kPacked, false},  {4, 64, 40, 16, Zp::kFloat, true},
                             {3, 72, 33, 32, Zp::kPacked, true},   {2, 50, 20, 16, Zp::kNone, false},
                             {5, 33, 17, 16, Zp::kPacked, false},  {1, 512, 600, 128, Zp::kNone, true},
                             {7, 200, 70, 64, Zp::kFloat, false},
                             // The panel GEMM (M > 4): row and column tails of its tiles, K' past one chunk
                             // of 512, several panels per thread.
                             {17, 600, 37, 32, Zp::kPacked, true}, {65, 130, 259, 128, Zp::kFloat, false},
                             {6, 1100, 9, 16, Zp::kNone, false},   {13, 64, 2049, 32, Zp::kPacked, false}};
  for (const NBitsCase& c : cases) {
    std::vector<double> want;
    std::vector<Tensor> in = nbits_inputs(c, want);
    while (!in.back().defined()) in.pop_back();
    auto y = run("MatMulNBits", 1, in, nbits_attrs(c.K, c.N, c.block), 1, {}, "com.microsoft");
    SCOPED_TRACE("M " + std::to_string(c.M) + " K " + std::to_string(c.K) + " N " + std::to_string(c.N));
    expect_close(y[0], {c.M, c.N}, want, 1e-4, 1e-4);
  }
}

TEST(ContribQuant, MatMulNBitsBatchedA) {
  NBitsCase c{6, 64, 24, 32, Zp::kPacked, false};
  std::vector<double> want;
  std::vector<Tensor> in = nbits_inputs(c, want);
  in.resize(4);
  in[0] = from(DataType::kFloat32, {2, 3, 64}, values(in[0]));
  auto y = run("MatMulNBits", 1, in, nbits_attrs(64, 24, 32), 1, {}, "com.microsoft");
  expect_close(y[0], {2, 3, 24}, want, 1e-4, 1e-4);
}

TEST(ContribQuant, MatMulNBitsBadInputsAreClearErrors) {
  NBitsCase c{2, 64, 8, 32, Zp::kPacked, false};
  std::vector<double> want;
  std::vector<Tensor> in = nbits_inputs(c, want);
  in.resize(4);
  auto expect_error = [](std::vector<Tensor> inputs, const Attrs& attrs, const std::string& text) {
    auto r = try_run("MatMulNBits", 1, inputs, attrs, 1, {}, "com.microsoft");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().to_string().find(text), std::string::npos) << r.status().to_string();
  };
  std::vector<Tensor> bad = in;
  bad[1] = random(DataType::kUInt8, {8, 2, 15}, 0, 255);
  expect_error(bad, nbits_attrs(64, 8, 32), "B must have 256 elements");
  bad = in;
  bad[2] = random(DataType::kFloat32, {8});
  expect_error(bad, nbits_attrs(64, 8, 32), "scales must have 16 elements");
  bad = in;
  bad[3] = random(DataType::kUInt8, {16}, 0, 255);
  expect_error(bad, nbits_attrs(64, 8, 32), "zero_points must have 8 elements");
  bad = in;
  bad[0] = random(DataType::kFloat32, {2, 60});
  expect_error(bad, nbits_attrs(64, 8, 32), "K = 64");
  bad = in;
  bad.push_back(from(DataType::kInt32, {64}, std::vector<double>(64, 0)));
  expect_error(bad, nbits_attrs(64, 8, 32), "g_idx");
  Attrs bits8 = nbits_attrs(64, 8, 32);
  bits8["bits"] = attr_int(8);
  expect_error(in, bits8, "bits");
  expect_error(in, nbits_attrs(64, 8, 24), "block_size");
  expect_error(in, nbits_attrs(64, int64_t{1} << 62, 32), "too large");
  expect_error(in, nbits_attrs(64, int64_t{1} << 60, int64_t{1} << 30), "too large");
}
