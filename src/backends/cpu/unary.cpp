// backends/cpu/unary.cpp — CPU kernels of the unary family: math functions, activations, logic and
// bitwise negation, NaN/Inf tests, Clip, Shrink and Identity. float16/bfloat16 are computed in float;
// float32 activations on the hot path use the vectorizable approximations of elementwise_math.h.
// Lets GCC if-convert the branch-free float math of elementwise_math.h and vectorize it (it refuses
// while FP exceptions must be preserved); kiln never reads FP exception flags.
#pragma GCC optimize("no-trapping-math")

#include <cmath>
#include <functional>
#include <limits>

#include "backends/cpu/elementwise_common.h"
#include "backends/cpu/elementwise_math.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

using namespace ew;

template <typename S, typename R, typename F>
[[gnu::always_inline]] inline void unary_span(const S* x, R* y, int64_t b, int64_t e, const F& f) {
  for (int64_t i = b; i < e; ++i) y[i] = store<R>(f(load(x[i])));
}

// The float32 loops compiled again for AVX2+FMA and for AVX-512 (chosen at run time where the CPU has them): the
// branch-free math of elementwise_math.h vectorizes 8 wide there (GPT-2's tanh-GELU: 4.7 M values per
// run).
template <typename S, typename R, typename F>
[[gnu::target("avx2,fma")]] void unary_span_avx2(const S* x, R* y, int64_t b, int64_t e, const F& f) {
  unary_span(x, y, b, e, f);
}
template <typename S, typename R, typename F>
[[gnu::target(KILN_TARGET_AVX512)]] void unary_span_avx512(const S* x, R* y, int64_t b, int64_t e, const F& f) {
  unary_span(x, y, b, e, f);
}

template <typename S, typename R, typename F>
void unary_apply(const Tensor& X, Tensor& Y, const F& f) {
  const S* x = X.data<S>();
  R* y = Y.data<R>();
  const bool avx2 = std::is_same_v<S, float> && std::is_same_v<R, float> && has_avx2_fma();
  const bool avx512 = avx2 && has_avx512();
  parallel_for(X.numel(), 1 << 14, [&](int64_t b, int64_t e) {
    if (avx512) unary_span_avx512(x, y, b, e, f);
    else if (avx2) unary_span_avx2(x, y, b, e, f);
    else unary_span(x, y, b, e, f);
  });
}

// reshape() of an elementwise op over dtype set `Set`: Y has X's shape, and bool or X's dtype.
template <unsigned Set, bool BoolOut>
Status reshape_same_shape(ReshapeContext& rc) {
  if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
  if (!(dtype_bit(rc.in[0].dtype) & Set))
    return rc.error(std::string("dtype ") + dtype_name(rc.in[0].dtype) + " is not supported");
  rc.out[0] = {BoolOut ? DataType::kBool : rc.in[0].dtype, rc.in[0].shape};
  return Status::Ok();
}

// Registers a unary op over dtype set `Set`; make(node) returns the element function (called with
// compute-type values). BoolOut: the output is bool (IsNaN, IsInf).
// `variant` (e.g. "tanh") names a kernel that only takes nodes passing `accept`.
template <unsigned Set, bool BoolOut, typename Make>
void add_unary(KernelRegistry& r, const std::string& op, int since, Make make, const std::string& variant = "",
               std::function<bool(const ir::Node&)> accept = nullptr) {
  KernelDef d;
  d.op = op;
  d.since = since;
  d.name = "cpu." + op + (variant.empty() ? "" : "." + variant);
  d.check = [accept](const ir::Node& n) -> std::string {
    if (accept && !accept(n)) return "attributes select another variant";
    return check_dtype(n, 0, Set);
  };
  d.create = [make](const ir::Node& node, KernelInit&) -> Expected<KernelPtr> {
    auto f = make(node);
    return make_staged(reshape_same_shape<Set, BoolOut>, [f](KernelContext& ctx) -> Status {
      const Tensor& X = ctx.input(0);
      Tensor& Y = ctx.output(0);
      visit<Set>(X.dtype(), [&](auto tag) {
        using S = typename decltype(tag)::type;
        using R = std::conditional_t<BoolOut, bool, S>;
        unary_apply<S, R>(X, Y, f);
      });
      return Status::Ok();
    });
  };
  r.add(std::move(d));
}

// For ops without attributes.
template <typename F> auto plain(F f) {
  return [f](const ir::Node&) { return f; };
}

// Always inlined, as the math it wraps (elementwise_math.h): the loops calling it vectorize only then.
template <typename C> [[gnu::always_inline]] inline C sigmoid(C x) {
  if constexpr (std::is_same_v<C, float>) {
    return math::sigmoid_f32(x);
  } else {
    if (x >= 0) return C(1) / (C(1) + std::exp(-x));
    const C e = std::exp(x);
    return e / (C(1) + e);
  }
}

template <typename C> [[gnu::always_inline]] inline C tanh_(C x) {
  if constexpr (std::is_same_v<C, float>) return math::tanh_f32(x);
  else return std::tanh(x);
}

template <typename C> [[gnu::always_inline]] inline C erf_(C x) {
  if constexpr (std::is_same_v<C, float>) return math::erf_f32(x);
  else return std::erf(x);
}

// x clamped to [lo, hi], NaN kept NaN (as numpy's clip; std::max/min return their first argument
// when the other is NaN, which made HardSigmoid(NaN) 1).
template <typename C> [[gnu::always_inline]] inline C clamp_keep_nan(C x, C lo, C hi) {
  return x < lo ? lo : x > hi ? hi : x;
}

template <typename C> C softplus(C x) {
  return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
}

// ---- Clip: bounds are attributes before opset 11, optional scalar inputs from 11 on.
void add_clip(KernelRegistry& r) {
  constexpr unsigned kSet = kNumeric;
  KernelDef d;
  d.op = "Clip";
  d.since = 1;
  d.name = "cpu.Clip";
  d.check = [](const ir::Node& n) { return check_dtype(n, 0, kSet); };
  d.create = [](const ir::Node& node, KernelInit&) -> Expected<KernelPtr> {
    const ops::ClipParams p = ops::parse_clip(node);
    auto reshape = [](ReshapeContext& rc) -> Status {
      KILN_RETURN_IF_ERROR((reshape_same_shape<kSet, false>(rc)));
      for (size_t i = 1; i <= 2 && i < rc.in.size(); ++i)
        if (rc.in[i].present && (shape_numel(rc.in[i].shape) != 1 || rc.in[i].dtype != rc.in[0].dtype))
          return rc.error(std::string(i == 1 ? "min" : "max") + " must be a scalar of the input's dtype");
      return Status::Ok();
    };
    return make_staged(reshape, [p](KernelContext& ctx) -> Status {
      const Tensor& X = ctx.input(0);
      visit<kSet>(X.dtype(), [&](auto tag) {
        using S = typename decltype(tag)::type;
        using C = compute_t<S>;
        C lo = std::numeric_limits<C>::lowest(), hi = std::numeric_limits<C>::max();
        if (!p.bounds_from_inputs) {
          lo = static_cast<C>(p.min);
          hi = static_cast<C>(p.max);
        } else {
          if (ctx.has_input(1)) lo = load(ctx.input(1).data<S>()[0]);
          if (ctx.has_input(2)) hi = load(ctx.input(2).data<S>()[0]);
        }
        Tensor& Y = ctx.output(0);
        unary_apply<S, S>(X, Y, [lo, hi](C x) {
          const C v = x < lo ? lo : x;
          return v > hi ? hi : v;
        });
      });
      return Status::Ok();
    });
  };
  r.add(std::move(d));
}

// ---- Identity: tensors, sequences and optionals (copied; outputs never alias inputs).
void add_identity(KernelRegistry& r) {
  KernelDef d;
  d.op = "Identity";
  d.since = 1;
  d.name = "cpu.Identity";
  d.create = [](const ir::Node&, KernelInit&) -> Expected<KernelPtr> {
    return make_kernel([](KernelContext& ctx) -> Status {
      if (!ctx.has_input(0)) {
        ctx.output_slot(0) = Slot{};
        return Status::Ok();
      }
      const Slot& in = ctx.input_slot(0);
      if (in.kind == Slot::Kind::kSequence) {
        std::vector<Tensor> seq;
        seq.reserve(in.sequence.size());
        for (const Tensor& t : in.sequence) seq.push_back(ctx.owned_copy(t));
        ctx.output_slot(0) = Slot::of_sequence(std::move(seq), in.seq_dtype);
        return Status::Ok();
      }
      const Tensor& X = in.tensor;
      Tensor& Y = ctx.output(0, X.dtype(), X.shape());
      copy_tensor(X, Y);
      return Status::Ok();
    });
  };
  r.add(std::move(d));
}

}  // namespace

void register_unary(KernelRegistry& r) {
  // ---- Arithmetic on any numeric type
  add_unary<kNumeric, false>(r, "Abs", 1, plain([](auto x) {
    using C = decltype(x);
    if constexpr (is_float_v<C>) return std::fabs(x);
    else if constexpr (std::is_signed_v<C>) return x < 0 ? static_cast<C>(0ull - static_cast<unsigned long long>(x)) : x;
    else return x;
  }));
  // Integers negate in the unsigned domain: -MIN wraps to MIN (as numpy) instead of overflowing (UB).
  add_unary<kFloats | kSigned, false>(r, "Neg", 1, plain([](auto x) {
    using C = decltype(x);
    if constexpr (std::is_integral_v<C>) return static_cast<C>(0ull - static_cast<unsigned long long>(x));
    else return static_cast<C>(-x);
  }));
  add_unary<kNumeric, false>(r, "Sign", 9, plain([](auto x) {
    using C = decltype(x);
    if constexpr (is_float_v<C>) {
      if (x != x) return x;
    }
    return static_cast<C>((x > 0) - (x < 0));
  }));
  // NaN compares false both ways: `x < 0 ? 0 : x` keeps it NaN, as numpy's maximum(x, 0) does.
  add_unary<kFloats | kSigned, false>(r, "Relu", 1, plain([](auto x) {
    using C = decltype(x);
    return x < C(0) ? C(0) : x;
  }));
  add_unary<kNumeric, false>(r, "Shrink", 9, [](const ir::Node& n) {
    const ops::ActivationParams p = ops::parse_activation(n);
    const float lambd = p.alpha, bias = p.beta;
    return [lambd, bias](auto x) {
      using C = decltype(x);
      if constexpr (is_float_v<C>) {
        return x < -lambd ? static_cast<C>(x + bias) : x > lambd ? static_cast<C>(x - bias) : C(0);
      } else {
        const double v = static_cast<double>(x);
        return v < -lambd ? static_cast<C>(v + bias) : v > lambd ? static_cast<C>(v - bias) : C(0);
      }
    };
  });

  // ---- Math functions (float types)
  auto fn = [&r](const std::string& op, int since, auto f) { add_unary<kFloats, false>(r, op, since, plain(f)); };
  fn("Exp", 1, [](auto x) { return std::exp(x); });
  fn("Log", 1, [](auto x) { return std::log(x); });
  fn("Sqrt", 1, [](auto x) { return std::sqrt(x); });
  fn("Reciprocal", 1, [](auto x) { return static_cast<decltype(x)>(1) / x; });
  fn("Floor", 1, [](auto x) { return std::floor(x); });
  fn("Ceil", 1, [](auto x) { return std::ceil(x); });
  fn("Round", 11, [](auto x) { return std::nearbyint(x); });
  fn("Sin", 7, [](auto x) { return std::sin(x); });
  fn("Cos", 7, [](auto x) { return std::cos(x); });
  fn("Tan", 7, [](auto x) { return std::tan(x); });
  fn("Asin", 7, [](auto x) { return std::asin(x); });
  fn("Acos", 7, [](auto x) { return std::acos(x); });
  fn("Atan", 7, [](auto x) { return std::atan(x); });
  fn("Sinh", 9, [](auto x) { return std::sinh(x); });
  fn("Cosh", 9, [](auto x) { return std::cosh(x); });
  fn("Asinh", 9, [](auto x) { return std::asinh(x); });
  fn("Acosh", 9, [](auto x) { return std::acosh(x); });
  fn("Atanh", 9, [](auto x) { return std::atanh(x); });
  fn("Erf", 9, [](auto x) { return erf_(x); });
  fn("Tanh", 1, [](auto x) { return tanh_(x); });
  fn("Sigmoid", 1, [](auto x) { return sigmoid(x); });
  fn("Softplus", 1, [](auto x) { return softplus(x); });
  fn("Softsign", 1, [](auto x) { return x / (static_cast<decltype(x)>(1) + std::fabs(x)); });
  fn("Mish", 18, [](auto x) { return x * std::tanh(softplus(x)); });

  // ---- Activations with attributes
  auto act = [&r](const std::string& op, int since, auto make) { add_unary<kFloats, false>(r, op, since, make); };
  act("LeakyRelu", 1, [](const ir::Node& n) {
    const float alpha = ops::parse_activation(n).alpha;
    return [alpha](auto x) { return x < 0 ? static_cast<decltype(x)>(alpha) * x : x; };
  });
  act("Elu", 1, [](const ir::Node& n) {
    const float alpha = ops::parse_activation(n).alpha;
    return [alpha](auto x) {
      using C = decltype(x);
      return x < 0 ? static_cast<C>(alpha) * (std::exp(x) - C(1)) : x;
    };
  });
  act("Selu", 1, [](const ir::Node& n) {
    const ops::ActivationParams p = ops::parse_activation(n);
    const float alpha = p.alpha, gamma = p.beta;
    return [alpha, gamma](auto x) {
      using C = decltype(x);
      return x <= 0 ? static_cast<C>(gamma) * (static_cast<C>(alpha) * std::exp(x) - static_cast<C>(alpha))
                    : static_cast<C>(gamma) * x;
    };
  });
  act("Celu", 12, [](const ir::Node& n) {
    const float alpha = ops::parse_activation(n).alpha;
    return [alpha](auto x) {
      using C = decltype(x);
      const C a = static_cast<C>(alpha);
      // max(0, x) + min(0, a·(exp(x/a) − 1)) with one of the two terms 0; NaN takes the second
      // branch and stays NaN (std::max/min would have made it 0).
      return x > C(0) ? x : a * (std::exp(x / a) - C(1));
    };
  });
  act("HardSigmoid", 1, [](const ir::Node& n) {
    const ops::ActivationParams p = ops::parse_activation(n);
    const float alpha = p.alpha, beta = p.beta;
    return [alpha, beta](auto x) {
      using C = decltype(x);
      return clamp_keep_nan(static_cast<C>(alpha) * x + static_cast<C>(beta), C(0), C(1));
    };
  });
  act("HardSwish", 14, plain([](auto x) {
    using C = decltype(x);
    return x * clamp_keep_nan(x * static_cast<C>(1.0 / 6.0) + C(0.5), C(0), C(1));
  }));
  act("ThresholdedRelu", 10, [](const ir::Node& n) {
    const float alpha = ops::parse_activation(n).alpha;
    return [alpha](auto x) { return x > static_cast<decltype(x)>(alpha) ? x : static_cast<decltype(x)>(0); };
  });
  // Gelu: one kernel per `approximate` mode, so each inner loop stays branch-free.
  auto gelu_tanh = [](const ir::Node& n) { return ops::parse_gelu(n).tanh; };
  add_unary<kFloats, false>(r, "Gelu", 20, plain([](auto x) {
    using C = decltype(x);
    const C k = static_cast<C>(0.7978845608028654);  // sqrt(2/pi)
    return C(0.5) * x * (C(1) + tanh_(k * (x + C(0.044715) * x * x * x)));
  }), "tanh", gelu_tanh);
  add_unary<kFloats, false>(r, "Gelu", 20, plain([](auto x) {
    using C = decltype(x);
    return C(0.5) * x * (C(1) + erf_(x * static_cast<C>(0.7071067811865476)));
  }), "erf", [gelu_tanh](const ir::Node& n) { return !gelu_tanh(n); });
  act("Swish", 24, [](const ir::Node& n) {
    const float alpha = ops::parse_activation(n).alpha;
    return [alpha](auto x) { return x * sigmoid(static_cast<decltype(x)>(alpha) * x); };
  });

  // ---- Logic, bitwise, classification
  add_unary<kBoolT, false>(r, "Not", 1, plain([](bool x) { return !x; }));
  add_unary<kInts, false>(r, "BitwiseNot", 18, plain([](auto x) { return static_cast<decltype(x)>(~x); }));
  add_unary<kFloats, true>(r, "IsNaN", 9, plain([](auto x) { return x != x; }));
  add_unary<kFloats, true>(r, "IsInf", 10, [](const ir::Node& n) {
    const ops::IsInfParams p = ops::parse_is_inf(n);
    const bool pos = p.detect_positive, neg = p.detect_negative;
    return [pos, neg](auto x) { return std::isinf(x) && ((x > 0 && pos) || (x < 0 && neg)); };
  });

  add_clip(r);
  add_identity(r);
}

}  // namespace kiln::cpu
