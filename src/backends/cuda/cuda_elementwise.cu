// backends/cuda/cuda_elementwise.cu — elementwise and data-movement kernels for every element type:
// unary math, broadcasting binary ops and comparisons, Where, Cast, strided copies (Transpose, Slice,
// Expand), Gather, fills and ranges.
#include <algorithm>
#include <cfloat>

#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// The activations keep NaN NaN, as the ONNX reference (numpy) and the CPU kernels do: fmaxf/fminf
// return the other operand when one is NaN (HardSigmoid(NaN) was 1, Clip(NaN) its min), and
// `x > 0 ? x : 0` sends NaN to the 0 branch. The comparisons below are written so that NaN, false
// either way, takes the branch that returns it.
// x clamped to [lo, hi] (hi when lo > hi, as numpy's clip and the CPU's Clip), NaN kept.
template <typename C>
__device__ __forceinline__ C clamp_keep_nan(C x, C lo, C hi) {
  const C v = x < lo ? lo : x;
  return v > hi ? hi : v;
}

__device__ __forceinline__ float apply_unary(UnaryOp op, float x, float alpha, float beta) {
  switch (op) {
    case UnaryOp::kRelu: return x < 0.f ? 0.f : x;
    case UnaryOp::kSigmoid: return 1.f / (1.f + expf(-x));
    case UnaryOp::kTanh: return tanhf(x);
    case UnaryOp::kExp: return expf(x);
    case UnaryOp::kLog: return logf(x);
    case UnaryOp::kSqrt: return sqrtf(x);
    case UnaryOp::kAbs: return fabsf(x);
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kErf: return erff(x);
    case UnaryOp::kLeakyRelu: return x >= 0.f ? x : alpha * x;
    case UnaryOp::kClip: return clamp_keep_nan(x, alpha, beta);
    case UnaryOp::kGelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case UnaryOp::kGeluTanh:
      return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case UnaryOp::kHardSigmoid: return clamp_keep_nan(alpha * x + beta, 0.f, 1.f);
    case UnaryOp::kHardSwish: return x * clamp_keep_nan(x / 6.f + 0.5f, 0.f, 1.f);
    case UnaryOp::kReciprocal: return 1.f / x;
    case UnaryOp::kFloor: return floorf(x);
    case UnaryOp::kCeil: return ceilf(x);
    case UnaryOp::kRound: return rintf(x);  // halves to even, as ONNX asks
    case UnaryOp::kSin: return sinf(x);
    case UnaryOp::kCos: return cosf(x);
    case UnaryOp::kTan: return tanf(x);
    case UnaryOp::kAtan: return atanf(x);
    case UnaryOp::kAsin: return asinf(x);
    case UnaryOp::kAcos: return acosf(x);
    case UnaryOp::kSinh: return sinhf(x);
    case UnaryOp::kCosh: return coshf(x);
    case UnaryOp::kSwish: return x / (1.f + expf(-alpha * x));
    case UnaryOp::kAsinh: return asinhf(x);
    case UnaryOp::kAcosh: return acoshf(x);
    case UnaryOp::kAtanh: return atanhf(x);
    case UnaryOp::kShrink: return x < -alpha ? x + beta : x > alpha ? x - beta : 0.f;
    case UnaryOp::kSoftplus: return softplus(x);
    case UnaryOp::kSoftsign: return x / (1.f + fabsf(x));
    case UnaryOp::kSilu: return x / (1.f + expf(-x));
    case UnaryOp::kElu: return x > 0.f ? x : alpha * (expf(x) - 1.f);
    case UnaryOp::kSelu: return beta * (x > 0.f ? x : alpha * (expf(x) - 1.f));
    // max(0, x) + min(0, alpha·(exp(x/alpha) − 1)): one of the two terms is 0.
    case UnaryOp::kCelu: return x > 0.f ? x : alpha * (expf(x / alpha) - 1.f);
    case UnaryOp::kMish: return x * tanhf(softplus(x));
    case UnaryOp::kThresholdedRelu: return x > alpha ? x : 0.f;
    case UnaryOp::kSign: return x != x ? x : static_cast<float>((x > 0.f) - (x < 0.f));  // NaN stays NaN
    default: return x;
  }
}

// The same ops in double, for float64 tensors (the float version's formulas, double math).
__device__ __forceinline__ double apply_unary_f64(UnaryOp op, double x, double alpha, double beta) {
  auto softplus_d = [](double v) { return v > 40.0 ? v : log1p(exp(v)); };
  switch (op) {
    case UnaryOp::kRelu: return x < 0 ? 0 : x;
    case UnaryOp::kSigmoid: return 1 / (1 + exp(-x));
    case UnaryOp::kTanh: return tanh(x);
    case UnaryOp::kExp: return exp(x);
    case UnaryOp::kLog: return log(x);
    case UnaryOp::kSqrt: return sqrt(x);
    case UnaryOp::kAbs: return fabs(x);
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kErf: return erf(x);
    case UnaryOp::kLeakyRelu: return x >= 0 ? x : alpha * x;
    case UnaryOp::kHardSigmoid: return clamp_keep_nan(alpha * x + beta, 0.0, 1.0);
    case UnaryOp::kHardSwish: return x * clamp_keep_nan(x / 6 + 0.5, 0.0, 1.0);
    case UnaryOp::kReciprocal: return 1 / x;
    case UnaryOp::kFloor: return floor(x);
    case UnaryOp::kCeil: return ceil(x);
    case UnaryOp::kRound: return rint(x);
    case UnaryOp::kSin: return sin(x);
    case UnaryOp::kCos: return cos(x);
    case UnaryOp::kTan: return tan(x);
    case UnaryOp::kAtan: return atan(x);
    case UnaryOp::kAsin: return asin(x);
    case UnaryOp::kAcos: return acos(x);
    case UnaryOp::kSinh: return sinh(x);
    case UnaryOp::kCosh: return cosh(x);
    case UnaryOp::kSwish: return x / (1 + exp(-alpha * x));
    case UnaryOp::kAsinh: return asinh(x);
    case UnaryOp::kAcosh: return acosh(x);
    case UnaryOp::kAtanh: return atanh(x);
    case UnaryOp::kShrink: return x < -alpha ? x + beta : x > alpha ? x - beta : 0.0;
    case UnaryOp::kSoftplus: return softplus_d(x);
    case UnaryOp::kSoftsign: return x / (1 + fabs(x));
    case UnaryOp::kSilu: return x / (1 + exp(-x));
    case UnaryOp::kElu: return x > 0 ? x : alpha * (exp(x) - 1);
    case UnaryOp::kSelu: return beta * (x > 0 ? x : alpha * (exp(x) - 1));
    case UnaryOp::kCelu: return x > 0 ? x : alpha * (exp(x / alpha) - 1);
    case UnaryOp::kMish: return x * tanh(softplus_d(x));
    case UnaryOp::kThresholdedRelu: return x > alpha ? x : 0;
    case UnaryOp::kSign: return x != x ? x : static_cast<double>((x > 0) - (x < 0));
    case UnaryOp::kGelu: return 0.5 * x * (1 + erf(x * 0.70710678118654752440));
    case UnaryOp::kGeluTanh: return 0.5 * x * (1 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    default: return x;
  }
}

__global__ void unary_f64_kernel(UnaryOp op, const double* __restrict__ x, double* __restrict__ y, int64_t n, float alpha,
                                 float beta) {
  KILN_GRID_LOOP(i, n) y[i] = apply_unary_f64(op, x[i], alpha, beta);
}

__global__ void isnan_f64_kernel(const double* __restrict__ x, bool* __restrict__ y, int64_t n) {
  KILN_GRID_LOOP(i, n) y[i] = x[i] != x[i];
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* __restrict__ x, T* __restrict__ y, int64_t n, float alpha, float beta) {
  KILN_GRID_LOOP(i, n) y[i] = convert<T>(apply_unary(op, convert<float>(x[i]), alpha, beta));
}

template <typename T>
__global__ void isnan_kernel(const T* __restrict__ x, bool* __restrict__ y, int64_t n) {
  KILN_GRID_LOOP(i, n) {
    const float v = convert<float>(x[i]);
    y[i] = v != v;
  }
}

template <typename T>
__global__ void bitnot_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  KILN_GRID_LOOP(i, n) y[i] = static_cast<T>(~x[i]);
}

__global__ void not_kernel(const bool* __restrict__ x, bool* __restrict__ y, int64_t n) {
  KILN_GRID_LOOP(i, n) y[i] = !x[i];
}

template <typename T>
__global__ void int_unary_kernel(UnaryOp op, const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  KILN_GRID_LOOP(i, n) {
    const T v = x[i];
    y[i] = op == UnaryOp::kNeg ? T(-v) : op == UnaryOp::kAbs ? (v < 0 ? T(-v) : v) : T((v > 0) - (v < 0));
  }
}

template <typename C>
__device__ __forceinline__ C apply_binary(BinaryOp op, C a, C b) {
  constexpr bool kFloat = std::is_floating_point<C>::value;
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv:
      if constexpr (kFloat) return a / b;
      else return b == C(0) ? C(0) : (std::is_signed<C>::value && b == C(-1)) ? C(0) - a : C(a / b);
    case BinaryOp::kPow:
      if constexpr (std::is_same<C, float>::value) return powf(a, b);
      else return static_cast<C>(pow(static_cast<double>(a), static_cast<double>(b)));
    // NaN propagates as in numpy's maximum/minimum (fmaxf would drop it).
    case BinaryOp::kMax: return (a != a || a > b) ? a : b;
    case BinaryOp::kMin: return (a != a || a < b) ? a : b;
    case BinaryOp::kFirst: return a;
    case BinaryOp::kFmod:
      if constexpr (kFloat) return fmod(a, b);
      else return b == C(0) ? C(0) : (std::is_signed<C>::value && b == C(-1)) ? C(0) : C(a % b);
    case BinaryOp::kMod:  // the result takes the divisor's sign (Python's %)
      if constexpr (kFloat) {
        C r = fmod(a, b);
        return (r != C(0) && ((r < C(0)) != (b < C(0)))) ? r + b : r;
      } else {
        if (b == C(0)) return C(0);
        if (std::is_signed<C>::value && b == C(-1)) return C(0);
        C r = a % b;
        return (r != C(0) && ((r < C(0)) != (b < C(0)))) ? C(r + b) : r;
      }
    case BinaryOp::kAnd: return C(a != C(0) && b != C(0));
    case BinaryOp::kOr: return C(a != C(0) || b != C(0));
    case BinaryOp::kXor: return C((a != C(0)) != (b != C(0)));
    case BinaryOp::kBitAnd:
      if constexpr (!kFloat) return C(a & b);
      else return a;
    case BinaryOp::kBitOr:
      if constexpr (!kFloat) return C(a | b);
      else return a;
    case BinaryOp::kBitXor:
      if constexpr (!kFloat) return C(a ^ b);
      else return a;
    case BinaryOp::kPRelu: return a < C(0) ? C(a * b) : a;
    case BinaryOp::kShiftLeft:  // a shift past the width gives 0 (the CPU kernel's rule)
      if constexpr (!kFloat) return b >= C(sizeof(C) * 8) ? C(0) : C(a << b);
      else return a;
    case BinaryOp::kShiftRight:
      if constexpr (!kFloat) return b >= C(sizeof(C) * 8) ? C(0) : C(a >> b);
      else return a;
    default: return a;
  }
}

template <typename C>
__device__ __forceinline__ bool apply_compare(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::kEqual: return a == b;
    case BinaryOp::kLess: return a < b;
    case BinaryOp::kLessEqual: return a <= b;
    case BinaryOp::kGreater: return a > b;
    case BinaryOp::kGreaterEqual: return a >= b;
    default: return false;
  }
}

// Bool computes as int (its arithmetic is only the logic ops).
template <typename T> struct BinCompute { using type = compute_t<T>; };
template <> struct BinCompute<bool> { using type = int; };

template <typename T>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, void* y, int64_t n, BroadcastIndex idx) {
  using C = typename BinCompute<T>::type;
  const bool compare = op >= BinaryOp::kEqual && op <= BinaryOp::kGreaterEqual;
  KILN_GRID_LOOP(i, n) {
    int64_t ia, ib;
    broadcast_offsets(idx, i, ia, ib);
    const C va = convert<C>(a[ia]);
    const C vb = b ? convert<C>(b[ib]) : C(0);
    if (compare) static_cast<bool*>(y)[i] = apply_compare<C>(op, va, vb);
    else static_cast<T*>(y)[i] = convert<T>(apply_binary<C>(op, va, vb));
  }
}

// An operand that is one contiguous block of the output's elements, broadcast along the dims before
// and after it, is read at (i / inner) % period for output element i (a same-shaped operand: inner 1,
// period n; a bias [C] against [N, C]: 1, C; a channel scale [C, 1, 1] against [N, C, H, W]: H·W, C;
// a scalar: period 1). Most binary ops in models are such, and this walk takes at most one division
// (in 32 bits where the output has fewer than 2^31 elements) where the general broadcast index takes
// two 64-bit ones a dim.
struct Walk {
  int64_t inner = 1, period = 1;
};

// The walk of one operand (a_side: a's strides, else b's), or false when its strides are not one.
bool walk_of(const BroadcastIndex& idx, bool a_side, Walk* w) {
  const int64_t* st = a_side ? idx.a_strides : idx.b_strides;
  int d = idx.rank - 1;
  w->inner = 1;
  w->period = 1;
  for (; d >= 0 && st[d] == 0; --d) w->inner *= idx.dims[d];    // broadcast along the trailing dims
  for (; d >= 0 && st[d] == w->period; --d) w->period *= idx.dims[d];  // the contiguous block
  for (; d >= 0; --d)
    if (st[d] != 0) return false;  // broadcast along the leading dims, nothing else
  return true;
}

template <typename I>
__device__ __forceinline__ I walk_offset(I i, I n, I inner, I period) {
  if (inner == 1) return period >= n ? i : i % period;
  return period == 1 ? I(0) : (i / inner) % period;
}

template <typename T, typename I>
__global__ void binary_walk_kernel(BinaryOp op, const T* a, const T* b, void* y, I n, Walk wa, Walk wb) {
  using C = typename BinCompute<T>::type;
  const bool compare = op >= BinaryOp::kEqual && op <= BinaryOp::kGreaterEqual;
  const I ai = static_cast<I>(wa.inner), ap = static_cast<I>(wa.period), bi = static_cast<I>(wb.inner),
          bp = static_cast<I>(wb.period);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n; i += I(blockDim.x) * gridDim.x) {
    const C va = convert<C>(a[walk_offset(i, n, ai, ap)]);
    const C vb = b ? convert<C>(b[walk_offset(i, n, bi, bp)]) : C(0);
    if (compare) static_cast<bool*>(y)[i] = apply_compare<C>(op, va, vb);
    else static_cast<T*>(y)[i] = convert<T>(apply_binary<C>(op, va, vb));
  }
}

// V = 16 / sizeof(T) neighbouring elements a thread, one 16-byte load of each operand that is
// contiguous along them (inner 1, period a multiple of V) or one value for all V (inner a multiple
// of V), one 16-byte store: the float types' arithmetic ops.
template <typename T, int V, typename I>
__device__ __forceinline__ void walk_lanes(const T* p, I i, I n, I inner, I period, T (&v)[V]) {
  if (inner == 1) {
    *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(p + (period >= n ? i : i % period));
  } else {
    const T x = p[period == 1 ? I(0) : (i / inner) % period];
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = x;
  }
}

template <typename T, typename I>
__global__ void binary_walk_vec_kernel(BinaryOp op, const T* a, const T* b, T* y, I n, Walk wa, Walk wb) {
  constexpr int V = 16 / sizeof(T);
  using C = compute_t<T>;
  const I ai = static_cast<I>(wa.inner), ap = static_cast<I>(wa.period), bi = static_cast<I>(wb.inner),
          bp = static_cast<I>(wb.period);
  for (I i = (blockIdx.x * I(blockDim.x) + threadIdx.x) * V; i < n; i += I(blockDim.x) * gridDim.x * V) {
    alignas(16) T va[V], vb[V], vy[V];
    walk_lanes<T, V, I>(a, i, n, ai, ap, va);
    if (b) walk_lanes<T, V, I>(b, i, n, bi, bp, vb);
#pragma unroll
    for (int k = 0; k < V; ++k)
      vy[k] = convert<T>(apply_binary<C>(op, convert<C>(va[k]), b ? convert<C>(vb[k]) : C(0)));
    *reinterpret_cast<uint4*>(y + i) = *reinterpret_cast<const uint4*>(vy);
  }
}

template <typename T>
__global__ void where_kernel(const bool* cond, const T* x, const T* z, T* y, int64_t n, Broadcast3Index idx) {
  KILN_GRID_LOOP(i, n) {
    int64_t rem = i, ic = 0, ix = 0, iz = 0;
    for (int d = idx.rank - 1; d >= 0; --d) {
      const int64_t c = rem % idx.dims[d];
      rem /= idx.dims[d];
      ic += c * idx.strides[0][d];
      ix += c * idx.strides[1][d];
      iz += c * idx.strides[2][d];
    }
    y[i] = cond[ic] ? x[ix] : z[iz];
  }
}

template <typename T>
__global__ void strided_copy_kernel(const T* x, T* y, int64_t n, StridedIndex idx) {
  KILN_GRID_LOOP(i, n) {
    int64_t rem = i, src = idx.base;
    for (int d = idx.rank - 1; d >= 0; --d) {
      src += (rem % idx.out_dims[d]) * idx.in_strides[d];
      rem /= idx.out_dims[d];
    }
    y[i] = x[src];
  }
}

// Where row r (an index over every dim but the last) of a strided copy starts in the source.
template <typename I>
__device__ __forceinline__ I row_source(I r, const StridedIndex& idx) {
  I rem = r, src = static_cast<I>(idx.base);
  for (int d = idx.rank - 2; d >= 0; --d) {
    const I od = static_cast<I>(idx.out_dims[d]);
    src += (rem % od) * static_cast<I>(idx.in_strides[d]);
    rem /= od;
  }
  return src;
}

// A strided copy whose innermost dim is contiguous in the source (a Slice of the last axis, the
// Transposes that keep the last axis): work items are V-sized pieces of rows (up to 16 bytes), each
// decoded once, in I (32-bit when every index fits). strided_copy_kernel decodes every element in
// 64-bit integer divisions, which cost more than the copy itself (GPT-2's [8192, 50264] -> 50257
// column slice: 2.28 ms, 0.36 TB/s, on an H200). idx's base and strides are in units of V here.
template <typename V, typename I>
__global__ void strided_rows_kernel(const V* __restrict__ x, V* __restrict__ y, I total, I vcols, StridedIndex idx) {
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < total; i += step) {
    const I r = i / vcols, c = i - r * vcols;
    const I src = row_source(r, idx);
    y[i] = x[src + c];
  }
}

// The same copy for long rows (kLongRow pieces or more): a block per row (grid-stride over rows), the
// row's source decoded once, its pieces copied four at a time per thread (loads issued before the
// stores). GPT-2's [8192, 50264] -> 50257 float16 slice moves 2-byte pieces: per-piece decoding made
// it 1.95 ms (0.85 TB/s) on an H200.
constexpr int64_t kLongRow = 512;
template <typename V, typename I>
__global__ void strided_long_rows_kernel(const V* __restrict__ x, V* __restrict__ y, I rows, I vcols, StridedIndex idx) {
  for (I r = static_cast<I>(blockIdx.x); r < rows; r += static_cast<I>(gridDim.x)) {
    const I src = row_source(r, idx);
    const V* xr = x + src;
    V* yr = y + r * vcols;
    const I step = static_cast<I>(blockDim.x);
    I c = static_cast<I>(threadIdx.x);
    for (; c + 3 * step < vcols; c += 4 * step) {
      const V a = xr[c], b = xr[c + step], e = xr[c + 2 * step], f = xr[c + 3 * step];
      yr[c] = a;
      yr[c + step] = b;
      yr[c + 2 * step] = e;
      yr[c + 3 * step] = f;
    }
    for (; c < vcols; c += step) yr[c] = xr[c];
  }
}

// Long rows of 2- or 4-byte elements whose source rows start 16-byte aligned but whose destination
// rows do not (a row is not a whole number of 16-byte pieces: GPT-2's 50257 logits of a padded head,
// 1.76 ms for [8192, 50264] -> 50257 float32 in 4-byte pieces on an H200). A block per row: the few
// elements before the row's first aligned destination piece and after its last one one at a time, the
// rest as 16-byte stores, each put together from the two aligned 16-byte source pieces it straddles
// (the shift is the same for the whole row: no divergence). idx's base and strides are in elements.
template <typename E, typename I>
__global__ void realign_rows_kernel(const E* __restrict__ x, E* __restrict__ y, I rows, I cols, StridedIndex idx) {
  constexpr int P = 16 / sizeof(E);  // elements per 16-byte piece
  for (I r = static_cast<I>(blockIdx.x); r < rows; r += static_cast<I>(gridDim.x)) {
    const I src = row_source(r, idx);
    const E* xr = x + src;  // 16-byte aligned
    E* yr = y + r * cols;
    const int head = static_cast<int>((P - (r * cols) % P) % P);  // elements before yr's first aligned piece
    const I body = head < cols ? (cols - head) / P : 0;             // whole aligned pieces
    const I tail = head + body * P;
    for (I c = static_cast<I>(threadIdx.x); c < head && c < cols; c += static_cast<I>(blockDim.x)) yr[c] = xr[c];
    for (I c = tail + static_cast<I>(threadIdx.x); c < cols; c += static_cast<I>(blockDim.x)) yr[c] = xr[c];
    const uint4* xv = reinterpret_cast<const uint4*>(xr);
    uint4* yv = reinterpret_cast<uint4*>(yr + head);
    for (I j = static_cast<I>(threadIdx.x); j < body; j += static_cast<I>(blockDim.x)) {
      // Destination piece j holds source elements head + P·j ... : pieces j and j + 1, shifted by head.
      const uint4 a = xv[j];
      const uint4 b = head ? xv[j + 1] : a;
      const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      const int shift_bytes = head * static_cast<int>(sizeof(E));
      const int ws = shift_bytes / 4;
      uint32_t u[5];
#pragma unroll
      for (int k = 0; k < 5; ++k) u[k] = ws == 0 ? w[k] : ws == 1 ? w[k + 1] : ws == 2 ? w[k + 2] : w[k + 3];
      uint4 o;
      if (shift_bytes % 4) {  // 2-byte elements at an odd shift: the high half of one word, the low of the next
        o = make_uint4(__funnelshift_r(u[0], u[1], 16), __funnelshift_r(u[1], u[2], 16), __funnelshift_r(u[2], u[3], 16),
                       __funnelshift_r(u[3], u[4], 16));
      } else {
        o = make_uint4(u[0], u[1], u[2], u[3]);
      }
      yv[j] = o;
    }
  }
}

// Rows of 2-byte floats (float16 or bfloat16), 16-byte aligned `pitch` elements apart, widened to
// float32 rows of `cols` packed back to back (a padded half GEMM's columns [0, cols) written as the
// model's float32 output: GPT-2's [8192, 50264] -> [8192, 50257] logits). A block per row: a thread
// stores 4 floats as one 16-byte piece at each aligned destination position, reading the 4 halves it
// needs from the two aligned 8-byte source words they straddle (the same shift for the whole row);
// the few floats before the first aligned piece and after the last one go one at a time. On an H200
// GPT-2's logits take 0.69 ms (3.6 TB/s; bench/cuda_widen_probe.cu times the forms tried: 16-byte
// source words, persistent grids and streaming stores were slower).
template <typename H>
__device__ __forceinline__ float half_bits_to_float(uint16_t b) {
  if constexpr (std::is_same<H, __half>::value) return __half2float(__ushort_as_half(b));
  else return __uint_as_float(static_cast<uint32_t>(b) << 16);  // bfloat16: float32's high half
}

template <typename H, typename I>
__global__ void __launch_bounds__(1024)
    widen_rows_kernel(const H* __restrict__ x, float* __restrict__ y, I rows, I cols, I pitch) {
  for (I r = static_cast<I>(blockIdx.x); r < rows; r += static_cast<I>(gridDim.x)) {
    const H* xr = x + r * pitch;
    float* yr = y + r * cols;
    const int head = static_cast<int>((4 - (r * cols) % 4) % 4);  // floats before yr's first aligned piece
    const I body = head < cols ? (cols - head) / 4 : 0;
    const I tail = head + body * 4;
    for (I c = static_cast<I>(threadIdx.x); c < head && c < cols; c += static_cast<I>(blockDim.x)) yr[c] = convert<float>(xr[c]);
    for (I c = tail + static_cast<I>(threadIdx.x); c < cols; c += static_cast<I>(blockDim.x)) yr[c] = convert<float>(xr[c]);
    // Destination piece j holds source elements head + 4j ... head + 4j + 3: words j and j + 1 (4
    // halves each), shifted by head. Word j + 1 stays inside the row: 4·body < pitch when head > 0.
    // Two pieces per thread per iteration, both pieces' loads issued before either store: one piece
    // per iteration left too few bytes in flight (bench/cuda_widen_probe.cu: 0.90 -> 0.69 ms for
    // GPT-2's logits at batch 64 on an H200, with 1024-thread blocks).
    const uint2* xv = reinterpret_cast<const uint2*>(xr);
    float4* yv = reinterpret_cast<float4*>(yr + head);
    const I step = static_cast<I>(blockDim.x);
    for (I j0 = static_cast<I>(threadIdx.x); j0 < body; j0 += 2 * step) {
      uint2 a[2], b[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const I j = j0 + u * step;
        if (j < body) {
          a[u] = __ldg(xv + j);
          b[u] = head ? __ldg(xv + j + 1) : a[u];
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const I j = j0 + u * step;
        if (j >= body) continue;
        const uint32_t w[4] = {a[u].x, a[u].y, b[u].x, b[u].y};
        uint16_t h[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int e = head + k;  // element e of the 8 the two words hold
          h[k] = static_cast<uint16_t>(w[e >> 1] >> ((e & 1) * 16));
        }
        yv[j] = make_float4(half_bits_to_float<H>(h[0]), half_bits_to_float<H>(h[1]), half_bits_to_float<H>(h[2]),
                            half_bits_to_float<H>(h[3]));
      }
    }
  }
}

template <typename From, typename To>
__global__ void cast_kernel(const From* __restrict__ x, To* __restrict__ y, int64_t n) {
  KILN_GRID_LOOP(i, n) {
    if constexpr (std::is_floating_point<compute_t<From>>::value && std::is_integral<To>::value &&
                  !std::is_same<To, bool>::value) {
      // Float to integer: truncation toward zero; NaN gives 0 (C++ leaves it undefined).
      const double v = convert<double>(x[i]);
      y[i] = v != v ? To(0) : static_cast<To>(v);
    } else {
      y[i] = convert<To>(x[i]);
    }
  }
}

template <typename T, typename I>
__global__ void gather_kernel(const T* data, const I* indices, T* y, int64_t outer, int64_t axis_dim, int64_t inner,
                              int64_t n_idx) {
  const int64_t n = outer * n_idx * inner;
  KILN_GRID_LOOP(i, n) {
    const int64_t in = i % inner, j = i / inner % n_idx, o = i / (inner * n_idx);
    int64_t k = static_cast<int64_t>(indices[j]);
    if (k < 0) k += axis_dim;
    y[i] = (k >= 0 && k < axis_dim) ? data[(o * axis_dim + k) * inner + in] : T{};
  }
}

template <typename T>
__global__ void fill_kernel(T* y, int64_t n, T v) {
  KILN_GRID_LOOP(i, n) y[i] = v;
}

template <typename T>
__global__ void range_kernel(T* y, int64_t n, int64_t istart, int64_t idelta, double start, double delta) {
  KILN_GRID_LOOP(i, n) {
    if constexpr (std::is_integral<T>::value) y[i] = static_cast<T>(istart + i * idelta);
    else if constexpr (sizeof(T) == 2) y[i] = convert<T>(static_cast<float>(start) + static_cast<float>(i) * static_cast<float>(delta));
    else y[i] = convert<T>(start + static_cast<double>(i) * delta);
  }
}

}  // namespace

int launch_unary(UnaryOp op, int elem, const void* x, void* y, int64_t n, float alpha, float beta, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (op == UnaryOp::kNot) {
    if (elem != kElemBool) return cudaErrorInvalidValue;
    not_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const bool*>(x), static_cast<bool*>(y), n);
    return cudaGetLastError();
  }
  if (op == UnaryOp::kBitNot) {
    return dispatch_numeric(elem, [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_integral<T>::value && !std::is_same<T, bool>::value) {
        bitnot_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
        return static_cast<int>(cudaGetLastError());
      } else {
        return static_cast<int>(cudaErrorInvalidValue);
      }
    });
  }
  if ((op == UnaryOp::kAbs || op == UnaryOp::kNeg || op == UnaryOp::kSign) && (elem == kElemI32 || elem == kElemI64)) {
    if (elem == kElemI32)
      int_unary_kernel<<<grid_for(n), kThreads, 0, stream>>>(op, static_cast<const int32_t*>(x), static_cast<int32_t*>(y), n);
    else
      int_unary_kernel<<<grid_for(n), kThreads, 0, stream>>>(op, static_cast<const int64_t*>(x), static_cast<int64_t*>(y), n);
    return cudaGetLastError();
  }
  if (elem == kElemF64) {
    if (op == UnaryOp::kIsNaN)
      isnan_f64_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const double*>(x), static_cast<bool*>(y), n);
    else
      unary_f64_kernel<<<grid_for(n), kThreads, 0, stream>>>(op, static_cast<const double*>(x), static_cast<double*>(y), n,
                                                             alpha, beta);
    return cudaGetLastError();
  }
  return dispatch_float(elem, [&](auto t) {
    using T = decltype(t);
    if (op == UnaryOp::kIsNaN)
      isnan_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<bool*>(y), n);
    else
      unary_kernel<<<grid_for(n), kThreads, 0, stream>>>(op, static_cast<const T*>(x), static_cast<T*>(y), n, alpha, beta);
    return static_cast<int>(cudaGetLastError());
  });
}

namespace {
template <typename T>
__global__ void bias_act_kernel(T* __restrict__ y, const T* __restrict__ bias, const T* __restrict__ z, int64_t n,
                                int64_t channels, int64_t inner, bool act, UnaryOp op, float alpha, float beta) {
  KILN_GRID_LOOP(i, n) {
    float v = convert<float>(y[i]);
    if (bias) v += convert<float>(bias[(i / inner) % channels]);
    if (z) v += convert<float>(z[i]);
    if (act) v = apply_unary(op, v, alpha, beta);
    y[i] = convert<T>(v);
  }
}

// The channels-last case (bias along the last dim, channels % 8 == 0, 16-byte aligned): 8 values of
// a 2-byte type per thread, one 16-byte load of y (and z) and of the bias. kOp names the activation at
// compile time for the ones transformers and CNNs run over their largest tensors (exact GELU after the
// FFN's first GEMM, as gelu_for_half below; tanh GELU; ReLU): no per-value dispatch, and the compiler
// interleaves the 8 values' math; kRuntimeOp reads the activation from `op`.
constexpr int kRuntimeOp = -1;

// Exact GELU for float16/bfloat16 results: x·Φ(x) with Φ(-u) = 0.5·erfc(u/√2) = 2^(u·Q(u) - 1), u = |x|,
// where Q(u) = log2(erfc(u/√2)) / u is fitted on [0, 5.7] by a degree-7 polynomial (weighted least
// squares towards minimax, kiln's own fit). Evaluated in float32 its relative error is ≤ 5e-6
// below |x| = 5.7 (the negative tail included, where 0.5·x·(1 + erf(x/√2)) in float32 loses every digit
// to cancellation), far below float16's 2^-11 relative half-step: on 2M points of [-12, 12] its float16
// rounding differs from the exact GELU's on 0.15% (the erff formula's on 4.8%). It costs 8 FMAs and one
// exp2, a fraction of erff's work, which was most of this kernel's time after the FFN's first GEMM
// (ViT-B/16 at batch 64 on an H200: 62 µs a call). Below x = -5.7 the result is 0 (|GELU| < 4e-8 there,
// as the erff formula gives); -inf gives NaN, as x·(1 + erf) does.
__device__ __forceinline__ float gelu_for_half(float x) {
  const float u = fabsf(x);  // past 5.7 (or NaN) the fit is not used: h is 0 below
  float q = -1.0525626947810451e-07f;
  q = fmaf(q, u, 4.87560043893609e-07f);
  q = fmaf(q, u, 4.0853716200217605e-05f);
  q = fmaf(q, u, -0.0008343169465661049f);
  q = fmaf(q, u, 0.008260981179773808f);
  q = fmaf(q, u, -0.05361459404230118f);
  q = fmaf(q, u, -0.45870620012283325f);
  q = fmaf(q, u, -1.1511820554733276f);
  const float h = u < 5.7f ? exp2f(fmaf(u, q, -1.f)) : 0.f;  // Φ(-u)
  const float phi = x >= 0.f ? 1.f - h : x == -INFINITY ? NAN : h;
  return x * phi;
}

template <typename T, int kOp>
__global__ void bias_act_last8_kernel(T* __restrict__ y, const T* __restrict__ bias, const T* __restrict__ z, int64_t vecs,
                                      int channels, bool act, UnaryOp op, float alpha, float beta) {
  if constexpr (kOp != kRuntimeOp) op = static_cast<UnaryOp>(kOp);
  KILN_GRID_LOOP(i, vecs) {
    uint4 yv = reinterpret_cast<uint4*>(y)[i];
    T* yt = reinterpret_cast<T*>(&yv);
    uint4 bv{}, zv{};
    if (bias) bv = reinterpret_cast<const uint4*>(bias)[static_cast<int>((i * 8) % channels) / 8];
    if (z) zv = reinterpret_cast<const uint4*>(z)[i];
    const T* bt = reinterpret_cast<const T*>(&bv);
    const T* zt = reinterpret_cast<const T*>(&zv);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float v = convert<float>(yt[k]);
      if (bias) v += convert<float>(bt[k]);
      if (z) v += convert<float>(zt[k]);
      if constexpr (kOp == static_cast<int>(UnaryOp::kGelu) && sizeof(T) == 2) {
        v = gelu_for_half(v);
      } else {
        if (act) v = apply_unary(op, v, alpha, beta);
      }
      yt[k] = convert<T>(v);
    }
    reinterpret_cast<uint4*>(y)[i] = yv;
  }
}

}  // namespace

int launch_bias_act(int elem, void* y, const void* bias, const void* z, int64_t n, int64_t channels, int64_t inner, bool act,
                    UnaryOp op, float alpha, float beta, cudaStream_t stream) {
  if (n <= 0 || (!bias && !act && !z)) return cudaSuccess;
  if (channels <= 0 || inner <= 0) return cudaErrorInvalidValue;
  return dispatch_float(elem, [&](auto t) {
    using T = decltype(t);
    // Without a bias (cuBLASLt applied it: the GELU after BERT's first FFN GEMM) any layout vectorizes.
    const bool bias_ok = !bias || (inner == 1 && channels % 8 == 0 && channels < (1 << 30) && aligned16(bias));
    if (sizeof(T) == 2 && bias_ok && n % 8 == 0 && aligned16(y) && (!z || aligned16(z))) {
      const int64_t vecs = n / 8;
      auto kernel = bias_act_last8_kernel<T, kRuntimeOp>;
      if (act && op == UnaryOp::kGelu) kernel = bias_act_last8_kernel<T, static_cast<int>(UnaryOp::kGelu)>;
      if (act && op == UnaryOp::kGeluTanh) kernel = bias_act_last8_kernel<T, static_cast<int>(UnaryOp::kGeluTanh)>;
      if (act && op == UnaryOp::kRelu) kernel = bias_act_last8_kernel<T, static_cast<int>(UnaryOp::kRelu)>;
      kernel<<<grid_for(vecs), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(bias), static_cast<const T*>(z),
                                                      vecs, bias ? static_cast<int>(channels) : 8, act, op, alpha, beta);
    } else {
      bias_act_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(bias),
                                                            static_cast<const T*>(z), n, channels, inner, act, op, alpha, beta);
    }
    return static_cast<int>(cudaGetLastError());
  });
}

namespace {
template <typename T>
__global__ void channel_affine_kernel(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ scale,
                                      const float* __restrict__ shift, int64_t n, int64_t channels, int64_t inner, bool act,
                                      UnaryOp op, float alpha, float beta) {
  KILN_GRID_LOOP(i, n) {
    const int64_t c = (i / inner) % channels;
    float v = convert<float>(x[i]) * scale[c] + shift[c];
    if (act) v = apply_unary(op, v, alpha, beta);
    y[i] = convert<T>(v);
  }
}

// Channels last, 8 values of a 2-byte type per thread: one 16-byte load of x, two of the scale and
// of the shift (float4), one store. The channel of the first value is (i * 8) % channels (channels %
// 8 == 0), in 32 bits when the vector count fits.
template <typename T, typename I>
__global__ void channel_affine_last8_kernel(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ scale,
                                            const float* __restrict__ shift, I vecs, I channels, bool act, UnaryOp op,
                                            float alpha, float beta) {
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < vecs; i += step) {
    uint4 xv = reinterpret_cast<const uint4*>(x)[i];
    const I c4 = (i * 8) % channels / 4;
    const float4 a0 = reinterpret_cast<const float4*>(scale)[c4], a1 = reinterpret_cast<const float4*>(scale)[c4 + 1];
    const float4 b0 = reinterpret_cast<const float4*>(shift)[c4], b1 = reinterpret_cast<const float4*>(shift)[c4 + 1];
    const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
    const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
    T* xt = reinterpret_cast<T*>(&xv);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      float v = convert<float>(xt[k]) * a[k] + b[k];
      if (act) v = apply_unary(op, v, alpha, beta);
      xt[k] = convert<T>(v);
    }
    reinterpret_cast<uint4*>(y)[i] = xv;
  }
}
}  // namespace

int launch_channel_affine(int elem, const void* x, void* y, const float* scale, const float* shift, int64_t n, int64_t channels,
                          int64_t inner, bool act, UnaryOp op, float alpha, float beta, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (channels <= 0 || inner <= 0) return cudaErrorInvalidValue;
  return dispatch_float(elem, [&](auto t) {
    using T = decltype(t);
    const bool vec = sizeof(T) == 2 && inner == 1 && channels % 8 == 0 && n % 8 == 0 && aligned16(x) && aligned16(y) &&
                     aligned16(scale) && aligned16(shift);
    if (vec) {
      const int64_t vecs = n / 8;
      if (vecs * 8 < (int64_t{1} << 31))
        channel_affine_last8_kernel<T, int32_t><<<grid_for(vecs), kThreads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<T*>(y), scale, shift, static_cast<int32_t>(vecs),
            static_cast<int32_t>(channels), act, op, alpha, beta);
      else
        channel_affine_last8_kernel<T, int64_t><<<grid_for(vecs), kThreads, 0, stream>>>(
            static_cast<const T*>(x), static_cast<T*>(y), scale, shift, vecs, channels, act, op, alpha, beta);
    } else {
      channel_affine_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), scale, shift, n,
                                                                  channels, inner, act, op, alpha, beta);
    }
    return static_cast<int>(cudaGetLastError());
  });
}

// ---- kiln.QMatMul's passes around cuBLASLt's int8 product (cuda_gemm.cpp)
namespace {
// Four bytes per thread: row i of A [m, k] into row i of out [m, kp] (kp % 4 == 0), uint8 values
// shifted to int8 (x ^ 0x80 == x - 128), the columns from k on zero.
__global__ void int8_rows_kernel(const uint8_t* __restrict__ a, bool from_uint8, int8_t* __restrict__ out, int64_t m, int64_t k,
                                 int64_t kp) {
  const int64_t quads = kp / 4;
  const uint8_t flip = from_uint8 ? 0x80 : 0;
  KILN_GRID_LOOP(q, m * quads) {
    const int64_t i = q / quads, j0 = (q % quads) * 4;
    uint32_t packed = 0;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int64_t j = j0 + t;
      const uint8_t v = j < k ? static_cast<uint8_t>(a[i * k + j] ^ flip) : 0;
      packed |= static_cast<uint32_t>(v) << (8 * t);
    }
    reinterpret_cast<uint32_t*>(out + i * kp)[j0 / 4] = packed;
  }
}

// saturate(rne(v / ys) + yz) to [lo, hi], as an 8-bit Out (QuantizeLinear's rounding).
template <typename Out>
__device__ __forceinline__ Out requantized(float v, float ys, int32_t yz, int32_t lo, int32_t hi) {
  const float q = rintf(v / ys) + static_cast<float>(yz);
  return static_cast<Out>(static_cast<int32_t>(fminf(fmaxf(q, static_cast<float>(lo)), static_cast<float>(hi))));
}

// v = scale[j] · acc[i, j] + offset[j], the activation, then float32 y or saturate(rne(v / ys) + yz).
template <typename Out>
__global__ void int8_epilogue_kernel(const int32_t* __restrict__ acc, int64_t ldacc, const float* __restrict__ scale,
                                     const float* __restrict__ offset, Out* __restrict__ y, int64_t m, int64_t n, bool act,
                                     UnaryOp op, float alpha, float beta, float ys, int32_t yz, int32_t lo, int32_t hi) {
  KILN_GRID_LOOP(e, m * n) {
    const int64_t i = e / n, j = e % n;
    float v = fmaf(scale[j], static_cast<float>(acc[i * ldacc + j]), offset[j]);
    if (act) v = apply_unary(op, v, alpha, beta);
    if constexpr (sizeof(Out) == 4) {
      y[e] = v;
    } else if constexpr (sizeof(Out) == 2) {
      y[e] = __float2half_rn(v);
    } else {
      y[e] = requantized<Out>(v, ys, yz, lo, hi);
    }
  }
}

// The same, four columns a thread (n % 4 == 0, ldacc % 4 == 0, 16-byte aligned acc) with 32-bit
// indices (m · n < 2^31): one 16-byte read of the sums, scales and offsets, one store.
template <typename Out>
__global__ void int8_epilogue4_kernel(const int32_t* __restrict__ acc, int ldacc, const float* __restrict__ scale,
                                      const float* __restrict__ offset, Out* __restrict__ y, int m, int n, bool act, UnaryOp op,
                                      float alpha, float beta, float ys, int32_t yz, int32_t lo, int32_t hi) {
  const int n4 = n / 4, total = m * n4;
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < total; e += gridDim.x * blockDim.x) {
    const int i = e / n4, j = (e - i * n4) * 4;
    const int4 a = *reinterpret_cast<const int4*>(acc + static_cast<int64_t>(i) * ldacc + j);
    const float4 s = *reinterpret_cast<const float4*>(scale + j), o = *reinterpret_cast<const float4*>(offset + j);
    float v[4] = {fmaf(s.x, static_cast<float>(a.x), o.x), fmaf(s.y, static_cast<float>(a.y), o.y),
                  fmaf(s.z, static_cast<float>(a.z), o.z), fmaf(s.w, static_cast<float>(a.w), o.w)};
    if (act)
      for (float& x : v) x = apply_unary(op, x, alpha, beta);
    Out* out = y + static_cast<int64_t>(i) * n + j;
    if constexpr (sizeof(Out) == 4) {
      *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (sizeof(Out) == 2) {
      const __half2 lo = __floats2half2_rn(v[0], v[1]), hi = __floats2half2_rn(v[2], v[3]);
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo);
      packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(out) = packed;
    } else {
      Out q[4];
      for (int t = 0; t < 4; ++t) q[t] = requantized<Out>(v[t], ys, yz, lo, hi);
      *reinterpret_cast<uint32_t*>(out) = *reinterpret_cast<const uint32_t*>(q);
    }
  }
}
}  // namespace

int launch_int8_rows(const uint8_t* a, bool from_uint8, int8_t* out, int64_t m, int64_t k, int64_t kp, cudaStream_t stream) {
  if (m <= 0 || kp <= 0) return cudaSuccess;
  if (kp % 4 != 0 || kp < k || (reinterpret_cast<uintptr_t>(out) & 3)) return cudaErrorInvalidValue;
  int8_rows_kernel<<<grid_for(m * (kp / 4)), kThreads, 0, stream>>>(a, from_uint8, out, m, k, kp);
  return static_cast<int>(cudaGetLastError());
}

int launch_int8_epilogue(const int32_t* acc, int64_t ldacc, const float* scale, const float* offset, void* y, int64_t m,
                         int64_t n, bool act, UnaryOp op, float alpha, float beta, int out_type, float ys, int32_t yz,
                         cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const bool vec = n % 4 == 0 && ldacc % 4 == 0 && m * n < (int64_t{1} << 31) && ldacc <= INT32_MAX &&
                   reinterpret_cast<uintptr_t>(acc) % 16 == 0 && reinterpret_cast<uintptr_t>(scale) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(offset) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 && out_type >= 0 &&
                   out_type <= 3;
  if (vec) {
    const unsigned g4 = grid_for(m * n / 4);
    const int mi = static_cast<int>(m), ni = static_cast<int>(n), ld = static_cast<int>(ldacc);
    if (out_type == 0)
      int8_epilogue4_kernel<float><<<g4, kThreads, 0, stream>>>(acc, ld, scale, offset, static_cast<float*>(y), mi, ni, act, op, alpha,
                                                                beta, ys, yz, 0, 0);
    else if (out_type == 1)
      int8_epilogue4_kernel<uint8_t><<<g4, kThreads, 0, stream>>>(acc, ld, scale, offset, static_cast<uint8_t*>(y), mi, ni, act, op,
                                                                  alpha, beta, ys, yz, 0, 255);
    else if (out_type == 2)
      int8_epilogue4_kernel<int8_t><<<g4, kThreads, 0, stream>>>(acc, ld, scale, offset, static_cast<int8_t*>(y), mi, ni, act, op,
                                                                 alpha, beta, ys, yz, -128, 127);
    else
      int8_epilogue4_kernel<__half><<<g4, kThreads, 0, stream>>>(acc, ld, scale, offset, static_cast<__half*>(y), mi, ni, act, op,
                                                                 alpha, beta, ys, yz, 0, 0);
    return static_cast<int>(cudaGetLastError());
  }
  const unsigned grid = grid_for(m * n);
  switch (out_type) {
    case 0:
      int8_epilogue_kernel<float><<<grid, kThreads, 0, stream>>>(acc, ldacc, scale, offset, static_cast<float*>(y), m, n, act, op,
                                                                 alpha, beta, ys, yz, 0, 0);
      break;
    case 1:
      int8_epilogue_kernel<uint8_t><<<grid, kThreads, 0, stream>>>(acc, ldacc, scale, offset, static_cast<uint8_t*>(y), m, n, act,
                                                                   op, alpha, beta, ys, yz, 0, 255);
      break;
    case 2:
      int8_epilogue_kernel<int8_t><<<grid, kThreads, 0, stream>>>(acc, ldacc, scale, offset, static_cast<int8_t*>(y), m, n, act,
                                                                  op, alpha, beta, ys, yz, -128, 127);
      break;
    case 3:
      int8_epilogue_kernel<__half><<<grid, kThreads, 0, stream>>>(acc, ldacc, scale, offset, static_cast<__half*>(y), m, n, act, op,
                                                                  alpha, beta, ys, yz, 0, 0);
      break;
    default: return cudaErrorInvalidValue;
  }
  return static_cast<int>(cudaGetLastError());
}

int launch_binary(BinaryOp op, int elem, const void* a, const void* b, void* y, int64_t n, const BroadcastIndex& index,
                  cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  Walk wa, wb;
  const bool walk = walk_of(index, true, &wa) && (!b || walk_of(index, false, &wb));
  const bool compare = op >= BinaryOp::kEqual && op <= BinaryOp::kGreaterEqual;
  return dispatch_numeric(elem, [&](auto t) {
    using T = decltype(t);
    const T* ta = static_cast<const T*>(a);
    const T* tb = static_cast<const T*>(b);
    if (!walk) {
      binary_kernel<<<grid_for(n), kThreads, 0, stream>>>(op, ta, tb, y, n, index);
      return static_cast<int>(cudaGetLastError());
    }
    constexpr int V = 16 / sizeof(T);
    bool vec = std::is_floating_point<compute_t<T>>::value && sizeof(T) <= 4 && !compare && n % V == 0 && aligned16(y);
    auto lanes_ok = [&](const void* p, const Walk& w) {
      return w.inner == 1 ? w.period % V == 0 && aligned16(p) : w.inner % V == 0;
    };
    vec = vec && lanes_ok(a, wa) && (!b || lanes_ok(b, wb));
    const bool narrow = n <= 0x7fffffff;
    if (vec) {
      if (narrow)
        binary_walk_vec_kernel<T, uint32_t><<<grid_for(n / V), kThreads, 0, stream>>>(op, ta, tb, static_cast<T*>(y),
                                                                                        static_cast<uint32_t>(n), wa, wb);
      else
        binary_walk_vec_kernel<T, int64_t><<<grid_for(n / V), kThreads, 0, stream>>>(op, ta, tb, static_cast<T*>(y), n, wa, wb);
    } else if (narrow) {
      binary_walk_kernel<T, uint32_t><<<grid_for(n), kThreads, 0, stream>>>(op, ta, tb, y, static_cast<uint32_t>(n), wa, wb);
    } else {
      binary_walk_kernel<T, int64_t><<<grid_for(n), kThreads, 0, stream>>>(op, ta, tb, y, n, wa, wb);
    }
    return static_cast<int>(cudaGetLastError());
  });
}

namespace {
template <typename T>
__global__ void scale_kernel(T* y, int64_t n, double s) {
  KILN_GRID_LOOP(i, n) y[i] = convert<T>(convert<compute_t<T>>(y[i]) * compute_t<T>(s));
}
}  // namespace

int launch_scale(int elem, void* y, int64_t n, double scale, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  auto go = [&](auto t) {
    using T = decltype(t);
    scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), n, scale);
    return static_cast<int>(cudaGetLastError());
  };
  if (elem == kElemF64) return go(double{});
  return dispatch_float(elem, go);
}

int launch_where(const bool* cond, const void* x, const void* z, void* y, int64_t n, int elem_bytes,
                 const Broadcast3Index& index, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto t) {
    using T = decltype(t);
    where_kernel<<<grid_for(n), kThreads, 0, stream>>>(cond, static_cast<const T*>(x), static_cast<const T*>(z),
                                                       static_cast<T*>(y), n, index);
    return static_cast<int>(cudaGetLastError());
  });
}

// The rows path of a strided copy (strided_rows_kernel), when the innermost dim is contiguous in the
// source; false when it does not apply.
bool launch_strided_rows(const void* x, void* y, int64_t n, int elem_bytes, const StridedIndex& index, cudaStream_t stream,
                         int* status) {
  const int r = index.rank;
  if (r < 1 || index.in_strides[r - 1] != 1 || index.out_dims[r - 1] <= 0) return false;
  const int64_t cols = index.out_dims[r - 1], rows = n / cols;
  if (rows * cols != n) return false;
  // The widest piece (16, 8, 4, 2 or 1 bytes) that divides a row, the base, every row stride and
  // both pointers.
  int64_t vb = 16;
  auto fits = [&](int64_t b) {
    if ((cols * elem_bytes) % b || (index.base * elem_bytes) % b || reinterpret_cast<uintptr_t>(x) % b ||
        reinterpret_cast<uintptr_t>(y) % b)
      return false;
    for (int d = 0; d + 1 < r; ++d)
      if ((index.in_strides[d] * elem_bytes) % b) return false;
    return true;
  };
  while (vb > elem_bytes && !fits(vb)) vb /= 2;
  if (vb < elem_bytes || !fits(vb)) return false;
  // Long rows of 2- or 4-byte elements that only the destination's row length keeps from 16-byte
  // pieces: aligned source pieces realigned in registers (realign_rows_kernel).
  if (vb < 16 && (elem_bytes == 2 || elem_bytes == 4) && cols * elem_bytes >= 16 * kLongRow) {
    const int64_t p16 = 16 / elem_bytes;
    bool aligned = index.base % p16 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
    int64_t reach = index.base + cols;
    for (int d = 0; d + 1 < r; ++d) {
      // Rows read forward and apart (not Expand's stride 0): the last piece read stays in the source.
      aligned = aligned && index.in_strides[d] % p16 == 0 && (index.in_strides[d] > 0 || index.out_dims[d] == 1);
      reach += (index.out_dims[d] - 1) * index.in_strides[d];
    }
    if (aligned && index.base >= 0) {
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65536));
      const bool narrow32 = n < (int64_t{1} << 30) && reach < (int64_t{1} << 30);
      auto go = [&](auto e) {
        using E = decltype(e);
        const E* xs = static_cast<const E*>(x);
        E* ys = static_cast<E*>(y);
        if (narrow32)
          realign_rows_kernel<E, int32_t><<<blocks, kThreads, 0, stream>>>(xs, ys, static_cast<int32_t>(rows),
                                                                          static_cast<int32_t>(cols), index);
        else
          realign_rows_kernel<E, int64_t><<<blocks, kThreads, 0, stream>>>(xs, ys, rows, cols, index);
      };
      if (elem_bytes == 2) go(uint16_t{}); else go(uint32_t{});
      *status = static_cast<int>(cudaGetLastError());
      return true;
    }
  }
  const int64_t per = vb / elem_bytes;
  StridedIndex v = index;
  v.base /= per;
  for (int d = 0; d + 1 < r; ++d) v.in_strides[d] /= per;
  const int64_t vcols = cols / per, total = rows * vcols;
  int64_t reach = v.base + vcols;  // one past the furthest piece read
  for (int d = 0; d + 1 < r; ++d) reach += (v.out_dims[d] - 1) * (v.in_strides[d] < 0 ? 0 : v.in_strides[d]);
  bool negative = v.base < 0;
  for (int d = 0; d + 1 < r; ++d) negative = negative || v.in_strides[d] < 0;
  const bool narrow = !negative && total < (int64_t{1} << 30) && reach < (int64_t{1} << 30);
  auto go = [&](auto piece) {
    using V = decltype(piece);
    const V* xs = static_cast<const V*>(x);
    V* ys = static_cast<V*>(y);
    const unsigned row_blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65536));
    if (vcols >= kLongRow && narrow)
      strided_long_rows_kernel<V, int32_t><<<row_blocks, kThreads, 0, stream>>>(xs, ys, static_cast<int32_t>(rows),
                                                                                 static_cast<int32_t>(vcols), v);
    else if (vcols >= kLongRow)
      strided_long_rows_kernel<V, int64_t><<<row_blocks, kThreads, 0, stream>>>(xs, ys, rows, vcols, v);
    else if (narrow)
      strided_rows_kernel<V, int32_t><<<grid_for(total), kThreads, 0, stream>>>(xs, ys, static_cast<int32_t>(total),
                                                                                 static_cast<int32_t>(vcols), v);
    else
      strided_rows_kernel<V, int64_t><<<grid_for(total), kThreads, 0, stream>>>(xs, ys, total, vcols, v);
    *status = static_cast<int>(cudaGetLastError());
  };
  switch (vb) {
    case 16: go(uint4{}); break;
    case 8: go(uint2{}); break;
    case 4: go(uint32_t{}); break;
    case 2: go(uint16_t{}); break;
    default: go(uint8_t{}); break;
  }
  return true;
}

int launch_strided_copy(const void* x, void* y, int64_t n, int elem_bytes, const StridedIndex& index, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  int status = cudaSuccess;
  if (launch_strided_rows(x, y, n, elem_bytes, index, stream, &status)) return status;
  return dispatch_bytes(elem_bytes, [&](auto t) {
    using T = decltype(t);
    strided_copy_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, index);
    return static_cast<int>(cudaGetLastError());
  });
}

namespace {
// One launch of Concat (parts' rows gathered into dst's pitched rows) or Split (dst's pitched rows
// scattered into the parts): `part[i]` is part i's contiguous rows, `rows` the pitched tensor.
struct ConcatLaunch {
  char* part[kConcatMaxParts];
  int64_t width[kConcatMaxParts];  // in pieces of vec[i] bytes
  int64_t offset[kConcatMaxParts];  // in bytes
  int vec[kConcatMaxParts];
  char* rows;
  int64_t outer, pitch;
};

template <bool kSplit, typename V, typename I>
__device__ void concat_part(V* __restrict__ part, char* __restrict__ rows_base, I rows, I width, I pitch, int64_t offset) {
  const I total = rows * width;
  const I step = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I i = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); i < total; i += step) {
    const I r = i / width, c = i - r * width;
    V* pitched = reinterpret_cast<V*>(rows_base + offset + static_cast<int64_t>(r) * pitch + static_cast<int64_t>(c) * sizeof(V));
    if constexpr (kSplit) part[i] = *pitched;
    else *pitched = part[i];
  }
}

// blockIdx.y is the part. 32-bit indices when every part's pieces fit (`narrow`).
template <bool kSplit, typename I>
__global__ void concat_kernel(ConcatLaunch a) {
  const int p = blockIdx.y;
  const I rows = static_cast<I>(a.outer), w = static_cast<I>(a.width[p]), pitch = static_cast<I>(a.pitch);
  switch (a.vec[p]) {
    case 16: concat_part<kSplit, uint4, I>(reinterpret_cast<uint4*>(a.part[p]), a.rows, rows, w, pitch, a.offset[p]); break;
    case 8: concat_part<kSplit, uint2, I>(reinterpret_cast<uint2*>(a.part[p]), a.rows, rows, w, pitch, a.offset[p]); break;
    case 4: concat_part<kSplit, uint32_t, I>(reinterpret_cast<uint32_t*>(a.part[p]), a.rows, rows, w, pitch, a.offset[p]); break;
    case 2: concat_part<kSplit, uint16_t, I>(reinterpret_cast<uint16_t*>(a.part[p]), a.rows, rows, w, pitch, a.offset[p]); break;
    default: concat_part<kSplit, uint8_t, I>(reinterpret_cast<uint8_t*>(a.part[p]), a.rows, rows, w, pitch, a.offset[p]); break;
  }
}

template <bool kSplit>
int launch_parts(const ConcatParts& parts, const void* rows, int64_t outer, int64_t pitch, cudaStream_t stream) {
  if (parts.count <= 0 || outer <= 0) return cudaSuccess;
  if (parts.count > kConcatMaxParts) return cudaErrorInvalidValue;
  ConcatLaunch a{};
  a.rows = static_cast<char*>(const_cast<void*>(rows));
  a.outer = outer;
  a.pitch = pitch;
  int64_t most = 0;
  for (int i = 0; i < parts.count; ++i) {
    const uint64_t bits = reinterpret_cast<uintptr_t>(parts.part[i]) | reinterpret_cast<uintptr_t>(rows) |
                          static_cast<uint64_t>(parts.width[i]) | static_cast<uint64_t>(parts.offset[i]) |
                          static_cast<uint64_t>(outer > 1 ? pitch : 0);
    int v = 16;
    while (v > 1 && (bits & static_cast<uint64_t>(v - 1))) v /= 2;
    a.part[i] = static_cast<char*>(const_cast<void*>(parts.part[i]));  // written only by launch_split
    a.vec[i] = v;
    a.width[i] = parts.width[i] / v;
    a.offset[i] = parts.offset[i];
    most = std::max(most, outer * a.width[i]);
  }
  if (most == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((most + kThreads - 1) / kThreads, 4096)), static_cast<unsigned>(parts.count));
  // 32-bit indices when the grid-stride loop's last step (index + the grid's threads) fits too.
  const int64_t step = static_cast<int64_t>(grid.x) * kThreads;
  if (most + step < (int64_t{1} << 31) && outer * pitch < (int64_t{1} << 31))
    concat_kernel<kSplit, int32_t><<<grid, kThreads, 0, stream>>>(a);
  else
    concat_kernel<kSplit, int64_t><<<grid, kThreads, 0, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}
}  // namespace

int launch_concat(const ConcatParts& parts, void* dst, int64_t outer, int64_t pitch, cudaStream_t stream) {
  return launch_parts<false>(parts, dst, outer, pitch, stream);
}

int launch_split(const void* src, const ConcatParts& parts, int64_t outer, int64_t pitch, cudaStream_t stream) {
  return launch_parts<true>(parts, src, outer, pitch, stream);
}

int launch_cast(const void* x, int from, void* y, int to, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return dispatch_numeric(from, [&](auto f) {
    using From = decltype(f);
    return dispatch_numeric(to, [&](auto t) {
      using To = decltype(t);
      cast_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const From*>(x), static_cast<To*>(y), n);
      return static_cast<int>(cudaGetLastError());
    });
  });
}

namespace {

// The gather kernel over elements of type T (indices int64 or int32).
template <typename T>
int gather_as(const void* data, const void* indices, bool indices64, void* y, int64_t outer, int64_t axis_dim,
              int64_t inner, int64_t n_indices, cudaStream_t stream) {
  const int64_t n = outer * n_indices * inner;
  if (indices64)
    gather_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(data), static_cast<const int64_t*>(indices),
                                                        static_cast<T*>(y), outer, axis_dim, inner, n_indices);
  else
    gather_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(data), static_cast<const int32_t*>(indices),
                                                        static_cast<T*>(y), outer, axis_dim, inner, n_indices);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launch_gather(const void* data, const void* indices, bool indices64, void* y, int64_t outer, int64_t axis_dim,
                  int64_t inner, int64_t n_indices, int elem_bytes, cudaStream_t stream) {
  if (outer * n_indices * inner <= 0) return cudaSuccess;
  // Rows of `inner` elements move whole: as 16-byte words when they are whole words and both tensors
  // are 16-byte aligned (ViT's Q, K, V cut out of a [3, S, B, E] projection: a scalar index along
  // axis 0, rows of S*B*E halves, went at a sixth of the copy bandwidth one half at a time).
  const int64_t row_bytes = inner * elem_bytes;
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  if (elem_bytes < 16 && row_bytes % 16 == 0 && aligned(data) && aligned(y))
    return gather_as<uint4>(data, indices, indices64, y, outer, axis_dim, row_bytes / 16, n_indices, stream);
  return dispatch_bytes(elem_bytes, [&](auto t) {
    return gather_as<decltype(t)>(data, indices, indices64, y, outer, axis_dim, inner, n_indices, stream);
  });
}

int launch_fill(void* y, int64_t n, int elem_bytes, uint64_t bits, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto t) {
    using T = decltype(t);
    fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), n, static_cast<T>(bits));
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_range(void* y, int elem, int64_t n, int64_t istart, int64_t idelta, double start, double delta,
                 cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same<T, bool>::value) {
      return static_cast<int>(cudaErrorInvalidValue);
    } else {
      range_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), n, istart, idelta, start, delta);
      return static_cast<int>(cudaGetLastError());
    }
  });
}

int launch_widen_rows(int elem, const void* x, float* y, int64_t rows, int64_t cols, int64_t pitch, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return 0;
  if ((elem != kElemF16 && elem != kElemBF16) || pitch < cols || pitch % 8 != 0 ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(y) % 16 != 0)
    return static_cast<int>(cudaErrorInvalidValue);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65536));
  constexpr unsigned kWidenThreads = 1024;  // a row per block; 2 blocks per SM measured fastest
  const bool narrow = rows * pitch < (int64_t{1} << 31) && rows * cols < (int64_t{1} << 31);
  auto go = [&](auto h) {
    using H = decltype(h);
    const H* xs = static_cast<const H*>(x);
    if (narrow)
      widen_rows_kernel<H, int32_t><<<blocks, kWidenThreads, 0, stream>>>(xs, y, static_cast<int32_t>(rows),
                                                                      static_cast<int32_t>(cols), static_cast<int32_t>(pitch));
    else
      widen_rows_kernel<H, int64_t><<<blocks, kWidenThreads, 0, stream>>>(xs, y, rows, cols, pitch);
  };
  if (elem == kElemF16) go(__half{}); else go(__nv_bfloat16{});
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kiln::cuda
