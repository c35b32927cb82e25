// backends/cuda/cuda_rnn.cu — RNN, GRU and LSTM: one block per (direction, batch entry) steps through
// the sequence; the block's threads share the hidden units, synchronizing once or twice per step.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void rnn_kernel(RnnArgs a) {
  const int dir = blockIdx.x / a.batch;
  const int64_t bi = blockIdx.x % a.batch;
  const int64_t S = a.seq, B = a.batch, I = a.input, H = a.hidden, nd = a.num_dir;
  const int G = a.cell == 0 ? 1 : a.cell == 1 ? 3 : 4;
  const bool reverse = dir == 1 || a.reverse_only;
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w) + dir * G * H * I;
  const T* r = static_cast<const T*>(a.r) + dir * G * H * H;
  const T* bias = a.b ? static_cast<const T*>(a.b) + dir * 2 * G * H : nullptr;
  const T* peep = a.p ? static_cast<const T*>(a.p) + dir * 3 * H : nullptr;
  const rnn::Activation* f = a.acts + dir * (a.cell == 0 ? 1 : a.cell == 1 ? 2 : 3);
  // State buffers of this block: h (2 copies), c, r⊙h (GRU).
  double* hbuf = a.workspace + static_cast<int64_t>(blockIdx.x) * 4 * H;
  double* cbuf = hbuf + 2 * H;
  double* rh = hbuf + 3 * H;
  auto state_at = [&](int64_t j) {  // initial_h / initial_c offset of (dir, bi, j) by layout
    return a.layout == 1 ? (bi * nd + dir) * H + j : (dir * B + bi) * H + j;
  };
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    hbuf[j] = a.h0 ? convert<double>(static_cast<const T*>(a.h0)[state_at(j)]) : 0.0;
    cbuf[j] = a.c0 ? convert<double>(static_cast<const T*>(a.c0)[state_at(j)]) : 0.0;
  }
  __syncthreads();
  const int64_t len = a.lens ? a.lens[bi] : S;
  // NaN stays NaN, as in the CPU kernel's std::clamp (fmin/fmax would make it -clip).
  auto clip = [&](double v) { return a.has_clip ? (v < -a.clip ? -a.clip : v > a.clip ? a.clip : v) : v; };
  auto wb = [&](int g, int64_t j) { return bias ? convert<double>(bias[g * H + j]) : 0.0; };
  auto rb = [&](int g, int64_t j) { return bias ? convert<double>(bias[(G + g) * H + j]) : 0.0; };
  int cur = 0;
  for (int64_t s = 0; s < len; ++s) {
    const int64_t t = reverse ? len - 1 - s : s;
    const T* xt = x + (a.layout == 1 ? (bi * S + t) * I : (t * B + bi) * I);
    const double* h = cur ? hbuf + H : hbuf;  // h_{t-1}
    double* hn = cur ? hbuf : hbuf + H;       // h_t
    // x·W_g[j] + h·R_g[j] for gate g and unit j.
    auto pre = [&](int g, int64_t j, bool with_h) {
      double v = 0;
      const T* wr = w + (g * H + j) * I;
      for (int64_t k = 0; k < I; ++k) v += convert<double>(xt[k]) * convert<double>(wr[k]);
      if (with_h) {
        const T* rr = r + (g * H + j) * H;
        for (int64_t k = 0; k < H; ++k) v += h[k] * convert<double>(rr[k]);
      }
      return v;
    };
    if (a.cell == 0) {
      for (int64_t j = threadIdx.x; j < H; j += blockDim.x) hn[j] = f[0](clip(pre(0, j, true) + wb(0, j) + rb(0, j)));
    } else if (a.cell == 2) {
      for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        const double pi = peep ? convert<double>(peep[j]) : 0, po = peep ? convert<double>(peep[H + j]) : 0,
                     pf = peep ? convert<double>(peep[2 * H + j]) : 0;
        const double cprev = cbuf[j];
        const double i = f[0](clip(pre(0, j, true) + wb(0, j) + rb(0, j) + pi * cprev));
        const double fg = a.input_forget ? 1 - i : f[0](clip(pre(2, j, true) + wb(2, j) + rb(2, j) + pf * cprev));
        const double g = f[1](clip(pre(3, j, true) + wb(3, j) + rb(3, j)));
        const double cn = fg * cprev + i * g;
        const double o = f[0](clip(pre(1, j, true) + wb(1, j) + rb(1, j) + po * cn));
        cbuf[j] = cn;  // only this thread reads c[j]
        hn[j] = o * f[2](cn);
      }
    } else {
      // GRU: z and r first; without linear_before_reset the candidate reads (r ⊙ h)·R_hᵀ, which needs
      // every unit's r: a barrier between the two halves.
      for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        const double z = f[0](clip(pre(0, j, true) + wb(0, j) + rb(0, j)));
        const double rv = f[0](clip(pre(1, j, true) + wb(1, j) + rb(1, j)));
        hn[j] = z;  // z parked in h_t until the candidate is known
        rh[j] = a.linear_before_reset ? rv : rv * h[j];
      }
      __syncthreads();
      for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        const T* rr = r + (2 * H + j) * H;
        double lin;
        if (a.linear_before_reset) {
          double hr = 0;
          for (int64_t k = 0; k < H; ++k) hr += h[k] * convert<double>(rr[k]);
          lin = rh[j] * (hr + rb(2, j));
        } else {
          double c = 0;
          for (int64_t k = 0; k < H; ++k) c += rh[k] * convert<double>(rr[k]);
          lin = c + rb(2, j);
        }
        const double ht = f[1](clip(pre(2, j, false) + wb(2, j) + lin));
        const double z = hn[j];
        hn[j] = (1 - z) * ht + z * h[j];
      }
    }
    __syncthreads();
    if (a.y)
      for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
        const int64_t at = a.layout == 1 ? ((bi * S + t) * nd + dir) * H + j : ((t * nd + dir) * B + bi) * H + j;
        static_cast<T*>(a.y)[at] = convert<T>(hn[j]);
      }
    cur ^= 1;
    __syncthreads();
  }
  const double* h = cur ? hbuf + H : hbuf;
  for (int64_t j = threadIdx.x; j < H; j += blockDim.x) {
    const int64_t at = a.layout == 1 ? (bi * nd + dir) * H + j : (dir * B + bi) * H + j;
    if (a.yh) static_cast<T*>(a.yh)[at] = convert<T>(h[j]);
    if (a.yc) static_cast<T*>(a.yc)[at] = convert<T>(cbuf[j]);
  }
}

}  // namespace

size_t rnn_workspace(const RnnArgs& a) { return static_cast<size_t>(a.num_dir * a.batch * 4 * a.hidden) * sizeof(double); }

int launch_rnn(const RnnArgs& a, cudaStream_t stream) {
  const int64_t blocks = a.num_dir * a.batch;
  const size_t elem = a.elem == kElemF64 ? 8 : a.elem == kElemF32 ? 4 : 2;
  if (a.y) {
    const int err = cudaMemsetAsync(a.y, 0, static_cast<size_t>(a.seq * a.num_dir * a.batch * a.hidden) * elem, stream);
    if (err != cudaSuccess) return err;
  }
  if (blocks == 0 || a.hidden == 0) return cudaSuccess;
  const int threads = a.hidden >= 256 ? 256 : static_cast<int>((a.hidden + 31) / 32 * 32);
  auto go = [&](auto tag) {
    using T = decltype(tag);
    rnn_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  };
  if (a.elem == kElemF64) return go(double{});
  return dispatch_float(a.elem, go);
}

}  // namespace kiln::cuda
