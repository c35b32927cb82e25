// backends/cpu/numeric.h — element access shared by the reduce, resize, einsum, unique, random, signal,
// string, detect and linalg kernel families: a dtype visitor that includes the 2-byte floats,
// accumulator types, and conversions to and from double.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "ops/op_table.h"

namespace kiln::cpu {

// Like visit_numeric, plus float16 and bfloat16 (as f16_t / bf16_t).
template <typename F>
bool visit_numeric_f16(DataType dt, F&& f) {
  if (dt == DataType::kFloat16) { f(Tag<f16_t>{}); return true; }
  if (dt == DataType::kBFloat16) { f(Tag<bf16_t>{}); return true; }
  return visit_numeric(dt, std::forward<F>(f));
}

// Num<T>: `acc` is the type sums are kept in; load/store convert between T and acc.
// 2-byte floats accumulate in float, float in double, integers in 64 bits, bool as int64.
template <typename T, typename = void>
struct Num {
  using acc = std::conditional_t<std::is_same_v<T, bool>, int64_t,
              std::conditional_t<std::is_floating_point_v<T>, double,
              std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>>;
  static constexpr bool is_float = std::is_floating_point_v<T>;
  static acc load(T v) { return static_cast<acc>(v); }
  static T store(acc a) {
    if constexpr (std::is_same_v<T, bool>) return a != 0;
    else return static_cast<T>(a);
  }
};
template <>
struct Num<f16_t> {
  using acc = float;
  static constexpr bool is_float = true;
  static float load(f16_t v) { return f16_to_f32(v.bits); }
  static f16_t store(float a) { return {f32_to_f16(a)}; }
};
template <>
struct Num<bf16_t> {
  using acc = float;
  static constexpr bool is_float = true;
  static float load(bf16_t v) { return bf16_to_f32(v.bits); }
  static bf16_t store(float a) { return {f32_to_bf16(a)}; }
};

template <typename T>
double to_double(T v) { return static_cast<double>(Num<T>::load(v)); }

// double → T; for integer T, non-finite values become 0 and the rest saturate (no UB).
template <typename T>
T from_double(double d) {
  using A = typename Num<T>::acc;
  if constexpr (Num<T>::is_float) {
    return Num<T>::store(static_cast<A>(d));
  } else if constexpr (std::is_same_v<T, bool>) {
    return d != 0;
  } else {
    if (!std::isfinite(d)) return T(0);
    if (d <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (d >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(d);
  }
}

// Lowest / highest value of T's accumulator domain (±inf for floats).
template <typename T>
typename Num<T>::acc acc_lowest() {
  using A = typename Num<T>::acc;
  if constexpr (Num<T>::is_float) return -std::numeric_limits<A>::infinity();
  else if constexpr (std::is_same_v<T, bool>) return 0;
  else return static_cast<A>(std::numeric_limits<T>::lowest());
}
template <typename T>
typename Num<T>::acc acc_highest() {
  using A = typename Num<T>::acc;
  if constexpr (Num<T>::is_float) return std::numeric_limits<A>::infinity();
  else if constexpr (std::is_same_v<T, bool>) return 1;
  else return static_cast<A>(std::numeric_limits<T>::max());
}

inline bool ops_normalize_axis(int64_t& axis, int64_t rank) { return ops::normalize_axis(axis, rank); }

// Row-major strides of `s`. They overflow only for a shape no tensor of which exists, or an empty one
// with a 0 before huge dims ([0, 2^40, 2^40]): that throws std::length_error, which the kernel guards
// (executor, eager runs) turn into an error naming the node, as Tensor::empty's size check does.
inline std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i)
    if (__builtin_mul_overflow(st[i + 1], s[i + 1], &st[i]))
      throw std::length_error("the strides of shape " + shape_to_string(s) + " overflow int64");
  return st;
}

// Reads a 1-D int32/int64 tensor (or a scalar) as int64 values.
inline bool read_ints(const Tensor& t, std::vector<int64_t>& out) {
  out.clear();
  if (t.dtype() == DataType::kInt64) out.assign(t.data<int64_t>(), t.data<int64_t>() + t.numel());
  else if (t.dtype() == DataType::kInt32) out.assign(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  else return false;
  return true;
}

// Reads a float/double/f16/bf16 tensor as doubles.
inline bool read_reals(const Tensor& t, std::vector<double>& out) {
  out.resize(static_cast<size_t>(t.numel()));
  bool ok = visit_numeric_f16(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = to_double(t.data<T>()[i]);
  });
  return ok;
}

}  // namespace kiln::cpu
