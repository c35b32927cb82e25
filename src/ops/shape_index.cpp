// ops/shape_index.cpp — types and shapes of the index-driven ops of the shape family: Gather,
// GatherElements, GatherND, ScatterElements, Scatter, ScatterND, OneHot, NonZero, Compress,
// ReverseSequence, Col2Im.
#include "ops/op_table.h"
#include "ops/params_shape.h"
#include "ops/shape_infer_util.h"

namespace kiln::ops {
namespace {

using ir::Dim;
using ir::SymShape;
using ir::Type;

Status infer_gather(InferContext& c) {
  c.out[0] = Type::tensor(c.dtype(0));
  const SymShape& x = c.shape(0);
  if (!x.known || !c.has(1) || !c.shape(1).known) return Status::Ok();
  int64_t axis = parse_gather(c.node).axis;
  if (!normalize_axis(axis, x.rank())) return c.error("axis out of range");
  std::vector<Dim> out(x.dims.begin(), x.dims.begin() + axis);
  out.insert(out.end(), c.shape(1).dims.begin(), c.shape(1).dims.end());
  out.insert(out.end(), x.dims.begin() + axis + 1, x.dims.end());
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

Status infer_gather_elements(InferContext& c) {
  c.out[0] = Type::tensor(c.dtype(0), c.has(1) ? c.shape(1) : SymShape());
  return Status::Ok();
}

Status infer_like_data(InferContext& c) {
  c.out[0] = c.type(0);
  return Status::Ok();
}

Status infer_gather_nd(InferContext& c) {
  c.out[0] = Type::tensor(c.dtype(0));
  const SymShape& x = c.shape(0);
  if (!x.known || !c.has(1) || !c.shape(1).known) return Status::Ok();
  const SymShape& ind = c.shape(1);
  const int64_t b = parse_gather_nd(c.node).batch_dims;
  if (ind.rank() < 1 || !ind.dims.back().is_static()) return Status::Ok();
  const int64_t k = ind.dims.back().value;
  if (b < 0 || b + k > x.rank()) return c.error("indices' last dim too large for data rank");
  std::vector<Dim> out(ind.dims.begin(), ind.dims.end() - 1);
  out.insert(out.end(), x.dims.begin() + b + k, x.dims.end());
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

Status infer_one_hot(InferContext& c) {
  c.out[0] = Type::tensor(c.has(2) ? c.dtype(2) : DataType::kUndefined);
  const SymShape& ind = c.shape(0);
  if (!ind.known) return Status::Ok();
  int64_t axis = parse_one_hot(c.node).axis;
  if (!normalize_axis(axis, ind.rank() + 1)) return c.error("axis out of range");
  Dim depth;
  const Tensor* d = c.value(1);
  if (d && d->numel() == 1) {
    if (d->dtype() == DataType::kInt64) depth = Dim(d->data<int64_t>()[0]);
    else if (d->dtype() == DataType::kInt32) depth = Dim(d->data<int32_t>()[0]);
    else if (d->dtype() == DataType::kFloat32) depth = Dim(static_cast<int64_t>(d->data<float>()[0]));
  }
  std::vector<Dim> out = ind.dims;
  out.insert(out.begin() + axis, depth);
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

Status infer_non_zero(InferContext& c) {
  const SymShape& x = c.shape(0);
  c.out[0] = Type::tensor(DataType::kInt64, SymShape({x.known ? Dim(x.rank()) : Dim(), Dim()}));
  return Status::Ok();
}

Status infer_compress(InferContext& c) {
  const SymShape& x = c.shape(0);
  c.out[0] = Type::tensor(c.dtype(0));
  const CompressParams p = parse_compress(c.node);
  if (!p.has_axis) {
    c.out[0].shape = SymShape({Dim()});
    return Status::Ok();
  }
  if (!x.known) return Status::Ok();
  int64_t axis = p.axis;
  if (!normalize_axis(axis, x.rank())) return c.error("axis out of range");
  std::vector<Dim> out = x.dims;
  out[axis] = Dim();
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

Status infer_col2im(InferContext& c) {
  c.out[0] = Type::tensor(c.dtype(0));
  const SymShape& x = c.shape(0);
  std::vector<int64_t> img, blk;
  if (!x.known || x.rank() != 3 || !const_ints(c, 1, &img) || !const_ints(c, 2, &blk)) return Status::Ok();
  int64_t kprod = 1;
  for (int64_t b : blk)
    if (b <= 0 || __builtin_mul_overflow(kprod, b, &kprod)) return c.error("block_shape entries must be positive and their product fit int64");
  std::vector<Dim> out = {x.dims[0], dim_div(x.dims[1], kprod)};
  for (int64_t d : img) out.push_back(Dim(d));
  c.out[0].shape = SymShape(std::move(out));
  return Status::Ok();
}

}  // namespace

void add_shape_index_ops(std::vector<OpDef>& t) {
  t.push_back({"Gather", "", 1, needs_input0<infer_gather>});
  t.push_back({"GatherElements", "", 11, needs_input0<infer_gather_elements>});
  t.push_back({"GatherND", "", 11, needs_input0<infer_gather_nd>});
  t.push_back({"ScatterElements", "", 11, needs_input0<infer_like_data>});
  t.push_back({"Scatter", "", 9, needs_input0<infer_like_data>});
  t.push_back({"ScatterND", "", 11, needs_input0<infer_like_data>});
  t.push_back({"OneHot", "", 9, needs_input0<infer_one_hot>});
  t.push_back({"NonZero", "", 9, needs_input0<infer_non_zero>});
  t.push_back({"Compress", "", 9, needs_input0<infer_compress>});
  t.push_back({"ReverseSequence", "", 10, needs_input0<infer_like_data>});
  t.push_back({"Col2Im", "", 18, needs_input0<infer_col2im>});
  // A zero stride divided the block count by zero: the attributes are checked at import.
  declare_attrs(t, "Col2Im", {{"dilations", ir::Attribute::Kind::kInts, false, rule_positive_ints},
                              {"pads", ir::Attribute::Kind::kInts, false, rule_non_negative_ints},
                              {"strides", ir::Attribute::Kind::kInts, false, rule_positive_ints}});
}

}  // namespace kiln::ops
