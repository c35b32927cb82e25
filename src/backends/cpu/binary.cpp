// backends/cpu/binary.cpp — CPU kernels of the binary family: arithmetic, comparisons, logic and
// bitwise ops, Pow, Mod, BitShift, PRelu, the variadic Max/Min/Sum/Mean, and Where. All broadcast
// multidirectionally (numpy rules); float16/bfloat16 are computed in float.
#include <cmath>
#include <limits>

#include "backends/cpu/elementwise_common.h"
#include "backends/cpu/numeric.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

using namespace ew;

// Applies o[i] = f(a[i], b[i]) over a broadcast planned at reshape (`bc`: A and B against O). The
// innermost run has input strides 0 or 1 in the common cases, which get their own loops so the
// compiler vectorizes them.
template <typename SA, typename SB, typename R, typename F>
void binary_apply(const Tensor& A, const Tensor& B, Tensor& O, const Broadcaster& bc, const F& f) {
  const SA* a = A.data<SA>();
  const SB* b = B.data<SB>();
  R* o = O.data<R>();
  bc.run([&](int64_t oo, const int64_t* off, int64_t n, const int64_t* st) {
    const SA* pa = a + off[0];
    const SB* pb = b + off[1];
    R* po = o + oo;
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) po[i] = store<R>(f(load(pa[i]), load(pb[i])));
    } else if (st[0] == 0 && st[1] == 1) {
      const auto av = load(pa[0]);
      for (int64_t i = 0; i < n; ++i) po[i] = store<R>(f(av, load(pb[i])));
    } else if (st[0] == 1 && st[1] == 0) {
      const auto bv = load(pb[0]);
      for (int64_t i = 0; i < n; ++i) po[i] = store<R>(f(load(pa[i]), bv));
    } else {
      for (int64_t i = 0; i < n; ++i) po[i] = store<R>(f(load(pa[i * st[0]]), load(pb[i * st[1]])));
    }
  });
}

// Opset < 7 broadcasting (attribute broadcast=1): B aligns with A starting at `axis`. PRelu before
// opset 7 has no attribute: a 1-D slope of more than one value is per channel (axis 1).
// False when a legacy axis puts B outside A (shape inference refuses such a model at import; an
// engine file or an eager call can still bring one here).
bool legacy_b_shape(const ops::BinaryParams& p, const Shape& a, const Shape& b, Shape* out) {
  if (p.legacy_prelu && b.size() == 1 && b[0] != 1 && a.size() >= 2) {
    Shape s = b;
    s.resize(a.size() - 1, 1);
    *out = std::move(s);
    return true;
  }
  *out = b;
  if (!p.legacy_broadcast) return true;
  const int64_t ra = static_cast<int64_t>(a.size()), rb = static_cast<int64_t>(b.size());
  int64_t axis = 0;
  if (!ops::legacy_broadcast_axis(p, ra, rb, &axis)) return false;
  for (int64_t i = axis + rb; i < ra; ++i) out->push_back(1);
  return true;
}

// The output shape of A op B (legacy broadcast attributes applied) and, as the per-shape state, the
// broadcast iteration of A and B over it.
Status reshape_binary(ReshapeContext& rc, const ops::BinaryParams& p, DataType out_dtype) {
  if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("needs two inputs");
  const Shape& a = rc.in[0].shape;
  const Shape& b = rc.in[1].shape;
  Shape b_shape;
  if (!legacy_b_shape(p, a, b, &b_shape))
    return rc.error("legacy broadcast axis " + std::to_string(p.axis) + " out of range for shapes " +
                    shape_to_string(a) + " and " + shape_to_string(b));
  Shape out;
  if (!broadcast_all({a, b_shape}, &out))
    return rc.error("shapes " + shape_to_string(a) + " and " + shape_to_string(b) + " do not broadcast");
  rc.state = std::make_shared<Broadcaster>(out, std::vector<Shape>{a, b_shape});
  rc.out[0] = {out_dtype, std::move(out)};
  return Status::Ok();
}

// Registers a same-dtype binary op over dtype set `Set`; make(node) returns the element function
// (called with compute-type values). The output is bool for comparisons and logic ops.
template <unsigned Set, bool BoolOut, typename Make>
void add_binary(KernelRegistry& r, const std::string& op, int since, Make make) {
  KernelDef d;
  d.op = op;
  d.since = since;
  d.name = "cpu." + op;
  d.check = [](const ir::Node& n) {
    std::string why = check_dtype(n, 0, Set);
    return why.empty() ? check_dtype(n, 1, Set) : why;
  };
  d.create = [make](const ir::Node& node, KernelInit&) -> Expected<KernelPtr> {
    auto f = make(node);
    const ops::BinaryParams p = ops::parse_binary(node);
    auto reshape = [p](ReshapeContext& rc) -> Status {
      if (rc.in.size() >= 2 && rc.in[0].dtype != rc.in[1].dtype)
        return rc.error(std::string("inputs have different dtypes (") + dtype_name(rc.in[0].dtype) + " and " +
                        dtype_name(rc.in[1].dtype) + ")");
      if (rc.in.size() >= 1 && !(dtype_bit(rc.in[0].dtype) & Set))
        return rc.error(std::string("dtype ") + dtype_name(rc.in[0].dtype) + " is not supported");
      return reshape_binary(rc, p, BoolOut ? DataType::kBool : rc.in[0].dtype);
    };
    return make_staged(reshape, [f](KernelContext& ctx) -> Status {
      const Tensor& A = ctx.input(0);
      const Tensor& B = ctx.input(1);
      const Broadcaster& bc = shape_state<Broadcaster>(ctx);
      Tensor& O = ctx.output(0);
      visit<Set>(A.dtype(), [&](auto tag) {
        using S = typename decltype(tag)::type;
        using R = std::conditional_t<BoolOut, bool, S>;
        binary_apply<S, S, R>(A, B, O, bc, f);
      });
      return Status::Ok();
    });
  };
  r.add(std::move(d));
}

template <typename C> constexpr bool is_signed_int_v = std::is_integral_v<C> && std::is_signed_v<C>;

// Integer division truncating toward zero; x/0 gives 0 and MIN/-1 wraps instead of trapping.
template <typename C> C int_div(C a, C b) {
  if (b == 0) return 0;
  if constexpr (is_signed_int_v<C>) {
    // Negated in the unsigned domain: MIN / -1 wraps to MIN without signed overflow (UB).
    if (b == C(-1)) return static_cast<C>(std::make_unsigned_t<C>(0) - static_cast<std::make_unsigned_t<C>>(a));
  }
  return static_cast<C>(a / b);
}

// Integer +, -, * wrap around as two's complement (as numpy and ONNX Runtime do): computed on uint64
// values, so neither signed overflow nor the promotion of small unsigned types to int (65535 * 65535)
// is undefined behaviour. Other types use their own operator.
template <typename C, typename F> C wrapping(C a, C b, F f) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>)
    return static_cast<C>(f(static_cast<uint64_t>(a), static_cast<uint64_t>(b)));
  else
    return static_cast<C>(f(a, b));
}

template <typename C> C int_rem(C a, C b) {  // C's %, safe
  if (b == 0) return 0;
  if constexpr (is_signed_int_v<C>) {
    if (b == C(-1)) return 0;
  }
  return static_cast<C>(a % b);
}

template <typename C> C float_max(C a, C b) {  // numpy.maximum: NaN propagates
  if constexpr (is_float_v<C>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a > b ? a : b;
}
template <typename C> C float_min(C a, C b) {
  if constexpr (is_float_v<C>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? a : b;
}

// ---- Mod
template <typename C> C mod_value(C a, C b, bool fmod) {
  if constexpr (is_float_v<C>) {
    C r = std::fmod(a, b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    C r = int_rem(a, b);
    if constexpr (std::is_signed_v<C>) {
      if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
    }
    return r;
  }
}

// ---- Pow (base and exponent dtypes may differ; the output has the base's dtype)
template <typename B, typename E> auto pow_value(B base, E e) {
  if constexpr (std::is_integral_v<B> && std::is_integral_v<E>) {
    if constexpr (std::is_signed_v<E>) {
      if (e < 0) return static_cast<B>(base == 1 ? 1 : base == B(-1) ? ((e % 2) ? -1 : 1) : 0);
    }
    // Exponentiation by squaring in the unsigned domain (wraps like numpy's integer power).
    using U = std::make_unsigned_t<std::conditional_t<sizeof(B) < 4, int32_t, B>>;
    U result = 1, b = static_cast<U>(base);
    auto n = static_cast<uint64_t>(e);
    while (n) {
      if (n & 1) result = static_cast<U>(result * b);
      b = static_cast<U>(b * b);
      n >>= 1;
    }
    return static_cast<B>(result);
  } else if constexpr (std::is_same_v<B, float> && !std::is_same_v<E, double>) {
    return std::pow(base, static_cast<float>(e));
  } else {
    const double r = std::pow(static_cast<double>(base), static_cast<double>(e));
    // An integer base with a float exponent can give NaN, ±inf or a value past B: from_double gives
    // each a defined result (0 for non-finite, else saturated) where a plain cast is undefined.
    if constexpr (std::is_integral_v<B>) return from_double<B>(r);
    else return static_cast<B>(r);
  }
}

void add_pow(KernelRegistry& r) {
  constexpr unsigned kSet = kNumeric;
  KernelDef d;
  d.op = "Pow";
  d.since = 1;
  d.name = "cpu.Pow";
  d.check = [](const ir::Node& n) {
    std::string why = check_dtype(n, 0, kSet);
    return why.empty() ? check_dtype(n, 1, kSet) : why;
  };
  d.create = [](const ir::Node& node, KernelInit&) -> Expected<KernelPtr> {
    const ops::BinaryParams p = ops::parse_binary(node);
    auto reshape = [p](ReshapeContext& rc) -> Status {
      if (rc.in.size() >= 2 && (!(dtype_bit(rc.in[0].dtype) & kSet) || !(dtype_bit(rc.in[1].dtype) & kSet)))
        return rc.error(std::string("Pow of ") + dtype_name(rc.in[0].dtype) + " by " + dtype_name(rc.in[1].dtype) +
                        " is not supported");
      return reshape_binary(rc, p, rc.in.empty() ? DataType::kUndefined : rc.in[0].dtype);
    };
    return make_staged(reshape, [](KernelContext& ctx) -> Status {
      const Tensor& A = ctx.input(0);
      const Tensor& B = ctx.input(1);
      const Broadcaster& bc = shape_state<Broadcaster>(ctx);
      Tensor& O = ctx.output(0);
      visit<kSet>(A.dtype(), [&](auto ta) {
        using SA = typename decltype(ta)::type;
        visit<kSet>(B.dtype(), [&](auto tb) {
          using SB = typename decltype(tb)::type;
          binary_apply<SA, SB, SA>(A, B, O, bc, [](auto x, auto y) { return pow_value(x, y); });
        });
      });
      return Status::Ok();
    });
  };
  r.add(std::move(d));
}

// ---- Max, Min, Sum, Mean: any number of inputs, broadcast together.
template <unsigned Set, typename F>
void add_variadic(KernelRegistry& r, const std::string& op, F f, bool mean) {
  KernelDef d;
  d.op = op;
  d.since = 1;
  d.name = "cpu." + op;
  d.check = [](const ir::Node& n) { return check_dtype(n, 0, Set); };
  d.create = [f, mean](const ir::Node&, KernelInit&) -> Expected<KernelPtr> {
    // Per shape: one broadcast per pass (input 0 into the output, then output op input i, then the
    // mean's division in place).
    auto reshape = [mean](ReshapeContext& rc) -> Status {
      const int n = static_cast<int>(rc.in.size());
      if (n < 1 || !rc.in[0].present) return rc.error("needs at least one input");
      std::vector<Shape> shapes;
      const DataType dt = rc.in[0].dtype;
      for (int i = 0; i < n; ++i) {
        if (!rc.in[i].present) return rc.error("input " + std::to_string(i) + " is missing");
        if (rc.in[i].dtype != dt) return rc.error("inputs have different dtypes");
        shapes.push_back(rc.in[i].shape);
      }
      if (!(dtype_bit(dt) & Set)) return rc.error(std::string("dtype ") + dtype_name(dt) + " is not supported");
      Shape out;
      if (!broadcast_all(shapes, &out)) return rc.error("input shapes do not broadcast");
      auto passes = std::make_shared<std::vector<Broadcaster>>();
      passes->emplace_back(out, std::vector<Shape>{shapes[0], shapes[0]});
      for (int i = 1; i < n; ++i) passes->emplace_back(out, std::vector<Shape>{out, shapes[i]});
      if (mean && n > 1) passes->emplace_back(out, std::vector<Shape>{out, out});
      rc.state = std::move(passes);
      rc.out[0] = {dt, std::move(out)};
      return Status::Ok();
    };
    return make_staged(reshape, [f, mean](KernelContext& ctx) -> Status {
      const int n = ctx.num_inputs();
      const std::vector<Broadcaster>& passes = shape_state<std::vector<Broadcaster>>(ctx);
      Tensor& O = ctx.output(0);
      visit<Set>(O.dtype(), [&](auto tag) {
        using S = typename decltype(tag)::type;
        const Tensor& first = ctx.input(0);
        binary_apply<S, S, S>(first, first, O, passes[0], [](auto x, auto) { return x; });
        for (int i = 1; i < n; ++i) binary_apply<S, S, S>(O, ctx.input(i), O, passes[i], f);
        if (mean && n > 1) {
          const Tensor& Ocopy = O;
          binary_apply<S, S, S>(Ocopy, Ocopy, O, passes[n], [n](auto x, auto) { return x / static_cast<decltype(x)>(n); });
        }
      });
      return Status::Ok();
    });
  };
  r.add(std::move(d));
}

// ---- Where(cond, X, Y): three-way broadcast, any dtype.
void add_where(KernelRegistry& r) {
  KernelDef d;
  d.op = "Where";
  d.since = 9;
  d.name = "cpu.Where";
  d.create = [](const ir::Node&, KernelInit&) -> Expected<KernelPtr> {
    auto reshape = [](ReshapeContext& rc) -> Status {
      if (rc.in.size() < 3 || !rc.in[0].present || !rc.in[1].present || !rc.in[2].present)
        return rc.error("needs three inputs");
      if (rc.in[0].dtype != DataType::kBool) return rc.error("condition must be bool");
      const DataType dt = rc.in[1].dtype;
      if (dt != rc.in[2].dtype) return rc.error("X and Y have different dtypes");
      if (dt != DataType::kString && dtype_size(dt) != 1 && dtype_size(dt) != 2 && dtype_size(dt) != 4 &&
          dtype_size(dt) != 8)
        return rc.error(std::string("dtype ") + dtype_name(dt) + " is not supported");
      Shape out;
      if (!broadcast_all({rc.in[0].shape, rc.in[1].shape, rc.in[2].shape}, &out))
        return rc.error("input shapes do not broadcast");
      rc.state = std::make_shared<Broadcaster>(out, std::vector<Shape>{rc.in[0].shape, rc.in[1].shape, rc.in[2].shape});
      rc.out[0] = {dt, std::move(out)};
      return Status::Ok();
    };
    return make_staged(reshape, [](KernelContext& ctx) -> Status {
      const Tensor& C = ctx.input(0);
      const Tensor& X = ctx.input(1);
      const Tensor& Y = ctx.input(2);
      const Broadcaster& bc = shape_state<Broadcaster>(ctx);
      Tensor& O = ctx.output(0);
      auto run = [&](auto tag) {
        using T = typename decltype(tag)::type;
        const bool* c = C.data<bool>();
        const T* x = X.data<T>();
        const T* y = Y.data<T>();
        T* o = O.data<T>();
        bc.run([&](int64_t oo, const int64_t* off, int64_t n, const int64_t* st) {
          for (int64_t i = 0; i < n; ++i)
            o[oo + i] = c[off[0] + i * st[0]] ? x[off[1] + i * st[1]] : y[off[2] + i * st[2]];
        });
      };
      if (X.dtype() == DataType::kString) {
        run(Tag<std::string>{});
      } else {
        switch (dtype_size(X.dtype())) {
          case 1: run(Tag<uint8_t>{}); break;
          case 2: run(Tag<uint16_t>{}); break;
          case 4: run(Tag<uint32_t>{}); break;
          case 8: run(Tag<uint64_t>{}); break;
          default: break;  // refused at reshape
        }
      }
      return Status::Ok();
    });
  };
  r.add(std::move(d));
}

}  // namespace

void register_binary(KernelRegistry& r) {
  auto plain = [](auto f) { return [f](const ir::Node&) { return f; }; };
  constexpr unsigned kArith = kNumeric;
  add_binary<kArith, false>(r, "Add", 1, plain([](auto a, auto b) { return wrapping(a, b, [](auto x, auto y) { return x + y; }); }));
  add_binary<kArith, false>(r, "Sub", 1, plain([](auto a, auto b) { return wrapping(a, b, [](auto x, auto y) { return x - y; }); }));
  add_binary<kArith, false>(r, "Mul", 1, plain([](auto a, auto b) { return wrapping(a, b, [](auto x, auto y) { return x * y; }); }));
  add_binary<kArith, false>(r, "Div", 1, plain([](auto a, auto b) {
    using C = decltype(a);
    if constexpr (std::is_integral_v<C>) return int_div(a, b);
    else return a / b;
  }));
  add_binary<kNumeric, false>(r, "Mod", 10, [](const ir::Node& n) {
    const bool fmod = ops::parse_mod(n).fmod;
    return [fmod](auto a, auto b) { return mod_value(a, b, fmod); };
  });
  add_binary<kUnsigned, false>(r, "BitShift", 11, [](const ir::Node& n) {
    const bool left = ops::parse_bit_shift(n).left;
    return [left](auto a, auto b) {
      using C = decltype(a);
      if (b >= static_cast<C>(sizeof(C) * 8)) return C(0);
      return static_cast<C>(left ? a << b : a >> b);
    };
  });
  add_binary<kBoolT, true>(r, "And", 1, plain([](bool a, bool b) { return a && b; }));
  add_binary<kBoolT, true>(r, "Or", 1, plain([](bool a, bool b) { return a || b; }));
  add_binary<kBoolT, true>(r, "Xor", 1, plain([](bool a, bool b) { return a != b; }));
  add_binary<kInts, false>(r, "BitwiseAnd", 18, plain([](auto a, auto b) { return static_cast<decltype(a)>(a & b); }));
  add_binary<kInts, false>(r, "BitwiseOr", 18, plain([](auto a, auto b) { return static_cast<decltype(a)>(a | b); }));
  add_binary<kInts, false>(r, "BitwiseXor", 18, plain([](auto a, auto b) { return static_cast<decltype(a)>(a ^ b); }));
  add_binary<kAll, true>(r, "Equal", 1, plain([](const auto& a, const auto& b) { return a == b; }));
  constexpr unsigned kOrdered = kNumeric | kBoolT;
  add_binary<kOrdered, true>(r, "Less", 1, plain([](auto a, auto b) { return a < b; }));
  add_binary<kOrdered, true>(r, "LessOrEqual", 12, plain([](auto a, auto b) { return a <= b; }));
  add_binary<kOrdered, true>(r, "Greater", 1, plain([](auto a, auto b) { return a > b; }));
  add_binary<kOrdered, true>(r, "GreaterOrEqual", 12, plain([](auto a, auto b) { return a >= b; }));
  add_binary<kFloats | kSigned | kUnsigned, false>(r, "PRelu", 1, plain([](auto x, auto slope) {
    return static_cast<decltype(x)>(x < 0 ? slope * x : x);
  }));
  add_pow(r);
  add_variadic<kNumeric>(r, "Max", [](auto a, auto b) { return float_max(a, b); }, false);
  add_variadic<kNumeric>(r, "Min", [](auto a, auto b) { return float_min(a, b); }, false);
  add_variadic<kNumeric>(r, "Sum", [](auto a, auto b) { return static_cast<decltype(a)>(a + b); }, false);
  add_variadic<kNumeric>(r, "Mean", [](auto a, auto b) { return static_cast<decltype(a)>(a + b); }, true);
  add_where(r);
}

}  // namespace kiln::cpu
