// ops/roi.cpp — types and shapes of the region-of-interest op family: RoiAlign, MaxRoiPool and
// DeformConv (2-D).
#include "ops/op_table.h"
#include "ops/params_ml.h"

namespace kiln::ops {

using ir::Dim;
using ir::SymShape;
using ir::Type;

namespace {

// RoiAlign / MaxRoiPool: [num_rois, C, out_h, out_w].
Status infer_roi(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(c.dtype(0));
  const bool align = c.node.op_type == "RoiAlign";
  Dim rois, ch, oh, ow;
  if (c.has(1) && c.shape(1).known && c.shape(1).rank() == 2) rois = c.shape(1).dims[0];
  if (c.shape(0).known && c.shape(0).rank() == 4) ch = c.shape(0).dims[1];
  if (align) {
    const RoiAlignParams p = parse_roi_align_unchecked(c.node);
    oh = Dim(p.output_height);
    ow = Dim(p.output_width);
  } else {
    const std::vector<int64_t> ps = parse_max_roi_pool_unchecked(c.node).pooled_shape;
    if (ps.size() != 2) return c.error("pooled_shape must have 2 values");
    oh = Dim(ps[0]);
    ow = Dim(ps[1]);
  }
  c.out[0].shape = SymShape({rois, ch, oh, ow});
  return Status::Ok();
}

// DeformConv (2-D): [N, oC, oH, oW] from X, W and the offset's spatial dims.
Status infer_deform_conv(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(c.dtype(0));
  if (!c.has(1) || !c.has(2) || !c.shape(0).known || !c.shape(1).known || !c.shape(2).known) return Status::Ok();
  const SymShape &x = c.shape(0), &w = c.shape(1), &off = c.shape(2);
  if (x.rank() != 4 || w.rank() != 4 || off.rank() != 4) return Status::Ok();
  c.out[0].shape = SymShape({x.dims[0], w.dims[0], off.dims[2], off.dims[3]});
  return Status::Ok();
}

}  // namespace

void add_roi_ops(std::vector<OpDef>& t) {
  t.push_back({"RoiAlign", "", 10, infer_roi});
  t.push_back({"MaxRoiPool", "", 1, infer_roi});
  t.push_back({"DeformConv", "", 19, infer_deform_conv});
}

}  // namespace kiln::ops
