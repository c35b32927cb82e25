// backends/cuda/cuda_pool_nd.cu — N-d MaxPool (with Indices), AveragePool and LpPool: one thread per
// output element walks its window as the CPU kernel does (pads, dilations, ceil mode, count_include_pad).
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void pool_nd_kernel(PoolNdArgs a) {
  const int64_t isz = a.win.in_size(), osz = a.win.out_size();
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  KILN_GRID_LOOP(t, a.planes * osz) {
    const int64_t plane = t / osz;
    int64_t o = t % osz;
    int64_t oc[kMaxRank], lo[kMaxRank], hi[kMaxRank], start[kMaxRank], j[kMaxRank], rm[kMaxRank];
    for (int d = a.win.n - 1; d >= 0; --d) {
      oc[d] = o % a.win.out[d];
      o /= a.win.out[d];
    }
    rm[a.win.n - 1] = 1;
    for (int d = a.win.n - 2; d >= 0; --d) rm[d] = rm[d + 1] * a.win.in[d + 1];
    int64_t padded_count = 1;
    bool empty = false;
    for (int d = 0; d < a.win.n; ++d) {
      const int64_t s = oc[d] * a.win.strides[d] - a.win.pad_begin[d], dil = a.win.dilations[d], k = a.win.kernel[d];
      start[d] = s;
      lo[d] = s >= 0 ? 0 : (-s + dil - 1) / dil;
      const int64_t last = a.win.in[d] - 1 - s;
      hi[d] = last < 0 ? -1 : (k - 1 < last / dil ? k - 1 : last / dil);
      const int64_t plast = a.win.in[d] + a.win.pad_end[d] - 1 - s;
      padded_count *= plast < 0 ? 0 : (k < plast / dil + 1 ? k : plast / dil + 1);
      if (lo[d] > hi[d]) empty = true;
    }
    const T* xp = x + plane * isz;
    double acc = a.kind == 0 ? -INFINITY : 0.0;
    int64_t best = -1, count = 0;
    if (!empty) {
      for (int d = 0; d < a.win.n; ++d) j[d] = lo[d];
      while (true) {
        int64_t off = 0;
        for (int d = 0; d < a.win.n; ++d) off += (start[d] + j[d] * a.win.dilations[d]) * rm[d];
        const double v = convert<double>(xp[off]);
        if (a.kind == 0) {
          if (v > acc || best < 0) {
            acc = v;
            best = off;
          }
        } else if (a.kind == 1) {
          acc += v;
        } else {
          acc += pow(fabs(v), a.p);
        }
        ++count;
        int d = a.win.n - 1;
        for (; d >= 0; --d) {
          if (++j[d] <= hi[d]) break;
          j[d] = lo[d];
        }
        if (d < 0) break;
      }
    }
    double out;
    if (a.kind == 0) out = acc;
    else if (a.kind == 1) {
      const int64_t div = a.count_include_pad ? padded_count : count;
      out = div ? acc / div : NAN;
    } else {
      out = pow(acc, 1.0 / a.p);
    }
    y[t] = convert<T>(out);
    if (a.indices) {
      int64_t flat = 0;
      if (best >= 0) {
        int64_t r = best, cm = 1;
        int64_t cms[kMaxRank];
        for (int d = 0; d < a.win.n; ++d) {
          cms[d] = cm;
          cm *= a.win.in[d];
        }
        for (int d = 0; d < a.win.n; ++d) {
          flat += (a.column_major ? cms[d] : rm[d]) * (r / rm[d]);
          r %= rm[d];
        }
      }
      a.indices[t] = plane * isz + flat;
    }
  }
}

}  // namespace

int launch_pool_nd(const PoolNdArgs& a, cudaStream_t stream) {
  if (a.win.n < 1 || a.win.n > kMaxRank) return cudaErrorInvalidValue;
  const int64_t osz = a.planes * a.win.out_size();
  if (osz == 0) return cudaSuccess;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    pool_nd_kernel<T><<<grid_for(osz), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  };
  switch (a.elem) {
    case kElemF64: return go(double{});
    case kElemI8: return go(int8_t{});
    case kElemU8: return go(uint8_t{});
    default: return dispatch_float(a.elem, go);
  }
}

}  // namespace kiln::cuda
