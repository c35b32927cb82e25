// kiln.QMatMul on CUDA (cuBLASLt int8 tensor cores, int32 sums, kiln's epilogue) against a double
// precision computation of what the QDQ graph means: dequantized A and B, their product, bias,
// activation, and QuantizeLinear's rounding when the node has y_scale. Skipped without a GPU, except
// the kernel row's static checks, which placement uses on machines without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backends/cuda/cuda_backend.h"
#include "test_cuda_util.h"

namespace kiln {
namespace {

using cudatest::OneNode;

struct QCase {
  Tensor a, w, bias;     // A [..., K] uint8/int8; W [K, N] int8; bias float32 or int32 [N] (or none)
  float xs = 0.02f;
  int32_t xz = 0;
  std::vector<float> ws;  // 1 or N values
  DataType out = DataType::kFloat32;  // float32, or uint8/int8 with ys/yz
  float ys = 0.05f;
  int32_t yz = 0;
  std::string act;        // "", "Relu" or "Gelu"
};

QCase make_case(DataType a_type, const Shape& a_shape, int64_t n, bool per_column, DataType bias_type, DataType out,
                std::mt19937& rng) {
  QCase c;
  const int64_t k = a_shape.back();
  c.a = Tensor::empty(a_type, a_shape);
  std::uniform_int_distribution<int> byte(0, 255), wbyte(-127, 127);
  for (int64_t i = 0; i < c.a.numel(); ++i) static_cast<uint8_t*>(c.a.raw())[i] = static_cast<uint8_t>(byte(rng));
  c.xz = a_type == DataType::kUInt8 ? 131 : -3;  // not 128: the zero-point correction is exercised
  c.w = Tensor::empty(DataType::kInt8, {k, n});
  for (int64_t i = 0; i < c.w.numel(); ++i) c.w.data<int8_t>()[i] = static_cast<int8_t>(wbyte(rng));
  std::uniform_real_distribution<float> scale(0.002f, 0.01f);
  c.ws.resize(per_column ? static_cast<size_t>(n) : 1);
  for (float& s : c.ws) s = scale(rng);
  if (bias_type == DataType::kFloat32) c.bias = cudatest::random_tensor({n}, rng);
  if (bias_type == DataType::kInt32) {
    c.bias = Tensor::empty(DataType::kInt32, {n});
    std::uniform_int_distribution<int> b(-5000, 5000);
    for (int64_t j = 0; j < n; ++j) c.bias.data<int32_t>()[j] = b(rng);
  }
  c.out = out;
  c.yz = out == DataType::kUInt8 ? 120 : 5;
  return c;
}

Tensor scalar_of(DataType t, double v) {
  Tensor s = Tensor::empty(t, {});
  switch (t) {
    case DataType::kFloat32: s.data<float>()[0] = static_cast<float>(v); break;
    case DataType::kUInt8: s.data<uint8_t>()[0] = static_cast<uint8_t>(v); break;
    case DataType::kInt8: s.data<int8_t>()[0] = static_cast<int8_t>(v); break;
    default: ADD_FAILURE() << "scalar_of: dtype";
  }
  return s;
}

std::vector<Tensor> inputs_of(const QCase& c) {
  Tensor ws = Tensor::empty(DataType::kFloat32, {static_cast<int64_t>(c.ws.size())});
  std::copy(c.ws.begin(), c.ws.end(), ws.data<float>());
  std::vector<Tensor> in = {c.a, scalar_of(DataType::kFloat32, c.xs), scalar_of(c.a.dtype(), c.xz), c.w, ws, Tensor(),
                            Tensor(), Tensor(), Tensor()};
  if (c.out != DataType::kFloat32) {
    in[6] = scalar_of(DataType::kFloat32, c.ys);
    in[7] = scalar_of(c.out, c.yz);
  }
  if (c.bias.defined()) in[8] = c.bias;
  while (!in.empty() && !in.back().defined()) in.pop_back();
  return in;
}

std::unique_ptr<OneNode> qmatmul_node(const QCase& c) {
  const std::vector<Tensor> in = inputs_of(c);
  std::vector<bool> constant(in.size(), true);
  constant[0] = false;
  auto n = std::make_unique<OneNode>("QMatMul", 1, in, 1, constant);
  n->node->domain = "kiln";
  if (!c.act.empty()) n->set_string("activation", c.act);
  n->node->outputs[0]->type = ir::Type::tensor(c.out);
  return n;
}

// What the graph means, in double: y = act(xs·ws[j]·Σ (a − xz)·w + bias[j]) (an int32 bias counts in
// xs·ws[j] units), then saturate(rne(y / ys) + yz) for an 8-bit output.
std::vector<double> reference(const QCase& c, bool quantize) {
  const int64_t k = c.w.shape()[0], n = c.w.shape()[1], m = c.a.numel() / k;
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t a = c.a.dtype() == DataType::kUInt8 ? c.a.data<uint8_t>()[i * k + kk] : c.a.data<int8_t>()[i * k + kk];
        acc += (a - c.xz) * c.w.data<int8_t>()[kk * n + j];
      }
      const double s = static_cast<double>(c.xs) * c.ws[c.ws.size() == 1 ? 0 : j];
      double v = s * static_cast<double>(acc);
      if (c.bias.defined())
        v += c.bias.dtype() == DataType::kInt32 ? s * c.bias.data<int32_t>()[j] : static_cast<double>(c.bias.data<float>()[j]);
      if (c.act == "Relu") v = std::max(v, 0.0);
      if (c.act == "Gelu") v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      if (quantize) {
        const double lo = c.out == DataType::kUInt8 ? 0 : -128, hi = c.out == DataType::kUInt8 ? 255 : 127;
        v = std::clamp(std::nearbyint(v / c.ys) + c.yz, lo, hi);
      }
      y[i * n + j] = v;
    }
  return y;
}

double value_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kFloat32: return t.data<float>()[i];
    case DataType::kUInt8: return t.data<uint8_t>()[i];
    case DataType::kInt8: return t.data<int8_t>()[i];
    default: return NAN;
  }
}

// Float outputs within 1e-5 of the largest |y| (float32 rounding of one scale and one add); 8-bit
// outputs within one step (y / ys within float32 rounding of a .5), and such ties rare.
void expect_matches(const Tensor& got, const QCase& c, const std::string& what) {
  const bool q = c.out != DataType::kFloat32;
  const std::vector<double> want = reference(c, q);
  ASSERT_EQ(got.dtype(), c.out) << what;
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  int64_t off_by_one = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double d = std::fabs(value_at(got, i) - want[i]);
    if (q) {
      ASSERT_LE(d, 1.0) << what << " element " << i;
      off_by_one += d > 0;
    } else {
      ASSERT_LE(d, 1e-5 * scale + 1e-6) << what << " element " << i << ": got " << value_at(got, i) << ", want " << want[i];
    }
  }
  if (q) EXPECT_LE(off_by_one, got.numel() / 100 + 1) << what;
}

TEST(CudaQMatMul, MatchesTheQdqGraphEveryTactic) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(11);
  struct Variant {
    DataType a;
    Shape a_shape;
    int64_t n;
    bool per_column;
    DataType bias, out;
    const char* act;
  };
  // K 64 and int8 A: A read as it is; K 50 or uint8 A: converted rows; N 30: padded sums.
  const Variant variants[] = {
      {DataType::kUInt8, {2, 9, 64}, 48, true, DataType::kFloat32, DataType::kFloat32, ""},
      {DataType::kInt8, {17, 64}, 32, false, DataType::kUndefined, DataType::kFloat32, "Relu"},
      {DataType::kUInt8, {5, 50}, 30, true, DataType::kInt32, DataType::kUInt8, "Relu"},
      {DataType::kInt8, {3, 4, 96}, 40, true, DataType::kFloat32, DataType::kInt8, "Gelu"},
      {DataType::kUInt8, {128, 256}, 64, true, DataType::kInt32, DataType::kUInt8, ""},
  };
  for (const Variant& v : variants) {
    QCase c = make_case(v.a, v.a_shape, v.n, v.per_column, v.bias, v.out, rng);
    c.act = v.act;
    const std::string what = std::string(dtype_name(v.a)) + " A " + shape_to_string(v.a_shape) + " N " + std::to_string(v.n) +
                             " → " + dtype_name(v.out) + (c.act.empty() ? "" : " " + c.act);
    auto node = qmatmul_node(c);
    std::vector<std::string> tactics;
    auto got = cudatest::run_cuda(*node->node, inputs_of(c), {}, &tactics);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
    expect_matches((*got)[0], c, what + ", own choice");
    EXPECT_FALSE(tactics.empty()) << what;
    for (const std::string& t : tactics) {
      auto g = cudatest::run_cuda(*node->node, inputs_of(c), t);
      ASSERT_TRUE(g.ok()) << what << " " << t << ": " << g.status().to_string();
      expect_matches((*g)[0], c, what + ", tactic " + t);
    }
  }
}

// The row's static check (what placement reads, with or without a GPU): only constant int8 weights
// and constant scales take the int8 kernel; anything else stays on the unfused path.
TEST(CudaQMatMul, RowTakesOnlyConstantWeightsAndScales) {
  const KernelRegistry* cuda = cuda_kernel_registry();
  if (!cuda) GTEST_SKIP() << "built without CUDA";
  const KernelDef* row = cuda->by_name("cuda.QMatMul.i8.cublaslt");
  ASSERT_NE(row, nullptr);
  std::mt19937 rng(12);
  QCase c = make_case(DataType::kUInt8, {4, 32}, 16, true, DataType::kFloat32, DataType::kUInt8, rng);
  EXPECT_EQ(row->rejects(*qmatmul_node(c)->node), "");
  auto w_input = qmatmul_node(c);
  w_input->node->inputs[3]->constant.reset();
  EXPECT_NE(row->rejects(*w_input->node).find("B must be a constant"), std::string::npos);
  auto scale_input = qmatmul_node(c);
  scale_input->node->inputs[1]->constant.reset();
  EXPECT_NE(row->rejects(*scale_input->node).find("constants"), std::string::npos);
  QCase f = c;
  f.a = cudatest::random_tensor({4, 32}, rng);
  EXPECT_NE(row->rejects(*qmatmul_node(f)->node).find("uint8 or int8"), std::string::npos);
}

}  // namespace
}  // namespace kiln
