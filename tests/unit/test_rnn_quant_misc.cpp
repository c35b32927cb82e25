// LpNormalization, RoiAlign, MaxRoiPool, Col2Im, DeformConv, TfIdfVectorizer and the
// training optimizers (Adagrad, Adam, Momentum) against naive references and invariants.
#include "test_rq_util.h"

using namespace rqtest;

TEST(RqMisc, LpNormalization) {
  for (int64_t p : {1, 2})
    for (int64_t axis : {-1, 0, 1}) {
      const Shape s = {3, 4, 5};
      Tensor x = random(DataType::kFloat32, s, -2, 2);
      const int64_t ax = axis < 0 ? axis + 3 : axis;
      // Zero the whole first line along the axis: its output must be zero, not NaN.
      for (int64_t k = 0; k < s[ax]; ++k) {
        std::vector<int64_t> c = {0, 0, 0};
        c[ax] = k;
        set(x, (c[0] * 4 + c[1]) * 5 + c[2], 0);
      }
      std::vector<double> want(x.numel());
      for (int64_t i = 0; i < x.numel(); ++i) {
        std::vector<int64_t> c = {i / 20, (i / 5) % 4, i % 5};
        double norm = 0;
        for (int64_t k = 0; k < s[ax]; ++k) {
          std::vector<int64_t> d = c;
          d[ax] = k;
          const double v = get(x, (d[0] * 4 + d[1]) * 5 + d[2]);
          norm += p == 1 ? std::fabs(v) : v * v;
        }
        if (p == 2) norm = std::sqrt(norm);
        want[i] = norm == 0 ? 0 : get(x, i) / norm;
      }
      auto y = run("LpNormalization", 22, {x}, {{"axis", attr_int(axis)}, {"p", attr_int(p)}});
      expect_close(y[0], s, want);
    }
  auto y = run("LpNormalization", 1, {from(DataType::kFloat64, {2, 3}, {1, 2, 2, 3, 4, 0})}, {});
  expect_close(y[0], {2, 3}, {1.0 / 3, 2.0 / 3, 2.0 / 3, 0.6, 0.8, 0});
}

TEST(RqMisc, RoiAlignLinearImageGivesBinCenters) {
  // On f(y, x) = 2y + 3x + 1, bilinear sampling is exact and the mean over a bin's regular grid is
  // f at the bin center — for any ROI inside the map.
  const int64_t H = 12, W = 10;
  Tensor x = Tensor::empty(DataType::kFloat32, {2, 2, H, W});
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) x.data<float>()[((n * 2 + c) * H + h) * W + w] = 2.0f * h + 3.0f * w + 1 + c + 10 * n;
  const std::vector<double> rois_v = {1, 1, 6, 7, 2.5, 3, 8, 9.5, 1, 1.5, 3.5, 4};
  Tensor rois = from(DataType::kFloat32, {3, 4}, rois_v);
  Tensor idx = from(DataType::kInt64, {3}, {0, 1, 1});
  for (const char* mode : {"half_pixel", "output_half_pixel"})
    for (int64_t sr : {0, 2}) {
      const double scale = 0.8, off = std::string(mode) == "half_pixel" ? 0.5 : 0;
      const int64_t PH = 3, PW = 4;
      std::vector<double> want;
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t c = 0; c < 2; ++c)
          for (int64_t ph = 0; ph < PH; ++ph)
            for (int64_t pw = 0; pw < PW; ++pw) {
              const double x1 = rois_v[r * 4] * scale - off, y1 = rois_v[r * 4 + 1] * scale - off;
              double rw = rois_v[r * 4 + 2] * scale - off - x1, rh = rois_v[r * 4 + 3] * scale - off - y1;
              if (off == 0) { rw = std::max(rw, 1.0); rh = std::max(rh, 1.0); }
              const double cy = y1 + (ph + 0.5) * rh / PH, cx = x1 + (pw + 0.5) * rw / PW;
              const double n = static_cast<double>(get(idx, r));
              want.push_back(2 * cy + 3 * cx + 1 + c + 10 * n);
            }
      auto y = run("RoiAlign", 16, {x, rois, idx},
                   {{"coordinate_transformation_mode", attr_str(mode)}, {"output_height", attr_int(PH)}, {"output_width", attr_int(PW)},
                    {"sampling_ratio", attr_int(sr)}, {"spatial_scale", attr_float(0.8f)}});
      expect_close(y[0], {3, 2, PH, PW}, want, 1e-5, 1e-4);
    }
}

TEST(RqMisc, RoiAlignOpset10DefaultsAndMaxMode) {
  // Opset 10 has no half-pixel offset: a 1x1 output over [0, 0, 2, 2] with 2x2 samples averages
  // f at (0.5, 0.5), (0.5, 1.5), (1.5, 0.5), (1.5, 1.5).
  Tensor x = from(DataType::kFloat32, {1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor rois = from(DataType::kFloat32, {1, 4}, {0, 0, 2, 2});
  Tensor idx = from(DataType::kInt64, {1}, {0});
  auto y = run("RoiAlign", 10, {x, rois, idx}, {});
  expect_close(y[0], {1, 1, 1, 1}, {5});
  // max mode takes the largest weighted corner of each sample: at (0.5, 0.5) corners weigh 1/4 each.
  auto m = run("RoiAlign", 10, {x, rois, idx}, {{"mode", attr_str("max")}});
  expect_close(m[0], {1, 1, 1, 1}, {9 * 0.25});
  EXPECT_FALSE(try_run("RoiAlign", 16, {x, rois, from(DataType::kInt64, {1}, {3})}, {}).ok());
}

TEST(RqMisc, MaxRoiPool) {
  const int64_t H = 6, W = 7;
  Tensor x = random(DataType::kFloat32, {2, 3, H, W});
  const std::vector<double> rv = {0, 0, 0, 6, 5, 1, 1.6, 2.2, 4.4, 4.9, 1, 3, 3, 3, 3};
  Tensor rois = from(DataType::kFloat32, {3, 5}, rv);
  const int64_t PH = 2, PW = 3;
  std::vector<double> want;
  for (int64_t r = 0; r < 3; ++r) {
    const int64_t n = static_cast<int64_t>(rv[r * 5]);
    const int64_t sw = std::lround(rv[r * 5 + 1]), sh = std::lround(rv[r * 5 + 2]), ew = std::lround(rv[r * 5 + 3]),
                  eh = std::lround(rv[r * 5 + 4]);
    const double bh = std::max<int64_t>(eh - sh + 1, 1) / double(PH), bw = std::max<int64_t>(ew - sw + 1, 1) / double(PW);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t ph = 0; ph < PH; ++ph)
        for (int64_t pw = 0; pw < PW; ++pw) {
          double m = -1e30;
          bool any = false;
          for (int64_t h = 0; h < H; ++h)
            for (int64_t w = 0; w < W; ++w) {
              const bool in_h = h >= sh + std::floor(ph * bh) && h < sh + std::ceil((ph + 1) * bh);
              const bool in_w = w >= sw + std::floor(pw * bw) && w < sw + std::ceil((pw + 1) * bw);
              if (in_h && in_w) { m = std::max(m, get(x, ((n * 3 + c) * H + h) * W + w)); any = true; }
            }
          want.push_back(any ? m : 0);
        }
  }
  auto y = run("MaxRoiPool", 22, {x, rois}, {{"pooled_shape", attr_ints({PH, PW})}});
  expect_close(y[0], {3, 3, PH, PW}, want);
}

TEST(RqMisc, Col2ImIsTheAdjointOfIm2Col) {
  // <col2im(cols), img> == <cols, im2col(img)> for random cols and img.
  struct G { std::vector<int64_t> im, k, dil, pads, str; };
  const G cases[] = {{{5, 6}, {2, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}},
                     {{7, 5}, {3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 1}},
                     {{4, 3, 5}, {2, 2, 3}, {1, 1, 1}, {1, 0, 0, 0, 1, 1}, {1, 2, 2}}};
  for (const G& g : cases) {
    const size_t nd = g.im.size();
    std::vector<int64_t> nb(nd);
    int64_t L = 1, K = 1, P = 1;
    for (size_t i = 0; i < nd; ++i) {
      nb[i] = (g.im[i] + g.pads[i] + g.pads[nd + i] - (g.dil[i] * (g.k[i] - 1) + 1)) / g.str[i] + 1;
      L *= nb[i];
      K *= g.k[i];
      P *= g.im[i];
    }
    const int64_t N = 2, C = 3;
    Tensor cols = random(DataType::kFloat64, {N, C * K, L});
    Shape is = {N, C};
    for (int64_t v : g.im) is.push_back(v);
    Tensor img = random(DataType::kFloat64, is);
    // im2col(img) · cols
    double rhs = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t kk = 0; kk < K; ++kk)
          for (int64_t l = 0; l < L; ++l) {
            int64_t pos = 0, rk = kk, rl = l;
            std::vector<int64_t> kc(nd), bc(nd);
            for (size_t i = nd; i-- > 0;) { kc[i] = rk % g.k[i]; rk /= g.k[i]; bc[i] = rl % nb[i]; rl /= nb[i]; }
            bool inside = true;
            for (size_t i = 0; i < nd; ++i) {
              const int64_t p = bc[i] * g.str[i] - g.pads[i] + kc[i] * g.dil[i];
              inside = inside && p >= 0 && p < g.im[i];
              pos = pos * g.im[i] + p;
            }
            if (inside) rhs += get(img, (n * C + c) * P + pos) * get(cols, ((n * C + c) * K + kk) * L + l);
          }
    std::vector<double> imv(g.im.begin(), g.im.end()), kv(g.k.begin(), g.k.end());
    auto y = run("Col2Im", 18, {cols, from(DataType::kInt64, {int64_t(nd)}, imv), from(DataType::kInt64, {int64_t(nd)}, kv)},
                 {{"dilations", attr_ints(g.dil)}, {"pads", attr_ints(g.pads)}, {"strides", attr_ints(g.str)}});
    ASSERT_EQ(shape_to_string(y[0].shape()), shape_to_string(is));
    double lhs = 0;
    for (int64_t i = 0; i < img.numel(); ++i) lhs += get(y[0], i) * get(img, i);
    EXPECT_NEAR(lhs, rhs, 1e-9 * (1 + std::fabs(rhs)));
  }
  // The onnx example (pads): input 1..75 in a [1, 5, 15] column layout.
  std::vector<double> in(75);
  for (int64_t c = 0; c < 5; ++c)
    for (int64_t l = 0; l < 15; ++l) in[c * 15 + l] = 1 + c + 5 * l;
  auto y = run("Col2Im", 18, {from(DataType::kFloat32, {1, 5, 15}, in), from(DataType::kInt64, {2}, {5, 5}), from(DataType::kInt64, {2}, {1, 5})},
               {{"pads", attr_ints({0, 1, 0, 1})}});
  const std::vector<double> head = {8, 21, 24, 27, 24, 38, 66, 69, 72, 54};
  for (size_t i = 0; i < head.size(); ++i) EXPECT_EQ(get(y[0], i), head[i]);
}

namespace {

// Plain grouped 2-D convolution of a [N, C, H, W] image sampled through `at(n, c, h, w)`.
template <typename At>
std::vector<double> conv_ref(int64_t N, int64_t C, int64_t OC, int64_t G, int64_t KH, int64_t KW, int64_t OH, int64_t OW,
                             int64_t s, int64_t pad, int64_t dil, const Tensor& w, const Tensor* b, At at) {
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < OC; ++oc)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = b ? get(*b, oc) : 0;
          const int64_t g = oc / (OC / G);
          for (int64_t ci = 0; ci < C / G; ++ci)
            for (int64_t i = 0; i < KH; ++i)
              for (int64_t j = 0; j < KW; ++j)
                acc += get(w, ((oc * (C / G) + ci) * KH + i) * KW + j) *
                       at(n, g * (C / G) + ci, oh * s - pad + i * dil, ow * s - pad + j * dil, i, j, oh, ow);
          y.push_back(acc);
        }
  return y;
}

}  // namespace

TEST(RqMisc, DeformConvMatchesConvWithIntegerOffsets) {
  const int64_t N = 2, C = 4, H = 6, W = 7, OC = 6, G = 2, OG = 2, KH = 3, KW = 2, s = 1, pad = 1, dil = 1;
  const int64_t OH = (H + 2 * pad - (KH - 1) - 1) / s + 1, OW = (W + 2 * pad - (KW - 1) - 1) / s + 1;
  Tensor x = random(DataType::kFloat32, {N, C, H, W}), w = random(DataType::kFloat32, {OC, C / G, KH, KW});
  Tensor b = random(DataType::kFloat32, {OC});
  // integer offsets: per offset group g, kernel tap (i, j): shift (dy, dx) = (g + i - 1, j - g)
  Tensor off = Tensor::empty(DataType::kFloat32, {N, OG * KH * KW * 2, OH, OW});
  Tensor mask = random(DataType::kFloat32, {N, OG * KH * KW, OH, OW}, 0, 1);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < OG; ++g)
      for (int64_t i = 0; i < KH; ++i)
        for (int64_t j = 0; j < KW; ++j)
          for (int64_t p = 0; p < OH * OW; ++p) {
            const int64_t ch = ((g * KH + i) * KW + j) * 2;
            off.data<float>()[((n * OG * KH * KW * 2) + ch) * OH * OW + p] = static_cast<float>(g + i - 1);
            off.data<float>()[((n * OG * KH * KW * 2) + ch + 1) * OH * OW + p] = static_cast<float>(j - g);
          }
  auto px = [&](int64_t n, int64_t c, int64_t h, int64_t ww) {
    return h >= 0 && h < H && ww >= 0 && ww < W ? get(x, ((n * C + c) * H + h) * W + ww) : 0.0;
  };
  auto want = conv_ref(N, C, OC, G, KH, KW, OH, OW, s, pad, dil, w, &b,
                       [&](int64_t n, int64_t c, int64_t h, int64_t ww, int64_t i, int64_t j, int64_t oh, int64_t ow) {
                         const int64_t g = c / (C / OG);
                         const double m = get(mask, ((n * OG + g) * KH * KW + i * KW + j) * OH * OW + oh * OW + ow);
                         return m * px(n, c, h + g + i - 1, ww + j - g);
                       });
  const Attrs attrs = {{"group", attr_int(G)}, {"offset_group", attr_int(OG)}, {"pads", attr_ints({pad, pad, pad, pad})},
                       {"kernel_shape", attr_ints({KH, KW})}};
  auto y = run("DeformConv", 19, {x, w, off, b, mask}, attrs);
  expect_close(y[0], {N, OC, OH, OW}, want, 1e-5, 1e-5);
}

TEST(RqMisc, DeformConvFractionalOffsetInterpolates) {
  // 1x1 kernel, offset (0.25, 0.5): bilinear between the four neighbours; outside the map is zero.
  Tensor x = from(DataType::kFloat32, {1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor w = from(DataType::kFloat32, {1, 1, 1, 1}, {1});
  Tensor off = Tensor::empty(DataType::kFloat32, {1, 2, 2, 2});
  for (int64_t p = 0; p < 4; ++p) { off.data<float>()[p] = 0.25f; off.data<float>()[4 + p] = 0.5f; }
  auto y = run("DeformConv", 19, {x, w, off}, {});
  // (0.25, 0.5): 0.75*(0.5*1+0.5*2) + 0.25*(0.5*3+0.5*4) = 2.0; (0.25, 1.5): right half outside → 0.75*0.5*2 + 0.25*0.5*4
  expect_close(y[0], {1, 1, 2, 2}, {2.0, 0.75 * 0.5 * 2 + 0.25 * 0.5 * 4, 0.75 * (0.5 * 3 + 0.5 * 4), 0.75 * 0.5 * 4});
}

TEST(RqMisc, TfIdfVectorizer) {
  const Attrs base = {{"ngram_counts", attr_ints({0, 4})}, {"ngram_indexes", attr_ints({0, 1, 2, 3, 4, 5, 6})},
                      {"pool_int64s", attr_ints({2, 3, 5, 4, 5, 6, 7, 8, 6, 7})}, {"mode", attr_str("TF")}};
  Tensor x = from(DataType::kInt32, {2, 6}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8});
  Attrs a = base;
  a["min_gram_length"] = attr_int(1);
  a["max_gram_length"] = attr_int(2);
  a["max_skip_count"] = attr_int(5);
  auto y = run("TfIdfVectorizer", 9, {x}, a);
  expect_equal(y[0], {2, 7}, {0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1});
  Attrs b = base;
  b["min_gram_length"] = attr_int(2);
  b["max_gram_length"] = attr_int(2);
  b["max_skip_count"] = attr_int(5);
  auto y1 = run("TfIdfVectorizer", 9, {from(DataType::kInt64, {12}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8})}, b);
  expect_equal(y1[0], {7}, {0, 0, 0, 0, 1, 3, 1});
  // TFIDF and IDF with weights; strings.
  Attrs c = {{"ngram_counts", attr_ints({0})}, {"ngram_indexes", attr_ints({1, 0})}, {"mode", attr_str("TFIDF")},
             {"weights", attr_floats({0.5f, 2.0f})}, {"min_gram_length", attr_int(1)}, {"max_gram_length", attr_int(1)}};
  ir::Attribute ps = attr_strs({"a", "b"});
  c["pool_strings"] = ps;
  Tensor sx = Tensor::empty(DataType::kString, {4});
  const char* words[] = {"a", "b", "a", "c"};
  for (int i = 0; i < 4; ++i) sx.data<std::string>()[i] = words[i];
  auto ys = run("TfIdfVectorizer", 9, {sx}, c);
  expect_equal(ys[0], {2}, {0.5 * 1, 2.0 * 2});  // column 0 = "b" (1x), column 1 = "a" (2x)
  c["mode"] = attr_str("IDF");
  auto yi = run("TfIdfVectorizer", 9, {sx}, c);
  expect_equal(yi[0], {2}, {0.5, 2.0});
}

TEST(RqMisc, Optimizers) {
  const std::string dom = "ai.onnx.preview.training";
  Tensor R = from(DataType::kFloat32, {}, {0.1}), T = from(DataType::kInt64, {}, {3});
  Tensor x1 = random(DataType::kFloat32, {4}), x2 = random(DataType::kFloat32, {2, 3});
  Tensor g1 = random(DataType::kFloat32, {4}), g2 = random(DataType::kFloat32, {2, 3});
  Tensor h1 = random(DataType::kFloat32, {4}, 0, 1), h2 = random(DataType::kFloat32, {2, 3}, 0, 1);
  Tensor v1 = random(DataType::kFloat32, {4}), v2 = random(DataType::kFloat32, {2, 3});
  const double r = 0.1, t = 3, nc = 0.01, eps = 1e-6;
  {  // Adagrad, two tensors
    auto y = run("Adagrad", 1, {R, T, x1, x2, g1, g2, h1, h2},
                 {{"decay_factor", attr_float(0.1f)}, {"norm_coefficient", attr_float(0.01f)}}, 4, {}, dom);
    const double rr = r / (1 + t * 0.1);
    for (int k = 0; k < 2; ++k) {
      const Tensor &x = k ? x2 : x1, &g = k ? g2 : g1, &h = k ? h2 : h1;
      std::vector<double> wx, wh;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double gr = nc * get(x, i) + get(g, i), hn = get(h, i) + gr * gr;
        wh.push_back(hn);
        wx.push_back(get(x, i) - rr * gr / (std::sqrt(hn) + eps));
      }
      expect_close(y[k], x.shape(), wx);
      expect_close(y[2 + k], x.shape(), wh);
    }
  }
  {  // Adam
    auto y = run("Adam", 1, {R, T, x1, g1, v1, h1},
                 {{"alpha", attr_float(0.8f)}, {"beta", attr_float(0.9f)}, {"norm_coefficient", attr_float(0.01f)},
                  {"norm_coefficient_post", attr_float(0.02f)}},
                 3, {}, dom);
    std::vector<double> wx, wv, wh;
    const double alpha = 0.8f, beta = 0.9f;
    for (int64_t i = 0; i < 4; ++i) {
      const double gr = nc * get(x1, i) + get(g1, i);
      const double vn = alpha * get(v1, i) + (1 - alpha) * gr, hn = beta * get(h1, i) + (1 - beta) * gr * gr;
      const double ra = r * std::sqrt(1 - std::pow(beta, t)) / (1 - std::pow(alpha, t));
      wx.push_back((1 - 0.02) * (get(x1, i) - ra * vn / (std::sqrt(hn) + eps)));
      wv.push_back(vn);
      wh.push_back(hn);
    }
    expect_close(y[0], {4}, wx, 1e-4);
    expect_close(y[1], {4}, wv);
    expect_close(y[2], {4}, wh);
  }
  for (const char* mode : {"standard", "nesterov"}) {  // Momentum, first step (T = 0) and later
    for (double tv : {0.0, 3.0}) {
      auto y = run("Momentum", 1, {R, from(DataType::kInt64, {}, {tv}), x1, g1, v1},
                   {{"alpha", attr_float(0.9f)}, {"beta", attr_float(0.5f)}, {"norm_coefficient", attr_float(0.01f)},
                    {"mode", attr_str(mode)}},
                   2, {}, dom);
      std::vector<double> wx, wv;
      const double alpha = 0.9f, beta = tv > 0 ? 0.5 : 1.0;
      for (int64_t i = 0; i < 4; ++i) {
        const double gr = nc * get(x1, i) + get(g1, i), vn = alpha * get(v1, i) + beta * gr;
        wv.push_back(vn);
        wx.push_back(std::string(mode) == "nesterov" ? get(x1, i) - r * (gr + alpha * vn) : get(x1, i) - r * vn);
      }
      expect_close(y[0], {4}, wx);
      expect_close(y[1], {4}, wv);
    }
  }
}
