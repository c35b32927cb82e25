// backends/cpu/shape_util.h — dtype-generic element movement shared by the shape/index kernel files.
//
// Data movement never looks at values, only at element sizes: every kernel here is a template over a
// storage type chosen by `visit_elem` (uint8/16/32/64, a 16-byte block, or std::string, which must be
// assigned element-wise rather than memcpy'd).
#pragma once

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu::shape_detail {

struct Block16 { uint64_t lo, hi; };

// Calls f(Tag<T>{}) with T a storage type of dtype_size(dt) bytes (std::string for strings).
template <typename F>
bool visit_elem(DataType dt, F&& f) {
  if (dt == DataType::kString) { f(Tag<std::string>{}); return true; }
  switch (dtype_size(dt)) {
    case 1: f(Tag<uint8_t>{}); return true;
    case 2: f(Tag<uint16_t>{}); return true;
    case 4: f(Tag<uint32_t>{}); return true;
    case 8: f(Tag<uint64_t>{}); return true;
    case 16: f(Tag<Block16>{}); return true;
    default: return false;
  }
}

inline std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

inline int64_t prod(const Shape& s, size_t b, size_t e) {
  int64_t n = 1;
  for (size_t i = b; i < e && i < s.size(); ++i) n *= s[i];
  return n;
}

// Reads an int32/int64 tensor into int64 values.
inline bool read_ints(const Tensor& t, std::vector<int64_t>* out) {
  out->resize(static_cast<size_t>(t.numel()));
  if (t.dtype() == DataType::kInt64) {
    std::copy_n(t.data<int64_t>(), t.numel(), out->begin());
  } else if (t.dtype() == DataType::kInt32) {
    std::copy_n(t.data<int32_t>(), t.numel(), out->begin());
  } else {
    return false;
  }
  return true;
}

// Reads index i of an int32/int64 tensor.
inline int64_t index_at(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kInt64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}

// Copies n elements (memcpy for plain types, assignment for strings).
template <typename T>
inline void copy_elems(T* dst, const T* src, int64_t n) {
  if constexpr (std::is_same_v<T, std::string>) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else if (n > 0) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
  }
}

// dst (contiguous, shape `out`) [idx] = src[base + sum idx_d * strides_d]. Strides may be 0
// (broadcast) or negative (reversed slices). Adjacent dims that are contiguous in both are merged
// first; a 2-D "columns become rows" copy goes through 32x32 tiles.
void strided_copy(DataType dt, void* dst, const Shape& out, const void* src, int64_t base,
                  std::vector<int64_t> strides);

// dst (shape `out`)[idx] = src[sum map_d[idx_d] * in_strides_d], or `fill` (one element) where any
// map_d[idx_d] is -1. Used by Pad (every mode) and CenterCropPad.
void mapped_copy(DataType dt, void* dst, const Shape& out, const void* src, const std::vector<int64_t>& in_strides,
                 const std::vector<std::vector<int64_t>>& maps, const void* fill);

// Writes `value` (one element of dtype dt) to n elements of dst.
void fill_elems(DataType dt, void* dst, int64_t n, const void* value);

// Copies a whole tensor's elements into an output of the same dtype and size.
void copy_tensor(const Tensor& src, Tensor& dst);

// Registers "cpu.<op>.any"; the kernel refuses to run when one of its first `required` inputs is
// missing, so kernels (and their reshape()) may read those freely. `host_inputs`: the operands that
// size the output (KernelDef::host_inputs), which reshape() reads as values.
void add_shape_kernel(KernelRegistry& r, const char* op, int since, int required, KernelFactory f,
                      int until = 1 << 30, uint32_t host_inputs = 0);

// Register functions of the split-up family (all called from register_shape).
void register_shape_index(KernelRegistry& r);
void register_shape_misc(KernelRegistry& r);

}  // namespace kiln::cpu::shape_detail
