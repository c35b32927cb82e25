// backends/cpu/shape.cpp — CPU kernels that move data without looking at it: Reshape, Transpose,
// Concat, Split, Slice, Expand, Tile, Pad, Squeeze, Unsqueeze, Flatten, DepthToSpace, SpaceToDepth,
// CenterCropPad. All are dtype-generic (see shape_util.h). Index-driven ops live in shape_index.cpp,
// value-producing ones (Shape, Constant, Range, ...) in shape_misc.cpp.
#include <immintrin.h>

#include <cstdint>
#include <numeric>
#include <set>

#include "backends/cpu/shape_util.h"
#include "backends/staged_kernel.h"
#include "ops/op_table.h"
#include "ops/params_shape.h"
#include "ops/shape.h"

namespace kiln::cpu {
namespace shape_detail {

// ---------------------------------------------------------------- generic movement

namespace {

// Rows [i0, i1) of a transpose to a few columns: output row i gathers src[i + j * s_in] for the K
// input rows j, read in order; K known to the compiler.
template <int K, typename T>
inline void narrow_rows(T* dst, const T* src, int64_t i0, int64_t i1, int64_t s_in) {
  for (int64_t i = i0; i < i1; ++i)
    for (int j = 0; j < K; ++j) dst[i * K + j] = src[i + j * s_in];
}

// A transpose to a few columns (an image's 3 or 4 channels moved innermost, NCHW -> NHWC): rows split
// among threads.
template <int K, typename T>
void transpose_to_narrow(T* dst, const T* src, int64_t rows, int64_t s_in) {
  parallel_for(rows, 8192, [&](int64_t b, int64_t e) { narrow_rows<K>(dst, src, b, e, s_in); });
}

// 4-byte elements, columns [j0, j1) of a transpose dst[i * inner + j] = src[i + j * s_in] (an NHWC ->
// NCHW move: i the channel, j the pixel) in 8 x 8 blocks through AVX registers: eight 8-element
// loads along i (contiguous in src), the classic unpack/shuffle/permute transpose, eight stores along
// j. [1, 112, 112, 96] -> NCHW at 1 thread on the development machine: 2.46 ms by 32 x 32 scalar
// tiles, ORT 0.38.
[[gnu::target("avx2,fma")]] void transpose32_avx2(uint32_t* dst, const uint32_t* src, int64_t rows, int64_t inner,
                                                  int64_t s_in, int64_t j0, int64_t j1) {
  int64_t i = 0;
  for (; i + 8 <= rows; i += 8) {
    int64_t j = j0;
    for (; j + 8 <= j1; j += 8) {
      const float* sp = reinterpret_cast<const float*>(src + i + j * s_in);
      const __m256 r0 = _mm256_loadu_ps(sp), r1 = _mm256_loadu_ps(sp + s_in), r2 = _mm256_loadu_ps(sp + 2 * s_in);
      const __m256 r3 = _mm256_loadu_ps(sp + 3 * s_in), r4 = _mm256_loadu_ps(sp + 4 * s_in), r5 = _mm256_loadu_ps(sp + 5 * s_in);
      const __m256 r6 = _mm256_loadu_ps(sp + 6 * s_in), r7 = _mm256_loadu_ps(sp + 7 * s_in);
      const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
      const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
      const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
      const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
      float* dp = reinterpret_cast<float*>(dst + i * inner + j);
      _mm256_storeu_ps(dp, _mm256_permute2f128_ps(u0, u4, 0x20));
      _mm256_storeu_ps(dp + inner, _mm256_permute2f128_ps(u1, u5, 0x20));
      _mm256_storeu_ps(dp + 2 * inner, _mm256_permute2f128_ps(u2, u6, 0x20));
      _mm256_storeu_ps(dp + 3 * inner, _mm256_permute2f128_ps(u3, u7, 0x20));
      _mm256_storeu_ps(dp + 4 * inner, _mm256_permute2f128_ps(u0, u4, 0x31));
      _mm256_storeu_ps(dp + 5 * inner, _mm256_permute2f128_ps(u1, u5, 0x31));
      _mm256_storeu_ps(dp + 6 * inner, _mm256_permute2f128_ps(u2, u6, 0x31));
      _mm256_storeu_ps(dp + 7 * inner, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
    for (; j < j1; ++j)
      for (int64_t m = 0; m < 8; ++m) dst[(i + m) * inner + j] = src[i + m + j * s_in];
  }
  for (; i < rows; ++i)
    for (int64_t j = j0; j < j1; ++j) dst[i * inner + j] = src[i + j * s_in];
}

// `batches` transposes of 4-byte elements, batch b reading src + b * s_batch and writing its rows x
// inner block of dst, by transpose32_avx2 in column blocks of 64 (a block reads 64 whole source rows
// of `rows` elements, contiguous) split among threads. False (nothing done) without AVX2 or for a
// side shorter than 8.
template <typename T>
bool transpose32(T* dst, const T* src, int64_t batches, int64_t s_batch, int64_t rows, int64_t inner, int64_t s_in) {
  static_assert(sizeof(T) == 4);
  if (rows < 8 || inner < 8 || !has_avx2_fma()) return false;
  constexpr int64_t kCols = 64;
  const int64_t blocks = (inner + kCols - 1) / kCols;
  const auto* s32 = reinterpret_cast<const uint32_t*>(src);
  auto* d32 = reinterpret_cast<uint32_t*>(dst);
  parallel_for(batches * blocks, std::max<int64_t>(1, 16384 / (kCols * rows)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / blocks, blk = t % blocks;
      transpose32_avx2(d32 + n * rows * inner, s32 + n * s_batch, rows, inner, s_in, blk * kCols,
                       std::min(inner, (blk + 1) * kCols));
    }
  });
  return true;
}

// Many small ones, [B, K, L] -> [B, L, K] with the B blocks at stride s_batch (ShuffleNet's channel
// shuffle in channels-last form: one block per pixel, K = 2): blocks split among threads.
template <int K, typename T>
void batched_transpose_to_narrow(T* dst, const T* src, int64_t batches, int64_t s_batch, int64_t rows, int64_t s_in) {
  parallel_for(batches, std::max<int64_t>(1, 8192 / (rows * K)), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) narrow_rows<K>(dst + n * rows * K, src + n * s_batch, 0, rows, s_in);
  });
}

template <typename T>
void strided_copy_t(T* dst, const Shape& out, const T* src, int64_t base, const std::vector<int64_t>& st) {
  const int r = static_cast<int>(out.size());
  const int64_t n = shape_numel(out);
  if (n == 0) return;
  if (r == 0) { dst[0] = src[base]; return; }
  const int64_t inner = out[r - 1];
  const int64_t s_in = st[r - 1];
  const int64_t rows = n / inner;
  // Columns become rows: tile so that both sides stay in cache.
  if (r == 2 && s_in != 1 && st[0] == 1 && rows > 1 && inner > 1) {
    if (inner == 2) return transpose_to_narrow<2>(dst, src + base, rows, s_in);
    if (inner == 3) return transpose_to_narrow<3>(dst, src + base, rows, s_in);
    if (inner == 4) return transpose_to_narrow<4>(dst, src + base, rows, s_in);
    if constexpr (sizeof(T) == 4)
      if (transpose32(dst, src + base, 1, 0, rows, inner, s_in)) return;
    constexpr int64_t B = 32;
    const int64_t tiles_i = (rows + B - 1) / B;
    parallel_for(tiles_i, 1, [&](int64_t tb, int64_t te) {
      for (int64_t ti = tb; ti < te; ++ti) {
        const int64_t i0 = ti * B, i1 = std::min(rows, i0 + B);
        for (int64_t j0 = 0; j0 < inner; j0 += B) {
          const int64_t j1 = std::min(inner, j0 + B);
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = j0; j < j1; ++j) dst[i * inner + j] = src[base + i + j * s_in];
        }
      }
    });
    return;
  }
  // A batch of them (NHWC -> NCHW at batch > 1).
  if constexpr (sizeof(T) == 4)
    if (r == 3 && st[1] == 1 && s_in != 1 && transpose32(dst, src + base, out[0], st[0], out[1], inner, s_in)) return;
  if (r == 3 && st[1] == 1 && s_in != 1 && inner >= 2 && inner <= 4 && out[1] > 1) {
    const int64_t b = out[0], l = out[1];
    if (inner == 2) return batched_transpose_to_narrow<2>(dst, src + base, b, st[0], l, s_in);
    if (inner == 3) return batched_transpose_to_narrow<3>(dst, src + base, b, st[0], l, s_in);
    return batched_transpose_to_narrow<4>(dst, src + base, b, st[0], l, s_in);
  }
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1));
  parallel_for(rows, grain, [&](int64_t b, int64_t e) {
    SmallDims<> idx(static_cast<size_t>(r));
    int64_t rem = b, off = base;
    for (int d = r - 2; d >= 0; --d) {
      idx[d] = rem % out[d];
      rem /= out[d];
      off += idx[d] * st[d];
    }
    for (int64_t row = b; row < e; ++row) {
      T* o = dst + row * inner;
      const T* s = src + off;
      if (s_in == 1) copy_elems(o, s, inner);
      else if (s_in == 0) std::fill_n(o, inner, s[0]);
      else for (int64_t j = 0; j < inner; ++j) o[j] = s[j * s_in];
      for (int d = r - 2; d >= 0; --d) {  // odometer step
        off += st[d];
        if (++idx[d] < out[d]) break;
        off -= st[d] * out[d];
        idx[d] = 0;
      }
    }
  });
}

template <typename T>
void mapped_copy_t(T* dst, const Shape& out, const T* src, const std::vector<int64_t>& in_st,
                   const std::vector<std::vector<int64_t>>& maps, const T& fill) {
  const int r = static_cast<int>(out.size());
  const int64_t n = shape_numel(out);
  if (n == 0) return;
  if (r == 0) { dst[0] = src[0]; return; }
  const int64_t inner = out[r - 1];
  const int64_t rows = n / inner;
  const std::vector<int64_t>& last = maps[r - 1];
  parallel_for(rows, std::max<int64_t>(1, 4096 / inner), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t rem = row, off = 0;
      bool outside = false;
      for (int d = r - 2; d >= 0; --d) {
        const int64_t m = maps[d][rem % out[d]];
        rem /= out[d];
        if (m < 0) outside = true;
        else off += m * in_st[d];
      }
      T* o = dst + row * inner;
      if (outside) { std::fill_n(o, inner, fill); continue; }
      const T* s = src + off;
      for (int64_t j = 0; j < inner; ++j) o[j] = last[j] < 0 ? fill : s[last[j] * in_st[r - 1]];
    }
  });
}

// Removes size-1 dims and merges dims that are contiguous in source and destination.
void simplify(Shape& out, std::vector<int64_t>& st) {
  Shape o;
  std::vector<int64_t> s;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    if (!o.empty() && s.back() == st[d] * out[d]) {
      o.back() *= out[d];
      s.back() = st[d];
    } else {
      o.push_back(out[d]);
      s.push_back(st[d]);
    }
  }
  out = std::move(o);
  st = std::move(s);
}

}  // namespace

void strided_copy(DataType dt, void* dst, const Shape& out_shape, const void* src, int64_t base,
                  std::vector<int64_t> strides) {
  Shape out = out_shape;
  if (shape_numel(out) == 0) return;
  simplify(out, strides);
  visit_elem(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    strided_copy_t(static_cast<T*>(dst), out, static_cast<const T*>(src), base, strides);
  });
}

void mapped_copy(DataType dt, void* dst, const Shape& out, const void* src, const std::vector<int64_t>& in_strides,
                 const std::vector<std::vector<int64_t>>& maps, const void* fill) {
  visit_elem(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    mapped_copy_t(static_cast<T*>(dst), out, static_cast<const T*>(src), in_strides, maps,
                  *static_cast<const T*>(fill));
  });
}

void fill_elems(DataType dt, void* dst, int64_t n, const void* value) {
  visit_elem(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::fill_n(static_cast<T*>(dst), n, *static_cast<const T*>(value));
  });
}

void add_shape_kernel(KernelRegistry& r, const char* op, int since, int required, KernelFactory f, int until,
                      uint32_t host_inputs) {
  KernelDef d;
  d.op = op;
  d.since = since;
  d.until = until;
  d.host_inputs = host_inputs;
  d.name = std::string("cpu.") + op + ".any";
  // Shape and Size read only their input's shape: it stays where it lives (no copy from a GPU).
  if (d.op == "Shape" || d.op == "Size") d.shape_inputs = 0b1;
  // The views' shape/axes operand is read on the host: when the plan cannot know it (a graph input),
  // the step is planned again on every run with the value in hand (make_view's reshape()).
  if (d.op == "Reshape" || d.op == "Squeeze" || d.op == "Unsqueeze") d.host_inputs |= 0b10;
  d.create = [f = std::move(f), required](const ir::Node& n, KernelInit& init) -> Expected<KernelPtr> {
    KILN_ASSIGN_OR_RETURN(KernelPtr k, f(n, init));
    if (required == 0) return k;
    std::shared_ptr<const Kernel> inner(std::move(k));
    auto run = [inner, required](KernelContext& ctx) -> Status {
      for (int i = 0; i < required; ++i)
        if (!ctx.has_input(i)) return ctx.error("missing required input " + std::to_string(i));
      return inner->run(ctx);
    };
    if (!inner->has_reshape()) return make_kernel(run);
    return make_staged([inner, required](ReshapeContext& rc) -> Status {
      for (int i = 0; i < required; ++i)
        if (static_cast<size_t>(i) >= rc.in.size() || !rc.in[i].present)
          return rc.error("missing required input " + std::to_string(i));
      return inner->reshape(rc);
    }, run);
  };
  r.add(std::move(d));
}

void copy_tensor(const Tensor& src, Tensor& dst) {
  visit_elem(src.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    copy_elems(dst.data<T>(), src.data<T>(), src.numel());
  });
}

}  // namespace shape_detail

namespace {

using namespace shape_detail;

// Ints from an attribute when the node has it (older opsets), else from host input `input` (if given):
// its value, which the plan knows or the step is planned again with it (KernelDef::host_inputs).
Status ints_from(const ReshapeContext& rc, bool has_attr, const std::vector<int64_t>& attr, int input,
                 std::vector<int64_t>* out, bool* present, const char* what) {
  *present = false;
  if (has_attr) { *out = attr; *present = true; return Status::Ok(); }
  if (input < 0 || static_cast<size_t>(input) >= rc.in.size() || !rc.in[input].present) { out->clear(); return Status::Ok(); }
  if (!rc.in[input].value) return unsupported(std::string(what) + " is known only when running");
  if (!read_ints(*rc.in[input].value, out)) return rc.error(std::string(what) + " must be int32 or int64");
  *present = true;
  return Status::Ok();
}

// A strided copy planned at reshape: dst (contiguous, shape `shape`)[idx] = src[base + sum idx_d *
// strides_d], dims and strides simplified once (see strided_copy), so a run only moves elements.
struct CopyPlan {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t base = 0;
  bool empty = true;
};

CopyPlan plan_copy(Shape out, std::vector<int64_t> strides, int64_t base) {
  CopyPlan p;
  p.empty = shape_numel(out) == 0;
  if (!p.empty) simplify(out, strides);
  p.shape = std::move(out);
  p.strides = std::move(strides);
  p.base = base;
  return p;
}

void run_copy(DataType dt, void* dst, const void* src, const CopyPlan& p) {
  if (p.empty) return;
  visit_elem(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    strided_copy_t(static_cast<T*>(dst), p.shape, static_cast<const T*>(src), p.base, p.strides);
  });
}

// The run of a kernel whose reshape() planned one strided copy of X into Y.
Status run_planned_copy(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  run_copy(x.dtype(), y.raw(), x.raw(), shape_state<CopyPlan>(ctx));
  return Status::Ok();
}

// The run of a view (Reshape, Squeeze, Unsqueeze, Flatten): X's elements into the output its
// reshape() shaped. The planner may have given Y X's own memory (share_input 0, granted when this step
// is X's last reader): then there is nothing to copy.
Status copy_into_view(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  if (y.raw() != x.raw()) copy_tensor(x, y);
  return Status::Ok();
}

// ---------------------------------------------------------------- Reshape / Squeeze / Unsqueeze / Flatten

// A view op's output shape from X's shape and its ints (an attribute, or input 1 when `present`);
// returns why not, or "".
using ViewShapeFn = std::function<std::string(const Shape& x, const std::vector<int64_t>& ints, bool present, Shape* out)>;

// A kernel that outputs X's elements under the shape `shape_of` gives: planned ahead when its ints
// are known before running (an attribute, a constant or a shape value), and then asking the planner
// for X's memory (a zero-copy view where X dies here).
Expected<KernelPtr> make_view(ViewShapeFn shape_of, bool has_attr, std::vector<int64_t> attr, const char* what) {
  auto reshape = [shape_of, has_attr, attr, what](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("missing required input 0");
    std::vector<int64_t> ints = attr;
    bool present = has_attr;
    if (!has_attr && rc.in.size() > 1 && rc.in[1].present) {
      if (!rc.in[1].value) return unsupported(std::string(what) + " is known only when running");
      if (!read_ints(*rc.in[1].value, &ints)) return rc.error(std::string(what) + " must be int32 or int64");
      present = true;
    }
    Shape out;
    if (std::string err = shape_of(rc.in[0].shape, ints, present, &out); !err.empty()) return rc.error(err);
    if (shape_numel(out) != shape_numel(rc.in[0].shape))
      return rc.error("cannot view " + shape_to_string(rc.in[0].shape) + " as " + shape_to_string(out));
    rc.out[0] = {rc.in[0].dtype, out};
    rc.share_input = 0;
    return Status::Ok();
  };
  // reshape() runs before every run with the operand's value in hand (planned ahead when it is
  // known then, else per run: a host input), so the run only moves the data.
  return make_staged(reshape, copy_into_view);
}

Expected<KernelPtr> create_reshape(const ir::Node& n, KernelInit&) {
  const ops::ReshapeParams p = ops::parse_reshape(n);
  return make_view(
      [allowzero = p.allowzero](const Shape& x, const std::vector<int64_t>& spec, bool present, Shape* out) {
        if (!present) return std::string("missing shape input");
        return ops::reshape_dims(x, spec, allowzero, out);
      },
      p.has_shape_attr, p.shape, "shape");
}

Expected<KernelPtr> create_squeeze(const ir::Node& n, KernelInit&) {
  const ops::SqueezeParams p = ops::parse_squeeze(n);
  return make_view(
      [](const Shape& x, const std::vector<int64_t>& axes, bool present, Shape* out) {
        const int rank = static_cast<int>(x.size());
        std::vector<bool> drop(rank, false);
        if (!present)
          for (int d = 0; d < rank; ++d) drop[d] = x[d] == 1;
        for (int64_t a : axes) {
          if (!ops::normalize_axis(a, rank)) return "axis " + std::to_string(a) + " out of range";
          if (x[a] != 1) return "cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(x[a]);
          drop[a] = true;
        }
        out->clear();
        for (int d = 0; d < rank; ++d)
          if (!drop[d]) out->push_back(x[d]);
        return std::string();
      },
      p.has_axes_attr, p.axes, "axes");
}

Expected<KernelPtr> create_unsqueeze(const ir::Node& n, KernelInit&) {
  const ops::SqueezeParams p = ops::parse_squeeze(n);
  return make_view(
      [](const Shape& x, const std::vector<int64_t>& axes, bool present, Shape* out) {
        if (!present) return std::string("missing axes");
        const int64_t r = static_cast<int64_t>(x.size() + axes.size());
        std::vector<bool> inserted(r, false);
        for (int64_t a : axes) {
          if (!ops::normalize_axis(a, r)) return "axis " + std::to_string(a) + " out of range";
          if (inserted[a]) return "axis " + std::to_string(a) + " repeated";
          inserted[a] = true;
        }
        out->clear();
        size_t k = 0;
        for (int64_t d = 0; d < r; ++d) out->push_back(inserted[d] ? 1 : x[k++]);
        return std::string();
      },
      p.has_axes_attr, p.axes, "axes");
}

Expected<KernelPtr> create_flatten(const ir::Node& n, KernelInit&) {
  const ops::FlattenParams p = ops::parse_flatten(n);
  return make_staged(
      [p](ReshapeContext& rc) -> Status {
        const Shape& x = rc.in[0].shape;
        const int rank = static_cast<int>(x.size());
        int64_t axis = p.axis;
        if (axis < 0) axis += rank;
        if (axis < 0 || axis > rank) return rc.error("axis out of range");
        rc.out[0] = {rc.in[0].dtype, Shape{prod(x, 0, axis), prod(x, axis, rank)}};
        rc.share_input = 0;  // a view of X where X dies here (see copy_into_view)
        return Status::Ok();
      },
      copy_into_view);
}

// ---------------------------------------------------------------- Transpose

// Planned per shape signature: the output shape, and the copy's dims and source strides simplified
// once, so a run only copies (no allocation: the channels-last pass puts Transposes in CPU chains).
Expected<KernelPtr> create_transpose(const ir::Node& n, KernelInit&) {
  const ops::TransposeParams p = ops::parse_transpose(n);
  auto reshape = [p](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("X is required");
    const Shape& xs = rc.in[0].shape;
    const int r = static_cast<int>(xs.size());
    std::vector<int64_t> perm = p.perm;
    if (perm.empty()) {
      perm.resize(r);
      for (int d = 0; d < r; ++d) perm[d] = r - 1 - d;
    }
    if (static_cast<int>(perm.size()) != r) return rc.error("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(r));
    std::vector<bool> seen(r, false);
    for (int64_t& p : perm) {
      if (!ops::normalize_axis(p, r) || seen[p]) return rc.error("perm is not a permutation");
      seen[p] = true;
    }
    const std::vector<int64_t> in_st = strides_of(xs);
    Shape out(r);
    std::vector<int64_t> st(r);
    for (int d = 0; d < r; ++d) {
      out[d] = xs[perm[d]];
      st[d] = in_st[perm[d]];
    }
    rc.state = std::make_shared<CopyPlan>(plan_copy(out, std::move(st), 0));  // identity perms collapse to one copy
    rc.out[0] = {rc.in[0].dtype, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, run_planned_copy);
}

// ---------------------------------------------------------------- Concat / Split

// Concat per shape: the output is `outer` rows, each the inputs' chunks one after another.
struct ConcatPlan {
  int64_t outer = 0, row = 0;
  std::vector<int64_t> chunk;  // per input (0 for an absent one): its elements in one row
};

Expected<KernelPtr> create_concat(const ir::Node& n, KernelInit&) {
  const ops::ConcatParams p = ops::parse_concat(n);
  auto reshape = [p](ReshapeContext& rc) -> Status {
    const ReshapeContext::In* first = nullptr;
    for (const auto& in : rc.in)
      if (in.present && !first) first = &in;
    if (!first) return rc.error("no inputs");
    const int r = static_cast<int>(first->shape.size());
    int64_t axis = p.axis;
    if (!ops::normalize_axis(axis, r))
      return rc.error("axis " + std::to_string(p.axis) + " out of range for rank " + std::to_string(r));
    Shape out = first->shape;
    out[axis] = 0;
    for (const auto& in : rc.in) {
      if (!in.present) continue;
      if (static_cast<int>(in.shape.size()) != r || in.dtype != first->dtype) return rc.error("inputs differ in rank or dtype");
      for (int d = 0; d < r; ++d)
        if (d != axis && in.shape[d] != out[d])
          return rc.error("input shapes " + shape_to_string(first->shape) + " and " + shape_to_string(in.shape) +
                          " differ outside the concat axis");
      out[axis] += in.shape[axis];
    }
    auto plan = std::make_shared<ConcatPlan>();
    plan->outer = prod(out, 0, axis);
    const int64_t inner = prod(out, axis + 1, r);
    plan->row = out[axis] * inner;
    for (const auto& in : rc.in) plan->chunk.push_back(in.present ? in.shape[axis] * inner : 0);
    rc.state = std::move(plan);
    rc.out[0] = {first->dtype, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const ConcatPlan& p = shape_state<ConcatPlan>(ctx);
    Tensor& y = ctx.output(0);
    const int n = ctx.num_inputs();
    visit_elem(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = y.data<T>();
      parallel_for(p.outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(p.row, 1)), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          int64_t at = o * p.row;
          for (int i = 0; i < n; ++i) {
            if (!ctx.has_input(i)) continue;
            const int64_t chunk = p.chunk[i];
            copy_elems(dst + at, ctx.input(i).data<T>() + o * chunk, chunk);
            at += chunk;
          }
        }
      });
    });
    return Status::Ok();
  });
}

Expected<KernelPtr> create_split(const ir::Node& n, KernelInit&) {
  const ops::SplitParams p = ops::parse_split(n);
  auto reshape = [p](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    const int r = static_cast<int>(x.size());
    const int outputs = static_cast<int>(rc.out.size());
    int64_t axis = p.axis;
    if (!ops::normalize_axis(axis, r)) return rc.error("axis out of range");
    const int64_t dim = x[axis];
    std::vector<int64_t> sizes;
    bool present;
    KILN_RETURN_IF_ERROR(ints_from(rc, p.has_split_attr, p.split, 1, &sizes, &present, "split"));
    if (!present || sizes.empty()) {
      std::string err = ops::equal_split_sizes(dim, p, outputs, &sizes);
      if (!err.empty()) return rc.error(err);
    }
    if (static_cast<int>(sizes.size()) != outputs)
      return rc.error(std::to_string(sizes.size()) + " split sizes for " + std::to_string(outputs) + " outputs");
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) return rc.error("negative split size");
      total += s;
    }
    if (total != dim) return rc.error("split sizes sum to " + std::to_string(total) + ", axis has " + std::to_string(dim));
    const int64_t inner = prod(x, axis + 1, r);
    auto plans = std::make_shared<std::vector<CopyPlan>>();
    int64_t at = 0;
    for (int i = 0; i < outputs; ++i) {
      Shape out = x;
      out[axis] = sizes[i];
      plans->push_back(plan_copy(out, strides_of(x), at * inner));
      at += sizes[i];
      rc.out[i] = {rc.in[0].dtype, std::move(out)};
    }
    rc.state = std::move(plans);
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const std::vector<CopyPlan>& plans = shape_state<std::vector<CopyPlan>>(ctx);
    const Tensor& x = ctx.input(0);
    for (int i = 0; i < ctx.num_outputs(); ++i)
      if (ctx.has_output(i)) run_copy(x.dtype(), ctx.output(i).raw(), x.raw(), plans[i]);
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- Slice

Expected<KernelPtr> create_slice(const ir::Node& n, KernelInit&) {
  const ops::SliceParams p = ops::parse_slice(n);
  auto reshape = [p](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    const int r = static_cast<int>(x.size());
    const bool attrs = p.has_starts_attr;
    auto has = [&rc](size_t i) { return i < rc.in.size() && rc.in[i].present; };
    std::vector<int64_t> starts, ends, axes, steps;
    bool present;
    if (!attrs && (!has(1) || !has(2))) return rc.error("missing starts or ends");
    KILN_RETURN_IF_ERROR(ints_from(rc, attrs, p.starts, 1, &starts, &present, "starts"));
    KILN_RETURN_IF_ERROR(ints_from(rc, attrs, p.ends, 2, &ends, &present, "ends"));
    KILN_RETURN_IF_ERROR(ints_from(rc, attrs && p.has_axes_attr, p.axes, attrs ? -1 : 3, &axes, &present, "axes"));
    if (!present) {
      axes.resize(starts.size());
      std::iota(axes.begin(), axes.end(), 0);
    }
    if (!attrs) KILN_RETURN_IF_ERROR(ints_from(rc, false, {}, 4, &steps, &present, "steps"));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
      return rc.error("starts, ends, axes and steps differ in length");
    const std::vector<int64_t> in_st = strides_of(x);
    Shape out = x;
    std::vector<int64_t> st = in_st;
    int64_t base = 0;
    std::vector<bool> seen(r, false);
    for (size_t i = 0; i < starts.size(); ++i) {
      int64_t a = axes[i];
      if (!ops::normalize_axis(a, r) || seen[a]) return rc.error("bad or repeated axis " + std::to_string(axes[i]));
      seen[a] = true;
      if (steps[i] == 0) return rc.error("step 0");
      const ops::SliceDim s = ops::slice_dim(x[a], starts[i], ends[i], steps[i]);
      out[a] = s.count;
      st[a] = in_st[a] * s.step;
      if (s.count > 0) base += s.start * in_st[a];
    }
    rc.state = std::make_shared<CopyPlan>(plan_copy(out, std::move(st), base));
    rc.out[0] = {rc.in[0].dtype, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, run_planned_copy);
}

// ---------------------------------------------------------------- Expand / Tile

Expected<KernelPtr> create_expand(const ir::Node&, KernelInit&) {
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (!rc.in[1].value) return unsupported("shape is known only when running");
    const Shape& x = rc.in[0].shape;
    std::vector<int64_t> spec;
    if (!read_ints(*rc.in[1].value, &spec)) return rc.error("shape must be int64");
    Shape out;
    if (!ops::broadcast_shapes(x, spec, &out))
      return rc.error("cannot broadcast " + shape_to_string(x) + " to " + shape_to_string(spec));
    const std::vector<int64_t> in_st = strides_of(x);
    const int r = static_cast<int>(out.size()), lead = r - static_cast<int>(x.size());
    std::vector<int64_t> st(r, 0);
    for (int d = lead; d < r; ++d) st[d] = x[d - lead] == 1 ? 0 : in_st[d - lead];
    rc.state = std::make_shared<CopyPlan>(plan_copy(out, std::move(st), 0));
    rc.out[0] = {rc.in[0].dtype, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, run_planned_copy);
}

Expected<KernelPtr> create_tile(const ir::Node&, KernelInit&) {
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (!rc.in[1].value) return unsupported("repeats is known only when running");
    const Shape& x = rc.in[0].shape;
    std::vector<int64_t> reps;
    if (!read_ints(*rc.in[1].value, &reps)) return rc.error("repeats must be int64");
    if (reps.size() != x.size()) return rc.error("repeats must have one entry per input dim");
    const std::vector<int64_t> in_st = strides_of(x);
    Shape out, view;
    std::vector<int64_t> st;
    for (size_t d = 0; d < x.size(); ++d) {
      if (reps[d] < 0) return rc.error("negative repeat");
      out.push_back(reps[d] * x[d]);
      view.push_back(reps[d]);  // output index = rep * dim + i: (rep, i) is row-major
      view.push_back(x[d]);
      st.push_back(0);
      st.push_back(in_st[d]);
    }
    rc.state = std::make_shared<CopyPlan>(plan_copy(std::move(view), std::move(st), 0));
    rc.out[0] = {rc.in[0].dtype, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, run_planned_copy);
}

// ---------------------------------------------------------------- Pad / CenterCropPad

using ops::PadMode;

int64_t pad_source(int64_t i, int64_t n, PadMode mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return i < 0 ? 0 : n - 1;
    case PadMode::kWrap: return ((i % n) + n) % n;
    case PadMode::kReflect: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      int64_t m = ((i % period) + period) % period;
      return m < n ? m : period - m;
    }
  }
  return -1;
}

// A zeroed element of any dtype (empty string for strings) for fills.
struct ZeroElem {
  Block16 bytes{0, 0};
  std::string str;
  const void* of(DataType dt) const { return dt == DataType::kString ? static_cast<const void*>(&str) : &bytes; }
};

// Converts Pad's old float 'value' attribute to one element of dtype dt.
bool float_to_elem(DataType dt, double v, Block16* out) {
  *out = {0, 0};
  if (dt == DataType::kFloat16) { uint16_t h = f32_to_f16(static_cast<float>(v)); std::memcpy(out, &h, 2); return true; }
  if (dt == DataType::kBFloat16) { uint16_t h = f32_to_bf16(static_cast<float>(v)); std::memcpy(out, &h, 2); return true; }
  return visit_numeric(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T t = static_cast<T>(v);
    std::memcpy(out, &t, sizeof(T));
  });
}

// Pad and CenterCropPad per shape: for each output dim, the input index each position reads (-1:
// the fill), X's strides, and the fill when it is not an input (zero, or Pad's old 'value').
struct MappedPlan {
  Shape out;
  std::vector<int64_t> in_strides;
  std::vector<std::vector<int64_t>> maps;
  ZeroElem zero;
  Block16 value{0, 0};
  bool has_value = false;  // the fill is `value`; else input 2 when given (Pad), else zero
  const void* fill(DataType dt) const { return has_value ? static_cast<const void*>(&value) : zero.of(dt); }
};

Expected<KernelPtr> create_pad(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::PadParams p, ops::parse_pad(n));
  auto reshape = [p](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    const DataType dt = rc.in[0].dtype;
    const int r = static_cast<int>(x.size());
    const bool attrs = p.has_pads_attr;
    std::vector<int64_t> pads, axes;
    bool present;
    KILN_RETURN_IF_ERROR(ints_from(rc, attrs, p.pads, 1, &pads, &present, "pads"));
    if (!attrs) KILN_RETURN_IF_ERROR(ints_from(rc, false, {}, 3, &axes, &present, "axes"));
    if (axes.empty()) {
      axes.resize(r);
      std::iota(axes.begin(), axes.end(), 0);
    }
    const size_t na = axes.size();
    if (pads.size() != 2 * na) return rc.error("pads must have 2 entries per padded axis");
    std::vector<int64_t> before(r, 0), after(r, 0);
    for (size_t i = 0; i < na; ++i) {
      int64_t a = axes[i];
      if (!ops::normalize_axis(a, r)) return rc.error("axis out of range");
      before[a] = pads[i];
      after[a] = pads[i + na];
    }
    auto plan = std::make_shared<MappedPlan>();
    // The fill value.
    if (attrs && dt != DataType::kString) {
      if (!float_to_elem(dt, p.value, &plan->value))
        return rc.error("value attribute does not fit dtype " + std::string(dtype_name(dt)));
      plan->has_value = true;
    } else if (!attrs && rc.in.size() > 2 && rc.in[2].present && shape_numel(rc.in[2].shape) > 0 && rc.in[2].dtype != dt) {
      return rc.error("constant_value dtype differs from data");
    }
    Shape out(r);
    for (int d = 0; d < r; ++d) {
      const int64_t dim = x[d];
      if (__builtin_add_overflow(dim, before[d], &out[d]) || __builtin_add_overflow(out[d], after[d], &out[d]))
        return rc.error("pads of axis " + std::to_string(d) + " overflow its size");
      if (out[d] < 0 || before[d] < -dim || after[d] < -dim)
        return rc.error("pads remove more than axis " + std::to_string(d) + " has");
      if (p.mode != PadMode::kConstant && dim == 0 && out[d] > 0)
        return rc.error("cannot " + p.mode_name + "-pad an empty axis");
    }
    // The maps are sized by the pads: checked against the limits first (an empty output, however
    // long its other axes, needs none).
    if (std::string why = check_tensor_size(dt, out); !why.empty()) return rc.error(why);
    if (shape_numel(out) > 0) {
      plan->maps.resize(r);
      for (int d = 0; d < r; ++d) {
        plan->maps[d].resize(out[d]);
        for (int64_t o = 0; o < out[d]; ++o) plan->maps[d][o] = pad_source(o - before[d], x[d], p.mode);
      }
    }
    plan->in_strides = strides_of(x);
    plan->out = out;
    rc.state = std::move(plan);
    rc.out[0] = {dt, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const MappedPlan& p = shape_state<MappedPlan>(ctx);
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return Status::Ok();
    const void* fill = p.fill(x.dtype());
    if (!p.has_value && ctx.num_inputs() > 2 && ctx.has_input(2) && ctx.input(2).numel() > 0) fill = ctx.input(2).raw();
    mapped_copy(x.dtype(), y.raw(), p.out, x.raw(), p.in_strides, p.maps, fill);
    return Status::Ok();
  });
}

Expected<KernelPtr> create_center_crop_pad(const ir::Node& n, KernelInit&) {
  const ops::CenterCropPadParams p = ops::parse_center_crop_pad(n);
  auto reshape = [p](ReshapeContext& rc) -> Status {
    if (!rc.in[1].value) return unsupported("shape is known only when running");
    const Shape& x = rc.in[0].shape;
    const int r = static_cast<int>(x.size());
    std::vector<int64_t> target;
    if (!read_ints(*rc.in[1].value, &target)) return rc.error("shape must be int64");
    std::vector<int64_t> axes = p.axes;
    if (axes.empty()) {
      axes.resize(r);
      std::iota(axes.begin(), axes.end(), 0);
    }
    if (target.size() != axes.size()) return rc.error("shape must have one entry per axis");
    Shape out = x;
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t& a = axes[i];
      if (!ops::normalize_axis(a, r)) return rc.error("axis out of range");
      if (target[i] < 0) return rc.error("negative target size");
      out[a] = target[i];
    }
    // The output's size is checked first, then the maps it sizes; an empty one needs none.
    if (std::string why = check_tensor_size(rc.in[0].dtype, out); !why.empty()) return rc.error(why);
    auto plan = std::make_shared<MappedPlan>();
    if (shape_numel(out) > 0) {
      std::vector<std::vector<int64_t>>& maps = plan->maps;
      maps.resize(r);
      for (int d = 0; d < r; ++d) {
        maps[d].resize(x[d]);
        std::iota(maps[d].begin(), maps[d].end(), 0);
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        const int64_t a = axes[i], dim = x[a], t = target[i];
        maps[a].resize(t);
        // Cropping keeps the centre (extra element dropped at the end); padding adds the extra at the end.
        const int64_t shift = t <= dim ? (dim - t) / 2 : -((t - dim) / 2);
        for (int64_t o = 0; o < t; ++o) {
          const int64_t s = o + shift;
          maps[a][o] = s >= 0 && s < dim ? s : -1;
        }
      }
    }
    plan->in_strides = strides_of(x);
    plan->out = out;
    rc.state = std::move(plan);
    rc.out[0] = {rc.in[0].dtype, std::move(out)};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const MappedPlan& p = shape_state<MappedPlan>(ctx);
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.numel() == 0) return Status::Ok();
    mapped_copy(x.dtype(), y.raw(), p.out, x.raw(), p.in_strides, p.maps, p.fill(x.dtype()));
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- DepthToSpace / SpaceToDepth

Expected<KernelPtr> create_depth_to_space(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::DepthToSpaceParams p, ops::parse_depth_to_space(n));
  const int64_t b = p.blocksize;
  const bool crd = p.crd;
  auto reshape = [b, crd](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() != 4) return rc.error("input must be 4-D");
    const int64_t N = x[0], C = x[1], H = x[2], W = x[3];
    if (C % (b * b) != 0) return rc.error("channels not divisible by blocksize^2");
    const int64_t c = C / (b * b);
    // Input viewed as 6-D, then read in the order of the output's 6-D view [N, c, H, b, W, b].
    const Shape in6 = crd ? Shape{N, c, b, b, H, W} : Shape{N, b, b, c, H, W};
    const std::vector<int64_t> s = strides_of(in6);
    std::vector<int64_t> st = crd ? std::vector<int64_t>{s[0], s[1], s[4], s[2], s[5], s[3]}
                                  : std::vector<int64_t>{s[0], s[3], s[4], s[1], s[5], s[2]};
    rc.state = std::make_shared<CopyPlan>(plan_copy({N, c, H, b, W, b}, std::move(st), 0));
    rc.out[0] = {rc.in[0].dtype, Shape{N, c, H * b, W * b}};
    return Status::Ok();
  };
  return make_staged(reshape, run_planned_copy);
}

Expected<KernelPtr> create_space_to_depth(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::DepthToSpaceParams p, ops::parse_depth_to_space(n));
  const int64_t b = p.blocksize;
  auto reshape = [b](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() != 4) return rc.error("input must be 4-D");
    const int64_t N = x[0], C = x[1], H = x[2], W = x[3];
    if (H % b != 0 || W % b != 0) return rc.error("spatial dims not divisible by blocksize");
    // [N, C, H/b, b, W/b, b] read as [N, b, b, C, H/b, W/b].
    const std::vector<int64_t> s = strides_of({N, C, H / b, b, W / b, b});
    rc.state = std::make_shared<CopyPlan>(plan_copy({N, b, b, C, H / b, W / b}, {s[0], s[3], s[5], s[1], s[2], s[4]}, 0));
    rc.out[0] = {rc.in[0].dtype, Shape{N, C * b * b, H / b, W / b}};
    return Status::Ok();
  };
  return make_staged(reshape, run_planned_copy);
}

}  // namespace

void register_shape(KernelRegistry& r) {
  add_shape_kernel(r, "Reshape", 1, 1, create_reshape);
  add_shape_kernel(r, "Squeeze", 1, 1, create_squeeze);
  add_shape_kernel(r, "Unsqueeze", 1, 1, create_unsqueeze);
  add_shape_kernel(r, "Flatten", 1, 1, create_flatten);
  add_shape_kernel(r, "Transpose", 1, 1, create_transpose);
  add_shape_kernel(r, "Concat", 1, 1, create_concat);
  add_shape_kernel(r, "Split", 1, 1, create_split, 1 << 30, 0b10);
  add_shape_kernel(r, "Slice", 1, 1, create_slice, 1 << 30, 0b11110);
  add_shape_kernel(r, "Expand", 8, 2, create_expand, 1 << 30, 0b10);
  add_shape_kernel(r, "Tile", 6, 2, create_tile, 1 << 30, 0b10);
  add_shape_kernel(r, "Pad", 2, 1, create_pad, 1 << 30, 0b1010);
  add_shape_kernel(r, "CenterCropPad", 18, 2, create_center_crop_pad, 1 << 30, 0b10);
  add_shape_kernel(r, "DepthToSpace", 1, 1, create_depth_to_space);
  add_shape_kernel(r, "SpaceToDepth", 1, 1, create_space_to_depth);
  shape_detail::register_shape_index(r);
  shape_detail::register_shape_misc(r);
}

}  // namespace kiln::cpu
