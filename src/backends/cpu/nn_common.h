// backends/cpu/nn_common.h — helpers shared by the CPU nn kernel files (nn_*.cpp): reading and
// writing float-like tensors in a compute type, GEMM, and the per-file registration hooks.
#pragma once

#include <oneapi/dnnl/dnnl.h>

#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu::nn {

void register_gemm(KernelRegistry& r);
void register_conv(KernelRegistry& r);
void register_qconv(KernelRegistry& r);  // nn_qconv.cpp: kiln.QConv, kiln.QMatMul
void register_pool(KernelRegistry& r);
void register_norm(KernelRegistry& r);
void register_softmax(KernelRegistry& r);

inline bool is_real(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

// Calls f(Tag<C>{}) with the compute type C of a float-like dtype: double for float64, float for
// float32/float16/bfloat16. Returns false for other dtypes.
template <typename F>
bool visit_real(DataType dt, F&& f) {
  if (dt == DataType::kFloat64) { f(Tag<double>{}); return true; }
  if (dt == DataType::kFloat32 || dt == DataType::kFloat16 || dt == DataType::kBFloat16) { f(Tag<float>{}); return true; }
  return false;
}

// v as C. A floating value read as an integer saturates (NaN reads as 0): a model's data can hold any
// float where an index or a zero point is expected, and a plain cast of an out-of-range float is
// undefined behaviour; the kernels' range checks then name the value.
template <typename C, typename S>
C convert_saturating(S v) {
  if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool> && std::is_floating_point_v<S>) {
    if (!(v == v)) return C{0};
    if (v <= static_cast<S>(std::numeric_limits<C>::min())) return std::numeric_limits<C>::min();
    if (v >= static_cast<S>(std::numeric_limits<C>::max())) return std::numeric_limits<C>::max();
    return static_cast<C>(v);
  } else {
    return static_cast<C>(v);
  }
}

// Element i of a numeric tensor as C (float16/bfloat16 decoded; floats read as integers saturate).
template <typename C>
C load_as(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kFloat16: return convert_saturating<C>(f16_to_f32(t.data<uint16_t>()[i]));
    case DataType::kBFloat16: return convert_saturating<C>(bf16_to_f32(t.data<uint16_t>()[i]));
    default: {
      C v{};
      visit_numeric(t.dtype(), [&](auto tag) { v = convert_saturating<C>(t.data<typename decltype(tag)::type>()[i]); });
      return v;
    }
  }
}

// Whether a tensor of `dt` is read as C in place (else ReadAs/WriteAs convert through a copy).
template <typename C>
bool is_native(DataType dt) {
  return (std::is_same_v<C, float> && dt == DataType::kFloat32) || (std::is_same_v<C, double> && dt == DataType::kFloat64) ||
         (std::is_same_v<C, int32_t> && dt == DataType::kInt32) || (std::is_same_v<C, int64_t> && dt == DataType::kInt64);
}

// The bytes ReadAs<C>/WriteAs<C> need as scratch for n elements of `dt` (0 when read in place): what
// a staged kernel's reshape() adds to its workspace.
template <typename C>
size_t conversion_bytes(DataType dt, int64_t n) {
  return is_native<C>(dt) ? 0 : static_cast<size_t>(n) * sizeof(C);
}

// Carves a kernel's workspace into arrays: reshape() takes the arrays from a Scratch without a base
// and asks for bytes(); run() takes the same arrays in the same order from ctx.workspace().
class Scratch {
 public:
  explicit Scratch(void* base = nullptr) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* take(size_t n) {
    T* r = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (n * sizeof(T) + 63) / 64 * 64;
    return r;
  }
  size_t bytes() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// A kernel computing in visit_real's type T over X (n elements) into Y of X's dtype converts through
// X and Y as T when their dtype is not T: two arrays of its workspace, taken in reshape() to size it
// (real_copies_bytes) and in run() from ctx.workspace(); null when nothing is converted.
template <typename T>
struct RealCopies {
  T* x = nullptr;
  T* y = nullptr;
  RealCopies(Scratch& ws, DataType dt, int64_t n) {
    if (!conversion_bytes<T>(dt, 1)) return;
    x = ws.take<T>(static_cast<size_t>(n));
    y = ws.take<T>(static_cast<size_t>(n));
  }
};
// reshape(): those bytes; false for a dtype visit_real does not take.
bool real_copies_bytes(DataType dt, int64_t n, size_t* bytes);

// The elements of `t` as C: a pointer straight into `t` when its dtype is C, else a converted copy
// (into `scratch` when given: conversion_bytes<C> of them, so a run allocates nothing).
template <typename C>
class ReadAs {
 public:
  explicit ReadAs(const Tensor& t, C* scratch = nullptr) {
    if (is_native<C>(t.dtype())) {
      p_ = t.data<C>();
      return;
    }
    C* dst = scratch;
    if (!dst) {
      buf_.resize(static_cast<size_t>(t.numel()));
      dst = buf_.data();
    }
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = load_as<C>(t, i);
    p_ = dst;
  }
  const C* data() const { return p_; }
  C operator[](int64_t i) const { return p_[i]; }

 private:
  const C* p_ = nullptr;
  std::vector<C> buf_;
};

// Stores `v` into element i of a float-like tensor.
template <typename C>
void store_as(Tensor& t, int64_t i, C v) {
  switch (t.dtype()) {
    case DataType::kFloat32: t.data<float>()[i] = static_cast<float>(v); break;
    case DataType::kFloat64: t.data<double>()[i] = static_cast<double>(v); break;
    case DataType::kFloat16: t.data<uint16_t>()[i] = f32_to_f16(static_cast<float>(v)); break;
    case DataType::kBFloat16: t.data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v)); break;
    default:  // an integer tensor: a float written to it saturates (NaN as 0), as load_as reads one
      visit_numeric(t.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        t.data<T>()[i] = convert_saturating<T>(v);
      });
  }
}

// A C buffer that ends up in `t`: writes go straight into `t` when its dtype is C, else into a
// scratch buffer that commit() converts.
template <typename C>
class WriteAs {
 public:
  explicit WriteAs(Tensor& t, C* scratch = nullptr) : t_(t) {
    if ((std::is_same_v<C, float> && t.dtype() == DataType::kFloat32) ||
        (std::is_same_v<C, double> && t.dtype() == DataType::kFloat64)) {
      p_ = t.data<C>();
      return;
    }
    converted_ = true;
    if (scratch) {
      p_ = scratch;
      return;
    }
    buf_.resize(static_cast<size_t>(t.numel()));
    p_ = buf_.data();
  }
  C* data() { return p_; }
  C& operator[](int64_t i) { return p_[i]; }
  void commit() {
    if (!converted_) return;
    const int64_t n = t_.numel();
    const C* src = p_;
    parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) store_as<C>(t_, i, src[i]);
    });
  }

 private:
  Tensor& t_;
  C* p_ = nullptr;
  bool converted_ = false;
  std::vector<C> buf_;
};

// What gemm() below accumulates in: T, or for integers an unsigned type of at least int's width.
template <typename T, bool = std::is_integral_v<T>>
struct GemmAcc { using type = T; };
template <typename T>
struct GemmAcc<T, true> { using type = std::make_unsigned_t<std::common_type_t<T, unsigned>>; };

// Row-major C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C. float goes to oneDNN's sgemm
// (itself multi-threaded); other types use plain loops.
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (K > 0) {
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
  }
  // Integer products wrap (two's complement) as onnxruntime's do; signed overflow being undefined in
  // C++, integers are multiplied and added as unsigned of at least int's width (fuzz_model found an
  // int32 MatMul overflowing).
  using Acc = typename GemmAcc<T>::type;
  parallel_for(M, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, N * K)), [&](int64_t m0, int64_t m1) {
    std::vector<Acc> acc(static_cast<size_t>(N));
    for (int64_t m = m0; m < m1; ++m) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t k = 0; k < K; ++k) {
        const Acc a = static_cast<Acc>(ta ? A[k * lda + m] : A[m * lda + k]);
        if (!tb) {
          const T* brow = B + k * ldb;
          for (int64_t n = 0; n < N; ++n) acc[n] += a * static_cast<Acc>(brow[n]);
        } else {
          for (int64_t n = 0; n < N; ++n) acc[n] += a * static_cast<Acc>(B[n * ldb + k]);
        }
      }
      T* c = C + m * ldc;
      for (int64_t n = 0; n < N; ++n)
        c[n] = static_cast<T>(static_cast<Acc>(alpha) * acc[n] + (beta == T(0) ? Acc(0) : static_cast<Acc>(beta) * static_cast<Acc>(c[n])));
    }
  });
}

inline std::string require_real(const ir::Node& n, int input) {
  return require_dtypes(n, input, {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16});
}

inline bool real_copies_bytes(DataType dt, int64_t n, size_t* bytes) {
  return visit_real(dt, [&](auto tag) {
    Scratch ws;
    RealCopies<typename decltype(tag)::type>(ws, dt, n);
    *bytes = ws.bytes();
  });
}

}  // namespace kiln::cpu::nn
