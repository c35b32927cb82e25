// Attention and LinearAttention against naive references written from the ONNX spec.
#include <limits>

#include "test_nn_util.h"

using namespace nntest;

namespace {

struct AttnCase {
  std::string name;
  bool packed = false;  // 3-D inputs
  int64_t B = 2, Hq = 2, Hkv = 2, Sq = 3, Skv = 5, D = 4, Dv = 4, P = 0;
  DataType dt = DataType::kFloat32;
  bool causal = false;
  float scale = 0;  // 0 = default
  float softcap = 0;
  int mode = -1;  // qk_matmul_output_mode; -1 = output not requested
  Shape mask_shape;  // empty = no mask
  bool bool_mask = false;
  bool nonpad = false;
};

double ninf() { return -std::numeric_limits<double>::infinity(); }

struct AttnRef {
  std::vector<double> y, pk, pv, qk;
};

// Straight from the spec: concat past, scores, softcap, bias (mask, padding, causal), softmax, PV.
AttnRef reference(const AttnCase& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask,
                  const Tensor* pk, const Tensor* pv, const std::vector<int64_t>& nonpad) {
  const int64_t T = c.P + c.Skv, group = c.Hq / c.Hkv;
  auto qat = [&](int64_t b, int64_t h, int64_t s, int64_t d) {
    return c.packed ? get(q, ((b * c.Sq + s) * c.Hq + h) * c.D + d) : get(q, ((b * c.Hq + h) * c.Sq + s) * c.D + d);
  };
  auto kvat = [&](const Tensor& x, const Tensor* past, int64_t dim, int64_t b, int64_t h, int64_t j, int64_t d) {
    if (j < c.P) return get(*past, ((b * c.Hkv + h) * c.P + j) * dim + d);
    j -= c.P;
    return c.packed ? get(x, ((b * c.Skv + j) * c.Hkv + h) * dim + d) : get(x, ((b * c.Hkv + h) * c.Skv + j) * dim + d);
  };
  AttnRef r;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hkv; ++h)
      for (int64_t j = 0; j < T; ++j) {
        for (int64_t d = 0; d < c.D; ++d) r.pk.push_back(kvat(k, pk, c.D, b, h, j, d));
        for (int64_t d = 0; d < c.Dv; ++d) r.pv.push_back(kvat(v, pv, c.Dv, b, h, j, d));
      }
  const double scale = c.scale ? c.scale : 1 / std::sqrt(static_cast<double>(c.D));
  const Shape full{c.B, c.Hq, c.Sq, T};
  std::vector<double> y(static_cast<size_t>(c.B * c.Hq * c.Sq * c.Dv));
  r.qk.resize(static_cast<size_t>(numel(full)));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.Sq; ++i) {
        std::vector<double> s(T);
        for (int64_t j = 0; j < T; ++j) {
          double x = 0;
          for (int64_t d = 0; d < c.D; ++d) x += qat(b, h, i, d) * kvat(k, pk, c.D, b, h / group, j, d);
          x *= scale;
          const int64_t at = flat({b, h, i, j}, full);
          if (c.mode == 0) r.qk[at] = x;
          if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
          if (c.mode == 1) r.qk[at] = x;
          if (mask) {
            const Shape& ms = mask->shape();
            if (j >= ms.back()) {
              x += ninf();
            } else {
              // right-aligned broadcast of the mask onto (b, h, i, j)
              const int64_t full_idx[4] = {b, h, i, j};
              int64_t off = 0;
              for (size_t m = 0; m < ms.size(); ++m) {
                const int64_t idx = full_idx[4 - ms.size() + m];
                off = off * ms[m] + (ms[m] == 1 ? 0 : idx);
              }
              x += c.bool_mask ? (get(*mask, off) != 0 ? 0.0 : ninf()) : get(*mask, off);
            }
          }
          if (!nonpad.empty() && j >= nonpad[b]) x += ninf();
          if (c.causal && j > i + c.P) x += ninf();
          if (c.mode == 2) r.qk[at] = x;
          s[j] = x;
        }
        double mx = ninf(), sum = 0;
        for (double x : s) mx = std::max(mx, x);
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < T; ++j) {
          s[j] /= sum;
          if (c.mode == 3) r.qk[flat({b, h, i, j}, full)] = s[j];
        }
        for (int64_t d = 0; d < c.Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < T; ++j) acc += s[j] * kvat(v, pv, c.Dv, b, h / group, j, d);
          const int64_t at = c.packed ? ((b * c.Sq + i) * c.Hq + h) * c.Dv + d : ((b * c.Hq + h) * c.Sq + i) * c.Dv + d;
          y[at] = acc;
        }
      }
  r.y = y;
  return r;
}

void check_case(const AttnCase& c) {
  SCOPED_TRACE(c.name);
  const Shape qs = c.packed ? Shape{c.B, c.Sq, c.Hq * c.D} : Shape{c.B, c.Hq, c.Sq, c.D};
  const Shape ks = c.packed ? Shape{c.B, c.Skv, c.Hkv * c.D} : Shape{c.B, c.Hkv, c.Skv, c.D};
  const Shape vs = c.packed ? Shape{c.B, c.Skv, c.Hkv * c.Dv} : Shape{c.B, c.Hkv, c.Skv, c.Dv};
  Tensor q = random(c.dt, qs), k = random(c.dt, ks), v = random(c.dt, vs);
  std::vector<Tensor> ins{q, k, v, Tensor(), Tensor(), Tensor(), Tensor()};
  Tensor mask;
  if (!c.mask_shape.empty()) {
    if (c.bool_mask) {
      mask = Tensor::empty(DataType::kBool, c.mask_shape);
      for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = (rng()() % 4) != 0;
      mask.data<bool>()[0] = true;
    } else {
      mask = random(c.dt, c.mask_shape, -2, 2);
    }
    ins[3] = mask;
  }
  Tensor pk, pv;
  if (c.P) {
    pk = random(c.dt, {c.B, c.Hkv, c.P, c.D});
    pv = random(c.dt, {c.B, c.Hkv, c.P, c.Dv});
    ins[4] = pk;
    ins[5] = pv;
  }
  std::vector<int64_t> nonpad;
  if (c.nonpad) {
    Tensor n = Tensor::empty(DataType::kInt64, {c.B});
    for (int64_t b = 0; b < c.B; ++b) nonpad.push_back(n.data<int64_t>()[b] = 1 + b % (c.Skv));
    ins[6] = n;
  }
  Attrs attrs;
  if (c.packed) {
    attrs["q_num_heads"] = int_attr(c.Hq);
    attrs["kv_num_heads"] = int_attr(c.Hkv);
  }
  if (c.causal) attrs["is_causal"] = int_attr(1);
  if (c.scale) attrs["scale"] = float_attr(c.scale);
  if (c.softcap) attrs["softcap"] = float_attr(c.softcap);
  if (c.mode >= 0) attrs["qk_matmul_output_mode"] = int_attr(c.mode);
  while (!ins.back().defined()) ins.pop_back();
  const bool kv_out = c.P > 0;
  auto out = run("Attention", c.nonpad ? 24 : 23, ins, attrs, 4, {true, kv_out, kv_out, c.mode >= 0});
  AttnRef want = reference(c, q, k, v, mask.defined() ? &mask : nullptr, c.P ? &pk : nullptr, c.P ? &pv : nullptr, nonpad);
  const double tol = c.dt == DataType::kFloat16 ? 1e-2 : (c.dt == DataType::kFloat64 ? 1e-10 : 1e-5);
  const int64_t T = c.P + c.Skv;
  expect_close(out[0], c.packed ? Shape{c.B, c.Sq, c.Hq * c.Dv} : Shape{c.B, c.Hq, c.Sq, c.Dv}, want.y, tol, tol);
  if (kv_out) {
    expect_close(out[1], {c.B, c.Hkv, T, c.D}, want.pk, 0, 0);
    expect_close(out[2], {c.B, c.Hkv, T, c.Dv}, want.pv, 0, 0);
  }
  if (c.mode >= 0) {
    // masked entries are -inf in both; expect_close treats equal infinities via |g-w| = nan, so compare here.
    ASSERT_EQ(out[3].numel(), static_cast<int64_t>(want.qk.size()));
    for (int64_t i = 0; i < out[3].numel(); ++i) {
      const double g = get(out[3], i), w = want.qk[i];
      if (std::isinf(w)) EXPECT_EQ(g, w) << i;
      else EXPECT_NEAR(g, w, tol + tol * std::fabs(w)) << i;
    }
  }
}

}  // namespace

TEST(Attention, MatchesReference) {
  std::vector<AttnCase> cases;
  auto add = [&](std::string name, auto f) {
    AttnCase c;
    c.name = std::move(name);
    f(c);
    cases.push_back(c);
  };
  add("mha 4d", [](AttnCase&) {});
  add("mha 3d", [](AttnCase& c) { c.packed = true; });
  add("causal square", [](AttnCase& c) { c.Skv = 3; c.causal = true; });
  add("causal rect", [](AttnCase& c) { c.causal = true; });
  add("float mask 2d", [](AttnCase& c) { c.mask_shape = {3, 5}; });
  add("float mask 3d bcast", [](AttnCase& c) { c.mask_shape = {2, 1, 3, 5}; });
  add("bool mask 4d", [](AttnCase& c) { c.mask_shape = {2, 2, 3, 5}; c.bool_mask = true; });
  add("short mask padded", [](AttnCase& c) { c.mask_shape = {1, 3}; });
  add("mask + causal", [](AttnCase& c) { c.mask_shape = {3, 5}; c.causal = true; });
  add("gqa 4d", [](AttnCase& c) { c.Hq = 6; c.Hkv = 2; });
  add("mqa 3d", [](AttnCase& c) { c.packed = true; c.Hq = 4; c.Hkv = 1; c.mask_shape = {3, 5}; });
  add("diff head sizes 3d", [](AttnCase& c) { c.packed = true; c.Dv = 6; c.Hq = 4; c.Hkv = 2; });
  add("past kv", [](AttnCase& c) { c.P = 4; c.mask_shape = {3, 9}; });
  add("past kv causal gqa 3d", [](AttnCase& c) { c.packed = true; c.P = 2; c.causal = true; c.Hq = 4; c.Hkv = 2; c.Dv = 3; });
  add("scale", [](AttnCase& c) { c.scale = 0.3f; });
  add("softcap + mask", [](AttnCase& c) { c.softcap = 0.7f; c.mask_shape = {3, 5}; });
  for (int m = 0; m < 4; ++m)
    add("qk mode " + std::to_string(m), [m](AttnCase& c) { c.mode = m; c.softcap = 0.9f; c.mask_shape = {3, 5}; c.causal = true; });
  add("nonpad kv", [](AttnCase& c) { c.nonpad = true; c.Skv = 6; });
  add("float64", [](AttnCase& c) { c.dt = DataType::kFloat64; c.causal = true; c.Hq = 4; });
  add("float16 past", [](AttnCase& c) { c.dt = DataType::kFloat16; c.P = 3; c.mask_shape = {3, 8}; });
  add("bigger (sgemm path)", [](AttnCase& c) { c.B = 1; c.Hq = 8; c.Hkv = 2; c.Sq = 33; c.Skv = 47; c.D = 32; c.Dv = 16; c.causal = true; });
  add("single kv token", [](AttnCase& c) { c.Skv = 1; c.Sq = 1; c.P = 5; });
  for (const AttnCase& c : cases) check_case(c);
}

TEST(Attention, FullyMaskedRowIsNan) {
  // Reference semantics: softmax over a row of -inf is 0/0.
  Tensor q = random(DataType::kFloat32, {1, 1, 2, 4}), k = random(DataType::kFloat32, {1, 1, 3, 4});
  Tensor v = random(DataType::kFloat32, {1, 1, 3, 4});
  Tensor m = Tensor::empty(DataType::kBool, {2, 3});
  for (int i = 0; i < 6; ++i) m.data<bool>()[i] = i >= 3;  // row 0 fully masked
  auto y = run("Attention", 23, {q, k, v, m}, {});
  for (int d = 0; d < 4; ++d) EXPECT_TRUE(std::isnan(get(y[0], d)));
  for (int d = 4; d < 8; ++d) EXPECT_FALSE(std::isnan(get(y[0], d)));
}

TEST(Attention, BadInputsAreErrors) {
  Tensor q = random(DataType::kFloat32, {1, 2, 8}), k = random(DataType::kFloat32, {1, 3, 8});
  EXPECT_FALSE(try_run("Attention", 23, {q, k, k}, {}).ok());  // 3-D without head counts
  EXPECT_FALSE(try_run("Attention", 23, {q, k, k}, {{"q_num_heads", int_attr(3)}, {"kv_num_heads", int_attr(2)}}).ok());
  Tensor q4 = random(DataType::kFloat32, {1, 3, 2, 4}), k4 = random(DataType::kFloat32, {1, 2, 2, 4});
  EXPECT_FALSE(try_run("Attention", 23, {q4, k4, k4}, {}).ok());  // 3 heads over 2 kv heads
  Tensor bad_mask = random(DataType::kFloat32, {3, 2});
  Tensor k42 = random(DataType::kFloat32, {1, 3, 2, 4});
  EXPECT_FALSE(try_run("Attention", 23, {q4, k42, k42, bad_mask}, {}).ok());
}

// ---- LinearAttention

namespace {

struct LinCase {
  std::string rule;
  int64_t B = 2, T = 3, Hq = 2, Hk = 2, dk = 3, dv = 4;
  bool past = false;
  bool decay_per_dim = false;
  bool beta_scalar = false;
  float scale = 0;
};

void check_linear(const LinCase& c) {
  SCOPED_TRACE(c.rule);
  const bool gated = c.rule == "gated" || c.rule == "gated_delta", delta = c.rule == "delta" || c.rule == "gated_delta";
  Tensor q = random(DataType::kFloat32, {c.B, c.T, c.Hq * c.dk}), k = random(DataType::kFloat32, {c.B, c.T, c.Hk * c.dk});
  Tensor v = random(DataType::kFloat32, {c.B, c.T, c.Hk * c.dv});
  Tensor past = c.past ? random(DataType::kFloat32, {c.B, c.Hk, c.dk, c.dv}) : Tensor();
  const int64_t gw = c.decay_per_dim ? c.Hk * c.dk : c.Hk, bw = c.beta_scalar ? 1 : c.Hk;
  Tensor decay = gated ? random(DataType::kFloat32, {c.B, c.T, gw}, -1, 0) : Tensor();
  Tensor beta = delta ? random(DataType::kFloat32, {c.B, c.T, bw}, 0, 1) : Tensor();
  Attrs attrs{{"q_num_heads", int_attr(c.Hq)}, {"kv_num_heads", int_attr(c.Hk)}, {"update_rule", string_attr(c.rule)}};
  if (c.scale) attrs["scale"] = float_attr(c.scale);
  std::vector<Tensor> ins{q, k, v, past, decay, beta};
  while (!ins.back().defined()) ins.pop_back();
  auto out = run("LinearAttention", 27, ins, attrs, 2);
  const double scale = c.scale ? c.scale : 1 / std::sqrt(static_cast<double>(c.dk));
  std::vector<double> y(static_cast<size_t>(c.B * c.T * c.Hq * c.dv)), st;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hk; ++h) {
      std::vector<std::vector<double>> S(c.dk, std::vector<double>(c.dv, 0));
      if (c.past)
        for (int64_t d = 0; d < c.dk; ++d)
          for (int64_t m = 0; m < c.dv; ++m) S[d][m] = get(past, ((b * c.Hk + h) * c.dk + d) * c.dv + m);
      for (int64_t t = 0; t < c.T; ++t) {
        auto K = [&](int64_t d) { return get(k, (b * c.T + t) * c.Hk * c.dk + h * c.dk + d); };
        auto V = [&](int64_t m) { return get(v, (b * c.T + t) * c.Hk * c.dv + h * c.dv + m); };
        if (gated)
          for (int64_t d = 0; d < c.dk; ++d) {
            const double g = std::exp(get(decay, (b * c.T + t) * gw + (c.decay_per_dim ? h * c.dk + d : h)));
            for (auto& x : S[d]) x *= g;
          }
        std::vector<double> u(c.dv);
        for (int64_t m = 0; m < c.dv; ++m) {
          u[m] = V(m);
          if (delta) {
            double r = 0;
            for (int64_t d = 0; d < c.dk; ++d) r += S[d][m] * K(d);
            u[m] = get(beta, (b * c.T + t) * bw + (c.beta_scalar ? 0 : h)) * (u[m] - r);
          }
        }
        for (int64_t d = 0; d < c.dk; ++d)
          for (int64_t m = 0; m < c.dv; ++m) S[d][m] += K(d) * u[m];
        for (int64_t hq = h * (c.Hq / c.Hk); hq < (h + 1) * (c.Hq / c.Hk); ++hq)
          for (int64_t m = 0; m < c.dv; ++m) {
            double o = 0;
            for (int64_t d = 0; d < c.dk; ++d) o += get(q, (b * c.T + t) * c.Hq * c.dk + hq * c.dk + d) * S[d][m];
            y[(b * c.T + t) * c.Hq * c.dv + hq * c.dv + m] = scale * o;
          }
      }
      for (auto& row : S) st.insert(st.end(), row.begin(), row.end());
    }
  expect_close(out[0], {c.B, c.T, c.Hq * c.dv}, y);
  expect_close(out[1], {c.B, c.Hk, c.dk, c.dv}, st);
}

}  // namespace

TEST(LinearAttention, MatchesReference) {
  check_linear({"linear"});
  check_linear({"linear", 1, 1, 2, 2, 3, 4, true});
  check_linear({"gated", 2, 4, 2, 2, 3, 2, true, true});
  check_linear({"delta", 2, 3, 4, 2, 3, 4, false, false, true});
  check_linear({"gated_delta", 1, 5, 3, 1, 4, 3, true, false, false, 0.5f});
  check_linear({"gated_delta", 2, 2, 4, 2, 2, 2, false, true, false});
}

TEST(LinearAttention, InputsMustMatchRule) {
  Tensor q = random(DataType::kFloat32, {1, 2, 4});
  Attrs attrs{{"q_num_heads", int_attr(2)}, {"kv_num_heads", int_attr(2)}, {"update_rule", string_attr("gated")}};
  EXPECT_FALSE(try_run("LinearAttention", 27, {q, q, q}, attrs, 2).ok());  // gated without decay
  attrs["update_rule"] = string_attr("bogus");
  EXPECT_FALSE(try_run("LinearAttention", 27, {q, q, q}, attrs, 2).ok());
}

namespace {

// The kiln-domain op `op` on `in` with `attrs`, eagerly on the CPU.
Expected<std::vector<Tensor>> try_run_kiln(const std::string& op, const std::vector<Tensor>& in, const Attrs& attrs) {
  ir::Graph g;
  std::vector<ir::Value*> ins;
  std::vector<Slot> slots;
  for (const Tensor& x : in) {
    ins.push_back(g.add_value("in" + std::to_string(ins.size()), ir::Type::tensor(x.dtype(), ir::SymShape::of(x.shape()))));
    slots.push_back(Slot::of(x));
  }
  ir::Node* n = g.add_node(op, "kiln", ins, {g.add_value("y")}, "n");
  n->opset = 1;
  n->attrs = attrs;
  auto r = run_node_eager(*n, slots);
  if (!r.ok()) return r.status();
  std::vector<Tensor> out;
  for (auto& s : *r) out.push_back(s.tensor);
  return out;
}

// kiln.Attention on `in` with `attrs` (num_heads and scale given by the caller).
Expected<std::vector<Tensor>> try_fused_attention(const std::vector<Tensor>& in, const Attrs& attrs) {
  return try_run_kiln("Attention", in, attrs);
}

// kiln.Attention (the fused op the attention passes make) on Q, K, V [1, S, H*D] = [1, 3, 2*4] and an
// additive mask [1, 1, S, T] (T = 5) whose row 1 is all -inf.
std::vector<Tensor> fused_attention(const std::vector<Tensor>& qkvm, bool zero_nan_rows, bool packed_qkv = false,
                                    int64_t heads = 2, bool sequence_first = false) {
  Attrs attrs{{"num_heads", int_attr(heads)}, {"scale", float_attr(0.5f)}};
  if (zero_nan_rows) attrs["zero_nan_rows"] = int_attr(1);
  if (packed_qkv) attrs["packed_qkv"] = int_attr(1);
  if (sequence_first) attrs["sequence_first"] = int_attr(1);
  auto r = try_fused_attention(qkvm, attrs);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::vector<Tensor>{};
}

}  // namespace

// torch's SDPA export guards the probabilities (Where(IsNaN(P), 0, P)); the fused op's zero_nan_rows
// does the same: a fully masked row's context is 0, the other rows are untouched. Without it the row
// is NaN, as Softmax makes it.
TEST(FusedAttention, ZeroNanRowsZeroesFullyMaskedRowsOnly) {
  const int64_t S = 3, T = 5, W = 8;
  Tensor m = random(DataType::kFloat32, {1, 1, S, T}, -1, 0);
  for (int64_t t = 0; t < T; ++t) m.data<float>()[T + t] = -std::numeric_limits<float>::infinity();
  const std::vector<Tensor> in = {random(DataType::kFloat32, {1, S, W}), random(DataType::kFloat32, {1, T, W}),
                                  random(DataType::kFloat32, {1, T, W}), m};
  const auto plain = fused_attention(in, false);
  const auto guarded = fused_attention(in, true);
  ASSERT_EQ(plain.size(), 1u);
  ASSERT_EQ(guarded.size(), 1u);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t c = 0; c < W; ++c) {
      const double g = get(guarded[0], s * W + c), p = get(plain[0], s * W + c);
      if (s == 1) {
        EXPECT_TRUE(std::isnan(p)) << c;
        EXPECT_EQ(g, 0.0) << c;
      } else {
        EXPECT_FALSE(std::isnan(p)) << s << "," << c;
        EXPECT_EQ(g, p) << s << "," << c;
      }
    }
}

// packed_qkv (timm's one projection [B, N, 3*H*D]): the same numbers as Q, K, V cut out of it, with
// and without an additive mask (Swin's relative position bias [H, N, N]), and sequence-first.
TEST(FusedAttention, PackedQkvIsTheOpOnItsThreeColumnBlocks) {
  const int64_t B = 2, N = 7, H = 3, D = 4, W = H * D;
  Tensor qkv = random(DataType::kFloat32, {B, N, 3 * W});
  Tensor part[3];
  for (int i = 0; i < 3; ++i) {
    part[i] = Tensor::empty(DataType::kFloat32, {B, N, W});
    for (int64_t r = 0; r < B * N; ++r)
      for (int64_t c = 0; c < W; ++c) part[i].data<float>()[r * W + c] = qkv.data<float>()[r * 3 * W + i * W + c];
  }
  const Tensor bias = random(DataType::kFloat32, {H, N, N});
  // The same tensors read sequence-first ([N', B', ...] with N' = B, B' = N: rows are rows either way).
  for (bool seq_first : {false, true})
    for (bool with_bias : {false, true}) {
      if (seq_first && with_bias) continue;  // the bias is [H, S, T]: S = T = N batch-first only
      std::vector<Tensor> packed_in = {qkv, qkv, qkv}, split_in = {part[0], part[1], part[2]};
      if (with_bias) {
        packed_in.push_back(bias);
        split_in.push_back(bias);
      }
      const auto got = fused_attention(packed_in, false, true, H, seq_first);
      const auto want = fused_attention(split_in, false, false, H, seq_first);
      ASSERT_EQ(got.size(), 1u);
      ASSERT_EQ(want.size(), 1u);
      ASSERT_EQ(got[0].shape(), (Shape{B, N, W}));
      for (int64_t i = 0; i < want[0].numel(); ++i) EXPECT_NEAR(get(got[0], i), get(want[0], i), 1e-6) << seq_first << " " << i;
    }
}

namespace {

// softmax(scale · q_b,h k_b,hᵀ + mask[b % P, h|0, s, t]) v_b,h in double, Q, K, V [B, S|T, H*D]
// batch-first and the mask [P, Hm, S, T] (Hm = H or 1).
std::vector<double> periodic_mask_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, int64_t H,
                                            double scale) {
  const int64_t B = q.dim(0), S = q.dim(1), T = k.dim(1), D = q.dim(2) / H, P = mask.dim(0), Hm = mask.dim(1);
  std::vector<double> y(static_cast<size_t>(B * S * H * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s) {
        std::vector<double> x(T);
        double mx = -1e300, sum = 0;
        for (int64_t t = 0; t < T; ++t) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += get(q, (b * S + s) * H * D + h * D + d) * get(k, (b * T + t) * H * D + h * D + d);
          x[t] = scale * dot + get(mask, (((b % P) * Hm + (Hm == 1 ? 0 : h)) * S + s) * T + t);
          mx = std::max(mx, x[t]);
        }
        for (int64_t t = 0; t < T; ++t) sum += x[t] = std::exp(x[t] - mx);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t t = 0; t < T; ++t) acc += x[t] / sum * get(v, (b * T + t) * H * D + h * D + d);
          y[static_cast<size_t>((b * S + s) * H * D + h * D + d)] = acc;
        }
      }
  return y;
}

}  // namespace

// mask_batch_period (Swin's shifted windows: B = images·nW, the mask [nW, H, S, T]): batch entry b adds
// mask entry b % P, with the heads given or broadcast, for several periods.
TEST(FusedAttention, MaskBatchPeriodReadsEntryBModPeriod) {
  const int64_t S = 5, T = 6, H = 3, D = 4;
  for (int64_t P : {1, 2, 3, 4})
    for (int64_t Hm : {H, int64_t{1}}) {
      const int64_t B = 2 * P;
      const Tensor q = random(DataType::kFloat32, {B, S, H * D}), k = random(DataType::kFloat32, {B, T, H * D}),
                   v = random(DataType::kFloat32, {B, T, H * D}), m = random(DataType::kFloat32, {P, Hm, S, T}, -3, 3);
      const Attrs attrs{{"num_heads", int_attr(H)}, {"scale", float_attr(0.5f)}, {"mask_batch_period", int_attr(P)}};
      auto got = try_fused_attention({q, k, v, m}, attrs);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      const std::vector<double> want = periodic_mask_reference(q, k, v, m, H, 0.5);
      ASSERT_EQ((*got)[0].shape(), (Shape{B, S, H * D}));
      for (int64_t i = 0; i < (*got)[0].numel(); ++i)
        ASSERT_NEAR(get((*got)[0], i), want[static_cast<size_t>(i)], 1e-5) << "period " << P << ", mask heads " << Hm << ", " << i;
    }
}

// A periodic mask must be [P, ...] of rank 4 and the batch a multiple of P; without a period a mask
// [P, H, S, T] with P != B does not broadcast.
TEST(FusedAttention, MaskBatchPeriodRefusesMasksAndBatchesThatDoNotFit) {
  const int64_t S = 2, T = 3, H = 2, D = 2;
  auto run_with = [&](int64_t B, const Shape& mask, int64_t period) {
    Attrs attrs{{"num_heads", int_attr(H)}, {"scale", float_attr(1.0f)}};
    if (period) attrs["mask_batch_period"] = int_attr(period);
    return try_fused_attention({random(DataType::kFloat32, {B, S, H * D}), random(DataType::kFloat32, {B, T, H * D}),
                                random(DataType::kFloat32, {B, T, H * D}), random(DataType::kFloat32, mask)},
                               attrs)
        .ok();
  };
  EXPECT_TRUE(run_with(6, {3, H, S, T}, 3));
  EXPECT_FALSE(run_with(6, {3, H, S, T}, 0));   // no period: 3 is not B
  EXPECT_FALSE(run_with(6, {2, H, S, T}, 3));   // dim 0 is not the period
  EXPECT_FALSE(run_with(4, {3, H, S, T}, 3));   // B not a multiple of the period
  EXPECT_FALSE(run_with(6, {H, S, T}, 3));      // rank 3: no period dim
}

namespace {

// x [B, Hx, L, E] (heads first) as the batch-first [B, L, H*E] the op reads by default, each of its
// Hx heads repeated for H / Hx consecutive heads (what a grouped-query export's Expand + Reshape make).
Tensor heads_first_to_rows(const Tensor& x, int64_t H) {
  const int64_t B = x.dim(0), Hx = x.dim(1), L = x.dim(2), E = x.dim(3), n = H / Hx;
  Tensor y = Tensor::empty(DataType::kFloat32, {B, L, H * E});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t e = 0; e < E; ++e)
          y.data<float>()[((b * L + l) * H + h) * E + e] = x.data<float>()[((b * Hx + h / n) * L + l) * E + e];
  return y;
}

}  // namespace

// heads_first (Q [B, H, S, D], K [B, Hkv, T, D], V [B, Hkv, T, Dv], as decoder exports have them after
// rotary embeddings) and kv_num_heads (grouped-query attention: query head h reads K/V head
// h / (H / Hkv)): the same numbers as the batch-first op on the rows with K and V's heads repeated,
// with an additive mask of fully masked rows under zero_nan_rows, for H = Hkv, grouped and one K/V
// head (multi-query); and grouped K/V heads in the batch-first layout (K [B, T, Hkv*D]).
TEST(FusedAttention, HeadsFirstAndGroupedKvHeadsAreTheOpOnRepeatedHeads) {
  const int64_t B = 2, S = 5, T = 7, H = 4, D = 8, Dv = 6;
  for (int64_t Hkv : {4, 2, 1}) {
    const Tensor q = random(DataType::kFloat32, {B, H, S, D}), k = random(DataType::kFloat32, {B, Hkv, T, D}),
                 v = random(DataType::kFloat32, {B, Hkv, T, Dv});
    Tensor m = random(DataType::kFloat32, {B, 1, S, T}, -2, 0);
    for (int64_t t = 0; t < T; ++t) m.data<float>()[2 * T + t] = -std::numeric_limits<float>::infinity();  // row 2 of batch 0
    const Tensor q3 = heads_first_to_rows(q, H), k3 = heads_first_to_rows(k, H), v3 = heads_first_to_rows(v, H);
    const Attrs plain{{"num_heads", int_attr(H)}, {"scale", float_attr(0.3f)}, {"zero_nan_rows", int_attr(1)}};
    auto want = try_fused_attention({q3, k3, v3, m}, plain);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    Attrs hf = plain;
    hf["heads_first"] = int_attr(1);
    if (Hkv != H) hf["kv_num_heads"] = int_attr(Hkv);
    if (Hkv == 1) hf.erase("num_heads");  // heads-first tensors carry their head counts
    auto got = try_fused_attention({q, k, v, m}, hf);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ((*got)[0].shape(), (Shape{B, S, H, Dv}));  // the rows of [B, S, H*Dv]
    EXPECT_EQ(get((*got)[0], 2 * H * Dv), 0.0);           // the fully masked row
    for (int64_t i = 0; i < (*want)[0].numel(); ++i)
      ASSERT_NEAR(get((*got)[0], i), get((*want)[0], i), 1e-5) << "Hkv " << Hkv << ", " << i;
    // Batch-first rows with Hkv heads in K and V.
    if (Hkv == H) continue;
    const Tensor k_rows = heads_first_to_rows(k, Hkv), v_rows = heads_first_to_rows(v, Hkv);
    Attrs grouped = plain;
    grouped["kv_num_heads"] = int_attr(Hkv);
    auto rows = try_fused_attention({q3, k_rows, v_rows, m}, grouped);
    ASSERT_TRUE(rows.ok()) << rows.status().to_string();
    for (int64_t i = 0; i < (*want)[0].numel(); ++i)
      ASSERT_NEAR(get((*rows)[0], i), get((*want)[0], i), 1e-5) << "rows, Hkv " << Hkv << ", " << i;
  }
}

// What does not fit is an error naming it: head counts that do not group, K heads other than
// kv_num_heads, heads-first inputs that are not 4-D, Q heads other than num_heads, heads_first with
// packed_qkv.
TEST(FusedAttention, HeadsFirstAndGroupedKvHeadsRefuseShapesThatDoNotFit) {
  auto err = [](const std::vector<Tensor>& in, Attrs attrs) {
    auto r = try_fused_attention(in, attrs);
    return r.ok() ? std::string("ok") : r.status().to_string();
  };
  const Tensor q = random(DataType::kFloat32, {1, 4, 3, 8}), k3 = random(DataType::kFloat32, {1, 3, 5, 8}),
               k2 = random(DataType::kFloat32, {1, 2, 5, 8});
  const Attrs hf{{"num_heads", int_attr(4)}, {"scale", float_attr(1.0f)}, {"heads_first", int_attr(1)}};
  EXPECT_EQ(err({q, k2, k2}, hf), "ok");
  EXPECT_NE(err({q, k3, k3}, hf).find("do not group"), std::string::npos);
  Attrs wrong_kv = hf;
  wrong_kv["kv_num_heads"] = int_attr(1);
  EXPECT_NE(err({q, k2, k2}, wrong_kv).find("kv_num_heads is 1"), std::string::npos);
  const Tensor q3d = random(DataType::kFloat32, {1, 3, 32});
  EXPECT_NE(err({q3d, q3d, q3d}, hf).find("4-D"), std::string::npos);
  Attrs heads5 = hf;
  heads5["num_heads"] = int_attr(2);
  EXPECT_NE(err({q, k2, k2}, heads5).find("num_heads"), std::string::npos);
  Attrs packed = hf;
  packed["packed_qkv"] = int_attr(1);
  EXPECT_NE(err({q, q, q}, packed).find("packed_qkv"), std::string::npos);
  Attrs rows{{"num_heads", int_attr(4)}, {"scale", float_attr(1.0f)}, {"kv_num_heads", int_attr(3)}};
  EXPECT_NE(err({q3d, random(DataType::kFloat32, {1, 5, 24}), random(DataType::kFloat32, {1, 5, 24})}, rows).find("heads"),
            std::string::npos);
}

// kiln.Rotary (passes/fuse_rotary.cpp: the rotate_half rotary embedding): y = x·cos + rotate_half(x)·sin
// against the formula in double, with cos/sin per (batch, position) as Llama's [B, 1, S, D], one table
// for every batch [S, D], and a per-head one [1, H, 1, D]; and what does not fit is an error.
TEST(FusedAttention, RotaryIsXCosPlusRotateHalfXSin) {
  const int64_t B = 2, H = 3, S = 5, D = 8;
  const Tensor x = random(DataType::kFloat32, {B, H, S, D});
  for (const Shape& cs : {Shape{B, 1, S, D}, Shape{S, D}, Shape{1, H, 1, D}}) {
    const Tensor c = random(DataType::kFloat32, cs), s = random(DataType::kFloat32, cs);
    auto got = try_run_kiln("Rotary", {x, c, s}, {});
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ((*got)[0].shape(), x.shape());
    // cos/sin right-aligned to x: element (b, h, p, i) reads index (b|0, h|0, p|0, i).
    auto at = [&](const Tensor& t, int64_t b, int64_t h, int64_t p, int64_t i) {
      Shape full = t.shape();
      full.insert(full.begin(), 4 - full.size(), 1);
      const int64_t bb = full[0] == 1 ? 0 : b, hh = full[1] == 1 ? 0 : h, pp = full[2] == 1 ? 0 : p, ii = full[3] == 1 ? 0 : i;
      return static_cast<double>(t.data<float>()[((bb * full[1] + hh) * full[2] + pp) * full[3] + ii]);
    };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t p = 0; p < S; ++p)
          for (int64_t i = 0; i < D; ++i) {
            const int64_t row = ((b * H + h) * S + p) * D;
            const double xi = x.data<float>()[row + i];
            const double rot = i < D / 2 ? -double(x.data<float>()[row + i + D / 2]) : double(x.data<float>()[row + i - D / 2]);
            const double want = xi * at(c, b, h, p, i) + rot * at(s, b, h, p, i);
            ASSERT_NEAR(get((*got)[0], row + i), want, 1e-5) << shape_to_string(cs) << " " << row + i;
          }
  }
  EXPECT_FALSE(try_run_kiln("Rotary", {random(DataType::kFloat32, {2, 7}), random(DataType::kFloat32, {2, 7}),
                                       random(DataType::kFloat32, {2, 7})}, {}).ok());  // odd last dim
  EXPECT_FALSE(try_run_kiln("Rotary", {random(DataType::kFloat32, {2, 8}), random(DataType::kFloat32, {4, 8}),
                                       random(DataType::kFloat32, {4, 8})}, {}).ok());  // cos would enlarge x
}
