// ops/rnn_quant.cpp — types and shapes of the quantization, recurrent (RNN/GRU/LSTM), loss,
// region-of-interest/vision and training op families.
#include <algorithm>

#include "ops/op_table.h"
#include "ops/params_ml.h"

namespace kiln::ops {

using ir::Dim;
using ir::SymShape;
using ir::Type;

namespace {

Status same_as_input(InferContext& c) {
  if (c.has(0)) c.out[0] = c.type(0);
  return Status::Ok();
}

// output_dtype where it names a dtype (0 and invalid codes: not given).
DataType output_dtype(const ir::Node& n) {
  const DataType dt = parse_quantize(n).output_dtype;
  const int32_t code = static_cast<int32_t>(dt);
  return code && dtype_is_valid(code) ? dt : DataType::kUndefined;
}

Status infer_quantize(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  DataType dt = output_dtype(c.node);
  if (c.has(2)) dt = c.dtype(2);
  if (dt == DataType::kUndefined) dt = DataType::kUInt8;
  c.out[0] = Type::tensor(dt, c.shape(0));
  return Status::Ok();
}

Status infer_dequantize(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  DataType dt = output_dtype(c.node);
  if (dt == DataType::kUndefined && c.has(1)) dt = c.dtype(1);
  c.out[0] = Type::tensor(dt, c.shape(0));
  return Status::Ok();
}

Status infer_dynamic_quantize(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(DataType::kUInt8, c.shape(0));
  if (c.out.size() > 1) c.out[1] = Type::tensor(c.dtype(0), SymShape(std::vector<Dim>{}));
  if (c.out.size() > 2) c.out[2] = Type::tensor(DataType::kUInt8, SymShape(std::vector<Dim>{}));
  return Status::Ok();
}

// RNN/GRU/LSTM: Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]), Y_h and Y_c
// [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]).
Status infer_rnn(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  const RnnParams p = parse_rnn_unchecked(c.node);
  const int64_t layout = p.layout;
  const Dim dirs(p.num_dir);
  Dim hidden;
  if (p.has_hidden_size) hidden = Dim(p.hidden_size);
  else if (c.has(2) && c.shape(2).known && c.shape(2).rank() == 3) hidden = c.shape(2).dims[2];
  Dim seq, batch;
  const SymShape& x = c.shape(0);
  if (x.known) {
    if (x.rank() != 3) return c.error("X must be 3-D");
    seq = x.dims[layout == 1 ? 1 : 0];
    batch = x.dims[layout == 1 ? 0 : 1];
  }
  const DataType dt = c.dtype(0);
  for (size_t i = 0; i < c.out.size(); ++i) {
    std::vector<Dim> dims;
    if (i == 0) dims = layout == 1 ? std::vector<Dim>{batch, seq, dirs, hidden} : std::vector<Dim>{seq, dirs, batch, hidden};
    else dims = layout == 1 ? std::vector<Dim>{batch, dirs, hidden} : std::vector<Dim>{dirs, batch, hidden};
    c.out[i] = Type::tensor(dt, SymShape(dims));
  }
  return Status::Ok();
}

// Losses: a scalar unless reduction is "none" (then the labels' shape); log_prob like the scores.
Status infer_loss(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  const DataType dt = c.dtype(0);
  if (parse_loss_unchecked(c.node).reduction != LossParams::Reduction::kNone) {
    c.out[0] = Type::tensor(dt, SymShape(std::vector<Dim>{}));
  } else {
    c.out[0] = Type::tensor(dt);
    if (c.has(1)) c.out[0].shape = c.shape(1);
  }
  if (c.out.size() > 1) c.out[1] = c.type(0);
  return Status::Ok();
}

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

// Optimizers: outputs are X_new..., then the states, each typed like its input.
Status infer_optimizer(InferContext& c) {
  const int states = c.node.op_type == "Adam" ? 2 : 1;
  const int n = (c.num_inputs() - 2) / (2 + states);
  for (size_t i = 0; i < c.out.size(); ++i) {
    const int k = static_cast<int>(i) / std::max(n, 1), j = static_cast<int>(i) % std::max(n, 1);
    const int in = k == 0 ? 2 + j : 2 + (k + 1) * n + j;
    if (c.has(in)) c.out[i] = c.type(in);
  }
  return Status::Ok();
}

Status infer_tfidf(InferContext& c) {
  const int64_t size = parse_tfidf_unchecked(c.node).out_size;
  c.out[0] = Type::tensor(DataType::kFloat32);
  if (!c.has(0) || !c.shape(0).known) return Status::Ok();
  if (c.shape(0).rank() == 2) c.out[0].shape = SymShape({c.shape(0).dims[0], Dim(size)});
  else c.out[0].shape = SymShape({Dim(size)});
  return Status::Ok();
}

}  // namespace

void add_rnn_quant_ops(std::vector<OpDef>& t) {
  t.push_back({"QuantizeLinear", "", 10, infer_quantize});
  t.push_back({"DequantizeLinear", "", 10, infer_dequantize});
  t.push_back({"DynamicQuantizeLinear", "", 11, infer_dynamic_quantize});
  t.push_back({"RNN", "", 7, infer_rnn});
  t.push_back({"GRU", "", 7, infer_rnn});
  t.push_back({"LSTM", "", 7, infer_rnn});
  t.push_back({"SoftmaxCrossEntropyLoss", "", 12, infer_loss});
  t.push_back({"NegativeLogLikelihoodLoss", "", 12, infer_loss});
  t.push_back({"LpNormalization", "", 1, same_as_input});
  t.push_back({"RoiAlign", "", 10, infer_roi});
  t.push_back({"MaxRoiPool", "", 1, infer_roi});
  t.push_back({"DeformConv", "", 19, infer_deform_conv});
  t.push_back({"TfIdfVectorizer", "", 9, infer_tfidf});
  t.push_back({"Adagrad", "ai.onnx.preview.training", 1, infer_optimizer});
  t.push_back({"Adam", "ai.onnx.preview.training", 1, infer_optimizer});
  t.push_back({"Momentum", "ai.onnx.preview.training", 1, infer_optimizer});
}

}  // namespace kiln::ops
