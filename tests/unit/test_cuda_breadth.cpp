// The CUDA kernels added for breadth against the CPU kernels (which pass onnx's node suite), on random
// inputs of shapes the node suite does not use: every output of each node, float32 within 1e-5
// (float64 1e-12), integer and bool outputs bit for bit. onnx's own cases for the same ops run on the
// GPU through `kiln conform` (tests/gpu/cuda_conformance.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "ir/float_types.h"
#include "test_cuda_util.h"

namespace kiln::cudatest {
namespace {

template <typename T>
Tensor filled(DataType dt, const Shape& shape, const std::function<T(int64_t)>& f) {
  Tensor t = Tensor::empty(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<T>()[i] = f(i);
  return t;
}
Tensor i64(const Shape& shape, const std::function<int64_t(int64_t)>& f) { return filled<int64_t>(DataType::kInt64, shape, f); }
Tensor f64(const Shape& shape, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-2, 2);
  return filled<double>(DataType::kFloat64, shape, [&](int64_t) { return u(rng); });
}

TEST(CudaBreadth, IndexOpsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(101);
  Tensor x = random_tensor({4, 5, 6}, rng);
  for (int64_t axis : {0, 1, 2, -1}) {
    const int64_t dim = x.dim(static_cast<int>((axis + 3) % 3));
    Tensor ind = i64({3, 4, 5}, [&](int64_t) { return static_cast<int64_t>(rng() % (2 * dim)) - dim; });
    OneNode g("GatherElements", 13, {x, ind});
    g.set_int("axis", axis);
    expect_all_same(*g.node, {x, ind}, "GatherElements axis " + std::to_string(axis));
  }
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    // Distinct indices along the axis for "none" (duplicates leave the winner unspecified).
    Tensor ind = i64({4, 2, 6}, [&](int64_t i) { return std::string(red) == "none" ? (i / 6) % 2 * 2 : static_cast<int64_t>(rng() % 5); });
    Tensor upd = random_tensor({4, 2, 6}, rng);
    OneNode s("ScatterElements", 18, {x, ind, upd});
    s.set_int("axis", 1);
    s.set_string("reduction", red);
    expect_all_same(*s.node, {x, ind, upd}, std::string("ScatterElements ") + red);
    Tensor nd_ind = i64({3, 2}, [&](int64_t i) { return std::string(red) == "none" ? (i % 2 ? i / 2 : 1) : static_cast<int64_t>(rng() % 4); });
    Tensor nd_upd = random_tensor({3, 6}, rng);
    OneNode snd("ScatterND", 18, {x, nd_ind, nd_upd});
    snd.set_string("reduction", red);
    expect_all_same(*snd.node, {x, nd_ind, nd_upd}, std::string("ScatterND ") + red);
  }
  for (int64_t b : {0, 1}) {
    Tensor ind = b ? i64({4, 3, 1}, [&](int64_t) { return static_cast<int64_t>(rng() % 5); })
                   : i64({2, 3, 2}, [&](int64_t i) { return static_cast<int64_t>(rng() % (i % 2 ? 5 : 4)); });
    OneNode g("GatherND", 13, {x, ind});
    g.set_int("batch_dims", b);
    expect_all_same(*g.node, {x, ind}, "GatherND batch_dims " + std::to_string(b));
  }
}

TEST(CudaBreadth, LossesMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(102);
  Tensor scores = random_tensor({3, 5, 4}, rng);
  Tensor labels = i64({3, 4}, [&](int64_t) { return static_cast<int64_t>(rng() % 5); });
  labels.data<int64_t>()[2] = 1;  // the ignored class appears
  Tensor weights = random_tensor({5}, rng, 0.5f, 1.5f);
  for (const char* op : {"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"})
    for (const char* red : {"none", "sum", "mean"})
      for (int weighted = 0; weighted < 2; ++weighted) {
        const bool sce = std::string(op)[0] == 'S';
        std::vector<Tensor> in = {scores, labels};
        if (weighted) in.push_back(weights);
        OneNode n(op, 13, in, sce ? 2 : 1);
        n.set_string("reduction", red);
        n.set_int("ignore_index", 1);
        expect_all_same(*n.node, in, std::string(op) + " " + red + (weighted ? " weighted" : ""));
      }
}

TEST(CudaBreadth, AttentionOpMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(103);
  // GQA 4 query heads over 2 kv heads, past keys, a float mask broadcast over heads, causal, softcap,
  // every qk output mode; then packed 3-D inputs with a bool mask.
  Tensor q = random_tensor({2, 4, 3, 8}, rng), k = random_tensor({2, 2, 5, 8}, rng), v = random_tensor({2, 2, 5, 6}, rng);
  Tensor pk = random_tensor({2, 2, 2, 8}, rng), pv = random_tensor({2, 2, 2, 6}, rng);
  Tensor mask = random_tensor({2, 1, 3, 7}, rng);
  for (int mode = 0; mode < 4; ++mode) {
    std::vector<Tensor> in = {q, k, v, mask, pk, pv};
    OneNode n("Attention", 23, in, 4);
    n.set_int("is_causal", 1);
    n.set_float("softcap", 3.0f);
    n.set_int("qk_matmul_output_mode", mode);
    expect_all_same(*n.node, in, "Attention 4-D mode " + std::to_string(mode));
  }
  Tensor q3 = random_tensor({2, 3, 4 * 8}, rng), k3 = random_tensor({2, 5, 2 * 8}, rng), v3 = random_tensor({2, 5, 2 * 6}, rng);
  Tensor bmask = filled<bool>(DataType::kBool, {3, 5}, [&](int64_t i) { return i % 3 != 1; });
  std::vector<Tensor> in = {q3, k3, v3, bmask};
  OneNode n("Attention", 23, in, 1);
  n.set_int("q_num_heads", 4);
  n.set_int("kv_num_heads", 2);
  n.set_float("scale", 0.3f);
  expect_all_same(*n.node, in, "Attention 3-D bool mask");
}

TEST(CudaBreadth, PadTileCropMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(104);
  Tensor x = random_tensor({2, 3, 4, 5}, rng);
  Tensor pads = i64({8}, [](int64_t i) { const int64_t p[8] = {0, 1, 3, -1, 1, 0, 2, 6}; return p[i]; });
  Tensor value = filled<float>(DataType::kFloat32, {}, [](int64_t) { return 1.5f; });
  for (const char* mode : {"constant", "reflect", "edge", "wrap"}) {
    std::vector<Tensor> in = {x, pads, value};
    OneNode n("Pad", 19, in, 1, {false, true, true});
    n.set_string("mode", mode);
    expect_all_same(*n.node, in, std::string("Pad ") + mode);
  }
  Tensor reps = i64({4}, [](int64_t i) { return i == 0 ? 1 : i + 1; });
  OneNode t("Tile", 13, {x, reps}, 1, {false, true});
  expect_all_same(*t.node, {x, reps}, "Tile");
  Tensor target = i64({2}, [](int64_t i) { return i ? 8 : 3; });
  OneNode c("CenterCropPad", 18, {x, target}, 1, {false, true});
  c.set_ints("axes", {2, 3});
  expect_all_same(*c.node, {x, target}, "CenterCropPad");
}

TEST(CudaBreadth, PoolingGridAndConvTransposeMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(105);
  Tensor x3 = random_tensor({1, 2, 5, 6, 7}, rng);
  for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) {
    OneNode n(op, 18, {x3}, std::string(op) == "MaxPool" ? 2 : 1);
    n.set_ints("kernel_shape", {2, 3, 2});
    n.set_ints("strides", {2, 1, 2});
    n.set_ints("pads", {1, 0, 1, 0, 1, 1});
    if (std::string(op) == "MaxPool") n.set_ints("dilations", {1, 2, 1});
    if (std::string(op) == "AveragePool") n.set_int("count_include_pad", 1);
    if (std::string(op) == "LpPool") n.set_int("p", 3);
    expect_all_same(*n.node, {x3}, std::string(op) + " 3-D");
  }
  Tensor x = random_tensor({2, 3, 5, 6}, rng);
  Tensor grid = random_tensor({2, 4, 7, 2}, rng, -1.2f, 1.2f);
  for (const char* mode : {"linear", "nearest", "cubic"})
    for (const char* pad : {"zeros", "border", "reflection"}) {
      OneNode n("GridSample", 20, {x, grid});
      n.set_string("mode", mode);
      n.set_string("padding_mode", pad);
      n.set_int("align_corners", std::string(pad) == "border");
      expect_all_same(*n.node, {x, grid}, std::string("GridSample ") + mode + " " + pad);
    }
  Tensor w = random_tensor({3, 2, 3, 2}, rng), b = random_tensor({6}, rng);
  OneNode ct("ConvTranspose", 11, {x, w, b});
  ct.set_int("group", 3);
  ct.set_ints("strides", {2, 3});
  ct.set_ints("dilations", {1, 2});
  ct.set_ints("pads", {1, 0, 0, 1});
  ct.set_ints("output_padding", {1, 0});
  expect_all_same(*ct.node, {x, w, b}, "ConvTranspose groups strides dilations");
}

TEST(CudaBreadth, QuantizeAndDequantizeMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(106);
  Tensor x = random_tensor({3, 4, 6}, rng, -20.f, 20.f);
  Tensor scale_axis = random_tensor({4}, rng, 0.05f, 0.3f);
  for (DataType q : {DataType::kInt8, DataType::kUInt8, DataType::kInt16, DataType::kInt4, DataType::kFloat8E4M3FN}) {
    Tensor zp = Tensor::empty(q, {4});
    std::memset(zp.raw(), 0, zp.nbytes());
    if (q == DataType::kUInt8) for (int i = 0; i < 4; ++i) zp.data<uint8_t>()[i] = static_cast<uint8_t>(100 + i);
    std::vector<Tensor> in = {x, scale_axis, zp};
    OneNode n("QuantizeLinear", 21, in);
    n.set_int("axis", 1);
    expect_all_same(*n.node, in, std::string("QuantizeLinear per axis to ") + dtype_name(q));
    auto quantized = run_node_eager(*n.node, {Slot::of(x), Slot::of(scale_axis), Slot::of(zp)});
    ASSERT_TRUE(quantized.ok());
    std::vector<Tensor> din = {(*quantized)[0].tensor, scale_axis, zp};
    OneNode d("DequantizeLinear", 21, din);
    d.set_int("axis", 1);
    expect_all_same(*d.node, din, std::string("DequantizeLinear per axis from ") + dtype_name(q));
  }
  Tensor scale_blocked = random_tensor({3, 4, 2}, rng, 0.05f, 0.3f);
  OneNode b("QuantizeLinear", 21, {x, scale_blocked});
  b.set_int("axis", 2);
  b.set_int("block_size", 3);
  expect_all_same(*b.node, {x, scale_blocked}, "QuantizeLinear blocked");
}

// The per-tensor path INT8 engines take (float32/float16 x, one float32 scale, int8/uint8 out, four
// values a thread) and the general kernel (a length not divisible by 4) agree with the CPU bit for
// bit, NaN, infinities and saturation included.
TEST(CudaBreadth, PerTensorQuantizeMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(108);
  for (const int64_t last : {12, 7}) {
    Tensor x = random_tensor({8, 33, last}, rng, -40.f, 40.f);
    float* xv = x.data<float>();
    xv[0] = std::nanf("");
    xv[1] = INFINITY;
    xv[2] = -INFINITY;
    xv[3] = 1e30f;
    xv[5] = 0.25f;  // exactly half a step at scale 0.5: rounds to even
    Tensor xh = Tensor::empty(DataType::kFloat16, x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) xh.data<uint16_t>()[i] = f32_to_f16(xv[i]);
    Tensor scale = filled<float>(DataType::kFloat32, {}, [](int64_t) { return 0.5f; });
    for (const Tensor* in : {&x, &xh})
      for (DataType q : {DataType::kInt8, DataType::kUInt8}) {
        Tensor zp = Tensor::empty(q, {});
        if (q == DataType::kInt8) zp.data<int8_t>()[0] = 3;
        else zp.data<uint8_t>()[0] = 128;
        const std::string what = std::string("QuantizeLinear per tensor ") + dtype_name(in->dtype()) + " to " + dtype_name(q) +
                                 ", last dim " + std::to_string(last);
        OneNode n("QuantizeLinear", 21, {*in, scale, zp});
        expect_all_same(*n.node, {*in, scale, zp}, what);
        OneNode no_zp("QuantizeLinear", 21, {*in, scale});
        expect_all_same(*no_zp.node, {*in, scale}, what + ", no zero point");
      }
  }
}

TEST(CudaBreadth, SmallOpsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(107);
  Tensor x = random_tensor({3, 4, 5}, rng);
  {
    OneNode n("Hardmax", 13, {x});
    n.set_int("axis", 1);
    expect_all_same(*n.node, {x}, "Hardmax");
  }
  {
    OneNode n("LpNormalization", 1, {x});
    n.set_int("axis", 1);
    n.set_int("p", 1);
    expect_all_same(*n.node, {x}, "LpNormalization p=1");
  }
  Tensor d = f64({4, 7}, rng);
  for (const char* op : {"Exp", "Tanh", "Sigmoid", "Erf", "Asinh", "Softplus"}) {
    OneNode n(op, 13, {d});
    expect_all_same(*n.node, {d}, std::string(op) + " float64");
  }
  {
    Tensor ind = i64({2, 3}, [&](int64_t) { return static_cast<int64_t>(rng() % 9) - 4; });
    Tensor depth = i64({}, [](int64_t) { return 5; });
    Tensor values = filled<float>(DataType::kFloat32, {2}, [](int64_t i) { return i ? 7.f : -1.f; });
    OneNode n("OneHot", 11, {ind, depth, values}, 1, {false, true, false});
    n.set_int("axis", 1);
    expect_all_same(*n.node, {ind, depth, values}, "OneHot");
  }
  {
    Tensor a = filled<uint32_t>(DataType::kUInt32, {2, 5}, [&](int64_t) { return static_cast<uint32_t>(rng()); });
    Tensor s = filled<uint32_t>(DataType::kUInt32, {5}, [](int64_t i) { return static_cast<uint32_t>(i * 9); });
    for (const char* dir : {"LEFT", "RIGHT"}) {
      OneNode n("BitShift", 11, {a, s});
      n.set_string("direction", dir);
      expect_all_same(*n.node, {a, s}, std::string("BitShift ") + dir);
    }
  }
  {
    Tensor exp5 = i64({5}, [](int64_t i) { return i % 4; });
    OneNode p("Pow", 15, {x, exp5});
    expect_all_same(*p.node, {x, exp5}, "Pow float by int64");
  }
  {
    Tensor a = random_tensor({3, 1, 5}, rng), b = random_tensor({4, 5}, rng);
    OneNode n("Mean", 13, {x, a, b});
    expect_all_same(*n.node, {x, a, b}, "Mean of three");
  }
}

TEST(CudaBreadth, SequenceOpsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(108);
  {
    Tensor x = random_tensor({2, 3, 4 * 8}, rng);
    Tensor pos = i64({2, 3}, [](int64_t i) { return (i * 5) % 9; });
    Tensor cs = random_tensor({9, 3}, rng), sn = random_tensor({9, 3}, rng);
    for (int inter = 0; inter < 2; ++inter) {
      OneNode n("RotaryEmbedding", 23, {x, cs, sn, pos});
      n.set_int("num_heads", 4);
      n.set_int("rotary_embedding_dim", 6);
      n.set_int("interleaved", inter);
      expect_all_same(*n.node, {x, cs, sn, pos}, "RotaryEmbedding interleaved " + std::to_string(inter));
    }
  }
  {
    Tensor x = random_tensor({2, 3, 6}, rng), w = random_tensor({3, 1, 4}, rng), b = random_tensor({3}, rng);
    Tensor past = random_tensor({2, 3, 3}, rng);
    OneNode n("CausalConvWithState", 27, {x, w, b, past}, 2);
    n.set_string("activation", "silu");
    expect_all_same(*n.node, {x, w, b, past}, "CausalConvWithState");
  }
  {
    const int64_t B = 2, T = 4, Hq = 4, Hk = 2, dk = 3, dv = 5;
    Tensor q = random_tensor({B, T, Hq * dk}, rng), k = random_tensor({B, T, Hk * dk}, rng, -0.5f, 0.5f);
    Tensor v = random_tensor({B, T, Hk * dv}, rng), past = random_tensor({B, Hk, dk, dv}, rng);
    Tensor decay = random_tensor({B, T, Hk * dk}, rng, -0.5f, 0.f), beta = random_tensor({B, T, Hk}, rng, 0.f, 1.f);
    std::vector<Tensor> in = {q, k, v, past, decay, beta};
    OneNode n("LinearAttention", 27, in, 2);
    n.set_int("q_num_heads", Hq);
    n.set_int("kv_num_heads", Hk);
    expect_all_same(*n.node, in, "LinearAttention gated_delta");
  }
}

Tensor q8(DataType dt, const Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(dt, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  return t;
}
Tensor scalar_of(DataType dt, double v) {
  Tensor t = Tensor::empty(dt, {});
  if (dt == DataType::kFloat32) t.data<float>()[0] = static_cast<float>(v);
  else if (dt == DataType::kInt8) t.data<int8_t>()[0] = static_cast<int8_t>(v);
  else if (dt == DataType::kUInt8) t.data<uint8_t>()[0] = static_cast<uint8_t>(v);
  else t.data<int64_t>()[0] = static_cast<int64_t>(v);
  return t;
}

// TopK on CUDA (a block sorting each line in shared memory up to 4,096 elements, a block selecting
// beyond) against the CPU kernel: lines of every size class (SSDlite's 3,234 scores with k = 300), the
// axis in the middle, ties, NaN, -0 and +0, int64 values that double cannot tell apart.
TEST(CudaBreadth, TopKMatchesTheCpuOnLongLinesTiesAndNaN) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(331);
  std::uniform_int_distribution<int> small(-4, 4);  // many ties
  struct Case {
    Shape shape;
    int64_t axis, k;
  };
  const Case cases[] = {{{3234}, 0, 300}, {{2, 4096}, 1, 4096}, {{3, 5000}, 1, 300}, {{2, 5000}, 1, 5000},
                        {{4, 37, 3}, 1, 37}, {{1, 1}, 1, 1}, {{6, 700, 2}, 1, 9}};
  for (const Case& c : cases) {
    for (int largest = 0; largest < 2; ++largest) {
      Tensor x = random_tensor(c.shape, rng);
      float* xf = x.data<float>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (i % 3 == 0) xf[i] = static_cast<float>(small(rng));  // ties, +0
        if (i % 97 == 5) xf[i] = -0.0f;
        if (i % 211 == 7) xf[i] = std::nanf("");
      }
      Tensor k = i64({1}, [&](int64_t) { return c.k; });
      OneNode n("TopK", 11, {x, k}, 2, {false, true});
      n.set_int("axis", c.axis);
      n.set_int("largest", largest);
      expect_all_same(*n.node, {x, k}, "TopK float32 " + shape_to_string(c.shape) + " k " + std::to_string(c.k) +
                                           " largest " + std::to_string(largest));
    }
  }
  // int64 beyond 2^53: neighbours double would round together.
  Tensor big = i64({5000}, [](int64_t i) { return (int64_t{1} << 60) + (i * 7919) % 5000 - (i % 2 ? 3 * i : 0); });
  Tensor big_short = i64({2, 1000}, [](int64_t i) { return (int64_t{1} << 60) + (i * 7919) % 1000; });
  for (const Tensor& x : {big, big_short})
    for (int largest = 0; largest < 2; ++largest) {
      Tensor k = i64({1}, [](int64_t) { return 50; });
      OneNode n("TopK", 11, {x, k}, 2, {false, true});
      n.set_int("axis", -1);
      n.set_int("largest", largest);
      expect_all_same(*n.node, {x, k}, "TopK int64 " + shape_to_string(x.shape()) + " largest " + std::to_string(largest));
    }
}

TEST(CudaBreadth, SelectionTransformsAndContractionsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(109);
  Tensor x = random_tensor({3, 7, 4}, rng);
  x.data<float>()[5] = x.data<float>()[9];  // a tie
  for (int largest = 0; largest < 2; ++largest) {
    Tensor k = i64({1}, [](int64_t) { return 3; });
    OneNode n("TopK", 11, {x, k}, 2, {false, true});
    n.set_int("axis", 1);
    n.set_int("largest", largest);
    expect_all_same(*n.node, {x, k}, "TopK largest " + std::to_string(largest));
  }
  {
    Tensor sig = random_tensor({2, 6, 3, 2}, rng);
    for (int inverse = 0; inverse < 2; ++inverse) {
      OneNode n("DFT", 17, {sig});
      n.set_int("axis", 1);
      n.set_int("inverse", inverse);
      expect_all_same(*n.node, {sig}, "DFT inverse " + std::to_string(inverse));
    }
    Tensor real = random_tensor({2, 8, 1}, rng);
    OneNode n("DFT", 17, {real});
    n.set_int("onesided", 1);
    expect_all_same(*n.node, {real}, "DFT onesided");
  }
  {
    Tensor cols = random_tensor({2, 3 * 4, 20}, rng);  // 4x5 image, 2x2 blocks, pads: 4x5 block positions
    Tensor img = i64({2}, [](int64_t i) { return i ? 5 : 4; }), blk = i64({2}, [](int64_t) { return 2; });
    OneNode n("Col2Im", 18, {cols, img, blk}, 1, {false, true, true});
    n.set_ints("pads", {0, 1, 1, 0});
    expect_all_same(*n.node, {cols, img, blk}, "Col2Im");
  }
  {
    Tensor a = random_tensor({2, 3, 4}, rng), b = random_tensor({2, 4, 5}, rng), c = random_tensor({3, 3}, rng);
    OneNode n("Einsum", 12, {a, b});
    n.set_string("equation", "bij,bjk->bik");
    expect_all_same(*n.node, {a, b}, "Einsum batched matmul");
    OneNode d("Einsum", 12, {c});
    d.set_string("equation", "ii->i");
    expect_all_same(*d.node, {c}, "Einsum diagonal");
    OneNode e("Einsum", 12, {a});
    e.set_string("equation", "...j->...");
    expect_all_same(*e.node, {a}, "Einsum ellipsis sum");
  }
  {
    Tensor a = f64({2, 3, 4}, rng), b = f64({4, 2}, rng);
    OneNode n("MatMul", 13, {a, b});
    expect_all_same(*n.node, {a, b}, "MatMul float64 broadcast");
  }
}

TEST(CudaBreadth, QuantizedMatMulAndConvMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(110);
  for (DataType t : {DataType::kInt8, DataType::kUInt8}) {
    Tensor a = q8(t, {2, 3, 5}, rng), b = q8(t, {5, 4}, rng);
    Tensor az = scalar_of(t, 3), bz = scalar_of(t, 7);
    OneNode mi("MatMulInteger", 10, {a, b, az, bz});
    expect_all_same(*mi.node, {a, b, az, bz}, std::string("MatMulInteger ") + dtype_name(t));
    Tensor sa = scalar_of(DataType::kFloat32, 0.02), sb = scalar_of(DataType::kFloat32, 0.05), sy = scalar_of(DataType::kFloat32, 0.3);
    Tensor zy = scalar_of(t, t == DataType::kUInt8 ? 128 : -3);
    std::vector<Tensor> in = {a, sa, az, b, sb, bz, sy, zy};
    OneNode ql("QLinearMatMul", 10, in);
    expect_all_same(*ql.node, in, std::string("QLinearMatMul ") + dtype_name(t));
    Tensor x = q8(t, {1, 4, 6, 5}, rng), w = q8(t, {6, 2, 3, 3}, rng);
    OneNode ci("ConvInteger", 10, {x, w, az, bz});
    ci.set_int("group", 2);
    ci.set_ints("pads", {1, 0, 1, 2});
    expect_all_same(*ci.node, {x, w, az, bz}, std::string("ConvInteger ") + dtype_name(t));
    Tensor wscale = random_tensor({6}, rng, 0.01f, 0.05f);
    Tensor wzero = Tensor::empty(t, {6});
    std::memset(wzero.raw(), 0, wzero.nbytes());
    Tensor bias = filled<int32_t>(DataType::kInt32, {6}, [&](int64_t i) { return static_cast<int32_t>(i * 37) - 90; });
    std::vector<Tensor> qin = {x, sa, az, w, wscale, wzero, sy, zy, bias};
    OneNode qc("QLinearConv", 10, qin);
    qc.set_int("group", 2);
    qc.set_ints("strides", {2, 1});
    expect_all_same(*qc.node, qin, std::string("QLinearConv per-channel ") + dtype_name(t));
  }
  Tensor x = random_tensor({3, 7}, rng, -4.f, 3.f);
  OneNode dq("DynamicQuantizeLinear", 11, {x}, 3);
  expect_all_same(*dq.node, {x}, "DynamicQuantizeLinear");
}

TEST(CudaBreadth, NormalizationsAndShapesMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(111);
  Tensor x = random_tensor({2, 6, 3, 4}, rng);
  {
    Tensor sc = random_tensor({6}, rng), bi = random_tensor({6}, rng);
    OneNode in("InstanceNormalization", 6, {x, sc, bi});
    expect_all_same(*in.node, {x, sc, bi}, "InstanceNormalization");
    Tensor gs = random_tensor({3}, rng), gb = random_tensor({3}, rng);
    OneNode gn("GroupNormalization", 18, {x, gs, gb});
    gn.set_int("num_groups", 3);
    expect_all_same(*gn.node, {x, gs, gb}, "GroupNormalization per group");
    OneNode lrn("LRN", 13, {x});
    lrn.set_int("size", 3);
    expect_all_same(*lrn.node, {x}, "LRN");
  }
  for (const char* mode : {"DCR", "CRD"}) {
    Tensor y = random_tensor({2, 8, 3, 2}, rng);
    OneNode d("DepthToSpace", 13, {y});
    d.set_int("blocksize", 2);
    d.set_string("mode", mode);
    expect_all_same(*d.node, {y}, std::string("DepthToSpace ") + mode);
  }
  {
    OneNode s("SpaceToDepth", 13, {x});
    s.set_int("blocksize", 1);
    expect_all_same(*s.node, {x}, "SpaceToDepth 1");
    Tensor y = random_tensor({1, 2, 4, 6}, rng);
    OneNode s2("SpaceToDepth", 13, {y});
    s2.set_int("blocksize", 2);
    expect_all_same(*s2.node, {y}, "SpaceToDepth 2");
  }
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    Tensor size = scalar_of(DataType::kInt64, 10);
    OneNode w(op, 17, {size}, 1, {true});
    w.set_int("periodic", 0);
    expect_all_same(*w.node, {size}, op);
  }
  {
    Tensor m = f64({3, 4, 4}, rng);
    OneNode d("Det", 11, {m});
    expect_all_same(*d.node, {m}, "Det");
  }
  {
    Tensor c = filled<int8_t>(DataType::kInt8, {12}, [](int64_t i) { return static_cast<int8_t>(i * 23 - 120); });
    Tensor lo = scalar_of(DataType::kInt8, -50), hi = scalar_of(DataType::kInt8, 60);
    OneNode n("Clip", 13, {c, lo, hi}, 1, {false, true, true});
    expect_all_same(*n.node, {c, lo, hi}, "Clip int8");
  }
}

TEST(CudaBreadth, OptimizersScattersAndSamplersMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(112);
  {
    Tensor r = scalar_of(DataType::kFloat32, 0.1), t = scalar_of(DataType::kInt64, 3);
    Tensor x = random_tensor({5}, rng), g = random_tensor({5}, rng), v = random_tensor({5}, rng), h = random_tensor({5}, rng, 0.f, 1.f);
    std::vector<Tensor> in = {r, t, x, g, v, h};
    OneNode n("Adam", 1, in, 3, {true, true});
    n.node->domain = "ai.onnx.preview.training";
    n.set_float("alpha", 0.8f);
    n.set_float("beta", 0.95f);
    n.set_float("epsilon", 1e-3f);
    expect_all_same(*n.node, in, "Adam");
  }
  {
    Tensor past = random_tensor({2, 3, 6, 4}, rng), upd = random_tensor({2, 3, 2, 4}, rng);
    Tensor widx = i64({2}, [](int64_t i) { return i ? 5 : 1; });
    OneNode n("TensorScatter", 24, {past, upd, widx});
    n.set_string("mode", "circular");
    expect_all_same(*n.node, {past, upd, widx}, "TensorScatter circular");
  }
  {
    Tensor x = random_tensor({1, 4, 6, 5}, rng), w = random_tensor({6, 2, 3, 3}, rng);
    Tensor off = random_tensor({1, 2 * 9, 4, 3}, rng, -1.5f, 1.5f), b = random_tensor({6}, rng);
    OneNode n("DeformConv", 19, {x, w, off, b});
    n.set_int("group", 2);
    n.set_ints("strides", {1, 1});
    expect_all_same(*n.node, {x, w, off, b}, "DeformConv");
  }
  {
    Tensor x = random_tensor({1, 2, 2, 3}, rng);
    Tensor ind = i64({1, 2, 2, 3}, [](int64_t i) { return (i / 6) * 24 + (i % 6) * 4 + 1; });
    OneNode n("MaxUnpool", 11, {x, ind});
    n.set_ints("kernel_shape", {2, 2});
    n.set_ints("strides", {2, 2});
    expect_all_same(*n.node, {x, ind}, "MaxUnpool");
  }
  {
    Tensor q = random_tensor({2, 4, 3, 8}, rng), k = random_tensor({2, 2, 5, 8}, rng), v = random_tensor({2, 2, 5, 6}, rng);
    OneNode n("FlexAttention", 1, {q, k, v});
    n.node->domain = "ai.onnx.preview";
    n.set_float("scale", 0.4f);
    expect_all_same(*n.node, {q, k, v}, "FlexAttention");
  }
}

TEST(CudaBreadth, RecurrentCellsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(113);
  const int64_t S = 5, B = 3, I = 4, H = 6;
  Tensor lens = filled<int32_t>(DataType::kInt32, {B}, [](int64_t i) { return static_cast<int32_t>(5 - 2 * i); });
  struct Case {
    const char* op;
    int gates;
    const char* direction;
    int layout;
    int lbr;
  };
  const Case cases[] = {{"LSTM", 4, "bidirectional", 0, 0}, {"LSTM", 4, "reverse", 1, 0}, {"GRU", 3, "forward", 0, 0},
                        {"GRU", 3, "bidirectional", 0, 1}, {"RNN", 1, "forward", 1, 0}};
  for (const Case& c : cases) {
    const int64_t nd = std::string(c.direction) == "bidirectional" ? 2 : 1;
    Tensor x = random_tensor(c.layout ? Shape{B, S, I} : Shape{S, B, I}, rng);
    Tensor w = random_tensor({nd, c.gates * H, I}, rng, -0.5f, 0.5f), r = random_tensor({nd, c.gates * H, H}, rng, -0.5f, 0.5f);
    Tensor b = random_tensor({nd, 2 * c.gates * H}, rng, -0.5f, 0.5f);
    Tensor h0 = random_tensor(c.layout ? Shape{B, nd, H} : Shape{nd, B, H}, rng);
    std::vector<Tensor> in = {x, w, r, b, lens, h0};
    const bool lstm = std::string(c.op) == "LSTM";
    if (lstm) {
      in.push_back(random_tensor(c.layout ? Shape{B, nd, H} : Shape{nd, B, H}, rng));
      in.push_back(random_tensor({nd, 3 * H}, rng, -0.5f, 0.5f));
    }
    OneNode n(c.op, 14, in, lstm ? 3 : 2);
    n.set_int("hidden_size", H);
    n.set_string("direction", c.direction);
    n.set_int("layout", c.layout);
    if (c.lbr) n.set_int("linear_before_reset", 1);
    if (lstm) n.set_float("clip", 2.5f);
    expect_all_same(*n.node, in, std::string(c.op) + " " + c.direction + " layout " + std::to_string(c.layout));
  }
}

}  // namespace
}  // namespace kiln::cudatest
