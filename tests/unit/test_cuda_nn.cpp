// CUDA MatMul/Gemm (cuBLASLt), Conv (cuDNN), pooling, softmax and batch norm against naive references.
#include <algorithm>
#include <cfloat>

#include "test_cuda_util.h"

using namespace kiln;
using namespace kiln::cudatest;

namespace {

// Naive numpy matmul (1-D promotion, batch broadcasting).
Tensor ref_matmul(const Tensor& a, const Tensor& b) {
  Shape sa = a.shape(), sb = b.shape();
  const bool av = sa.size() == 1, bv = sb.size() == 1;
  if (av) sa.insert(sa.begin(), 1);
  if (bv) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const size_t r = std::max(ba.size(), bb.size());
  auto dim = [r](const Shape& s, size_t i) { return i < r - s.size() ? int64_t{1} : s[i - (r - s.size())]; };
  Shape batch(r);
  for (size_t i = 0; i < r; ++i) batch[i] = std::max(dim(ba, i), dim(bb, i));
  Shape out = batch;
  if (!av) out.push_back(m);
  if (!bv) out.push_back(n);
  Tensor y = Tensor::empty(DataType::kFloat32, out);
  const int64_t nb = shape_numel(batch);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t rem = bi, ia = 0, ib = 0, sta = 1, stb = 1;
    for (int i = static_cast<int>(r) - 1; i >= 0; --i) {
      const int64_t c = rem % batch[i];
      rem /= batch[i];
      if (dim(ba, i) != 1) ia += c * sta;
      if (dim(bb, i) != 1) ib += c * stb;
      sta *= dim(ba, i);
      stb *= dim(bb, i);
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += double(a.data<float>()[(ia * m + i) * k + p]) * b.data<float>()[(ib * k + p) * n + j];
        y.data<float>()[(bi * m + i) * n + j] = static_cast<float>(s);
      }
  }
  return y;
}

struct ConvSpec {
  int64_t group = 1, sh = 1, sw = 1, dh = 1, dw = 1, pt = 0, pl = 0, pb = 0, pr = 0;
};

// Naive NCHW convolution with explicit (possibly asymmetric) pads.
Tensor ref_conv(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvSpec& s) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3);
  const int64_t m = w.dim(0), cg = w.dim(1), kh = w.dim(2), kw = w.dim(3);
  const int64_t oh = (h + s.pt + s.pb - ((kh - 1) * s.dh + 1)) / s.sh + 1;
  const int64_t ow = (wd + s.pl + s.pr - ((kw - 1) * s.dw + 1)) / s.sw + 1;
  Tensor y = Tensor::empty(DataType::kFloat32, {n, m, oh, ow});
  const int64_t mg = m / s.group;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < m; ++o)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = bias ? bias->data<float>()[o] : 0.0;
          const int64_t g = o / mg;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t u = 0; u < kh; ++u)
              for (int64_t v = 0; v < kw; ++v) {
                const int64_t yy = i * s.sh - s.pt + u * s.dh, xx = j * s.sw - s.pl + v * s.dw;
                if (yy < 0 || xx < 0 || yy >= h || xx >= wd) continue;
                acc += double(x.data<float>()[((b * c + g * cg + ci) * h + yy) * wd + xx]) *
                       w.data<float>()[((o * cg + ci) * kh + u) * kw + v];
              }
          y.data<float>()[((b * m + o) * oh + i) * ow + j] = static_cast<float>(acc);
        }
  return y;
}

}  // namespace

TEST(CudaMatMul, BatchedAndBroadcast) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(11);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},       {{2, 3, 4}, {4, 5}},    {{4}, {2, 4, 5}},      {{2, 1, 3, 4}, {3, 4, 2}},
      {{2, 3, 4}, {4}},       {{2, 3, 4}, {2, 4, 5}}, {{4}, {4}},            {{3, 4}, {2, 4, 5}},
      {{65, 130}, {130, 33}}, {{2, 0}, {0, 3}},       {{0, 3}, {3, 2}},      {{5, 3, 7}, {1, 7, 9}},
  };
  for (const auto& [sa, sb] : cases) {
    Tensor a = random_tensor(sa, rng), b = random_tensor(sb, rng);
    OneNode n("MatMul", 13, {a, b});
    check_node(*n.node, {a, b}, ref_matmul(a, b), 1e-4f, 1e-4f, "MatMul " + shape_to_string(sa) + shape_to_string(sb));
  }
}

// beta 1 with C a row of N ([N] or [1, N]) takes cuBLASLt's bias epilogue; the other C shapes and
// betas are broadcast into Y first. K = 0: Y = beta·C.
TEST(CudaGemm, TransposesAlphaBetaBias) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(12);
  const int64_t M = 5;
  for (int64_t N : {7, 8})
  for (int64_t K : {6, 0})
  for (float beta : {1.3f, 1.0f})
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const Shape& cs : {Shape{N}, Shape{1, N}, Shape{M, 1}, Shape{}, Shape{M, N}, Shape{-1}}) {
        Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, rng);
        Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, rng);
        const bool has_c = cs != Shape{-1};
        Tensor c = has_c ? random_tensor(cs, rng) : Tensor();
        const float alpha = 0.7f;
        // Reference: op(A), op(B) made explicit, then alpha·AB + beta·C.
        Tensor at = Tensor::empty(DataType::kFloat32, {M, K}), bt = Tensor::empty(DataType::kFloat32, {K, N});
        for (int64_t i = 0; i < M; ++i)
          for (int64_t p = 0; p < K; ++p) at.data<float>()[i * K + p] = a.data<float>()[ta ? p * M + i : i * K + p];
        for (int64_t p = 0; p < K; ++p)
          for (int64_t j = 0; j < N; ++j) bt.data<float>()[p * N + j] = b.data<float>()[tb ? j * K + p : p * N + j];
        Tensor want = ref_matmul(at, bt);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            float cv = 0;
            if (has_c) {
              const Shape& s = c.shape();
              const int64_t ci = s.size() == 2 ? (s[0] == 1 ? 0 : i) * s[1] + (s[1] == 1 ? 0 : j) : (s.empty() ? 0 : j);
              cv = c.data<float>()[ci];
            }
            float& v = want.data<float>()[i * N + j];
            v = alpha * v + beta * cv;
          }
        std::vector<Tensor> ins = {a, b};
        if (has_c) ins.push_back(c);
        OneNode n("Gemm", 13, ins);
        n.set_int("transA", ta);
        n.set_int("transB", tb);
        n.set_float("alpha", alpha);
        n.set_float("beta", beta);
        check_node(*n.node, ins, want, 1e-4f, 1e-4f,
                   "Gemm N=" + std::to_string(N) + " K=" + std::to_string(K) + " beta=" + std::to_string(beta) + " tA=" + std::to_string(ta) +
                       " tB=" + std::to_string(tb) + " C=" + shape_to_string(cs));
      }
}

TEST(CudaConv, GroupsStridesPadsDilationsBias) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(13);
  struct Case {
    Shape x, w;
    ConvSpec s;
    std::string auto_pad = "NOTSET";
    bool bias = true;
  };
  const std::vector<Case> cases = {
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},
      {{2, 4, 9, 11}, {6, 2, 3, 3}, {2, 2, 2, 1, 1, 1, 1, 1, 1}},
      {{2, 4, 10, 10}, {4, 1, 3, 3}, {4, 1, 1, 2, 2, 2, 2, 2, 2}, "NOTSET", false},  // depthwise, dilated
      {{1, 2, 9, 9}, {3, 2, 2, 2}, {1, 1, 1, 1, 1, 0, 0, 1, 1}, "SAME_UPPER"},          // asymmetric pads
      {{1, 2, 9, 9}, {3, 2, 2, 2}, {1, 1, 1, 1, 1, 1, 1, 0, 0}, "SAME_LOWER"},
      {{1, 2, 7, 7}, {3, 2, 3, 3}, {1, 2, 2, 1, 1, 0, 0, 0, 0}, "VALID"},
      {{1, 1, 6, 6}, {2, 1, 3, 3}, {1, 1, 1, 1, 1, 0, 1, 2, 0}},                        // explicit asymmetric
      {{0, 3, 8, 8}, {4, 3, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1}},                        // empty batch
  };
  for (const Case& c : cases) {
    Tensor x = random_tensor(c.x, rng), w = random_tensor(c.w, rng), b = random_tensor({c.w[0]}, rng);
    std::vector<Tensor> ins = {x, w};
    if (c.bias) ins.push_back(b);
    OneNode n("Conv", 11, ins, 1, {false, true, true});
    n.set_int("group", c.s.group);
    n.set_ints("strides", {c.s.sh, c.s.sw});
    n.set_ints("dilations", {c.s.dh, c.s.dw});
    n.set_ints("kernel_shape", {c.w[2], c.w[3]});
    if (c.auto_pad == "NOTSET") n.set_ints("pads", {c.s.pt, c.s.pl, c.s.pb, c.s.pr});
    else n.set_string("auto_pad", c.auto_pad);
    check_node(*n.node, ins, ref_conv(x, w, c.bias ? &b : nullptr, c.s), 1e-4f, 1e-4f,
               "Conv x=" + shape_to_string(c.x) + " w=" + shape_to_string(c.w) + " " + c.auto_pad);
  }
  // 1-D convolution runs as 2-D with height 1.
  Tensor x = random_tensor({2, 3, 10}, rng), w = random_tensor({4, 3, 3}, rng);
  OneNode n("Conv", 11, {x, w}, 1, {false, true});
  n.set_ints("pads", {1, 2});
  n.set_ints("strides", {2});
  Tensor want = ref_conv(x.clone().reshaped({2, 3, 1, 10}), w.clone().reshaped({4, 3, 1, 3}), nullptr,
                         {1, 1, 2, 1, 1, 0, 1, 0, 2});
  check_node(*n.node, {x, w}, want.reshaped({2, 4, want.dim(3)}), 1e-4f, 1e-4f, "Conv1D");
}

// A convolution with more than 4 groups offers no FFT (4), tiled-FFT (5) or non-fused Winograd (7)
// tactic — cuDNN runs those once per group, and timing one cost seconds of a build — and every tactic
// it does offer, and the untuned choice, matches the reference. (Ungrouped, the untuned choice only:
// the non-fused Winograd's float32 error on a 5x5 kernel is ~3e-3 of the values, which the tuner's
// agreement check judges by relative L2.)
TEST(CudaConv, ManyGroupsOfferNoPerGroupAlgorithms) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(91);
  for (int64_t group : {int64_t{1}, int64_t{48}}) {
    const int64_t c = 48;
    Tensor x = random_tensor({2, c, 20, 20}, rng), w = random_tensor({c, c / group, 5, 5}, rng), b = random_tensor({c}, rng);
    OneNode n("Conv", 11, {x, w, b}, 1, {false, true, true});
    n.set_int("group", group);
    n.set_ints("kernel_shape", {5, 5});
    n.set_ints("pads", {2, 2, 2, 2});
    const std::string label = "Conv group " + std::to_string(group);
    std::vector<std::string> tactics;
    ASSERT_TRUE(run_cuda(*n.node, {x, w, b}, {}, &tactics).ok()) << label;
    ASSERT_FALSE(tactics.empty()) << label;
    if (group > 4)
      for (const std::string& t : tactics)
        EXPECT_TRUE(t != "algo4" && t != "algo5" && t != "algo7") << label << " offers " << t;
    const Tensor want = ref_conv(x, w, &b, {group, 1, 1, 1, 1, 2, 2, 2, 2});
    if (group == 1) tactics.clear();
    tactics.push_back("");
    for (const std::string& t : tactics) {
      auto got = run_cuda(*n.node, {x, w, b}, t);
      ASSERT_TRUE(got.ok()) << label << " tactic '" << t << "': " << got.status().to_string();
      expect_close((*got)[0], want, 2e-3f, 2e-3f, label + " tactic '" + t + "'");
    }
  }
}

namespace {

struct PoolSpec {
  int64_t kh, kw, sh = 1, sw = 1, pt = 0, pl = 0, pb = 0, pr = 0;
  bool max = true, include_pad = false, ceil = false;
};

Tensor ref_pool(const Tensor& x, const PoolSpec& s) {
  const int64_t nc = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
  auto out_dim = [&](int64_t in, int64_t k, int64_t st, int64_t p0, int64_t p1) {
    const int64_t avail = in + p0 + p1 - k;
    int64_t o = (s.ceil ? (avail + st - 1) / st : avail / st) + 1;
    if (s.ceil && (o - 1) * st >= in + p0) --o;
    return o;
  };
  const int64_t oh = out_dim(h, s.kh, s.sh, s.pt, s.pb), ow = out_dim(w, s.kw, s.sw, s.pl, s.pr);
  Tensor y = Tensor::empty(DataType::kFloat32, {x.dim(0), x.dim(1), oh, ow});
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        float acc = s.max ? -INFINITY : 0.f;
        int64_t cnt = 0, pcnt = 0;
        for (int64_t u = 0; u < s.kh; ++u)
          for (int64_t v = 0; v < s.kw; ++v) {
            const int64_t yy = i * s.sh - s.pt + u, xx = j * s.sw - s.pl + v;
            if (yy >= h + s.pb || xx >= w + s.pr) continue;
            ++pcnt;
            if (yy < 0 || xx < 0 || yy >= h || xx >= w) continue;
            const float val = x.data<float>()[(c * h + yy) * w + xx];
            acc = s.max ? std::max(acc, val) : acc + val;
            ++cnt;
          }
        if (!s.max) acc /= static_cast<float>(s.include_pad ? pcnt : cnt);
        y.data<float>()[(c * oh + i) * ow + j] = acc;
      }
  return y;
}

}  // namespace

TEST(CudaPool, MaxAndAverage) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(14);
  const std::vector<PoolSpec> specs = {
      {3, 3, 2, 2, 1, 1, 1, 1, true},
      {2, 2, 2, 2, 0, 0, 0, 0, true},
      {3, 3, 2, 2, 1, 1, 1, 1, false, false},
      {3, 3, 2, 2, 1, 1, 1, 1, false, true},
      {3, 2, 2, 2, 0, 0, 0, 0, false, false, true},  // ceil_mode
      {3, 3, 2, 2, 0, 0, 0, 0, true, false, true},
      {2, 3, 1, 2, 1, 0, 0, 2, false, true},          // asymmetric pads
  };
  for (const PoolSpec& s : specs) {
    Tensor x = random_tensor({2, 3, 9, 10}, rng);
    OneNode n(s.max ? "MaxPool" : "AveragePool", 19, {x});
    n.set_ints("kernel_shape", {s.kh, s.kw});
    n.set_ints("strides", {s.sh, s.sw});
    n.set_ints("pads", {s.pt, s.pl, s.pb, s.pr});
    n.set_int("ceil_mode", s.ceil);
    if (!s.max) n.set_int("count_include_pad", s.include_pad);
    check_node(*n.node, {x}, ref_pool(x, s), 1e-5f, 1e-5f,
               std::string(s.max ? "MaxPool" : "AveragePool") + " k=" + std::to_string(s.kh) + "x" + std::to_string(s.kw));
  }
  {  // SAME_UPPER 2x2 stride 1 on 5x5: pads (0, 1) on each dim
    Tensor x = random_tensor({1, 2, 5, 5}, rng);
    OneNode n("MaxPool", 12, {x});
    n.set_ints("kernel_shape", {2, 2});
    n.set_string("auto_pad", "SAME_UPPER");
    check_node(*n.node, {x}, ref_pool(x, {2, 2, 1, 1, 0, 0, 1, 1, true}), 0, 0, "MaxPool SAME_UPPER");
  }
  {  // the Indices output runs through the N-d kernel, row- and column-major, as the CPU computes it
    Tensor x = random_tensor({2, 3, 5, 4}, rng);
    for (int order = 0; order < 2; ++order) {
      OneNode n("MaxPool", 12, {x}, 2);
      n.set_ints("kernel_shape", {2, 2});
      n.set_int("storage_order", order);
      auto got = run_cuda(*n.node, {x});
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      auto want = run_node_eager(*n.node, {Slot::of(x)});
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      expect_close((*got)[0], (*want)[0].tensor, 0, 0, "MaxPool values");
      const Tensor &gi = (*got)[1], &wi = (*want)[1].tensor;
      ASSERT_EQ(gi.shape(), wi.shape());
      for (int64_t i = 0; i < wi.numel(); ++i) EXPECT_EQ(gi.data<int64_t>()[i], wi.data<int64_t>()[i]) << "index " << i;
    }
  }
}

TEST(CudaPool, GlobalPools) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(15);
  Tensor x = random_tensor({2, 3, 7, 9}, rng);
  Tensor avg = Tensor::empty(DataType::kFloat32, {2, 3, 1, 1}), mx = Tensor::empty(DataType::kFloat32, {2, 3, 1, 1});
  for (int64_t r = 0; r < 6; ++r) {
    double s = 0;
    float m = -INFINITY;
    for (int64_t i = 0; i < 63; ++i) {
      s += x.data<float>()[r * 63 + i];
      m = std::max(m, x.data<float>()[r * 63 + i]);
    }
    avg.data<float>()[r] = static_cast<float>(s / 63);
    mx.data<float>()[r] = m;
  }
  OneNode a("GlobalAveragePool", 1, {x});
  check_node(*a.node, {x}, avg, 1e-5f, 1e-5f, "GlobalAveragePool");
  OneNode m("GlobalMaxPool", 1, {x});
  check_node(*m.node, {x}, mx, 0, 0, "GlobalMaxPool");
}

TEST(CudaSoftmax, AxesAndOpsets) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(16);
  Tensor x = random_tensor({2, 3, 4}, rng, -5, 5);
  // Reference over [outer, dim, inner].
  auto ref = [&](int64_t outer, int64_t dim, int64_t inner, bool log) {
    Tensor y = Tensor::empty(DataType::kFloat32, x.shape());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        float m = -FLT_MAX;
        double s = 0;
        for (int64_t k = 0; k < dim; ++k) m = std::max(m, x.data<float>()[(o * dim + k) * inner + i]);
        for (int64_t k = 0; k < dim; ++k) s += std::exp(x.data<float>()[(o * dim + k) * inner + i] - m);
        for (int64_t k = 0; k < dim; ++k) {
          const float v = x.data<float>()[(o * dim + k) * inner + i] - m;
          y.data<float>()[(o * dim + k) * inner + i] = log ? v - static_cast<float>(std::log(s)) : std::exp(v) / static_cast<float>(s);
        }
      }
    return y;
  };
  for (bool log : {false, true}) {
    const char* op = log ? "LogSoftmax" : "Softmax";
    OneNode last(op, 13, {x});
    check_node(*last.node, {x}, ref(6, 4, 1, log), 1e-5f, 1e-5f, std::string(op) + " 13 default axis");
    OneNode mid(op, 13, {x});
    mid.set_int("axis", 1);
    check_node(*mid.node, {x}, ref(2, 3, 4, log), 1e-5f, 1e-5f, std::string(op) + " 13 axis 1");
    OneNode old(op, 11, {x});  // opset 11 default axis 1 coerces to [2, 12]
    check_node(*old.node, {x}, ref(2, 12, 1, log), 1e-5f, 1e-5f, std::string(op) + " 11 default axis");
  }
  Tensor big = random_tensor({3, 3000}, rng, -5, 5);
  OneNode n("Softmax", 13, {big});
  auto got = run_cuda(*n.node, {big});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int i = 0; i < 3000; ++i) s += (*got)[0].data<float>()[r * 3000 + i];
    EXPECT_NEAR(s, 1.0, 1e-4);
  }
}

TEST(CudaBatchNorm, Inference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(17);
  Tensor x = random_tensor({2, 3, 4, 5}, rng);
  Tensor scale = random_tensor({3}, rng), bias = random_tensor({3}, rng), mean = random_tensor({3}, rng);
  Tensor var = random_tensor({3}, rng, 0.1f, 2.f);
  Tensor want = Tensor::empty(DataType::kFloat32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = i / 20 % 3;
    want.data<float>()[i] = (x.data<float>()[i] - mean.data<float>()[c]) / std::sqrt(var.data<float>()[c] + 1e-3f) *
                                scale.data<float>()[c] + bias.data<float>()[c];
  }
  std::vector<Tensor> ins = {x, scale, bias, mean, var};
  OneNode n("BatchNormalization", 15, ins);
  n.set_float("epsilon", 1e-3f);
  check_node(*n.node, ins, want, 1e-5f, 1e-5f, "BatchNormalization");
  OneNode t("BatchNormalization", 15, ins);
  t.set_int("training_mode", 1);
  EXPECT_EQ((*cuda_backend())->kernels().find(*t.node), nullptr);
}
