// backends/cpu/signal.cpp — signal ops on the CPU: DFT (17, 20), STFT, Hann/Hamming/Blackman
// windows and MelWeightMatrix. Transforms are direct DFTs in double with a twiddle table.
#include <cmath>
#include <complex>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/numeric.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

using cd = std::complex<double>;

// A DFT of length n: out[k] = scale * Σ_t in[t] e^{∓2πi kt/n} (sign + for inverse).
class Dft {
 public:
  Dft(int64_t n, bool inverse) : n_(n), tw_(static_cast<size_t>(n)) {
    const double sign = inverse ? 1.0 : -1.0;
    for (int64_t k = 0; k < n; ++k) tw_[k] = std::polar(1.0, sign * 2 * M_PI * static_cast<double>(k) / static_cast<double>(n));
  }
  // `in` has n values (already padded/truncated); writes the first `m` outputs.
  void apply(const cd* in, cd* out, int64_t m, double scale) const {
    for (int64_t k = 0; k < m; ++k) {
      cd s = 0;
      int64_t idx = 0;
      for (int64_t t = 0; t < n_; ++t) {
        s += in[t] * tw_[idx];
        idx += k;
        if (idx >= n_) idx %= n_;
      }
      out[k] = s * scale;
    }
  }
 private:
  int64_t n_;
  std::vector<cd> tw_;
};

template <typename T>
void store_complex(Tensor& y, int64_t i, cd v, bool with_imag) {
  T* p = y.data<T>();
  if (with_imag) {
    p[2 * i] = from_double<T>(v.real());
    p[2 * i + 1] = from_double<T>(v.imag());
  } else {
    p[i] = from_double<T>(v.real());
  }
}

Status run_dft(KernelContext& ctx, int64_t axis_attr, bool axis_input, bool inverse, bool onesided) {
  const Tensor& x = ctx.input(0);
  const int64_t r = x.rank();
  if (r < 2 || (x.shape().back() != 1 && x.shape().back() != 2)) return ctx.error("input's last dim must be 1 (real) or 2 (complex)");
  int64_t axis = axis_attr;
  std::vector<int64_t> v;
  if (axis_input && ctx.has_input(2)) {
    if (!read_ints(ctx.input(2), v) || v.size() != 1) return ctx.error("axis must be a scalar int");
    axis = v[0];
  }
  if (!ops_normalize_axis(axis, r) || axis == r - 1) return ctx.error("axis out of range");
  const int64_t len = x.shape()[axis];
  int64_t n = inverse && onesided ? 2 * (len - 1) : len;
  if (ctx.has_input(1) && ctx.input(1).numel() > 0) {
    if (!read_ints(ctx.input(1), v) || v.size() != 1) return ctx.error("dft_length must be a scalar int");
    n = v[0];
  }
  if (n <= 0) return ctx.error("dft_length must be positive");
  const bool complex_in = x.shape().back() == 2;
  std::vector<double> xs;
  if (!read_reals(x, xs)) return ctx.error("unsupported dtype");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (int64_t d = axis + 1; d < r - 1; ++d) inner *= x.shape()[d];
  const int64_t m = inverse ? n : (onesided ? n / 2 + 1 : n);
  const bool real_out = inverse && onesided;
  Shape os = x.shape();
  os[axis] = m;
  os.back() = real_out ? 1 : 2;
  Tensor& y = ctx.output(0, x.dtype(), os);
  const Dft dft(n, inverse);
  const double scale = inverse ? 1.0 / static_cast<double>(n) : 1.0;
  Status st = Status::Ok();
  visit_numeric_f16(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_for(outer * inner, 1, [&](int64_t b, int64_t e) {
      std::vector<cd> line(static_cast<size_t>(n)), out(static_cast<size_t>(n));
      for (int64_t oi = b; oi < e; ++oi) {
        const int64_t o = oi / inner, i = oi % inner;
        auto in_at = [&](int64_t t) {
          const int64_t e0 = (o * len + t) * inner + i;
          return complex_in ? cd(xs[2 * e0], xs[2 * e0 + 1]) : cd(xs[e0], 0);
        };
        for (int64_t t = 0; t < n; ++t) {
          if (real_out) {  // Hermitian extension of the half spectrum (irfft)
            const int64_t half = n / 2;
            if (t <= half) line[t] = t < len ? in_at(t) : cd(0, 0);
            else line[t] = n - t < len ? std::conj(in_at(n - t)) : cd(0, 0);
          } else {
            line[t] = t < len ? in_at(t) : cd(0, 0);
          }
        }
        dft.apply(line.data(), out.data(), m, scale);
        for (int64_t k = 0; k < m; ++k) store_complex<T>(y, (o * m + k) * inner + i, out[k], !real_out);
      }
    });
  });
  return st;
}

Expected<KernelPtr> create_dft(const ir::Node& n, KernelInit&) {
  const ops::DftParams p = ops::parse_dft(n);
  return make_kernel([p](KernelContext& ctx) { return run_dft(ctx, p.axis, p.axis_input, p.inverse, p.onesided); });
}

Expected<KernelPtr> create_stft(const ir::Node& nd, KernelInit&) {
  const bool onesided = ops::parse_stft(nd).onesided;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2)) return ctx.error("signal must be [batch, length, 1 or 2]");
    std::vector<int64_t> v;
    if (!ctx.has_input(1) || !read_ints(ctx.input(1), v) || v.size() != 1 || v[0] <= 0) return ctx.error("frame_step must be a positive scalar");
    const int64_t step = v[0];
    std::vector<double> window, xs;
    int64_t flen = -1;
    if (ctx.has_input(2)) {
      if (!read_reals(ctx.input(2), window)) return ctx.error("window must be float");
      flen = static_cast<int64_t>(window.size());
    }
    if (ctx.has_input(3)) {
      if (!read_ints(ctx.input(3), v) || v.size() != 1) return ctx.error("frame_length must be a scalar int");
      if (flen >= 0 && v[0] != flen) return ctx.error("frame_length differs from the window's length");
      flen = v[0];
    }
    if (flen <= 0) return ctx.error("give a window or a frame_length");
    const int64_t batch = x.dim(0), len = x.dim(1);
    // (before anything is sized by frame_length: a frame longer than the signal is an error)
    if (len < flen) return ctx.error("signal shorter than one frame");
    if (window.empty()) window.assign(static_cast<size_t>(flen), 1.0);
    const bool complex_in = x.dim(2) == 2;
    if (complex_in && onesided) return ctx.error("onesided needs a real signal");
    const int64_t frames = (len - flen) / step + 1;
    const int64_t bins = onesided ? flen / 2 + 1 : flen;
    if (!read_reals(x, xs)) return ctx.error("unsupported dtype");
    Tensor& y = ctx.output(0, x.dtype(), {batch, frames, bins, 2});
    const Dft dft(flen, false);
    visit_numeric_f16(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      parallel_for(batch * frames, 1, [&](int64_t b0, int64_t e0) {
        std::vector<cd> line(static_cast<size_t>(flen)), out(static_cast<size_t>(flen));
        for (int64_t bf = b0; bf < e0; ++bf) {
          const int64_t b = bf / frames, f = bf % frames;
          for (int64_t t = 0; t < flen; ++t) {
            const int64_t e = (b * len + f * step + t);
            const cd s = complex_in ? cd(xs[2 * e], xs[2 * e + 1]) : cd(xs[e], 0);
            line[t] = s * window[t];
          }
          dft.apply(line.data(), out.data(), bins, 1.0);
          for (int64_t k = 0; k < bins; ++k) store_complex<T>(y, bf * bins + k, out[k], true);
        }
      });
    });
    return Status::Ok();
  });
}

enum class Window { kHann, kHamming, kBlackman };

Expected<KernelPtr> create_window(const ir::Node& nd, KernelInit&) {
  const Window w = nd.op_type == "HannWindow" ? Window::kHann : nd.op_type == "HammingWindow" ? Window::kHamming : Window::kBlackman;
  const ops::SignalWindowParams p = ops::parse_signal_window(nd);
  const bool periodic = p.periodic;
  const DataType dt = p.output_datatype;
  return make_kernel([=](KernelContext& ctx) -> Status {
    std::vector<int64_t> v;
    if (!read_ints(ctx.input(0), v) || v.size() != 1 || v[0] < 0) return ctx.error("size must be a non-negative scalar int");
    const int64_t n = v[0];
    Tensor& y = ctx.output(0, dt, {n});
    const double denom = static_cast<double>(periodic ? n : n - 1);
    const bool ok = visit_numeric_f16(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t i = 0; i < n; ++i) {
        const double a = 2 * M_PI * static_cast<double>(i) / denom;
        double val;
        if (w == Window::kHann) val = 0.5 - 0.5 * std::cos(a);
        else if (w == Window::kHamming) val = 25.0 / 46.0 - (1 - 25.0 / 46.0) * std::cos(a);
        else val = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
        y.data<T>()[i] = from_double<T>(val);
      }
    });
    return ok ? Status::Ok() : ctx.error("unsupported output_datatype");
  });
}

Expected<KernelPtr> create_mel(const ir::Node& nd, KernelInit&) {
  const DataType dt = ops::parse_mel_weight_matrix(nd).output_datatype;
  return make_kernel([=](KernelContext& ctx) -> Status {
    std::vector<int64_t> v;
    std::vector<double> f;
    int64_t ints[3];
    for (int k = 0; k < 3; ++k) {
      if (!read_ints(ctx.input(k), v) || v.size() != 1) return ctx.error("num_mel_bins, dft_length and sample_rate must be scalar ints");
      ints[k] = v[0];
    }
    double hz[2];
    for (int k = 0; k < 2; ++k) {
      if (!read_reals(ctx.input(3 + k), f) || f.size() != 1) return ctx.error("edge frequencies must be float scalars");
      hz[k] = f[0];
    }
    const int64_t mel = ints[0], dft_len = ints[1], rate = ints[2];
    if (mel <= 0 || dft_len <= 0 || rate <= 0) return ctx.error("num_mel_bins, dft_length and sample_rate must be positive");
    const int64_t spec = dft_len / 2 + 1;
    // The output first: its size (spec x mel, overflow and the tensor limit checked) bounds every
    // buffer and loop below, so attribute-sized inputs cannot allocate or iterate past it.
    Tensor& y = ctx.output(0, dt, {spec, mel});
    // Same construction as the onnx reference: mel_bins + 2 points evenly spaced in mel.
    const double lo = 2595 * std::log10(1 + hz[0] / 700), hi = 2595 * std::log10(1 + hz[1] / 700);
    const double step = (hi - lo) / static_cast<double>(mel + 2);
    std::vector<int64_t> bin(static_cast<size_t>(mel + 2));
    for (int64_t i = 0; i < mel + 2; ++i) {
      const double hzv = 700 * (std::pow(10.0, (static_cast<double>(i) * step + lo) / 2595) - 1);
      double b = std::floor(static_cast<double>(dft_len + 1) * hzv / static_cast<double>(rate));
      // Hostile edges (huge, infinite or NaN hertz) put a bin past int64's range: held to ±2^60, as far
      // outside the spectrum as it needs to be (the ramps below visit only rows that exist, and bin
      // differences stay inside int64).
      if (!(b > -0x1p60)) b = -0x1p60;
      if (b > 0x1p60) b = 0x1p60;
      bin[i] = static_cast<int64_t>(b);
    }
    std::vector<double> out(static_cast<size_t>(spec * mel), 0.0);
    auto set = [&](int64_t j, int64_t i, double val) {
      if (j >= 0 && j < spec) out[j * mel + i] = val;
    };
    // (each ramp visits only the rows that exist: bins past the spectrum are skipped, not walked)
    for (int64_t i = 0; i < mel; ++i) {
      const int64_t l = bin[i], c = bin[i + 1], h = bin[i + 2];
      if (c == l) set(c, i, 1);
      else
        for (int64_t j = std::max<int64_t>(l, 0); j <= std::min(c, spec - 1); ++j)
          set(j, i, static_cast<double>(j - l) / static_cast<double>(c - l));
      if (h > c)
        for (int64_t j = std::max<int64_t>(c, 0); j < std::min(h, spec); ++j)
          set(j, i, static_cast<double>(h - j) / static_cast<double>(h - c));
    }
    const bool ok = visit_numeric_f16(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (size_t k = 0; k < out.size(); ++k) y.data<T>()[k] = from_double<T>(out[k]);
    });
    return ok ? Status::Ok() : ctx.error("unsupported output_datatype");
  });
}

}  // namespace

void register_signal(KernelRegistry& r) {
  r.add({"DFT", "", 17, 1 << 30, "cpu.DFT.any", nullptr, create_dft});
  r.add({"STFT", "", 17, 1 << 30, "cpu.STFT.any", nullptr, create_stft});
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"})
    r.add({op, "", 17, 1 << 30, std::string("cpu.") + op + ".any", nullptr, create_window});
  r.add({"MelWeightMatrix", "", 17, 1 << 30, "cpu.MelWeightMatrix.any", nullptr, create_mel});
}

}  // namespace kiln::cpu
