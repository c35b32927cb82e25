// backends/cpu/elementwise_common.h — what the unary, binary and cast kernel families share:
// dtype sets and visitors (float16/bfloat16 computed in float), and numpy broadcasting iteration.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu::ew {

// ---- Dtype sets (bit masks), checked at compile time so a kernel body is only instantiated for the
// element types it supports.
enum : unsigned {
  kF32 = 1u << 0, kF64 = 1u << 1, kF16 = 1u << 2, kBF16 = 1u << 3,
  kI8 = 1u << 4, kI16 = 1u << 5, kI32 = 1u << 6, kI64 = 1u << 7,
  kU8 = 1u << 8, kU16 = 1u << 9, kU32 = 1u << 10, kU64 = 1u << 11,
  kBoolT = 1u << 12, kStr = 1u << 13,
};
constexpr unsigned kFloats = kF32 | kF64 | kF16 | kBF16;
constexpr unsigned kSigned = kI8 | kI16 | kI32 | kI64;
constexpr unsigned kUnsigned = kU8 | kU16 | kU32 | kU64;
constexpr unsigned kInts = kSigned | kUnsigned;
constexpr unsigned kNumeric = kFloats | kInts;
constexpr unsigned kAll = kNumeric | kBoolT | kStr;

inline unsigned dtype_bit(DataType dt) {
  switch (dt) {
    case DataType::kFloat32: return kF32;
    case DataType::kFloat64: return kF64;
    case DataType::kFloat16: return kF16;
    case DataType::kBFloat16: return kBF16;
    case DataType::kInt8: return kI8;
    case DataType::kInt16: return kI16;
    case DataType::kInt32: return kI32;
    case DataType::kInt64: return kI64;
    case DataType::kUInt8: return kU8;
    case DataType::kUInt16: return kU16;
    case DataType::kUInt32: return kU32;
    case DataType::kUInt64: return kU64;
    case DataType::kBool: return kBoolT;
    case DataType::kString: return kStr;
    default: return 0;
  }
}

// Calls f(Tag<S>{}) with S the storage type of `dt` when dt is in `Set`; false otherwise.
template <unsigned Set, typename F>
bool visit(DataType dt, F&& f) {
#define KILN_EW_CASE(code, bit, T)            \
  case DataType::code:                        \
    if constexpr ((Set & (bit)) != 0) {       \
      f(Tag<T>{});                            \
      return true;                            \
    } else {                                  \
      return false;                           \
    }
  switch (dt) {
    KILN_EW_CASE(kFloat32, kF32, float)
    KILN_EW_CASE(kFloat64, kF64, double)
    KILN_EW_CASE(kFloat16, kF16, f16_t)
    KILN_EW_CASE(kBFloat16, kBF16, bf16_t)
    KILN_EW_CASE(kInt8, kI8, int8_t)
    KILN_EW_CASE(kInt16, kI16, int16_t)
    KILN_EW_CASE(kInt32, kI32, int32_t)
    KILN_EW_CASE(kInt64, kI64, int64_t)
    KILN_EW_CASE(kUInt8, kU8, uint8_t)
    KILN_EW_CASE(kUInt16, kU16, uint16_t)
    KILN_EW_CASE(kUInt32, kU32, uint32_t)
    KILN_EW_CASE(kUInt64, kU64, uint64_t)
    KILN_EW_CASE(kBool, kBoolT, bool)
    KILN_EW_CASE(kString, kStr, std::string)
    default: return false;
  }
#undef KILN_EW_CASE
}

// A registry `check` that refuses a known input dtype outside `set`.
inline std::string check_dtype(const ir::Node& n, int input, unsigned set) {
  if (!n.has_input(input)) return "";
  const ir::Type& t = n.inputs[input]->type;
  if (!t.is_tensor() || t.dtype == DataType::kUndefined) return "";
  if (dtype_bit(t.dtype) & set) return "";
  return std::string("input ") + std::to_string(input) + " has dtype " + dtype_name(t.dtype) + " which it does not take";
}

// ---- Storage ↔ compute type: float16 and bfloat16 are computed in float.
template <typename S> struct Compute { using type = S; };
template <> struct Compute<f16_t> { using type = float; };
template <> struct Compute<bf16_t> { using type = float; };
template <typename S> using compute_t = typename Compute<S>::type;

template <typename S> inline compute_t<S> load(S v) { return v; }
template <> inline float load<f16_t>(f16_t v) { return f16_to_f32(v.bits); }
template <> inline float load<bf16_t>(bf16_t v) { return bf16_to_f32(v.bits); }

template <typename R, typename C> inline R store(C v) {
  if constexpr (std::is_same_v<R, f16_t>) return f16_t{f32_to_f16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<R, bf16_t>) return bf16_t{f32_to_bf16(static_cast<float>(v))};
  else return static_cast<R>(v);
}

template <typename T> constexpr bool is_float_v = std::is_floating_point_v<T>;

// ---- Broadcasting
// Elementwise iteration over `out` with any number of inputs broadcast to it (numpy rules): calls
// fn(out_offset, in_offsets, count, in_strides) for runs of `count` consecutive output elements whose
// input elements are at in_offsets[k] + j * in_strides[k] (strides are 0 or 1 for the innermost run;
// larger only after dims merged). Runs are processed in parallel for large outputs.
class Broadcaster {
 public:
  static constexpr int kMaxInputs = 4;
  Broadcaster(const Shape& out, const std::vector<Shape>& ins);
  int64_t numel() const { return numel_; }
  template <typename Fn>
  void run(Fn&& fn, int64_t grain = 1 << 15) const {
    const int64_t inner = dims_.empty() ? 1 : dims_.back();
    if (numel_ == 0) return;
    parallel_for(numel_, grain, [&](int64_t b, int64_t e) {
      int64_t offs[kMaxInputs];
      int64_t inner_strides[kMaxInputs];
      for (int k = 0; k < nin_; ++k) inner_strides[k] = dims_.empty() ? 0 : strides_[k].back();
      // Rows one after another from the chunk's first: one division per chunk, and for two merged
      // dims (a per-channel operand of a channels-last tensor: [H*W, C] against [0, 1]) each row's
      // offsets follow from the row alone.
      int64_t idx = b, row = b / inner, col = b % inner;
      while (idx < e) {
        const int64_t len = std::min(inner - col, e - idx);
        if (dims_.size() == 2)
          for (int k = 0; k < nin_; ++k) offs[k] = row * strides_[k][0];
        else
          row_offsets(row, offs);
        for (int k = 0; k < nin_; ++k) offs[k] += col * inner_strides[k];
        fn(idx, static_cast<const int64_t*>(offs), len, static_cast<const int64_t*>(inner_strides));
        idx += len;
        ++row;
        col = 0;
      }
    });
  }

 private:
  void row_offsets(int64_t row, int64_t* offs) const;
  int nin_ = 0;
  int64_t numel_ = 0;
  std::vector<int64_t> dims_;                  // merged output dims
  std::vector<std::vector<int64_t>> strides_;  // per input, per merged dim (0 where broadcast)
};

inline Broadcaster::Broadcaster(const Shape& out, const std::vector<Shape>& ins) {
  nin_ = static_cast<int>(ins.size());
  numel_ = shape_numel(out);
  const size_t r = out.size();
  std::vector<std::vector<int64_t>> st(ins.size(), std::vector<int64_t>(r, 0));
  for (size_t k = 0; k < ins.size(); ++k) {
    const Shape& s = ins[k];
    int64_t stride = 1;
    for (size_t i = 0; i < s.size(); ++i) {
      const size_t si = s.size() - 1 - i, oi = r - 1 - i;
      st[k][oi] = s[si] == 1 && out[oi] != 1 ? 0 : stride;
      stride *= s[si];
    }
  }
  // Merge dims: drop size-1 dims, fuse neighbours whose strides are contiguous for every input.
  for (size_t i = 0; i < r; ++i) {
    if (out[i] == 1) continue;
    bool fuse = !dims_.empty();
    for (size_t k = 0; fuse && k < ins.size(); ++k)
      fuse = strides_[k].back() == st[k][i] * out[i];
    if (fuse) {
      dims_.back() *= out[i];
      for (size_t k = 0; k < ins.size(); ++k) strides_[k].back() = st[k][i];
    } else {
      dims_.push_back(out[i]);
      strides_.resize(ins.size());
      for (size_t k = 0; k < ins.size(); ++k) strides_[k].push_back(st[k][i]);
    }
  }
  strides_.resize(ins.size());
}

inline void Broadcaster::row_offsets(int64_t row, int64_t* offs) const {
  for (int k = 0; k < nin_; ++k) offs[k] = 0;
  for (int i = static_cast<int>(dims_.size()) - 2; i >= 0 && row > 0; --i) {
    const int64_t c = row % dims_[i];
    row /= dims_[i];
    for (int k = 0; k < nin_; ++k) offs[k] += c * strides_[k][i];
  }
}

// The broadcast shape of several shapes, or false when they do not broadcast.
inline bool broadcast_all(const std::vector<Shape>& shapes, Shape* out) {
  Shape o;
  for (const Shape& s : shapes) {
    size_t r = std::max(o.size(), s.size());
    Shape n(r);
    for (size_t i = 0; i < r; ++i) {
      const int64_t a = i < r - o.size() ? 1 : o[i - (r - o.size())];
      const int64_t b = i < r - s.size() ? 1 : s[i - (r - s.size())];
      if (a == b || b == 1) n[i] = a;
      else if (a == 1) n[i] = b;
      else return false;
    }
    o = std::move(n);
  }
  *out = std::move(o);
  return true;
}

// Copies a tensor of any dtype (strings element by element).
inline void copy_tensor(const Tensor& src, Tensor& dst) {
  if (src.dtype() == DataType::kString) {
    const auto* s = src.data<std::string>();
    auto* d = dst.data<std::string>();
    for (int64_t i = 0; i < src.numel(); ++i) d[i] = s[i];
  } else if (src.nbytes()) {
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
  }
}

}  // namespace kiln::cpu::ew
