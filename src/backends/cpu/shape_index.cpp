// backends/cpu/shape_index.cpp — index-driven CPU kernels: Gather, GatherElements, GatherND,
// ScatterElements, Scatter, ScatterND, OneHot, NonZero, Compress, ReverseSequence, Col2Im.
// Indices are validated (negative ones wrap) before any element moves; out-of-range indices are
// errors, never out-of-bounds reads.
#include "backends/cpu/shape_util.h"
#include "ops/op_table.h"
#include "ops/params_shape.h"

namespace kiln::cpu::shape_detail {
namespace {

// Reads indices (int32/int64), wrapping negatives against `dim`; false on a value outside [-dim, dim).
bool load_indices(const Tensor& t, int64_t dim, std::vector<int64_t>* out, std::string* why) {
  if (t.dtype() != DataType::kInt64 && t.dtype() != DataType::kInt32) {
    *why = "indices must be int32 or int64";
    return false;
  }
  out->resize(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t v = index_at(t, i);
    if (v < -dim || v >= dim) {
      *why = "index " + std::to_string(v) + " out of range for axis of size " + std::to_string(dim);
      return false;
    }
    (*out)[i] = v < 0 ? v + dim : v;
  }
  return true;
}

// ---------------------------------------------------------------- reductions for scatters

using Reduction = ops::ScatterReduction;

template <typename T>
T combine(T a, T b, Reduction r) {
  switch (r) {
    case Reduction::kAdd: return static_cast<T>(a + b);
    case Reduction::kMul: return static_cast<T>(a * b);
    case Reduction::kMax: return a < b ? b : a;
    case Reduction::kMin: return b < a ? b : a;
    case Reduction::kNone: return b;
  }
  return b;
}

// One scatter write: `block` elements of the updates at `src` go to the output at `dst`.
struct Write { int64_t dst, src; };

// Applies the writes in order (later duplicates see earlier ones, as the spec's loop does).
Status apply_writes(KernelContext& ctx, DataType dt, Reduction red, void* out, const void* upd,
                    const std::vector<Write>& writes, int64_t block) {
  if (red == Reduction::kNone) {
    visit_elem(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (const Write& w : writes) copy_elems(static_cast<T*>(out) + w.dst, static_cast<const T*>(upd) + w.src, block);
    });
    return Status::Ok();
  }
  auto via_float = [&](float (*load)(uint16_t), uint16_t (*store)(float)) {
    auto* o = static_cast<uint16_t*>(out);
    const auto* u = static_cast<const uint16_t*>(upd);
    for (const Write& w : writes)
      for (int64_t j = 0; j < block; ++j) o[w.dst + j] = store(combine(load(o[w.dst + j]), load(u[w.src + j]), red));
  };
  if (dt == DataType::kFloat16) { via_float(f16_to_f32, f32_to_f16); return Status::Ok(); }
  if (dt == DataType::kBFloat16) { via_float(bf16_to_f32, f32_to_bf16); return Status::Ok(); }
  const bool ok = visit_numeric(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* o = static_cast<T*>(out);
    const auto* u = static_cast<const T*>(upd);
    for (const Write& w : writes)
      for (int64_t j = 0; j < block; ++j) o[w.dst + j] = combine(o[w.dst + j], u[w.src + j], red);
  });
  if (!ok) return ctx.error(std::string("reduction not supported for dtype ") + dtype_name(dt));
  return Status::Ok();
}

// ---------------------------------------------------------------- Gather

Expected<KernelPtr> create_gather(const ir::Node& n, KernelInit&) {
  const int64_t axis_attr = ops::parse_gather(n).axis;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    int64_t axis = axis_attr;
    if (!ops::normalize_axis(axis, x.rank())) return ctx.error("axis out of range");
    const int64_t dim = x.dim(static_cast<int>(axis));
    std::vector<int64_t> idx;
    std::string why;
    if (!load_indices(ind, dim, &idx, &why)) return ctx.error(why);
    Shape out(x.shape().begin(), x.shape().begin() + axis);
    out.insert(out.end(), ind.shape().begin(), ind.shape().end());
    out.insert(out.end(), x.shape().begin() + axis + 1, x.shape().end());
    Tensor& y = ctx.output(0, x.dtype(), out);
    const int64_t outer = prod(x.shape(), 0, axis), inner = prod(x.shape(), axis + 1, x.rank());
    const int64_t nidx = static_cast<int64_t>(idx.size());
    visit_elem(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      parallel_for(outer * nidx, std::max<int64_t>(1, 8192 / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          const int64_t o = p / nidx, k = p % nidx;
          copy_elems(dst + p * inner, src + (o * dim + idx[k]) * inner, inner);
        }
      });
    });
    return Status::Ok();
  });
}

// For each element of `shape` (row-major), the offset in a tensor of `strides` of the same
// position with dimension `axis` replaced by idx[element].
std::vector<int64_t> element_offsets(const Shape& shape, const std::vector<int64_t>& strides, int axis,
                                     const std::vector<int64_t>& idx) {
  const int r = static_cast<int>(shape.size());
  std::vector<int64_t> offs(idx.size());
  std::vector<int64_t> pos(r, 0);
  for (size_t e = 0; e < idx.size(); ++e) {
    int64_t off = 0;
    for (int d = 0; d < r; ++d) off += (d == axis ? idx[e] : pos[d]) * strides[d];
    offs[e] = off;
    for (int d = r - 1; d >= 0; --d) {
      if (++pos[d] < shape[d]) break;
      pos[d] = 0;
    }
  }
  return offs;
}

// Checks that `ind` has the rank of `x` and fits inside it away from `axis`.
Status check_elementwise_indices(KernelContext& ctx, const Tensor& x, const Tensor& ind, int64_t axis) {
  if (ind.rank() != x.rank()) return ctx.error("indices must have the rank of data");
  for (int d = 0; d < x.rank(); ++d)
    if (d != axis && ind.dim(d) > x.dim(d))
      return ctx.error("indices shape " + shape_to_string(ind.shape()) + " exceeds data shape " + shape_to_string(x.shape()));
  return Status::Ok();
}

Expected<KernelPtr> create_gather_elements(const ir::Node& n, KernelInit&) {
  const int64_t axis_attr = ops::parse_gather(n).axis;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    int64_t axis = axis_attr;
    if (!ops::normalize_axis(axis, x.rank())) return ctx.error("axis out of range");
    KILN_RETURN_IF_ERROR(check_elementwise_indices(ctx, x, ind, axis));
    std::vector<int64_t> idx;
    std::string why;
    if (!load_indices(ind, x.dim(static_cast<int>(axis)), &idx, &why)) return ctx.error(why);
    const std::vector<int64_t> offs = element_offsets(ind.shape(), strides_of(x.shape()), static_cast<int>(axis), idx);
    Tensor& y = ctx.output(0, x.dtype(), ind.shape());
    visit_elem(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      for (size_t e = 0; e < offs.size(); ++e) dst[e] = src[offs[e]];
    });
    return Status::Ok();
  });
}

Expected<KernelPtr> create_scatter_elements(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::ScatterParams p, ops::parse_scatter(n));
  const int64_t axis_attr = p.axis;
  const Reduction red = p.reduction;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    int64_t axis = axis_attr;
    if (!ops::normalize_axis(axis, x.rank())) return ctx.error("axis out of range");
    KILN_RETURN_IF_ERROR(check_elementwise_indices(ctx, x, ind, axis));
    if (upd.shape() != ind.shape()) return ctx.error("updates must have the shape of indices");
    if (upd.dtype() != x.dtype()) return ctx.error("updates must have the dtype of data");
    std::vector<int64_t> idx;
    std::string why;
    if (!load_indices(ind, x.dim(static_cast<int>(axis)), &idx, &why)) return ctx.error(why);
    const std::vector<int64_t> offs = element_offsets(ind.shape(), strides_of(x.shape()), static_cast<int>(axis), idx);
    std::vector<Write> writes(offs.size());
    for (size_t e = 0; e < offs.size(); ++e) writes[e] = {offs[e], static_cast<int64_t>(e)};
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    copy_tensor(x, y);
    return apply_writes(ctx, x.dtype(), red, y.raw(), upd.raw(), writes, 1);
  });
}

// ---------------------------------------------------------------- GatherND / ScatterND

// Offsets (into data) of the slices that an [..., k] index tensor selects, with `batch_dims`
// leading dims shared between data and indices.
Status nd_offsets(KernelContext& ctx, const Tensor& x, const Tensor& ind, int64_t b, std::vector<int64_t>* offs,
                  int64_t* block) {
  if (ind.rank() < 1 || b < 0 || b >= ind.rank() || b >= x.rank()) return ctx.error("bad indices rank or batch_dims");
  if (ind.dtype() != DataType::kInt64 && ind.dtype() != DataType::kInt32) return ctx.error("indices must be int64");
  for (int d = 0; d < b; ++d)
    if (ind.dim(d) != x.dim(d)) return ctx.error("batch dims of data and indices differ");
  const int64_t k = ind.dim(-1);
  if (k < 1 || b + k > x.rank()) return ctx.error("indices' last dim " + std::to_string(k) + " too large for data rank");
  const std::vector<int64_t> st = strides_of(x.shape());
  *block = prod(x.shape(), b + k, x.rank());
  const int64_t batches = prod(x.shape(), 0, b);
  const int64_t batch_stride = prod(x.shape(), b, x.rank());
  const int64_t tuples = ind.numel() / k;
  const int64_t per_batch = batches ? tuples / batches : 0;
  offs->resize(tuples);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = (per_batch ? t / per_batch : 0) * batch_stride;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t dim = x.dim(static_cast<int>(b + j));
      int64_t v = index_at(ind, t * k + j);
      if (v < -dim || v >= dim) return ctx.error("index " + std::to_string(v) + " out of range for axis of size " + std::to_string(dim));
      if (v < 0) v += dim;
      off += v * st[b + j];
    }
    (*offs)[t] = off;
  }
  return Status::Ok();
}

Expected<KernelPtr> create_gather_nd(const ir::Node& n, KernelInit&) {
  const int64_t batch_dims = ops::parse_gather_nd(n).batch_dims;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    std::vector<int64_t> offs;
    int64_t block;
    KILN_RETURN_IF_ERROR(nd_offsets(ctx, x, ind, batch_dims, &offs, &block));
    Shape out(ind.shape().begin(), ind.shape().end() - 1);
    out.insert(out.end(), x.shape().begin() + batch_dims + ind.dim(-1), x.shape().end());
    Tensor& y = ctx.output(0, x.dtype(), out);
    visit_elem(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (size_t t = 0; t < offs.size(); ++t) copy_elems(y.data<T>() + t * block, x.data<T>() + offs[t], block);
    });
    return Status::Ok();
  });
}

Expected<KernelPtr> create_scatter_nd(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::ScatterParams p, ops::parse_scatter(n));
  const Reduction red = p.reduction;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    const Tensor& upd = ctx.input(2);
    std::vector<int64_t> offs;
    int64_t block;
    KILN_RETURN_IF_ERROR(nd_offsets(ctx, x, ind, 0, &offs, &block));
    Shape want(ind.shape().begin(), ind.shape().end() - 1);
    want.insert(want.end(), x.shape().begin() + ind.dim(-1), x.shape().end());
    if (upd.shape() != want) return ctx.error("updates shape " + shape_to_string(upd.shape()) + ", expected " + shape_to_string(want));
    if (upd.dtype() != x.dtype()) return ctx.error("updates must have the dtype of data");
    std::vector<Write> writes(offs.size());
    for (size_t t = 0; t < offs.size(); ++t) writes[t] = {offs[t], static_cast<int64_t>(t) * block};
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    copy_tensor(x, y);
    return apply_writes(ctx, x.dtype(), red, y.raw(), upd.raw(), writes, block);
  });
}

// ---------------------------------------------------------------- OneHot

// Reads any numeric tensor's elements as int64 (OneHot takes float indices and depth too).
bool numeric_as_int64(const Tensor& t, std::vector<int64_t>* out) {
  out->resize(static_cast<size_t>(t.numel()));
  auto conv = [&](auto load) { for (int64_t i = 0; i < t.numel(); ++i) (*out)[i] = static_cast<int64_t>(load(i)); };
  if (t.dtype() == DataType::kFloat16) { conv([&](int64_t i) { return f16_to_f32(t.data<uint16_t>()[i]); }); return true; }
  if (t.dtype() == DataType::kBFloat16) { conv([&](int64_t i) { return bf16_to_f32(t.data<uint16_t>()[i]); }); return true; }
  return visit_numeric(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv([&](int64_t i) { return t.data<T>()[i]; });
  });
}

Expected<KernelPtr> create_one_hot(const ir::Node& n, KernelInit&) {
  const int64_t axis_attr = ops::parse_one_hot(n).axis;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& ind = ctx.input(0);
    const Tensor& vals = ctx.input(2);
    std::vector<int64_t> idx, depth_v;
    if (!numeric_as_int64(ind, &idx) || !numeric_as_int64(ctx.input(1), &depth_v) || depth_v.size() != 1)
      return ctx.error("indices and depth must be numeric, depth one value");
    if (vals.numel() != 2) return ctx.error("values must have two elements [off, on]");
    const int64_t depth = depth_v[0];
    if (depth < 1) return ctx.error("depth must be positive");
    int64_t axis = axis_attr;
    if (!ops::normalize_axis(axis, ind.rank() + 1)) return ctx.error("axis out of range");
    Shape out = ind.shape();
    out.insert(out.begin() + axis, depth);
    const int64_t outer = prod(ind.shape(), 0, axis), inner = prod(ind.shape(), axis, ind.rank());
    Tensor& y = ctx.output(0, vals.dtype(), out);
    visit_elem(vals.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T& off = vals.data<T>()[0];
      const T& on = vals.data<T>()[1];
      T* dst = y.data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t d = 0; d < depth; ++d)
          for (int64_t i = 0; i < inner; ++i) {
            int64_t v = idx[o * inner + i];
            if (v < 0) v += depth;
            dst[(o * depth + d) * inner + i] = v == d ? on : off;
          }
    });
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- NonZero / Compress

// Marks which elements are nonzero (non-empty for strings; -0.0 counts as zero).
bool nonzero_mask(const Tensor& t, std::vector<uint8_t>* mask) {
  mask->resize(static_cast<size_t>(t.numel()));
  const int64_t n = t.numel();
  if (t.dtype() == DataType::kString) {
    for (int64_t i = 0; i < n; ++i) (*mask)[i] = !t.data<std::string>()[i].empty();
    return true;
  }
  if (t.dtype() == DataType::kFloat16 || t.dtype() == DataType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) (*mask)[i] = (t.data<uint16_t>()[i] & 0x7fff) != 0;
    return true;
  }
  return visit_numeric(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < n; ++i) (*mask)[i] = t.data<T>()[i] != T(0);
  });
}

Expected<KernelPtr> create_non_zero(const ir::Node&, KernelInit&) {
  return make_kernel([](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    std::vector<uint8_t> mask;
    if (!nonzero_mask(x, &mask)) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
    int64_t nnz = 0;
    for (uint8_t m : mask) nnz += m;
    const int r = x.rank();
    Tensor& y = ctx.output(0, DataType::kInt64, {r, nnz});
    int64_t* out = y.data<int64_t>();
    std::vector<int64_t> pos(r, 0);
    int64_t k = 0;
    for (size_t e = 0; e < mask.size(); ++e) {
      if (mask[e]) {
        for (int d = 0; d < r; ++d) out[d * nnz + k] = pos[d];
        ++k;
      }
      for (int d = r - 1; d >= 0; --d) {
        if (++pos[d] < x.dim(d)) break;
        pos[d] = 0;
      }
    }
    return Status::Ok();
  });
}

Expected<KernelPtr> create_compress(const ir::Node& n, KernelInit&) {
  const ops::CompressParams p = ops::parse_compress(n);
  const bool has_axis = p.has_axis;
  const int64_t axis_attr = p.axis;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const Tensor& cond = ctx.input(1);
    if (cond.dtype() != DataType::kBool || cond.rank() != 1) return ctx.error("condition must be a 1-D bool tensor");
    int64_t axis = 0;
    Shape in = {x.numel()};
    if (has_axis) {
      axis = axis_attr;
      if (!ops::normalize_axis(axis, x.rank())) return ctx.error("axis out of range");
      in = x.shape();
    }
    const int64_t dim = in[axis];
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < cond.numel(); ++i) {
      if (!cond.data<bool>()[i]) continue;
      if (i >= dim) return ctx.error("condition selects index " + std::to_string(i) + " past the axis size " + std::to_string(dim));
      keep.push_back(i);
    }
    Shape out = in;
    out[axis] = static_cast<int64_t>(keep.size());
    Tensor& y = ctx.output(0, x.dtype(), out);
    const int64_t outer = prod(in, 0, axis), inner = prod(in, axis + 1, in.size());
    const int64_t nk = static_cast<int64_t>(keep.size());
    visit_elem(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t k = 0; k < nk; ++k)
          copy_elems(y.data<T>() + (o * nk + k) * inner, x.data<T>() + (o * dim + keep[k]) * inner, inner);
    });
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- ReverseSequence

Expected<KernelPtr> create_reverse_sequence(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::ReverseSequenceParams p, ops::parse_reverse_sequence(n));
  const int64_t batch_axis = p.batch_axis, time_axis = p.time_axis;
  return make_kernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2) return ctx.error("input must have rank >= 2");
    const int64_t B = x.dim(static_cast<int>(batch_axis)), T = x.dim(static_cast<int>(time_axis));
    std::vector<int64_t> lens;
    if (!read_ints(ctx.input(1), &lens) || static_cast<int64_t>(lens.size()) != B)
      return ctx.error("sequence_lens must be int64 with one entry per batch");
    for (int64_t l : lens)
      if (l < 0 || l > T) return ctx.error("sequence length " + std::to_string(l) + " outside [0, " + std::to_string(T) + "]");
    const int64_t inner = prod(x.shape(), 2, x.rank());
    const std::vector<int64_t> st = strides_of(x.shape());
    const int64_t sb = st[batch_axis], stt = st[time_axis];
    Tensor& y = ctx.output(0, x.dtype(), x.shape());
    visit_elem(x.dtype(), [&](auto tag) {
      using E = typename decltype(tag)::type;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t src_t = t < lens[b] ? lens[b] - 1 - t : t;
          copy_elems(y.data<E>() + b * sb + t * stt, x.data<E>() + b * sb + src_t * stt, inner);
        }
    });
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- Col2Im

Expected<KernelPtr> create_col2im(const ir::Node& n, KernelInit&) {
  const ops::Col2ImParams p = ops::parse_col2im(n);
  return make_kernel([p](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> img, blk;
    if (!read_ints(ctx.input(1), &img) || !read_ints(ctx.input(2), &blk) || img.size() != blk.size() || img.empty())
      return ctx.error("image_shape and block_shape must be int64 of equal length");
    const size_t s = img.size();
    std::vector<int64_t> dil = p.dilations.empty() ? std::vector<int64_t>(s, 1) : p.dilations;
    std::vector<int64_t> str = p.strides.empty() ? std::vector<int64_t>(s, 1) : p.strides;
    std::vector<int64_t> pads = p.pads.empty() ? std::vector<int64_t>(2 * s, 0) : p.pads;
    if (dil.size() != s || str.size() != s || pads.size() != 2 * s) return ctx.error("attribute lengths do not match image rank");
    if (x.rank() != 3) return ctx.error("input must be [N, C*prod(block), L]");
    int64_t kprod = 1;
    for (size_t d = 0; d < s; ++d)
      if (blk[d] <= 0 || img[d] < 0 || __builtin_mul_overflow(kprod, blk[d], &kprod))
        return ctx.error("block_shape entries must be positive, image_shape entries >= 0, and their products fit int64");
    if (x.dim(1) % kprod != 0) return ctx.error("input dim 1 not divisible by prod(block_shape)");
    const int64_t N = x.dim(0), C = x.dim(1) / kprod;
    std::vector<int64_t> nblk(s);
    int64_t L = 1;
    for (size_t d = 0; d < s; ++d) {
      // Checked: the attributes are >= 1 (pads >= 0, at import) but may be as large as int64 allows.
      int64_t span = 0, reach = 0;
      if (__builtin_add_overflow(img[d], pads[d], &span) || __builtin_add_overflow(span, pads[d + s], &span) ||
          __builtin_mul_overflow(dil[d], blk[d] - 1, &reach) || reach >= span)
        return ctx.error("axis " + std::to_string(d) + ": the dilated block does not fit the padded image");
      nblk[d] = (span - reach - 1) / str[d] + 1;
      if (__builtin_mul_overflow(L, nblk[d], &L)) return ctx.error("the block count overflows int64");
    }
    if (L != x.dim(2)) return ctx.error("input dim 2 is " + std::to_string(x.dim(2)) + ", blocks give " + std::to_string(L));
    Shape out = {N, C};
    out.insert(out.end(), img.begin(), img.end());
    const int64_t isz = prod(img, 0, s);
    Tensor& y = ctx.output(0, x.dtype(), out);
    const bool ok = visit_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = y.data<T>();
      const T* src = x.data<T>();
      std::fill_n(dst, N * C * isz, T(0));
      std::vector<int64_t> kpos(s), lpos(s);
      for (int64_t nc = 0; nc < N * C; ++nc)
        for (int64_t kk = 0; kk < kprod; ++kk) {
          for (int64_t d = s - 1, r = kk; d >= 0; --d) { kpos[d] = r % blk[d]; r /= blk[d]; }
          for (int64_t l = 0; l < L; ++l) {
            for (int64_t d = s - 1, r = l; d >= 0; --d) { lpos[d] = r % nblk[d]; r /= nblk[d]; }
            int64_t off = 0;
            bool inside = true;
            for (size_t d = 0; d < s && inside; ++d) {
              const int64_t p = lpos[d] * str[d] - pads[d] + kpos[d] * dil[d];
              inside = p >= 0 && p < img[d];
              off = off * img[d] + p;
            }
            if (inside) dst[nc * isz + off] += src[(nc * kprod + kk) * L + l];
          }
        }
    });
    if (!ok) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
    return Status::Ok();
  });
}

}  // namespace

void register_shape_index(KernelRegistry& r) {
  add_shape_kernel(r, "Gather", 1, 2, create_gather);
  add_shape_kernel(r, "GatherElements", 11, 2, create_gather_elements);
  add_shape_kernel(r, "GatherND", 11, 2, create_gather_nd);
  add_shape_kernel(r, "ScatterElements", 11, 3, create_scatter_elements);
  add_shape_kernel(r, "Scatter", 9, 3, create_scatter_elements, 10);
  add_shape_kernel(r, "ScatterND", 11, 3, create_scatter_nd);
  add_shape_kernel(r, "OneHot", 9, 3, create_one_hot);
  add_shape_kernel(r, "NonZero", 9, 1, create_non_zero);
  add_shape_kernel(r, "Compress", 9, 2, create_compress);
  add_shape_kernel(r, "ReverseSequence", 10, 2, create_reverse_sequence);
  add_shape_kernel(r, "Col2Im", 18, 3, create_col2im);
}

}  // namespace kiln::cpu::shape_detail
