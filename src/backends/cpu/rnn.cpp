// backends/cpu/rnn.cpp — RNN, GRU and LSTM on the CPU (opset 7+; `layout` from opset 14).
//
// Per direction, the input projection X·Wᵀ + Wb of every time step is one GEMM; each step then
// adds H·Rᵀ (one GEMM over the batch) and applies the gates. Batches with a sequence_lens entry
// shorter than the sequence stop early (reverse direction starts at their own last step); their
// Y rows past the end are zero and Y_h/Y_c hold the state after their last step.
#include <algorithm>
#include <cctype>

#include "backends/cpu/nn_common.h"
#include "backends/cpu/numeric_f64.h"
#include "ops/params_ml.h"

namespace kiln::cpu {
namespace {

using Cell = ops::RnnParams::Cell;

int gates_of(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 3 : 4; }
int acts_of(Cell c) { return c == Cell::kRnn ? 1 : c == Cell::kGru ? 2 : 3; }

using Act = rnn::Activation;

// The shapes of one run, checked against the inputs.
struct Dims {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0;
  int num_dir = 1, gates = 1;
};

template <typename T>
std::vector<T> read_all(const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<T>(load_f64(t, i));
  return v;
}

// [d0, d1, rest] → [d1, d0, rest] (switches between layout 1 and layout 0).
template <typename T>
std::vector<T> swap01(const std::vector<T>& v, int64_t d0, int64_t d1, int64_t rest) {
  std::vector<T> out(v.size());
  for (int64_t a = 0; a < d0; ++a)
    for (int64_t b = 0; b < d1; ++b) std::copy_n(&v[(a * d1 + b) * rest], rest, &out[(b * d0 + a) * rest]);
  return out;
}

// One direction of one run. x: [seq, batch, input] (layout 0); h0/c0: [batch, hidden];
// y: [seq, num_dir, batch, hidden]; yh/yc: [batch, hidden].
template <typename T>
struct Direction {
  const ops::RnnParams& a;
  const Dims& d;
  int dir;
  bool reverse;
  const T* w;   // [G*H, input]
  const T* r;   // [G*H, H]
  const T* b;   // [2*G*H] or null
  const T* p;   // LSTM peepholes [3*H] or null
  const Act* act;

  double clip(double v) const { return a.has_clip ? std::clamp(v, -a.clip, a.clip) : v; }
  double wb(int64_t g, int64_t j) const { return b ? static_cast<double>(b[g * d.hidden + j]) : 0.0; }
  double rb(int64_t g, int64_t j) const { return b ? static_cast<double>(b[(d.gates + g) * d.hidden + j]) : 0.0; }

  void run(const std::vector<T>& x, const std::vector<int64_t>& lens, const T* h0, const T* c0, std::vector<T>& y,
           T* yh, T* yc) const {
    const int64_t B = d.batch, H = d.hidden, GH = d.gates * H, S = d.seq;
    std::vector<T> xw(static_cast<size_t>(S * B * GH));  // x · Wᵀ for every step
    if (S * B > 0 && GH > 0)
      nn::gemm<T>(false, true, S * B, GH, d.input, T(1), x.data(), d.input, w, d.input, T(0), xw.data(), GH);
    std::vector<T> h(h0, h0 + B * H), c(static_cast<size_t>(B * H), T(0)), hr(static_cast<size_t>(B * GH)),
        z(static_cast<size_t>(B * H)), rh(static_cast<size_t>(B * H)), cand(static_cast<size_t>(B * H));
    if (c0) std::copy(c0, c0 + B * H, c.begin());
    // GRU without linear_before_reset multiplies R's h block by r ⊙ h, computed after the gates.
    const bool gru_late = a.cell == Cell::kGru && !a.linear_before_reset;
    const int64_t rcols = gru_late ? 2 * H : GH;
    for (int64_t s = 0; s < S; ++s) {
      if (B > 0 && H > 0) nn::gemm<T>(false, true, B, rcols, H, T(1), h.data(), H, r, H, T(0), hr.data(), GH);
      auto time_of = [&](int64_t bi) { return reverse ? lens[bi] - 1 - s : s; };
      for (int64_t bi = 0; bi < B; ++bi) {
        if (s >= lens[bi]) continue;
        const T* xg = &xw[(time_of(bi) * B + bi) * GH];
        const T* hg = &hr[bi * GH];
        T* hb = &h[bi * H];
        if (a.cell == Cell::kRnn) {
          for (int64_t j = 0; j < H; ++j) hb[j] = static_cast<T>(act[0](clip(xg[j] + hg[j] + wb(0, j) + rb(0, j))));
        } else if (a.cell == Cell::kLstm) {
          lstm_cell(xg, hg, hb, &c[bi * H]);
        } else {
          for (int64_t j = 0; j < H; ++j) {
            z[bi * H + j] = static_cast<T>(act[0](clip(xg[j] + hg[j] + wb(0, j) + rb(0, j))));
            const T rv = static_cast<T>(act[0](clip(xg[H + j] + hg[H + j] + wb(1, j) + rb(1, j))));
            rh[bi * H + j] = gru_late ? rv * hb[j] : rv;
          }
        }
      }
      if (a.cell == Cell::kGru) {
        if (gru_late && B > 0 && H > 0)
          nn::gemm<T>(false, true, B, H, H, T(1), rh.data(), H, r + 2 * H * H, H, T(0), cand.data(), H);
        for (int64_t bi = 0; bi < B; ++bi) {
          if (s >= lens[bi]) continue;
          const T* xg = &xw[(time_of(bi) * B + bi) * GH];
          for (int64_t j = 0; j < H; ++j) {
            const int64_t k = bi * H + j;
            const double lin = gru_late ? cand[k] + rb(2, j) : rh[k] * (hr[bi * GH + 2 * H + j] + rb(2, j));
            const double ht = act[1](clip(xg[2 * H + j] + wb(2, j) + lin));
            h[k] = static_cast<T>((1 - z[k]) * ht + z[k] * h[k]);
          }
        }
      }
      for (int64_t bi = 0; bi < B; ++bi)
        if (s < lens[bi]) std::copy_n(&h[bi * H], H, &y[((time_of(bi) * d.num_dir + dir) * B + bi) * H]);
    }
    std::copy(h.begin(), h.end(), yh);
    if (yc) std::copy(c.begin(), c.end(), yc);
  }

  // Gates i, o, f, c (ONNX order); peepholes i, o, f.
  void lstm_cell(const T* xg, const T* hg, T* hb, T* cb) const {
    const int64_t H = d.hidden;
    for (int64_t j = 0; j < H; ++j) {
      const double pi = p ? p[j] : 0, po = p ? p[H + j] : 0, pf = p ? p[2 * H + j] : 0;
      const double cprev = cb[j];
      const double i = act[0](clip(xg[j] + hg[j] + wb(0, j) + rb(0, j) + pi * cprev));
      const double f = a.input_forget ? 1 - i : act[0](clip(xg[2 * H + j] + hg[2 * H + j] + wb(2, j) + rb(2, j) + pf * cprev));
      const double g = act[1](clip(xg[3 * H + j] + hg[3 * H + j] + wb(3, j) + rb(3, j)));
      const double cn = f * cprev + i * g;
      const double o = act[0](clip(xg[H + j] + hg[H + j] + wb(1, j) + rb(1, j) + po * cn));
      cb[j] = static_cast<T>(cn);
      hb[j] = static_cast<T>(o * act[2](cn));
    }
  }
};

template <typename T>
Status rnn_run(KernelContext& ctx, const ops::RnnParams& a, const Dims& d) {
  const int64_t S = d.seq, B = d.batch, H = d.hidden, GH = d.gates * H;
  const int nd = d.num_dir;
  std::vector<T> x = read_all<T>(ctx.input(0));
  if (a.layout == 1) x = swap01(x, B, S, d.input);
  const std::vector<T> w = read_all<T>(ctx.input(1)), r = read_all<T>(ctx.input(2));
  std::vector<T> bias, peep, h0(static_cast<size_t>(nd * B * H), T(0)), c0;
  if (ctx.has_input(3)) bias = read_all<T>(ctx.input(3));
  std::vector<int64_t> lens(static_cast<size_t>(B), S);
  if (ctx.has_input(4))
    for (int64_t bi = 0; bi < B; ++bi) lens[bi] = static_cast<int64_t>(load_f64(ctx.input(4), bi));
  for (int64_t l : lens)
    if (l < 0 || l > S) return ctx.error("sequence_lens entries must lie in [0, " + std::to_string(S) + "]");
  if (ctx.has_input(5)) {
    h0 = read_all<T>(ctx.input(5));
    if (a.layout == 1) h0 = swap01(h0, B, nd, H);
  }
  if (a.cell == Cell::kLstm && ctx.has_input(6)) {
    c0 = read_all<T>(ctx.input(6));
    if (a.layout == 1) c0 = swap01(c0, B, nd, H);
  }
  if (a.cell == Cell::kLstm && ctx.has_input(7)) peep = read_all<T>(ctx.input(7));
  std::vector<T> y(static_cast<size_t>(S * nd * B * H), T(0)), yh(static_cast<size_t>(nd * B * H)),
      yc(static_cast<size_t>(nd * B * H));
  for (int dir = 0; dir < nd; ++dir) {
    Direction<T> run{a, d, dir, dir == 1 || a.reverse_only, w.data() + dir * GH * d.input, r.data() + dir * GH * H,
                     bias.empty() ? nullptr : bias.data() + dir * 2 * GH, peep.empty() ? nullptr : peep.data() + dir * 3 * H,
                     &a.acts[static_cast<size_t>(dir * acts_of(a.cell))]};
    run.run(x, lens, h0.data() + dir * B * H, c0.empty() ? nullptr : c0.data() + dir * B * H, y, yh.data() + dir * B * H,
            yc.data() + dir * B * H);
  }
  const DataType dt = ctx.input(0).dtype();
  auto emit = [&](int i, std::vector<T> v, const Shape& shape) {
    if (!ctx.has_output(i)) return;
    Tensor& t = ctx.output(i, dt, shape);
    for (int64_t k = 0; k < t.numel(); ++k) store_float(t, k, static_cast<double>(v[k]));
  };
  if (a.layout == 0) {
    emit(0, y, {S, nd, B, H});
    emit(1, yh, {nd, B, H});
    if (a.cell == Cell::kLstm) emit(2, yc, {nd, B, H});
  } else {
    // y [seq, nd, batch, hidden] → [batch, seq, nd, hidden]
    std::vector<T> yb(y.size());
    for (int64_t t = 0; t < S; ++t)
      for (int dir = 0; dir < nd; ++dir)
        for (int64_t bi = 0; bi < B; ++bi)
          std::copy_n(&y[((t * nd + dir) * B + bi) * H], H, &yb[((bi * S + t) * nd + dir) * H]);
    emit(0, std::move(yb), {B, S, nd, H});
    emit(1, swap01(yh, nd, B, H), {B, nd, H});
    if (a.cell == Cell::kLstm) emit(2, swap01(yc, nd, B, H), {B, nd, H});
  }
  return Status::Ok();
}

Status check_shape(KernelContext& ctx, int i, const char* name, const Shape& want) {
  if (!ctx.has_input(i) || ctx.input(i).shape() == want) return Status::Ok();
  return ctx.error(std::string(name) + " must have shape " + shape_to_string(want) + ", got " +
                   shape_to_string(ctx.input(i).shape()));
}

Status rnn_kernel(KernelContext& ctx, const ops::RnnParams& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& r = ctx.input(2);
  if (x.rank() != 3 || w.rank() != 3 || r.rank() != 3) return ctx.error("X, W and R must be 3-D");
  Dims d;
  d.num_dir = a.num_dir;
  d.gates = gates_of(a.cell);
  d.seq = a.layout == 1 ? x.dim(1) : x.dim(0);
  d.batch = a.layout == 1 ? x.dim(0) : x.dim(1);
  d.input = x.dim(2);
  d.hidden = r.dim(2);
  if (a.hidden_size && a.hidden_size != d.hidden)
    return ctx.error("hidden_size " + std::to_string(a.hidden_size) + " differs from R's last dim " +
                     std::to_string(d.hidden));
  const int64_t nd = d.num_dir, GH = d.gates * d.hidden, B = d.batch, H = d.hidden;
  KILN_RETURN_IF_ERROR(check_shape(ctx, 1, "W", {nd, GH, d.input}));
  KILN_RETURN_IF_ERROR(check_shape(ctx, 2, "R", {nd, GH, H}));
  KILN_RETURN_IF_ERROR(check_shape(ctx, 3, "B", {nd, 2 * GH}));
  KILN_RETURN_IF_ERROR(check_shape(ctx, 4, "sequence_lens", {B}));
  const Shape state = a.layout == 1 ? Shape{B, nd, H} : Shape{nd, B, H};
  KILN_RETURN_IF_ERROR(check_shape(ctx, 5, "initial_h", state));
  if (a.cell == Cell::kLstm) {
    KILN_RETURN_IF_ERROR(check_shape(ctx, 6, "initial_c", state));
    KILN_RETURN_IF_ERROR(check_shape(ctx, 7, "P", {nd, 3 * H}));
  }
  if (x.dtype() == DataType::kFloat64) return rnn_run<double>(ctx, a, d);
  return rnn_run<float>(ctx, a, d);
}

}  // namespace

void register_rnn(KernelRegistry& r) {
  for (const char* name : {"RNN", "GRU", "LSTM"}) {
    r.add({name, "", 7, 1 << 30, std::string("cpu.") + name + ".any", [](const ir::Node& n) { return require_float(n, 0); },
           [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
             KILN_ASSIGN_OR_RETURN(ops::RnnParams a, ops::parse_rnn(n));  // the cell from the op type
             return make_kernel([a](KernelContext& ctx) { return rnn_kernel(ctx, a); });
           }});
  }
}

}  // namespace kiln::cpu
