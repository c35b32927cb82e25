// backends/cpu/shape_misc.cpp — shape-family CPU kernels that produce values: Shape, Size,
// ConstantOfShape, Constant, Range, Trilu, EyeLike.
#include <cmath>

#include "backends/cpu/shape_util.h"
#include "backends/staged_kernel.h"
#include "ops/op_table.h"
#include "ops/params_shape.h"
#include "util/checked.h"

namespace kiln::cpu::shape_detail {
namespace {

// ---------------------------------------------------------------- Shape / Size

Expected<KernelPtr> create_shape(const ir::Node& n, KernelInit&) {
  const ops::ShapeParams p = ops::parse_shape(n);
  // The dims [b, e) of X: the output's length, and (as the per-shape state) b.
  auto reshape = [p](ReshapeContext& rc) -> Status {
    const int64_t r = static_cast<int64_t>(rc.in[0].shape.size());
    auto clamp = [r](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + r : v, 0, r); };
    const int64_t b = clamp(p.start), e = p.has_end ? clamp(p.end) : r;
    rc.state = std::make_shared<int64_t>(b);
    rc.out[0] = {DataType::kInt64, Shape{std::max<int64_t>(0, e - b)}};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t b = shape_state<int64_t>(ctx);
    Tensor& y = ctx.output(0);
    for (int64_t i = 0; i < y.numel(); ++i) y.data<int64_t>()[i] = x.dim(static_cast<int>(b + i));
    return Status::Ok();
  });
}

Expected<KernelPtr> create_size(const ir::Node&, KernelInit&) {
  return make_staged(
      [](ReshapeContext& rc) -> Status {
        rc.out[0] = {DataType::kInt64, Shape{}};
        return Status::Ok();
      },
      [](KernelContext& ctx) -> Status {
        ctx.output(0).data<int64_t>()[0] = ctx.input(0).numel();
        return Status::Ok();
      });
}

// ---------------------------------------------------------------- Constant / ConstantOfShape

// The tensor a Constant node's attribute describes.
Expected<Tensor> constant_value(const ir::Node& n) {
  using S = ops::ConstantParams::Source;
  KILN_ASSIGN_OR_RETURN(const ops::ConstantParams p, ops::parse_constant(n));
  auto vec = [&p](const auto& values) {
    Tensor t = Tensor::empty(p.dtype, p.shape);
    using T = typename std::decay_t<decltype(values)>::value_type;
    for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
    return t;
  };
  switch (p.source) {
    case S::kTensor: return p.tensor;
    case S::kSparseTensor:
      if (!p.tensor.defined()) return unsupported(n.describe() + ": sparse_value was not densified by the importer");
      return p.tensor;
    case S::kFloats: return vec(p.floats);
    case S::kInts: return vec(p.ints);
    case S::kStrings: return vec(p.strings);
  }
  return p.tensor;
}

Expected<KernelPtr> create_constant(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(Tensor value, constant_value(n));
  return make_staged(
      [value](ReshapeContext& rc) -> Status {
        rc.out[0] = {value.dtype(), value.shape()};
        return Status::Ok();
      },
      [value](KernelContext& ctx) -> Status {
        copy_tensor(value, ctx.output(0));
        return Status::Ok();
      });
}

Expected<KernelPtr> create_constant_of_shape(const ir::Node& n, KernelInit&) {
  const ops::ConstantOfShapeParams p = ops::parse_constant_of_shape(n);
  Tensor value;
  if (p.has_value) {
    value = p.value;
    if (value.numel() != 1) return invalid_model(n.describe() + ": value must hold exactly one element");
  } else {
    value = Tensor::empty(DataType::kFloat32, {1});
  }
  auto reshape = [dt = value.dtype()](ReshapeContext& rc) -> Status {
    if (!rc.in[0].value) return unsupported("shape is known only when running");
    std::vector<int64_t> shape;
    if (!read_ints(*rc.in[0].value, &shape)) return rc.error("shape must be int64");
    for (int64_t d : shape)
      if (d < 0) return rc.error("negative dim in shape");
    rc.out[0] = {dt, std::move(shape)};
    return Status::Ok();
  };
  return make_staged(reshape, [value](KernelContext& ctx) -> Status {
    Tensor& y = ctx.output(0);
    fill_elems(value.dtype(), y.raw(), y.numel(), value.raw());
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- Range

template <typename T>
void range_fill(T* out, int64_t n, T start, T delta) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
}

// Range's length from its scalar operands (host inputs: the length sizes the output).
Status range_length(const ReshapeContext& rc, int64_t* len) {
  if (!rc.in[0].value || !rc.in[1].value || !rc.in[2].value) return unsupported("start, limit and delta are known only when running");
  const Tensor& s = *rc.in[0].value;
  const Tensor& l = *rc.in[1].value;
  const Tensor& d = *rc.in[2].value;
  const DataType dt = s.dtype();
  if (l.dtype() != dt || d.dtype() != dt || s.numel() != 1 || l.numel() != 1 || d.numel() != 1)
    return rc.error("start, limit and delta must be scalars of one dtype");
  if (dt == DataType::kFloat16 || dt == DataType::kBFloat16) {
    const bool h = dt == DataType::kFloat16;
    auto load = [h](const Tensor& t) { uint16_t b = t.data<uint16_t>()[0]; return h ? f16_to_f32(b) : bf16_to_f32(b); };
    const float start = load(s), limit = load(l), delta = load(d);
    if (delta == 0) return rc.error("delta is zero");
    int64_t n;
    if (!count_from_double(std::ceil((limit - start) / delta), &n)) return rc.error("Range's length is NaN, infinite or past 2^53");
    *len = std::max<int64_t>(0, n);
    return Status::Ok();
  }
  Status st = Status::Ok();
  const bool ok = visit_numeric(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      st = rc.error("Range does not take bool");
    } else {
      const T start = s.data<T>()[0], limit = l.data<T>()[0], delta = d.data<T>()[0];
      if (delta == T(0)) { st = rc.error("delta is zero"); return; }
      int64_t n;
      if constexpr (std::is_floating_point_v<T>) {
        if (!count_from_double(std::ceil((static_cast<double>(limit) - start) / delta), &n)) {
          st = rc.error("Range's length is NaN, infinite or past 2^53");
          return;
        }
      } else {  // exact integer ceil-division, in 128 bits (limit - start can pass int64)
        const __int128 a = static_cast<int64_t>(start), b = static_cast<int64_t>(limit), c = static_cast<int64_t>(delta);
        const __int128 w = c > 0 ? (b > a ? (b - a + c - 1) / c : 0) : (a > b ? (a - b - c - 1) / -c : 0);
        if (w > INT64_MAX) {
          st = rc.error("Range's length passes int64");
          return;
        }
        n = static_cast<int64_t>(w);
      }
      *len = std::max<int64_t>(n, 0);
    }
  });
  if (!ok) return rc.error(std::string("Range does not take dtype ") + dtype_name(dt));
  return st;
}

Expected<KernelPtr> create_range(const ir::Node&, KernelInit&) {
  auto reshape = [](ReshapeContext& rc) -> Status {
    int64_t n = 0;
    KILN_RETURN_IF_ERROR(range_length(rc, &n));
    rc.out[0] = {rc.in[0].dtype, Shape{n}};
    return Status::Ok();
  };
  return make_staged(reshape, [](KernelContext& ctx) -> Status {
    const Tensor& s = ctx.input(0);
    const Tensor& d = ctx.input(2);
    const DataType dt = s.dtype();
    Tensor& y = ctx.output(0);
    const int64_t n = y.numel();
    if (dt == DataType::kFloat16 || dt == DataType::kBFloat16) {
      const bool h = dt == DataType::kFloat16;
      auto load = [h](const Tensor& t) { uint16_t b = t.data<uint16_t>()[0]; return h ? f16_to_f32(b) : bf16_to_f32(b); };
      const float start = load(s), delta = load(d);
      for (int64_t i = 0; i < n; ++i) {
        const float v = start + static_cast<float>(i) * delta;
        y.data<uint16_t>()[i] = h ? f32_to_f16(v) : f32_to_bf16(v);
      }
      return Status::Ok();
    }
    visit_numeric(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) range_fill(y.data<T>(), n, s.data<T>()[0], d.data<T>()[0]);
    });
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- Trilu / EyeLike

Expected<KernelPtr> create_trilu(const ir::Node& n, KernelInit&) {
  const bool upper = ops::parse_trilu(n).upper;
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in[0].shape.size() < 2) return rc.error("input must have rank >= 2");
    rc.out[0] = {rc.in[0].dtype, rc.in[0].shape};
    return Status::Ok();
  };
  return make_staged(reshape, [=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    int64_t k = 0;
    if (ctx.has_input(1)) {
      if (ctx.input(1).numel() != 1) return ctx.error("k must be a scalar");
      k = index_at(ctx.input(1), 0);
    }
    const int64_t rows = x.dim(-2), cols = x.dim(-1), mats = rows * cols != 0 ? x.numel() / (rows * cols) : 0;
    Tensor& y = ctx.output(0);
    visit_elem(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = x.data<T>();
      T* dst = y.data<T>();
      for (int64_t m = 0; m < mats; ++m)
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t e = (m * rows + i) * cols + j;
            const bool keep = upper ? j - i >= k : j - i <= k;
            dst[e] = keep ? src[e] : T{};
          }
    });
    return Status::Ok();
  });
}

// Writes one element equal to 1 of dtype dt into `out`; false for dtypes without a 1.
bool one_of(DataType dt, Block16* out) {
  *out = {0, 0};
  if (dt == DataType::kFloat16) { const uint16_t b = 0x3C00; std::memcpy(out, &b, 2); return true; }
  if (dt == DataType::kBFloat16) { const uint16_t b = 0x3F80; std::memcpy(out, &b, 2); return true; }
  return visit_numeric(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T one = T(1);
    std::memcpy(out, &one, sizeof(T));
  });
}

Expected<KernelPtr> create_eye_like(const ir::Node& n, KernelInit&) {
  const ops::EyeLikeParams p = ops::parse_eye_like(n);
  auto reshape = [p](ReshapeContext& rc) -> Status {
    if (rc.in[0].shape.size() != 2) return rc.error("input must be 2-D");
    const DataType dt = p.dtype ? static_cast<DataType>(p.dtype) : rc.in[0].dtype;
    Block16 one;
    if (!one_of(dt, &one)) return rc.error(std::string("EyeLike does not take dtype ") + dtype_name(dt));
    rc.out[0] = {dt, rc.in[0].shape};
    return Status::Ok();
  };
  return make_staged(reshape, [p](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const DataType dt = y.dtype();
    Block16 one, zero{0, 0};
    one_of(dt, &one);
    const int64_t rows = x.dim(0), cols = x.dim(1);
    const size_t es = dtype_size(dt);
    auto* out = static_cast<char*>(y.raw());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) std::memcpy(out + (i * cols + j) * es, j - i == p.k ? &one : &zero, es);
    return Status::Ok();
  });
}

}  // namespace

void register_shape_misc(KernelRegistry& r) {
  add_shape_kernel(r, "Shape", 1, 1, create_shape);
  add_shape_kernel(r, "Size", 1, 1, create_size);
  add_shape_kernel(r, "Constant", 1, 0, create_constant);
  add_shape_kernel(r, "ConstantOfShape", 9, 1, create_constant_of_shape, 1 << 30, 0b1);
  add_shape_kernel(r, "Range", 11, 3, create_range, 1 << 30, 0b111);
  add_shape_kernel(r, "Trilu", 14, 1, create_trilu);
  add_shape_kernel(r, "EyeLike", 9, 1, create_eye_like);
}

}  // namespace kiln::cpu::shape_detail
