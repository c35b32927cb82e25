// backends/cpu/random.cpp — RandomNormal, RandomUniform (+Like), Bernoulli, Multinomial.
//
// With a `seed` attribute every run draws the same numbers (a fresh std::mt19937_64 seeded from it
// per run keeps `run` const and thread-safe); without one each run is seeded from std::random_device,
// or, after kiln::set_random_seed(n), from the next value of one process-wide sequence started from n.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/numeric.h"
#include "ops/params_misc.h"

namespace kiln {
namespace {

// set_random_seed's sequence: the next draw's position, valid once `g_seeded` is set.
std::atomic<bool> g_seeded{false};
std::atomic<uint64_t> g_next_draw{0};

// SplitMix64's finalizer: consecutive positions give unrelated seeds.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

void set_random_seed(uint64_t seed) {
  g_next_draw.store(mix(seed), std::memory_order_relaxed);
  g_seeded.store(true, std::memory_order_release);
}

namespace cpu {

uint64_t unseeded_random_seed() {
  if (g_seeded.load(std::memory_order_acquire))
    return mix(g_next_draw.fetch_add(0x9E3779B97F4A7C15ull, std::memory_order_relaxed));
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

namespace {

struct Seed {
  bool has = false;
  uint64_t value = 0;
  std::mt19937_64 engine() const { return std::mt19937_64(has ? value : unseeded_random_seed()); }
};

// P: any of the random ops' params (has_seed, seed).
template <typename P>
Seed seed_of(const P& p) {
  Seed s;
  if (p.has_seed) {
    s.has = true;
    uint32_t bits;
    std::memcpy(&bits, &p.seed, 4);
    s.value = bits * 0x9E3779B97F4A7C15ull + 12345;
  }
  return s;
}

template <typename Draw>
Status fill_real(KernelContext& ctx, Tensor& y, Draw&& draw) {
  bool ok = false;
  visit_numeric_f16(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (Num<T>::is_float) {
      T* p = y.data<T>();
      for (int64_t i = 0; i < y.numel(); ++i) p[i] = from_double<T>(draw());
      ok = true;
    }
  });
  return ok ? Status::Ok() : ctx.error(std::string("output dtype must be a float type, got ") + dtype_name(y.dtype()));
}

// RandomNormal / RandomUniform and their *Like forms.
Expected<KernelPtr> create_random(const ir::Node& n, KernelInit&) {
  const bool normal = n.op_type.find("Normal") != std::string::npos;
  const bool like = n.op_type.find("Like") != std::string::npos;
  const ops::RandomParams p = ops::parse_random(n);
  const double a = normal ? p.mean : p.low;
  const double b = normal ? p.scale : p.high;
  const bool has_dtype = p.has_dtype;
  const DataType dtype = p.dtype;
  const Shape shape = p.shape;
  const Seed seed = seed_of(p);
  return make_kernel([=](KernelContext& ctx) -> Status {
    DataType dt = dtype;
    Shape s = shape;
    if (like) {
      s = ctx.input(0).shape();
      if (!has_dtype) dt = ctx.input(0).dtype();
    }
    Tensor& y = ctx.output(0, dt, s);
    auto g = seed.engine();
    if (normal) {
      std::normal_distribution<double> d(a, b);
      return fill_real(ctx, y, [&] { return d(g); });
    }
    std::uniform_real_distribution<double> d(a, b);
    return fill_real(ctx, y, [&] { return d(g); });
  });
}

Expected<KernelPtr> create_bernoulli(const ir::Node& n, KernelInit&) {
  const ops::BernoulliParams params = ops::parse_bernoulli(n);
  const bool has_dtype = params.has_dtype;
  const DataType dtype = params.dtype;
  const Seed seed = seed_of(params);
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& p = ctx.input(0);
    std::vector<double> probs;
    if (!read_reals(p, probs)) return ctx.error("input must be a float tensor");
    Tensor& y = ctx.output(0, has_dtype ? dtype : p.dtype(), p.shape());
    auto g = seed.engine();
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const bool ok = visit_numeric_f16(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t i = 0; i < y.numel(); ++i) y.data<T>()[i] = from_double<T>(u(g) < probs[i] ? 1.0 : 0.0);
    });
    return ok ? Status::Ok() : ctx.error("unsupported output dtype");
  });
}

Expected<KernelPtr> create_multinomial(const ir::Node& n, KernelInit&) {
  const ops::MultinomialParams p = ops::parse_multinomial(n);
  const int64_t samples = p.sample_size;
  const DataType dtype = p.dtype;
  const Seed seed = seed_of(p);
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.rank() != 2) return ctx.error("input must be 2-D [batch, classes]");
    if (dtype != DataType::kInt32 && dtype != DataType::kInt64) return ctx.error("dtype must be int32 or int64");
    std::vector<double> logits;
    if (!read_reals(x, logits)) return ctx.error("input must be a float tensor");
    const int64_t batch = x.dim(0), classes = x.dim(1);
    Tensor& y = ctx.output(0, dtype, {batch, samples});
    auto g = seed.engine();
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> cdf(static_cast<size_t>(classes));
    for (int64_t b = 0; b < batch; ++b) {
      double m = -INFINITY, total = 0;
      for (int64_t c = 0; c < classes; ++c) m = std::max(m, logits[b * classes + c]);
      for (int64_t c = 0; c < classes; ++c) cdf[c] = total += std::exp(logits[b * classes + c] - m);
      for (int64_t s = 0; s < samples; ++s) {
        const double r = u(g) * total;
        const int64_t c = std::min<int64_t>(classes - 1, std::upper_bound(cdf.begin(), cdf.end(), r) - cdf.begin());
        if (dtype == DataType::kInt32) y.data<int32_t>()[b * samples + s] = static_cast<int32_t>(c);
        else y.data<int64_t>()[b * samples + s] = c;
      }
    }
    return Status::Ok();
  });
}

}  // namespace

void register_random(KernelRegistry& r) {
  for (const char* op : {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"})
    r.add({op, "", 1, 1 << 30, std::string("cpu.") + op + ".any", nullptr, create_random});
  r.add({"Bernoulli", "", 15, 1 << 30, "cpu.Bernoulli.any", nullptr, create_bernoulli});
  r.add({"Multinomial", "", 7, 1 << 30, "cpu.Multinomial.any", nullptr, create_multinomial});
}

}  // namespace cpu
}  // namespace kiln
