// kiln.QMatMul and kiln.QConv against a double precision computation of what the QDQ graph means:
// dequantized A and B, their product, bias, activation, and QuantizeLinear's rounding when the node
// has y_scale. On CUDA (cuBLASLt, cuDNN, kiln's own kernels: skipped without a GPU, except the kernel
// rows' static checks, which placement uses on machines without one) and on the CPU, every row: the
// exact kernels on every machine, oneDNN's where this machine has them (skipped with the reason).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "backends/cuda/cuda_backend.h"
#include "ir/float_types.h"
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
    case DataType::kFloat8E4M3FN: static_cast<uint8_t*>(s.raw())[0] = f32_to_mini(static_cast<float>(v), MiniFloat::kE4M3FN, true); break;
    default: ADD_FAILURE() << "scalar_of: dtype";
  }
  return s;
}

std::vector<Tensor> inputs_of(const QCase& c) {
  Tensor ws = Tensor::empty(DataType::kFloat32, {static_cast<int64_t>(c.ws.size())});
  std::copy(c.ws.begin(), c.ws.end(), ws.data<float>());
  std::vector<Tensor> in = {c.a, scalar_of(DataType::kFloat32, c.xs), scalar_of(c.a.dtype(), c.xz), c.w, ws, Tensor(),
                            Tensor(), Tensor(), Tensor()};
  if (c.out == DataType::kUInt8 || c.out == DataType::kInt8) {
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
  if (c.out == DataType::kFloat16) n->set_int("output_dtype", static_cast<int64_t>(DataType::kFloat16));
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
    case DataType::kFloat16: return f16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kFloat8E4M3FN: return mini_to_f32(static_cast<const uint8_t*>(t.raw())[i], MiniFloat::kE4M3FN);
    default: return NAN;
  }
}

// Float outputs within 1e-5 of the largest |y| (float32 rounding of one scale and one add; float16:
// plus its own rounding, half a unit in the last place); 8-bit outputs within one step (y / ys
// within float32 rounding of a .5), and such ties rare.
void expect_matches(const Tensor& got, const QCase& c, const std::string& what) {
  const bool q = c.out == DataType::kUInt8 || c.out == DataType::kInt8, half = c.out == DataType::kFloat16;
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
      ASSERT_LE(d, 1e-5 * scale + 1e-6 + (half ? std::fabs(want[i]) / 2048 : 0.0))
          << what << " element " << i << ": got " << value_at(got, i) << ", want " << want[i];
    }
  }
  if (q) EXPECT_LE(off_by_one, got.numel() / 100 + 1) << what;
}

// One kiln.QMatMul case: A's type and shape, N, per-column scales, the bias type, the output, the activation.
struct Variant {
  DataType a;
  Shape a_shape;
  int64_t n;
  bool per_column;
  DataType bias, out;
  const char* act;
};

// The cases every row takes. K 64 and int8 A: A read as it is (CUDA); K 50 or uint8 A: converted
// rows; N 30: padded sums.
const Variant kVariants[] = {
    {DataType::kUInt8, {2, 9, 64}, 48, true, DataType::kFloat32, DataType::kFloat32, ""},
    {DataType::kInt8, {17, 64}, 32, false, DataType::kUndefined, DataType::kFloat32, "Relu"},
    {DataType::kUInt8, {5, 50}, 30, true, DataType::kInt32, DataType::kUInt8, "Relu"},
    {DataType::kInt8, {3, 4, 96}, 40, true, DataType::kFloat32, DataType::kInt8, "Gelu"},
    {DataType::kUInt8, {128, 256}, 64, true, DataType::kInt32, DataType::kUInt8, ""},
};

// The variant's case drawn from rng, and its name for failure messages.
QCase case_of(const Variant& v, std::mt19937& rng, std::string* what) {
  QCase c = make_case(v.a, v.a_shape, v.n, v.per_column, v.bias, v.out, rng);
  c.act = v.act;
  *what = std::string(dtype_name(v.a)) + " A " + shape_to_string(v.a_shape) + " N " + std::to_string(v.n) + " → " +
          dtype_name(v.out) + (c.act.empty() ? "" : " " + c.act);
  return c;
}

TEST(CudaQMatMul, MatchesTheQdqGraphEveryTactic) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(11);
  std::vector<Variant> variants(std::begin(kVariants), std::end(kVariants));
  // float16 out (passes::products_write_half): four columns a thread, and N 30 one at a time.
  variants.push_back({DataType::kUInt8, {2, 9, 64}, 48, true, DataType::kFloat32, DataType::kFloat16, "Gelu"});
  variants.push_back({DataType::kInt8, {7, 64}, 30, false, DataType::kFloat32, DataType::kFloat16, ""});
  for (const Variant& v : variants) {
    std::string what;
    const QCase c = case_of(v, rng, &what);
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

namespace kiln {
namespace {

// ---- kiln.QConv on CUDA (cuDNN's graph API, channels-last int8) against the QDQ graph's meaning in
// double: y = act(xs·ws[m]·Σ x·w + bias[m] [+ zs·z]), then saturate(rne(y / ys)) for an int8 output.
struct ConvCase {
  int64_t n, h, w, c, m, k, stride, pad;
  bool per_channel, relu, residual;
  DataType bias, out;
  int64_t group = 1;  // W is [M, k, k, C / group]
};

struct ConvData {
  ConvCase cc;
  DataType q8 = DataType::kInt8;  // X, W, Z and an 8-bit Y: int8, or E4M3 (FP8 engines)
  Tensor x, w, ws, bias, z;
  float xs = 0.03f, ys = 0.08f, zs = 0.05f;
  int64_t oh = 0, ow = 0;
};

ConvData make_conv(const ConvCase& cc, std::mt19937& rng) {
  ConvData d;
  d.cc = cc;
  d.oh = (cc.h + 2 * cc.pad - cc.k) / cc.stride + 1;
  d.ow = (cc.w + 2 * cc.pad - cc.k) / cc.stride + 1;
  std::uniform_int_distribution<int> byte(-128, 127), wbyte(-127, 127);
  d.x = Tensor::empty(DataType::kInt8, {cc.n, cc.h, cc.w, cc.c});
  for (int64_t i = 0; i < d.x.numel(); ++i) d.x.data<int8_t>()[i] = static_cast<int8_t>(byte(rng));
  d.w = Tensor::empty(DataType::kInt8, {cc.m, cc.k, cc.k, cc.c / cc.group});
  for (int64_t i = 0; i < d.w.numel(); ++i) d.w.data<int8_t>()[i] = static_cast<int8_t>(wbyte(rng));
  // Scales that keep y / ys mostly inside int8's range, so saturation and rounding both show.
  const double fan = static_cast<double>(cc.c / cc.group * cc.k * cc.k);
  std::uniform_real_distribution<float> scale(0.5f, 1.5f);
  d.ws = Tensor::empty(DataType::kFloat32, {cc.per_channel ? cc.m : 1});
  for (int64_t i = 0; i < d.ws.numel(); ++i)
    d.ws.data<float>()[i] = static_cast<float>(scale(rng) * 40.0 * d.ys / (d.xs * 128.0 * 127.0 * std::sqrt(fan)));
  if (cc.bias == DataType::kFloat32) {
    d.bias = Tensor::empty(DataType::kFloat32, {cc.m});
    std::uniform_real_distribution<float> b(-2.f, 2.f);
    for (int64_t i = 0; i < cc.m; ++i) d.bias.data<float>()[i] = b(rng);
  } else if (cc.bias == DataType::kInt32) {
    d.bias = Tensor::empty(DataType::kInt32, {cc.m});
    std::uniform_int_distribution<int> b(-20000, 20000);
    for (int64_t i = 0; i < cc.m; ++i) d.bias.data<int32_t>()[i] = b(rng);
  }
  if (cc.residual) {
    d.z = Tensor::empty(DataType::kInt8, {cc.n, d.oh, d.ow, cc.m});
    for (int64_t i = 0; i < d.z.numel(); ++i) d.z.data<int8_t>()[i] = static_cast<int8_t>(byte(rng));
  }
  return d;
}

std::vector<Tensor> conv_inputs(const ConvData& d) {
  std::vector<Tensor> in = {d.x, scalar_of(DataType::kFloat32, d.xs), scalar_of(d.q8, 0), d.w, d.ws, Tensor(),
                            Tensor(), Tensor(), d.bias, Tensor(), Tensor()};
  if (d.cc.out != DataType::kFloat32) {
    in[6] = scalar_of(DataType::kFloat32, d.ys);
    in[7] = scalar_of(d.q8, 0);
  }
  if (d.cc.residual) {
    in[9] = d.z;
    in[10] = scalar_of(DataType::kFloat32, d.zs);
  }
  while (!in.empty() && !in.back().defined()) in.pop_back();
  return in;
}

std::unique_ptr<OneNode> qconv_node(const ConvData& d) {
  const std::vector<Tensor> in = conv_inputs(d);
  std::vector<bool> constant(in.size(), true);
  constant[0] = false;
  if (in.size() > 9) constant[9] = false;
  auto n = std::make_unique<OneNode>("QConv", 1, in, 1, constant);
  n->node->domain = "kiln";
  n->set_int("channels_last", 1);
  n->set_ints("kernel_shape", {d.cc.k, d.cc.k});
  n->set_ints("strides", {d.cc.stride, d.cc.stride});
  n->set_ints("pads", {d.cc.pad, d.cc.pad, d.cc.pad, d.cc.pad});
  if (d.cc.relu) n->set_string("activation", "Relu");
  n->node->outputs[0]->type = ir::Type::tensor(d.cc.out);
  return n;
}

// What the graph means, per output element, in double; quantize = false: before the output's
// QuantizeLinear.
std::vector<double> conv_reference(const ConvData& d, bool quantize = true) {
  const ConvCase& c = d.cc;
  std::vector<double> y(static_cast<size_t>(c.n * d.oh * d.ow * c.m));
  for (int64_t b = 0; b < c.n; ++b)
    for (int64_t oy = 0; oy < d.oh; ++oy)
      for (int64_t ox = 0; ox < d.ow; ++ox)
        for (int64_t m = 0; m < c.m; ++m) {
          double acc = 0;  // exact: int8 and E4M3 products and their sums fit a double here
          for (int64_t ky = 0; ky < c.k; ++ky)
            for (int64_t kx = 0; kx < c.k; ++kx) {
              const int64_t iy = oy * c.stride - c.pad + ky, ix = ox * c.stride - c.pad + kx;
              if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
              const int64_t cg = c.c / c.group, first = m / (c.m / c.group) * cg;
              const int64_t xp = ((b * c.h + iy) * c.w + ix) * c.c + first, wp = ((m * c.k + ky) * c.k + kx) * cg;
              for (int64_t ch = 0; ch < cg; ++ch) acc += value_at(d.x, xp + ch) * value_at(d.w, wp + ch);
            }
          const double s = static_cast<double>(d.xs) * d.ws.data<float>()[d.ws.numel() == 1 ? 0 : m];
          double v = s * static_cast<double>(acc);
          if (c.bias == DataType::kFloat32) v += d.bias.data<float>()[m];
          if (c.bias == DataType::kInt32) v += s * d.bias.data<int32_t>()[m];
          const int64_t at = ((b * d.oh + oy) * d.ow + ox) * c.m + m;
          if (c.residual) v += static_cast<double>(d.zs) * value_at(d.z, at);
          if (c.relu) v = std::max(v, 0.0);
          if (quantize && c.out == DataType::kInt8) v = std::clamp(std::nearbyint(v / d.ys), -128.0, 127.0);
          if (quantize && c.out == DataType::kFloat8E4M3FN)
            v = mini_to_f32(f32_to_mini(static_cast<float>(v / d.ys), MiniFloat::kE4M3FN, true), MiniFloat::kE4M3FN);
          y[static_cast<size_t>(at)] = v;
        }
  return y;
}

// int8 outputs within one step, rarely off (float32 scale arithmetic near a .5); float outputs
// within float32 rounding of the epilogue (1e-5 of the largest |y|).
void expect_conv_matches(const Tensor& got, const ConvData& d, const std::string& what) {
  const std::vector<double> want = conv_reference(d);
  ASSERT_EQ(got.dtype(), d.cc.out) << what;
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  double top = 0;
  for (double v : want) top = std::max(top, std::fabs(v));
  int64_t off = 0, saturated = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = value_at(got, i), dd = std::fabs(g - want[i]);
    if (d.cc.out == DataType::kInt8) {
      ASSERT_LE(dd, 1.0) << what << " element " << i << ": got " << g << ", want " << want[i];
      off += dd > 0;
      saturated += std::fabs(want[i]) >= 127;
    } else {
      ASSERT_LE(dd, 1e-5 * top + 1e-6) << what << " element " << i << ": got " << g << ", want " << want[i];
    }
  }
  if (d.cc.out == DataType::kInt8) {
    EXPECT_LE(off, got.numel() / 100 + 1) << what;
    EXPECT_LT(saturated, got.numel() / 4) << what << ": the case's scales saturate too much to test rounding";
  }
}

// "C>M kxk/stride at HxW [+Z] [Relu] → out", for failure messages.
std::string case_name(const ConvCase& cc) {
  return std::to_string(cc.c) + ">" + std::to_string(cc.m) + " " + std::to_string(cc.k) + "x" + std::to_string(cc.k) + "/" +
         std::to_string(cc.stride) + " at " + std::to_string(cc.h) + "x" + std::to_string(cc.w) + (cc.residual ? " +Z" : "") +
         (cc.relu ? " Relu" : "") + " → " + dtype_name(cc.out);
}

bool offers(const std::vector<std::string>& tactics, const char* t) { return std::count(tactics.begin(), tactics.end(), t) > 0; }

// Runs d's kiln.QConv with the kernel's own choice, then with each tactic it offers (cuDNN's
// configurations up to cfg<max_cfg>; one that does not build here is skipped), checking every output
// with check(got, d, what); returns the tactics offered.
template <typename Check>
std::vector<std::string> check_every_tactic(const ConvData& d, const std::string& what, Check check,
                                            int max_cfg = std::numeric_limits<int>::max()) {
  auto node = qconv_node(d);
  std::vector<std::string> tactics;
  auto got = cudatest::run_cuda(*node->node, conv_inputs(d), {}, &tactics);
  EXPECT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  if (!got.ok()) return tactics;
  check((*got)[0], d, what + ", own choice");
  EXPECT_FALSE(tactics.empty()) << what;
  for (const std::string& t : tactics) {
    if (t.rfind("cfg", 0) == 0 && std::atoi(t.c_str() + 3) > max_cfg) continue;
    auto g = cudatest::run_cuda(*node->node, conv_inputs(d), t);
    if (!g.ok() && g.status().message().find("no engine") != std::string::npos) continue;  // a configuration that does not build here
    EXPECT_TRUE(g.ok()) << what << " " << t << ": " << g.status().to_string();
    if (!g.ok()) return tactics;
    check((*g)[0], d, what + ", tactic " + t);
  }
  return tactics;
}

TEST(CudaQConv, MatchesTheQdqGraphEveryTactic) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(21);
  const ConvCase cases[] = {
      // n h w c m k stride pad per_channel relu residual bias out
      {2, 7, 7, 64, 32, 1, 1, 0, true, true, false, DataType::kFloat32, DataType::kInt8},
      {1, 9, 9, 16, 16, 3, 1, 1, true, true, true, DataType::kFloat32, DataType::kInt8},
      {2, 10, 10, 32, 64, 3, 2, 1, false, false, false, DataType::kInt32, DataType::kFloat32},
      {3, 8, 8, 64, 128, 1, 2, 0, true, false, true, DataType::kUndefined, DataType::kInt8},
      {1, 6, 6, 128, 256, 1, 1, 0, true, true, true, DataType::kFloat32, DataType::kFloat32},
      {2, 15, 15, 3, 16, 7, 2, 3, true, true, false, DataType::kFloat32, DataType::kInt8},  // an RGB stem: C padded to 4
      // 1x1 shapes for kiln's own kernel (cuda_qgemm.cu): a K tail inside a 64-byte step (80), output
      // channels that fill no tile (36, 200), several pixel tiles, more K steps than stages (320),
      // stride 2 on an odd side.
      {2, 14, 14, 80, 36, 1, 1, 0, true, true, true, DataType::kFloat32, DataType::kInt8},
      {1, 12, 12, 320, 200, 1, 1, 0, false, true, false, DataType::kInt32, DataType::kInt8},
      {2, 9, 9, 48, 64, 1, 2, 0, true, false, false, DataType::kFloat32, DataType::kFloat32},
      // Its streaming form (K <= 256, M % 16 == 0, int8 out): a partial last pixel tile with the
      // residual, all four 64-byte K steps (256), a K tail and a channel tile wider than M with stride
      // 2, and enough pixel tiles (576) that resident blocks walk several.
      {2, 14, 14, 64, 256, 1, 1, 0, true, true, true, DataType::kFloat32, DataType::kInt8},
      {1, 16, 16, 256, 64, 1, 1, 0, true, true, false, DataType::kInt32, DataType::kInt8},
      {2, 11, 11, 48, 32, 1, 2, 0, false, false, true, DataType::kFloat32, DataType::kInt8},
      {8, 96, 96, 64, 32, 1, 1, 0, true, true, true, DataType::kFloat32, DataType::kInt8},
  };
  for (const ConvCase& cc : cases) {
    const ConvData d = make_conv(cc, rng);
    const std::string what = case_name(cc);
    const std::vector<std::string> tactics = check_every_tactic(d, what, expect_conv_matches);
    if (cc.k == 1 && cc.c % 16 == 0)
      EXPECT_TRUE(offers(tactics, "mma64") && offers(tactics, "mma128")) << what << ": kiln's 1x1 kernel is not among the tactics";
    if (cc.k == 1 && cc.c % 16 == 0 && cc.c <= 256 && cc.m % 16 == 0 && cc.out == DataType::kInt8)
      EXPECT_TRUE(offers(tactics, "stream64") && offers(tactics, "stream128"))
          << what << ": the 1x1 kernel's streaming form is not among the tactics";
  }
}

// Random finite E4M3 values below 2^(top - 7) in magnitude (biased exponents 0 .. top - 1), both signs.
Tensor random_e4m3(const Shape& shape, int top, std::mt19937& rng) {
  Tensor t = Tensor::empty(DataType::kFloat8E4M3FN, shape);
  std::uniform_int_distribution<int> bits(0, top * 8 - 1), sign(0, 1);
  for (int64_t i = 0; i < t.numel(); ++i) static_cast<uint8_t*>(t.raw())[i] = static_cast<uint8_t>(bits(rng) | (sign(rng) << 7));
  return t;
}

// An FP8 engine's convolution (builder/calibrate.cpp): E4M3 X, W and residual, per-channel weight
// scales, E4M3 or float32 output. y_scale puts the largest output ~1.3x past E4M3's 448, so
// saturation shows as well as rounding.
ConvData make_fp8_conv(const ConvCase& cc, std::mt19937& rng) {
  ConvData d = make_conv(cc, rng);
  d.q8 = DataType::kFloat8E4M3FN;
  d.x = random_e4m3({cc.n, cc.h, cc.w, cc.c}, 11, rng);  // |x| < 16
  d.w = random_e4m3({cc.m, cc.k, cc.k, cc.c}, 8, rng);   // |w| < 2
  if (cc.residual) d.z = random_e4m3({cc.n, d.oh, d.ow, cc.m}, 13, rng);
  std::uniform_real_distribution<float> scale(0.005f, 0.015f);
  for (int64_t i = 0; i < d.ws.numel(); ++i) d.ws.data<float>()[i] = scale(rng);
  double top = 0;
  for (double v : conv_reference(d, false)) top = std::max(top, std::fabs(v));
  d.ys = static_cast<float>(top / 600.0);
  return d;
}

// Hopper's FP8 tensor cores add partial sums with fewer bits than float32 (about 2^-13 of the running
// magnitude): each output may be off by 2^-11 of the sum of its terms' magnitudes (the reference on
// |x|, |w|, |bias|, |z|), which matters only where the terms cancel. On top of that, E4M3 outputs
// within one E4M3 step of the reference (rounding near a boundary), rarely off; float outputs within
// float32 rounding.
void expect_fp8_conv_matches(const Tensor& got, const ConvData& d, const std::string& what) {
  const std::vector<double> want = conv_reference(d);
  ConvData mag = d;
  mag.cc.relu = false;
  for (Tensor* t : {&mag.x, &mag.w, &mag.z}) {
    if (!t->defined()) continue;
    *t = t->clone();
    for (int64_t i = 0; i < t->numel(); ++i) static_cast<uint8_t*>(t->raw())[i] &= 0x7f;
  }
  if (mag.bias.defined() && mag.bias.dtype() == DataType::kFloat32) {
    mag.bias = mag.bias.clone();
    for (int64_t i = 0; i < mag.bias.numel(); ++i) mag.bias.data<float>()[i] = std::fabs(mag.bias.data<float>()[i]);
  }
  const std::vector<double> terms = conv_reference(mag, false);
  const double unit = d.cc.out == DataType::kFloat8E4M3FN ? d.ys : 1.0;  // an E4M3 output is y / ys
  ASSERT_EQ(got.dtype(), d.cc.out) << what;
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  double top = 0;
  for (double v : want) top = std::max(top, std::fabs(v));
  int64_t off = 0, saturated = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = value_at(got, i), dd = std::fabs(g - want[i]), acc = std::ldexp(terms[i] / unit, -11);
    ASSERT_TRUE(std::isfinite(g)) << what << " element " << i << ": got " << g << ", want " << want[i];
    if (d.cc.out == DataType::kFloat8E4M3FN) {
      ASSERT_LE(dd, std::max(std::fabs(want[i]) / 8, 1.0 / 512) * 1.0001 + acc)
          << what << " element " << i << ": got " << g << ", want " << want[i];
      off += dd > 0;
      saturated += std::fabs(want[i]) == 448;
    } else {
      ASSERT_LE(dd, 1e-5 * top + acc) << what << " element " << i << ": got " << g << ", want " << want[i];
    }
  }
  if (d.cc.out == DataType::kFloat8E4M3FN) {
    EXPECT_LE(off, got.numel() / 20 + 1) << what;
    EXPECT_GT(saturated, 0) << what << ": no output saturated";
  }
}

TEST(CudaQConv, Fp8MatchesTheQdqGraphEveryTactic) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(23);
  const ConvCase cases[] = {
      // n h w c m k stride pad per_channel relu residual bias out (float32 or E4M3)
      {2, 9, 9, 16, 32, 3, 1, 1, true, true, false, DataType::kFloat32, DataType::kFloat8E4M3FN},
      {1, 10, 10, 32, 16, 3, 2, 1, true, false, true, DataType::kFloat32, DataType::kFloat8E4M3FN},
      {2, 7, 7, 64, 64, 1, 1, 0, true, true, true, DataType::kFloat32, DataType::kFloat8E4M3FN},
      {2, 8, 8, 64, 128, 1, 2, 0, false, false, false, DataType::kUndefined, DataType::kFloat8E4M3FN},
      {1, 6, 6, 48, 32, 3, 1, 1, true, true, true, DataType::kFloat32, DataType::kFloat32},
      {2, 15, 15, 3, 16, 7, 2, 3, true, true, false, DataType::kFloat32, DataType::kFloat8E4M3FN},  // C padded to 16
      // kiln's 1x1 kernel in E4M3: a K tail (80), K > 256 (blocked only), float32 out, stride 2, and
      // enough pixel tiles (576) that the streaming form's resident blocks walk several.
      {2, 14, 14, 80, 48, 1, 1, 0, true, true, true, DataType::kFloat32, DataType::kFloat8E4M3FN},
      {1, 12, 12, 320, 64, 1, 1, 0, false, false, false, DataType::kFloat32, DataType::kFloat8E4M3FN},
      {2, 9, 9, 64, 32, 1, 2, 0, true, true, true, DataType::kFloat32, DataType::kFloat32},
      {8, 96, 96, 64, 32, 1, 1, 0, true, true, true, DataType::kFloat32, DataType::kFloat8E4M3FN},
  };
  for (const ConvCase& cc : cases) {
    const ConvData d = make_fp8_conv(cc, rng);
    const std::string what = "fp8 " + case_name(cc);
    // kiln's own kernels, and cuDNN's first three configurations (each E4M3 one is compiled at first
    // use, seconds apiece).
    const std::vector<std::string> tactics = check_every_tactic(d, what, expect_fp8_conv_matches, 2);
    if (cc.k == 1)
      EXPECT_TRUE(offers(tactics, "mma64") && offers(tactics, "mma128")) << what << ": kiln's 1x1 kernel is not among the tactics";
    if (cc.k == 1 && cc.c <= 256 && cc.out == DataType::kFloat8E4M3FN)
      EXPECT_TRUE(offers(tactics, "stream64") && offers(tactics, "stream128")) << what << ": the streaming form is not among the tactics";
  }
}

// The row's static check (placement reads it with or without a GPU).
TEST(CudaQConv, RowTakesSymmetricChannelsLastInt8Only) {
  const KernelRegistry* cuda = cuda_kernel_registry();
  if (!cuda) GTEST_SKIP() << "built without CUDA";
  const KernelDef* row = cuda->by_name("cuda.QConv.i8.cudnn");
  ASSERT_NE(row, nullptr);
  std::mt19937 rng(22);
  const ConvData d = make_conv({1, 5, 5, 16, 8, 3, 1, 1, true, true, true, DataType::kFloat32, DataType::kInt8}, rng);
  EXPECT_EQ(row->rejects(*qconv_node(d)->node), "");
  auto nchw = qconv_node(d);
  nchw->set_int("channels_last", 0);
  EXPECT_NE(row->rejects(*nchw->node).find("channels-last"), std::string::npos);
  auto grouped = qconv_node(d);
  grouped->set_int("group", 2);
  EXPECT_NE(row->rejects(*grouped->node).find("grouped"), std::string::npos);
  auto zp = qconv_node(d);
  zp->node->inputs[2]->constant->data<int8_t>()[0] = 3;
  EXPECT_NE(row->rejects(*zp->node).find("x_zero_point"), std::string::npos);
  auto gelu = qconv_node(d);
  gelu->set_string("activation", "Gelu");
  EXPECT_NE(row->rejects(*gelu->node).find("Relu"), std::string::npos);
  const ConvData odd_in = make_conv({1, 5, 5, 6, 8, 3, 1, 1, true, true, false, DataType::kFloat32, DataType::kInt8}, rng);
  EXPECT_EQ(row->rejects(*qconv_node(odd_in)->node), "") << "input channels are padded";
  const ConvData odd_out = make_conv({1, 5, 5, 8, 6, 3, 1, 1, true, true, false, DataType::kFloat32, DataType::kInt8}, rng);
  EXPECT_NE(row->rejects(*qconv_node(odd_out)->node).find("divisible by 4"), std::string::npos);
  // E4M3 (FP8 engines): X, W, Z and Y all E4M3, channels divisible by 16.
  const ConvData f8 = make_fp8_conv({1, 5, 5, 16, 16, 3, 1, 1, true, true, true, DataType::kFloat32, DataType::kFloat8E4M3FN}, rng);
  EXPECT_EQ(row->rejects(*qconv_node(f8)->node), "");
  ConvData mixed = f8;
  mixed.x = Tensor::empty(DataType::kInt8, f8.x.shape());
  auto mixed_node = qconv_node(mixed);
  EXPECT_NE(row->rejects(*mixed_node->node).find("X must be float8e4m3fn"), std::string::npos);
  ConvData int8_y = f8;
  int8_y.cc.out = DataType::kInt8;
  auto y_node = qconv_node(int8_y);
  y_node->node->inputs[7]->constant = scalar_of(DataType::kInt8, 0);
  y_node->node->inputs[7]->type.dtype = DataType::kInt8;
  EXPECT_NE(row->rejects(*y_node->node).find("y must be float8e4m3fn"), std::string::npos);
  const ConvData f8_odd_in = make_fp8_conv({1, 5, 5, 8, 16, 3, 1, 1, true, true, false, DataType::kFloat32, DataType::kFloat32}, rng);
  EXPECT_EQ(row->rejects(*qconv_node(f8_odd_in)->node), "") << "input channels are padded to 16";
  const ConvData f8_odd_out = make_fp8_conv({1, 5, 5, 16, 8, 3, 1, 1, true, true, false, DataType::kFloat32, DataType::kFloat32}, rng);
  EXPECT_NE(row->rejects(*qconv_node(f8_odd_out)->node).find("divisible by 16"), std::string::npos);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// ---- The CPU rows. oneDNN's ("*.i8.onednn") run only where oneDNN dispatches to VNNI kernels; the
// exact ones ("*.i8.exact") everywhere, so each test runs the exact row and, where the machine has it,
// oneDNN's, and says which it skipped.

// The CPU row `name`, or why this machine does not run it ("" when it does).
const KernelDef* cpu_row(const std::string& name, std::string* skip) {
  const KernelDef* row = cpu_backend().kernels().by_name(name);
  EXPECT_NE(row, nullptr) << name;
  if (row && row->unavailable) *skip = row->unavailable();
  return row;
}

// Parameter: the rows' variant ("exact", "onednn"); `row` is set up, or the test skipped with why.
class CpuQRow : public ::testing::TestWithParam<std::string> {
 protected:
  const KernelDef* row_of(const std::string& op) {
    std::string skip;
    const KernelDef* row = cpu_row("cpu." + op + ".i8." + GetParam(), &skip);
    if (!skip.empty()) return nullptr;
    return row;
  }
  std::string skip_reason(const std::string& op) {
    std::string skip;
    cpu_row("cpu." + op + ".i8." + GetParam(), &skip);
    return skip;
  }
};

#define KILN_CPU_ROW(var, op)                                                              \
  const KernelDef* var = row_of(op);                                                       \
  if (!var) {                                                                              \
    const std::string why = skip_reason(op);                                               \
    if (!why.empty()) GTEST_SKIP() << "cpu." << op << ".i8." << GetParam() << ": " << why; \
    FAIL() << "no row cpu." << op << ".i8." << GetParam();                                 \
  }

TEST_P(CpuQRow, QMatMulMatchesTheQdqGraph) {
  KILN_CPU_ROW(row, "QMatMul");
  std::mt19937 rng(31);
  std::vector<Variant> variants(std::begin(kVariants), std::end(kVariants));
  // K 1100: three blocks of the exact kernel's float sums; 300 rows of it: two row chunks; 1-D A.
  variants.push_back({DataType::kUInt8, {7, 1100}, 24, true, DataType::kInt32, DataType::kUInt8, ""});
  variants.push_back({DataType::kInt8, {300, 1100}, 20, true, DataType::kFloat32, DataType::kFloat32, "Gelu"});
  variants.push_back({DataType::kUInt8, {40}, 16, false, DataType::kFloat32, DataType::kInt8, ""});
  for (const Variant& v : variants) {
    std::string what;
    const QCase c = case_of(v, rng, &what);
    auto node = qmatmul_node(c);
    auto got = cudatest::run_row(&cpu_backend(), row, *node->node, inputs_of(c));
    ASSERT_TRUE(got.ok()) << row->name << ": " << what << ": " << got.status().to_string();
    expect_matches((*got)[0], c, row->name + ": " + what);
  }
}

// Sums beyond 2^24 stay exact: with unit scales a float output is the int32 sum itself (rounded once
// to float), which a float32 accumulation over K = 1100 large same-signed products would miss.
TEST_P(CpuQRow, QMatMulSumsBeyondFloatPrecisionAreExact) {
  KILN_CPU_ROW(row, "QMatMul");
  std::mt19937 rng(32);
  const int64_t m = 6, k = 1100, n = 8;
  QCase c = make_case(DataType::kUInt8, {m, k}, n, false, DataType::kUndefined, DataType::kFloat32, rng);
  std::uniform_int_distribution<int> big(200, 255), neg(-128, -100);
  for (int64_t i = 0; i < c.a.numel(); ++i) c.a.data<uint8_t>()[i] = static_cast<uint8_t>(big(rng));
  for (int64_t i = 0; i < c.w.numel(); ++i) c.w.data<int8_t>()[i] = static_cast<int8_t>(neg(rng));
  c.xz = 0;
  c.xs = 1;
  c.ws = {1};
  bool beyond = false;
  std::vector<float> want(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int64_t kk = 0; kk < k; ++kk) acc += int64_t{c.a.data<uint8_t>()[i * k + kk]} * c.w.data<int8_t>()[kk * n + j];
      want[i * n + j] = static_cast<float>(acc);
      beyond = beyond || std::llabs(acc) > (int64_t{1} << 24);
    }
  ASSERT_TRUE(beyond) << "the case must reach sums a float32 cannot hold exactly";
  auto node = qmatmul_node(c);
  auto got = cudatest::run_row(&cpu_backend(), row, *node->node, inputs_of(c));
  ASSERT_TRUE(got.ok()) << row->name << ": " << got.status().to_string();
  for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ((*got)[0].data<float>()[i], want[i]) << row->name << " element " << i;
}

// A 4-D tensor with its dims permuted: out dim i is t's dim perm[i] (NHWC → NCHW is {0, 3, 1, 2}).
Tensor permuted(const Tensor& t, const std::array<int, 4>& perm) {
  const Shape& s = t.shape();
  Tensor o = Tensor::empty(t.dtype(), {s[perm[0]], s[perm[1]], s[perm[2]], s[perm[3]]});
  const size_t es = dtype_size(t.dtype());
  const int64_t stride[4] = {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
  const auto* src = static_cast<const char*>(t.raw());
  auto* dst = static_cast<char*>(o.raw());
  const Shape& os = o.shape();
  int64_t i = 0;
  for (int64_t a = 0; a < os[0]; ++a)
    for (int64_t b = 0; b < os[1]; ++b)
      for (int64_t c = 0; c < os[2]; ++c)
        for (int64_t d = 0; d < os[3]; ++d, ++i) {
          const int64_t from = a * stride[perm[0]] + b * stride[perm[1]] + c * stride[perm[2]] + d * stride[perm[3]];
          std::memcpy(dst + i * es, src + from * es, es);
        }
  return o;
}

TEST_P(CpuQRow, QConvMatchesTheQdqGraphInBothLayouts) {
  KILN_CPU_ROW(row, "QConv");
  std::mt19937 rng(33);
  const ConvCase cases[] = {
      // n h w c m k stride pad per_channel relu residual bias out group
      {2, 7, 7, 64, 32, 1, 1, 0, true, true, false, DataType::kFloat32, DataType::kInt8},
      {1, 9, 9, 16, 16, 3, 1, 1, true, true, false, DataType::kFloat32, DataType::kInt8},
      {2, 10, 10, 32, 64, 3, 2, 1, false, false, false, DataType::kInt32, DataType::kFloat32},
      {3, 8, 8, 64, 128, 1, 2, 0, true, false, false, DataType::kUndefined, DataType::kInt8},
      {2, 15, 15, 3, 16, 7, 2, 3, true, true, false, DataType::kFloat32, DataType::kInt8},
      {1, 6, 6, 64, 24, 3, 1, 1, true, false, false, DataType::kFloat32, DataType::kInt8},  // K 576: two chunks
      {2, 8, 8, 32, 32, 3, 1, 1, true, true, false, DataType::kFloat32, DataType::kInt8, 32},  // depthwise
      {1, 9, 7, 16, 24, 3, 2, 1, false, false, false, DataType::kInt32, DataType::kFloat32, 4},
      // A group of 64 channels at 3x3 sums 576 products: the exact row's im2col blocks.
      {2, 6, 5, 128, 32, 3, 1, 1, true, true, false, DataType::kFloat32, DataType::kInt8, 2},
      {1, 12, 12, 600, 16, 1, 1, 0, true, false, false, DataType::kInt32, DataType::kInt8},  // 1x1, two chunks
  };
  for (const ConvCase& cc : cases) {
    const ConvData d = make_conv(cc, rng);
    const std::string what = row->name + ": " + case_name(cc) + (cc.group > 1 ? " group " + std::to_string(cc.group) : "");
    for (const bool nhwc : {true, false}) {
      auto node = qconv_node(d);
      std::vector<Tensor> in = conv_inputs(d);
      if (cc.group > 1) node->set_int("group", cc.group);
      if (!nhwc) {
        in[0] = permuted(in[0], {0, 3, 1, 2});  // the row's other layout, checked against the same reference
        in[3] = permuted(in[3], {0, 3, 1, 2});
        node->set_int("channels_last", 0);
        for (int i : {0, 3}) node->node->inputs[i]->type = ir::Type::tensor(in[i].dtype(), ir::SymShape::of(in[i].shape()));
        node->node->inputs[3]->constant = in[3];
      }
      auto got = cudatest::run_row(&cpu_backend(), row, *node->node, in);
      ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
      expect_conv_matches(nhwc ? (*got)[0] : permuted((*got)[0], {0, 2, 3, 1}), d, what + (nhwc ? ", NHWC" : ", NCHW"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, CpuQRow, ::testing::Values("exact", "onednn"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Without VNNI the oneDNN rows say why, and the exact rows take their nodes: a QDQ graph quantizes on
// every machine.

TEST(CpuQConv, TheExactRowsTakeWhatOneDnnCannot) {
  const KernelRegistry& cpu = cpu_backend().kernels();
  std::mt19937 rng(34);
  const ConvData d = make_conv({1, 5, 5, 8, 8, 3, 1, 1, true, true, false, DataType::kFloat32, DataType::kInt8}, rng);
  const KernelDef* chosen = cpu.find(*qconv_node(d)->node);
  ASSERT_NE(chosen, nullptr);
  std::string skip;
  cpu_row("cpu.QConv.i8.onednn", &skip);
  EXPECT_EQ(chosen->name, skip.empty() ? "cpu.QConv.i8.onednn" : "cpu.QConv.i8.exact") << skip;
  if (!skip.empty()) EXPECT_NE(skip.find("VNNI"), std::string::npos) << skip;
  QCase c = make_case(DataType::kUInt8, {4, 32}, 16, true, DataType::kFloat32, DataType::kUInt8, rng);
  const KernelDef* mm = cpu.find(*qmatmul_node(c)->node);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->name, skip.empty() ? "cpu.QMatMul.i8.onednn" : "cpu.QMatMul.i8.exact");
}

}  // namespace
}  // namespace kiln
