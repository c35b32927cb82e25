// RNN / GRU / LSTM against a naive per-batch, per-step reference.
#include <functional>

#include "test_rq_util.h"

using namespace rqtest;

namespace {

enum class Cell { kRnn, kGru, kLstm };
using Fn = std::function<double(double)>;

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct Case {
  Cell cell = Cell::kLstm;
  int64_t S = 4, B = 3, I = 5, H = 4;
  std::string direction = "forward";
  int64_t layout = 0;
  bool bias = true, lens = false, init = false, peep = false;
  bool lbr = false, input_forget = false;
  double clip = 0;
  DataType dt = DataType::kFloat32;
  // activations per direction (f, g, h); empty = defaults
  std::vector<Fn> acts;
  Attrs extra;
};

int gates(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 3 : 4; }
const char* op_name(Cell c) { return c == Cell::kRnn ? "RNN" : c == Cell::kGru ? "GRU" : "LSTM"; }

struct Result { std::vector<double> y, yh, yc; };

// Straightforward reference on layout-0 data: x [S, B, I], h0/c0 [nd, B, H], y [S, nd, B, H].
Result reference(const Case& k, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& r,
                 const std::vector<double>& b, const std::vector<int64_t>& lens, const std::vector<double>& h0,
                 const std::vector<double>& c0, const std::vector<double>& p) {
  const int nd = k.direction == "bidirectional" ? 2 : 1;
  const int64_t G = gates(k.cell), H = k.H, I = k.I, B = k.B, S = k.S;
  Result res;
  res.y.assign(S * nd * B * H, 0);
  res.yh.assign(nd * B * H, 0);
  res.yc.assign(nd * B * H, 0);
  std::vector<Fn> acts = k.acts;
  if (acts.empty()) acts = {sigmoid, [](double v) { return std::tanh(v); }, [](double v) { return std::tanh(v); }};
  if (k.cell == Cell::kRnn && k.acts.empty()) acts = {[](double v) { return std::tanh(v); }};
  if (k.cell == Cell::kGru && k.acts.empty()) acts.resize(2);
  if (k.acts.empty() && nd == 2) {
    const std::vector<Fn> one = acts;
    acts.insert(acts.end(), one.begin(), one.end());
  }
  auto clip = [&](double v) { return k.clip > 0 ? std::clamp(v, -k.clip, k.clip) : v; };
  for (int d = 0; d < nd; ++d) {
    const bool rev = d == 1 || k.direction == "reverse";
    // weights of gate g: row (g*H + j) of W[d]
    auto W = [&](int64_t g, int64_t j, int64_t i) { return w[((d * G + g) * H + j) * I + i]; };
    auto R = [&](int64_t g, int64_t j, int64_t i) { return r[((d * G + g) * H + j) * H + i]; };
    auto Wb = [&](int64_t g, int64_t j) { return b.empty() ? 0.0 : b[d * 2 * G * H + g * H + j]; };
    auto Rb = [&](int64_t g, int64_t j) { return b.empty() ? 0.0 : b[d * 2 * G * H + (G + g) * H + j]; };
    for (int64_t bi = 0; bi < B; ++bi) {
      std::vector<double> h(H), c(H, 0);
      for (int64_t j = 0; j < H; ++j) {
        h[j] = h0.empty() ? 0 : h0[(d * B + bi) * H + j];
        c[j] = c0.empty() ? 0 : c0[(d * B + bi) * H + j];
      }
      const int64_t L = lens.empty() ? S : lens[bi];
      for (int64_t step = 0; step < L; ++step) {
        const int64_t t = rev ? L - 1 - step : step;
        const double* xt = &x[(t * B + bi) * I];
        auto xdot = [&](int64_t g, int64_t j) { double s = 0; for (int64_t i = 0; i < I; ++i) s += W(g, j, i) * xt[i]; return s; };
        auto hdot = [&](int64_t g, int64_t j, const std::vector<double>& v) { double s = 0; for (int64_t i = 0; i < H; ++i) s += R(g, j, i) * v[i]; return s; };
        std::vector<double> hn(H), cn(H);
        if (k.cell == Cell::kRnn) {
          for (int64_t j = 0; j < H; ++j) hn[j] = acts[d * 1 + 0](clip(xdot(0, j) + hdot(0, j, h) + Wb(0, j) + Rb(0, j)));
        } else if (k.cell == Cell::kGru) {
          const Fn& f = acts[d * 2], &g = acts[d * 2 + 1];
          std::vector<double> z(H), rr(H), rh(H);
          for (int64_t j = 0; j < H; ++j) {
            z[j] = f(clip(xdot(0, j) + hdot(0, j, h) + Wb(0, j) + Rb(0, j)));
            rr[j] = f(clip(xdot(1, j) + hdot(1, j, h) + Wb(1, j) + Rb(1, j)));
            rh[j] = rr[j] * h[j];
          }
          for (int64_t j = 0; j < H; ++j) {
            const double lin = k.lbr ? rr[j] * (hdot(2, j, h) + Rb(2, j)) : hdot(2, j, rh) + Rb(2, j);
            const double ht = g(clip(xdot(2, j) + Wb(2, j) + lin));
            hn[j] = (1 - z[j]) * ht + z[j] * h[j];
          }
        } else {
          const Fn& f = acts[d * 3], &g = acts[d * 3 + 1], &hf = acts[d * 3 + 2];
          for (int64_t j = 0; j < H; ++j) {
            const double pi = p.empty() ? 0 : p[d * 3 * H + j], po = p.empty() ? 0 : p[d * 3 * H + H + j],
                         pf = p.empty() ? 0 : p[d * 3 * H + 2 * H + j];
            const double ig = f(clip(xdot(0, j) + hdot(0, j, h) + Wb(0, j) + Rb(0, j) + pi * c[j]));
            double fg = f(clip(xdot(2, j) + hdot(2, j, h) + Wb(2, j) + Rb(2, j) + pf * c[j]));
            if (k.input_forget) fg = 1 - ig;
            const double cc = g(clip(xdot(3, j) + hdot(3, j, h) + Wb(3, j) + Rb(3, j)));
            cn[j] = fg * c[j] + ig * cc;
            const double og = f(clip(xdot(1, j) + hdot(1, j, h) + Wb(1, j) + Rb(1, j) + po * cn[j]));
            hn[j] = og * hf(cn[j]);
          }
          c = cn;
        }
        h = hn;
        for (int64_t j = 0; j < H; ++j) res.y[((t * nd + d) * B + bi) * H + j] = h[j];
      }
      for (int64_t j = 0; j < H; ++j) {
        res.yh[(d * B + bi) * H + j] = h[j];
        res.yc[(d * B + bi) * H + j] = c[j];
      }
    }
  }
  return res;
}

// [a, b, rest] → [b, a, rest]
std::vector<double> swap01(const std::vector<double>& v, int64_t a, int64_t b, int64_t rest) {
  std::vector<double> o(v.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t k = 0; k < rest; ++k) o[(j * a + i) * rest + k] = v[(i * b + j) * rest + k];
  return o;
}

void check(const Case& k) {
  SCOPED_TRACE(std::string(op_name(k.cell)) + " " + k.direction + " layout " + std::to_string(k.layout));
  const int nd = k.direction == "bidirectional" ? 2 : 1;
  const int64_t G = gates(k.cell), S = k.S, B = k.B, H = k.H, I = k.I;
  Tensor X = random(k.dt, {S, B, I}), W = random(k.dt, {nd, G * H, I}, -0.7, 0.7), R = random(k.dt, {nd, G * H, H}, -0.7, 0.7);
  Tensor Bt = k.bias ? random(k.dt, {nd, 2 * G * H}, -0.5, 0.5) : Tensor();
  Tensor lens_t, h0, c0, P;
  std::vector<int64_t> lens;
  if (k.lens) {
    std::vector<double> lv;
    for (int64_t bi = 0; bi < B; ++bi) lv.push_back(static_cast<double>(std::max<int64_t>(1, S - 2 * bi)));
    for (double v : lv) lens.push_back(static_cast<int64_t>(v));
    lens_t = from(DataType::kInt32, {B}, lv);
  }
  if (k.init) {
    h0 = random(k.dt, {nd, B, H});
    if (k.cell == Cell::kLstm) c0 = random(k.dt, {nd, B, H});
  }
  if (k.peep) P = random(k.dt, {nd, 3 * H}, -0.5, 0.5);
  const Result want = reference(k, values(X), values(W), values(R), Bt.defined() ? values(Bt) : std::vector<double>{}, lens,
                                h0.defined() ? values(h0) : std::vector<double>{}, c0.defined() ? values(c0) : std::vector<double>{},
                                P.defined() ? values(P) : std::vector<double>{});
  // Inputs in the requested layout.
  Tensor Xl = X, h0l = h0, c0l = c0;
  if (k.layout == 1) {
    Xl = from(k.dt, {B, S, I}, swap01(values(X), S, B, I));
    if (h0.defined()) h0l = from(k.dt, {B, nd, H}, swap01(values(h0), nd, B, H));
    if (c0.defined()) c0l = from(k.dt, {B, nd, H}, swap01(values(c0), nd, B, H));
  }
  std::vector<Tensor> inputs = {Xl, W, R, Bt, lens_t, h0l};
  if (k.cell == Cell::kLstm) {
    inputs.push_back(c0l);
    inputs.push_back(P);
  }
  while (!inputs.back().defined()) inputs.pop_back();
  Attrs attrs = k.extra;
  attrs["direction"] = attr_str(k.direction);
  attrs["hidden_size"] = attr_int(H);
  if (k.layout) attrs["layout"] = attr_int(1);
  if (k.cell == Cell::kGru && k.lbr) attrs["linear_before_reset"] = attr_int(1);
  if (k.input_forget) attrs["input_forget"] = attr_int(1);
  if (k.clip > 0) attrs["clip"] = attr_float(static_cast<float>(k.clip));
  const int nout = k.cell == Cell::kLstm ? 3 : 2;
  auto out = run(op_name(k.cell), k.layout ? 14 : 7, inputs, attrs, nout);
  const double tol = k.dt == DataType::kFloat64 ? 1e-10 : 2e-5;
  if (k.layout == 0) {
    expect_close(out[0], {S, nd, B, H}, want.y, tol, tol);
    expect_close(out[1], {nd, B, H}, want.yh, tol, tol);
    if (k.cell == Cell::kLstm) expect_close(out[2], {nd, B, H}, want.yc, tol, tol);
  } else {
    // y [S, nd, B, H] → [B, S, nd, H]
    std::vector<double> yb(want.y.size());
    for (int64_t t = 0; t < S; ++t)
      for (int d = 0; d < nd; ++d)
        for (int64_t bi = 0; bi < B; ++bi)
          for (int64_t j = 0; j < H; ++j) yb[((bi * S + t) * nd + d) * H + j] = want.y[((t * nd + d) * B + bi) * H + j];
    expect_close(out[0], {B, S, nd, H}, yb, tol, tol);
    expect_close(out[1], {B, nd, H}, swap01(want.yh, nd, B, H), tol, tol);
    if (k.cell == Cell::kLstm) expect_close(out[2], {B, nd, H}, swap01(want.yc, nd, B, H), tol, tol);
  }
}

}  // namespace

TEST(Rnn, LstmForwardDefaults) {
  Case k;
  k.bias = false;
  check(k);
}

TEST(Rnn, LstmBidirectionalSeqLensPeepholes) {
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64}) {
    Case k;
    k.dt = dt;
    k.S = 5;
    k.direction = "bidirectional";
    k.lens = k.init = k.peep = true;
    check(k);
  }
}

TEST(Rnn, LstmReverseInputForgetClip) {
  Case k;
  k.direction = "reverse";
  k.input_forget = true;
  k.clip = 0.4;
  k.init = k.peep = true;
  check(k);
}

TEST(Rnn, LstmLayout1) {
  Case k;
  k.direction = "bidirectional";
  k.layout = 1;
  k.lens = k.init = true;
  check(k);
}

TEST(Rnn, GruBothResetModes) {
  for (bool lbr : {false, true})
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      Case k;
      k.cell = Cell::kGru;
      k.lbr = lbr;
      k.direction = dir;
      k.lens = k.init = true;
      check(k);
    }
}

TEST(Rnn, GruLayout1Double) {
  Case k;
  k.cell = Cell::kGru;
  k.dt = DataType::kFloat64;
  k.layout = 1;
  k.direction = "bidirectional";
  k.lens = k.init = true;
  check(k);
}

TEST(Rnn, SimpleRnnDirectionsAndLayouts) {
  for (int64_t layout : {0, 1})
    for (const char* dir : {"forward", "reverse", "bidirectional"}) {
      Case k;
      k.cell = Cell::kRnn;
      k.direction = dir;
      k.layout = layout;
      k.lens = k.init = true;
      check(k);
    }
}

TEST(Rnn, ActivationsWithAlphaBeta) {
  // GRU with f = HardSigmoid(0.3, 0.4), g = LeakyRelu(0.05), the same for both directions.
  Case k;
  k.cell = Cell::kGru;
  k.direction = "bidirectional";
  k.init = true;
  Fn f = [](double v) { return std::clamp(0.3 * v + 0.4, 0.0, 1.0); };
  Fn g = [](double v) { return v >= 0 ? v : 0.05 * v; };
  k.acts = {f, g, f, g};
  k.extra["activations"] = attr_strs({"HardSigmoid", "LeakyRelu", "HardSigmoid", "LeakyRelu"});
  k.extra["activation_alpha"] = attr_floats({0.3f, 0.05f, 0.3f, 0.05f});
  k.extra["activation_beta"] = attr_floats({0.4f, 0.4f});
  check(k);
  // RNN with Relu, LSTM with (Sigmoid, ScaledTanh(2, 0.5), Softsign).
  Case r;
  r.cell = Cell::kRnn;
  r.acts = {[](double v) { return v > 0 ? v : 0; }};
  r.extra["activations"] = attr_strs({"Relu"});
  check(r);
  Case l;
  l.acts = {sigmoid, [](double v) { return 2 * std::tanh(0.5 * v); }, [](double v) { return v / (1 + std::fabs(v)); }};
  l.extra["activations"] = attr_strs({"Sigmoid", "ScaledTanh", "Softsign"});
  l.extra["activation_alpha"] = attr_floats({2});
  l.extra["activation_beta"] = attr_floats({0.5});
  check(l);
}

TEST(Rnn, EmptyBatchAndBadShapes) {
  Case k;
  k.B = 0;
  check(k);
  auto bad = try_run("LSTM", 7, {random(DataType::kFloat32, {2, 1, 3}), random(DataType::kFloat32, {1, 16, 2}),
                                 random(DataType::kFloat32, {1, 16, 4})}, {{"hidden_size", attr_int(4)}}, 3);
  EXPECT_FALSE(bad.ok());
  auto lens = try_run("RNN", 7, {random(DataType::kFloat32, {2, 1, 3}), random(DataType::kFloat32, {1, 4, 3}),
                                 random(DataType::kFloat32, {1, 4, 4}), Tensor(), from(DataType::kInt32, {1}, {3})}, {}, 2);
  EXPECT_FALSE(lens.ok());
}
