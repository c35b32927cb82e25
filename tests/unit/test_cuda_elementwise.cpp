// CUDA backend basics, elementwise kernels and data-movement kernels against naive references.
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <functional>
#include <tuple>
#include <vector>

#include "test_cuda_util.h"

using namespace kiln;
using namespace kiln::cudatest;

namespace {

// Naive numpy broadcasting of a binary function.
Tensor ref_binary(const Tensor& a, const Tensor& b, const std::function<float(float, float)>& f) {
  const size_t r = std::max(a.rank(), b.rank());
  Shape out(r);
  auto dim = [r](const Tensor& t, size_t k) { return k < r - t.rank() ? int64_t{1} : t.shape()[k - (r - t.rank())]; };
  for (size_t k = 0; k < r; ++k) out[k] = std::max(dim(a, k), dim(b, k));
  for (size_t k = 0; k < r; ++k)
    if (dim(a, k) == 0 || dim(b, k) == 0) out[k] = 0;
  Tensor y = Tensor::empty(DataType::kFloat32, out);
  for (int64_t i = 0; i < y.numel(); ++i) {
    int64_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
    for (int k = static_cast<int>(r) - 1; k >= 0; --k) {
      const int64_t c = rem % out[k];
      rem /= out[k];
      if (dim(a, k) != 1) ia += c * sa;
      if (dim(b, k) != 1) ib += c * sb;
      sa *= dim(a, k);
      sb *= dim(b, k);
    }
    y.data<float>()[i] = f(a.data<float>()[ia], b.data<float>()[ib]);
  }
  return y;
}

Tensor ref_map(const Tensor& x, const std::function<float(float)>& f) {
  Tensor y = Tensor::empty(DataType::kFloat32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = f(x.data<float>()[i]);
  return y;
}

}  // namespace

TEST(CudaBackend, FingerprintAndCopies) {
  KILN_REQUIRE_GPU();
  Backend* be = *cuda_backend();
  EXPECT_EQ(be->name(), "cuda");
  const std::string fp = be->fingerprint();
  EXPECT_NE(fp.find("sm_"), std::string::npos) << fp;
  EXPECT_NE(fp.find("cuDNN 9."), std::string::npos) << fp;
  EXPECT_NE(fp.find("cuBLAS"), std::string::npos) << fp;
  std::cout << "fingerprint: " << fp << "\n";
  std::mt19937 rng(1);
  Tensor h = random_tensor({3, 5}, rng);
  auto state = be->create_state();
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  Tensor d1 = Tensor::with_storage(DataType::kFloat32, {3, 5}, *be->allocate(h.nbytes()));
  Tensor d2 = Tensor::with_storage(DataType::kFloat32, {3, 5}, *be->allocate(h.nbytes()));
  EXPECT_EQ(d1.device().type, DeviceType::kCUDA);
  Tensor back = Tensor::empty(DataType::kFloat32, {3, 5});
  ASSERT_TRUE(be->copy(h, d1, state->get()).ok());
  ASSERT_TRUE(be->copy(d1, d2, state->get()).ok());
  ASSERT_TRUE(be->copy(d2, back, state->get()).ok());
  ASSERT_TRUE(be->synchronize(state->get()).ok());
  expect_close(back, h, 0, 0);
  // Synchronous copies (no state) too.
  Tensor back2 = Tensor::empty(DataType::kFloat32, {3, 5});
  ASSERT_TRUE(be->copy(d1, back2, nullptr).ok());
  expect_close(back2, h, 0, 0);
}

// Copies between pageable host memory and the GPU of 1 MiB and more go through the state's pinned
// staging buffers in 8 MiB chunks: sizes around the chunk edges, both directions, back to back (the
// buffers are reused while earlier transfers may still run), and a device-to-device copy between.
TEST(CudaBackend, LargeCopiesThroughStagingBuffers) {
  KILN_REQUIRE_GPU();
  Backend* be = *cuda_backend();
  auto state = be->create_state();
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  for (int64_t bytes : {int64_t{1} << 20, (int64_t{8} << 20) - 4, (int64_t{8} << 20) + 4, (int64_t{16} << 20) + 12,
                        (int64_t{37} << 20) + 8}) {
    const int64_t n = bytes / 4;
    Tensor h = Tensor::empty(DataType::kInt32, {n}), back = Tensor::empty(DataType::kInt32, {n});
    for (int64_t i = 0; i < n; ++i) h.data<int32_t>()[i] = static_cast<int32_t>(i * 2654435761u);
    Tensor d1 = Tensor::with_storage(DataType::kInt32, {n}, *be->allocate(h.nbytes()));
    Tensor d2 = Tensor::with_storage(DataType::kInt32, {n}, *be->allocate(h.nbytes()));
    Tensor h2 = h.clone();
    ASSERT_TRUE(be->copy(h, d1, state->get()).ok());
    ASSERT_TRUE(be->copy(h2, d2, state->get()).ok());  // reuses the staging buffers right away
    ASSERT_TRUE(be->copy(d2, d1, state->get()).ok());
    ASSERT_TRUE(be->copy(d1, back, state->get()).ok());
    ASSERT_TRUE(be->synchronize(state->get()).ok());
    ASSERT_EQ(std::memcmp(back.raw(), h.raw(), h.nbytes()), 0) << bytes << " bytes";
  }
}

TEST(CudaBackend, ChecksRefuseWhatTheyCannotRun) {
  KILN_REQUIRE_GPU();
  Backend* be = *cuda_backend();
  Tensor c64 = Tensor::empty(DataType::kComplex64, {4});
  OneNode add("Add", 14, {c64, c64});
  std::string why;
  EXPECT_EQ(be->kernels().find(*add.node, &why), nullptr);
  EXPECT_NE(why.find("complex64"), std::string::npos) << why;
  std::mt19937 rng(2);
  // A computed (non-constant) Reshape target is a host input: accepted.
  OneNode reshape("Reshape", 14, {random_tensor({2, 3}, rng), int64_tensor({3, 2})}, 1, {false, false});
  EXPECT_NE(be->kernels().find(*reshape.node), nullptr);
  OneNode conv3d("Conv", 11, {random_tensor({1, 1, 3, 3, 3}, rng), random_tensor({1, 1, 2, 2, 2}, rng)});
  EXPECT_EQ(be->kernels().find(*conv3d.node), nullptr);
  OneNode mm("MatMul", 13, {random_tensor({2, 3}, rng), random_tensor({3, 2}, rng)});
  const KernelDef* def = be->kernels().find(*mm.node);
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->name, "cuda.MatMul.cublaslt");
  // kiln.FusedMatMul's output_columns: a half B with a multiple of 8 columns only (else the pass
  // keeps its float32 Slice instead of building a node the kernel would refuse at reshape).
  for (const auto& [cols, dt, ok] : std::vector<std::tuple<int64_t, DataType, bool>>{
           {16, DataType::kFloat16, true}, {16, DataType::kBFloat16, true}, {12, DataType::kFloat16, false},
           {16, DataType::kFloat32, false}}) {
    OneNode f("FusedMatMul", 1, {Tensor::empty(dt, {4, 16}), Tensor::empty(dt, {16, cols})});
    f.node->domain = "kiln";
    f.set_int("output_dtype", static_cast<int64_t>(DataType::kFloat32));
    f.set_int("output_columns", 5);
    EXPECT_EQ(be->kernels().find(*f.node, &why) != nullptr, ok) << cols << " " << dtype_name(dt) << ": " << why;
  }
}

TEST(CudaUnary, MatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(3);
  struct Case {
    const char* op;
    int opset;
    std::function<float(float)> f;
    float lo = -3.f, hi = 3.f;
  };
  const float s2 = std::sqrt(2.f);
  const std::vector<Case> cases = {
      {"Relu", 14, [](float x) { return std::max(x, 0.f); }},
      {"Sigmoid", 13, [](float x) { return 1.f / (1.f + std::exp(-x)); }},
      {"Tanh", 13, [](float x) { return std::tanh(x); }},
      {"Exp", 13, [](float x) { return std::exp(x); }},
      {"Log", 13, [](float x) { return std::log(x); }, 0.01f, 10.f},
      {"Sqrt", 13, [](float x) { return std::sqrt(x); }, 0.f, 10.f},
      {"Abs", 13, [](float x) { return std::fabs(x); }},
      {"Neg", 13, [](float x) { return -x; }},
      {"Erf", 13, [](float x) { return std::erf(x); }},
      {"LeakyRelu", 16, [](float x) { return x >= 0 ? x : 0.01f * x; }},
      {"HardSigmoid", 6, [](float x) { return std::clamp(0.2f * x + 0.5f, 0.f, 1.f); }},
      {"HardSwish", 14, [](float x) { return x * std::clamp(x / 6.f + 0.5f, 0.f, 1.f); }},
      {"Gelu", 20, [s2](float x) { return 0.5f * x * (1.f + std::erf(x / s2)); }},
  };
  for (const Case& c : cases) {
    for (const Shape& shape : {Shape{1000}, Shape{2, 3, 7}, Shape{0, 4}, Shape{}}) {
      Tensor x = random_tensor(shape, rng, c.lo, c.hi);
      OneNode n(c.op, c.opset, {x});
      check_node(*n.node, {x}, ref_map(x, c.f), 1e-5f, 1e-5f, std::string(c.op) + " " + shape_to_string(shape));
    }
  }
}

TEST(CudaUnary, AttributesAndClip) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(4);
  Tensor x = random_tensor({5, 40}, rng, -8, 8);
  {
    OneNode n("LeakyRelu", 16, {x});
    n.set_float("alpha", 0.3f);
    check_node(*n.node, {x}, ref_map(x, [](float v) { return v >= 0 ? v : 0.3f * v; }), 1e-6f, 1e-6f, "LeakyRelu");
  }
  {
    OneNode n("HardSigmoid", 6, {x});
    n.set_float("alpha", 0.1f);
    n.set_float("beta", 0.4f);
    check_node(*n.node, {x}, ref_map(x, [](float v) { return std::clamp(0.1f * v + 0.4f, 0.f, 1.f); }), 1e-6f, 1e-6f);
  }
  {
    OneNode n("Gelu", 20, {x});
    n.set_string("approximate", "tanh");
    auto f = [](float v) { return 0.5f * v * (1.f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v))); };
    check_node(*n.node, {x}, ref_map(x, f), 1e-5f, 1e-5f, "Gelu tanh");
  }
  {
    OneNode n("Clip", 13, {x, scalar_f32(-1.5f), scalar_f32(2.f)}, 1, {false, true, true});
    check_node(*n.node, {x, scalar_f32(-1.5f), scalar_f32(2.f)}, ref_map(x, [](float v) { return std::clamp(v, -1.5f, 2.f); }),
               0, 0, "Clip 13");
  }
  {
    OneNode n("Clip", 13, {x, Tensor(), scalar_f32(1.f)}, 1, {false, false, true});
    check_node(*n.node, {x, Tensor(), scalar_f32(1.f)}, ref_map(x, [](float v) { return std::min(v, 1.f); }), 0, 0,
               "Clip max only");
  }
  {
    OneNode n("Clip", 6, {x});
    n.set_float("min", -0.5f);
    n.set_float("max", 0.5f);
    check_node(*n.node, {x}, ref_map(x, [](float v) { return std::clamp(v, -0.5f, 0.5f); }), 0, 0, "Clip 6");
  }
  {  // a computed bound is a host input, read while planning
    OneNode n("Clip", 13, {x, scalar_f32(-1.f)}, 1, {false, false});
    check_node(*n.node, {x, scalar_f32(-1.f)}, ref_map(x, [](float v) { return std::max(v, -1.f); }), 0, 0, "Clip computed min");
  }
}

TEST(CudaBinary, BroadcastMatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(5);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}},       {{2, 1, 4}, {3, 1}},     {{}, {5}},
      {{0, 3}, {3}},          {{3, 1, 5}, {1, 4, 1}}, {{1}, {2, 2}},           {{2, 1, 2, 1, 2, 1, 2, 3}, {2, 1, 2, 1, 2, 1, 3}},
  };
  struct Op {
    const char* name;
    std::function<float(float, float)> f;
  };
  const std::vector<Op> ops = {
      {"Add", [](float a, float b) { return a + b; }}, {"Sub", [](float a, float b) { return a - b; }},
      {"Mul", [](float a, float b) { return a * b; }}, {"Div", [](float a, float b) { return a / b; }},
      {"Pow", [](float a, float b) { return std::pow(a, b); }}, {"Max", [](float a, float b) { return std::max(a, b); }},
      {"Min", [](float a, float b) { return std::min(a, b); }},
  };
  for (const Op& op : ops) {
    for (const auto& [sa, sb] : shapes) {
      const bool pow = std::string(op.name) == "Pow";
      Tensor a = random_tensor(sa, rng, pow ? 0.1f : -2.f, 2.f);
      Tensor b = random_tensor(sb, rng, pow ? -2.f : 0.5f, 2.f);
      OneNode n(op.name, 13, {a, b});
      check_node(*n.node, {a, b}, ref_binary(a, b, op.f), 1e-5f, 1e-5f,
                 std::string(op.name) + " " + shape_to_string(sa) + " " + shape_to_string(sb));
    }
  }
}

TEST(CudaBinary, VariadicMaxMin) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(6);
  Tensor a = random_tensor({3, 1}, rng), b = random_tensor({4}, rng), c = random_tensor({2, 1, 1}, rng);
  auto mx = [](float x, float y) { return std::max(x, y); };
  auto mn = [](float x, float y) { return std::min(x, y); };
  OneNode n("Max", 13, {a, b, c});
  check_node(*n.node, {a, b, c}, ref_binary(ref_binary(a, b, mx), c, mx), 0, 0, "Max3");
  OneNode m("Min", 13, {a, b, c});
  check_node(*m.node, {a, b, c}, ref_binary(ref_binary(a, b, mn), c, mn), 0, 0, "Min3");
  OneNode one("Max", 13, {a});
  check_node(*one.node, {a}, a, 0, 0, "Max1");
}

TEST(CudaShape, ReshapeFlattenSqueezeUnsqueezeIdentity) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(7);
  Tensor x = random_tensor({2, 3, 4}, rng);
  {
    Tensor s = int64_tensor({0, -1, 2});
    OneNode n("Reshape", 14, {x, s}, 1, {false, true});
    check_node(*n.node, {x, s}, x.clone().reshaped({2, 6, 2}), 0, 0, "Reshape");
  }
  {
    OneNode n("Flatten", 13, {x});
    n.set_int("axis", -1);
    check_node(*n.node, {x}, x.clone().reshaped({6, 4}), 0, 0, "Flatten");
  }
  Tensor y = random_tensor({1, 3, 1, 4}, rng);
  {
    OneNode n("Squeeze", 11, {y});
    check_node(*n.node, {y}, y.clone().reshaped({3, 4}), 0, 0, "Squeeze all");
  }
  {
    Tensor axes = int64_tensor({-2});
    OneNode n("Squeeze", 13, {y, axes}, 1, {false, true});
    check_node(*n.node, {y, axes}, y.clone().reshaped({1, 3, 4}), 0, 0, "Squeeze 13");
  }
  {
    Tensor axes = int64_tensor({0, -1});
    OneNode n("Unsqueeze", 13, {x, axes}, 1, {false, true});
    check_node(*n.node, {x, axes}, x.clone().reshaped({1, 2, 3, 4, 1}), 0, 0, "Unsqueeze 13");
  }
  {
    OneNode n("Unsqueeze", 11, {x});
    n.set_ints("axes", {1});
    check_node(*n.node, {x}, x.clone().reshaped({2, 1, 3, 4}), 0, 0, "Unsqueeze 11");
  }
  {
    OneNode n("Identity", 16, {x});
    check_node(*n.node, {x}, x, 0, 0, "Identity");
  }
}

TEST(CudaShape, TransposeAndConcat) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(8);
  Tensor x = random_tensor({2, 3, 4, 5}, rng);
  const std::vector<int64_t> perm = {2, 0, 3, 1};
  Tensor want = Tensor::empty(DataType::kFloat32, {4, 2, 5, 3});
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 5; ++d)
          want.data<float>()[((c * 2 + a) * 5 + d) * 3 + b] = x.data<float>()[((a * 3 + b) * 4 + c) * 5 + d];
  OneNode n("Transpose", 13, {x});
  n.set_ints("perm", perm);
  check_node(*n.node, {x}, want, 0, 0, "Transpose");
  Tensor m = random_tensor({3, 7}, rng);
  Tensor mt = Tensor::empty(DataType::kFloat32, {7, 3});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 7; ++j) mt.data<float>()[j * 3 + i] = m.data<float>()[i * 7 + j];
  OneNode t2("Transpose", 13, {m});  // default perm reverses
  check_node(*t2.node, {m}, mt, 0, 0, "Transpose default");

  for (int64_t axis : {0, 1, -1}) {
    // a is 3 long on every axis, b 4 along the concat axis: the output is 7 long there.
    Tensor a = random_tensor({3, 3, 3}, rng), e = random_tensor({3, 0, 3}, rng);
    const int64_t ax = axis < 0 ? axis + 3 : axis;
    Shape sb = {3, 3, 3};
    sb[ax] = 4;
    Tensor b = random_tensor(sb, rng);
    Shape so = {3, 3, 3};
    so[ax] = 7;
    Tensor want_c = Tensor::empty(DataType::kFloat32, so);
    for (int64_t i = 0; i < want_c.numel(); ++i) {
      int64_t idx[3], rem = i;
      for (int k = 2; k >= 0; --k) {
        idx[k] = rem % so[k];
        rem /= so[k];
      }
      const bool first = idx[ax] < 3;
      const Tensor& src = first ? a : b;
      if (!first) idx[ax] -= 3;
      const Shape& ss = src.shape();
      want_c.data<float>()[i] = src.data<float>()[(idx[0] * ss[1] + idx[1]) * ss[2] + idx[2]];
    }
    std::vector<Tensor> ins = {a, b};
    if (axis == 1) ins = {a, e, b};  // an empty input contributes nothing
    OneNode c("Concat", 13, ins);
    c.set_int("axis", axis);
    check_node(*c.node, ins, want_c, 0, 0, "Concat axis " + std::to_string(axis));
  }
}

// Split makes every output it names, the empty ones too: a zero split size (onnx's
// test_split_zero_size_splits_* errored on the H200 with "output 0 is not a tensor" after Split
// became one launch that skipped them), and an input with no rows (every output empty).
TEST(CudaShape, SplitMakesEmptyOutputs) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(21);
  Tensor x = random_tensor({4, 5}, rng);
  OneNode n("Split", 13, {x, int64_tensor({2, 0, 3})}, 3, {false, true});
  n.set_int("axis", 1);
  auto out = run_cuda(*n.node, {x, int64_tensor({2, 0, 3})});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 3u);
  const int64_t widths[3] = {2, 0, 3}, starts[3] = {0, 2, 2};
  for (int k = 0; k < 3; ++k) {
    const Tensor& y = (*out)[k];
    ASSERT_TRUE(y.defined()) << "output " << k;
    ASSERT_EQ(y.shape(), (Shape{4, widths[k]})) << "output " << k;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < widths[k]; ++j)
        EXPECT_EQ(y.data<float>()[i * widths[k] + j], x.data<float>()[i * 5 + starts[k] + j]) << k << " " << i << " " << j;
  }
  Tensor none = Tensor::empty(DataType::kFloat32, {0, 5});
  OneNode e("Split", 13, {none, int64_tensor({1, 4})}, 2, {false, true});
  e.set_int("axis", 1);
  auto empty = run_cuda(*e.node, {none, int64_tensor({1, 4})});
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  ASSERT_EQ(empty->size(), 2u);
  EXPECT_TRUE((*empty)[0].defined() && (*empty)[0].shape() == (Shape{0, 1}));
  EXPECT_TRUE((*empty)[1].defined() && (*empty)[1].shape() == (Shape{0, 4}));
}

// Concat in one launch per 32 inputs, each input's rows moved in the widest pieces its alignment
// allows: 40 inputs of float16 channels-last rows (some 8-channel, 16-byte pieces; some 3-channel,
// 2-byte pieces), uint8 rows of odd widths, and int64 along axis 0 (one row) — bit for bit with the
// CPU kernel.
TEST(CudaShape, ConcatManyInputsAnyAlignment) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(77);
  std::uniform_int_distribution<int> byte(0, 255);
  auto random_bytes = [&](DataType dt, const Shape& s) {
    Tensor t = Tensor::empty(dt, s);
    auto* p = static_cast<uint8_t*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(byte(rng));
    if (dt == DataType::kFloat16)  // finite values only (NaN bit patterns compare by bits anyway)
      for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] &= 0x3fff;
    return t;
  };
  std::vector<Tensor> halves;
  for (int i = 0; i < 40; ++i) halves.push_back(random_bytes(DataType::kFloat16, {2, 5, 7, i % 3 == 0 ? 3 : 8}));
  OneNode h("Concat", 13, halves);
  h.set_int("axis", 3);
  expect_all_same(*h.node, halves, "Concat of 40 float16 NHWC inputs");
  std::vector<Tensor> bytes = {random_bytes(DataType::kUInt8, {4, 3, 5}), random_bytes(DataType::kUInt8, {4, 1, 5}),
                               random_bytes(DataType::kUInt8, {4, 7, 5})};
  OneNode u("Concat", 13, bytes);
  u.set_int("axis", 1);
  expect_all_same(*u.node, bytes, "Concat of uint8 rows of 15, 5 and 35 bytes");
  std::vector<Tensor> longs = {random_bytes(DataType::kInt64, {3, 2}), random_bytes(DataType::kInt64, {1, 2})};
  OneNode l("Concat", 13, longs);
  l.set_int("axis", 0);
  expect_all_same(*l.node, longs, "Concat of int64 along axis 0");
}
