// ops/signal.cpp — types and shapes of the signal op family: DFT, STFT, the Hann/Hamming/Blackman
// windows and MelWeightMatrix.
#include "ops/op_table.h"
#include "ops/params_misc.h"

namespace kiln::ops {
namespace {

ir::SymShape unknown_dims(int rank) { return ir::SymShape(std::vector<ir::Dim>(rank)); }

Status infer_window(InferContext& ctx) {
  const DataType dt = parse_signal_window(ctx.node).output_datatype;
  std::vector<int64_t> n;
  ctx.out[0] = ir::Type::tensor(dt, const_ints(ctx.value(0), n) && n.size() == 1 ? ir::SymShape::of({n[0]}) : unknown_dims(1));
  return Status::Ok();
}

Status infer_mel(InferContext& ctx) {
  const DataType dt = parse_mel_weight_matrix(ctx.node).output_datatype;
  ir::SymShape s = unknown_dims(2);
  std::vector<int64_t> v;
  if (const_ints(ctx.value(1), v) && v.size() == 1) s.dims[0] = ir::Dim(v[0] / 2 + 1);
  if (const_ints(ctx.value(0), v) && v.size() == 1) s.dims[1] = ir::Dim(v[0]);
  ctx.out[0] = ir::Type::tensor(dt, s);
  return Status::Ok();
}

Status infer_dft(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  const ir::SymShape& in = ctx.shape(0);
  if (!in.known || in.rank() < 2) return Status::Ok();
  const DftParams p = parse_dft(ctx.node);
  const bool inverse = p.inverse, onesided = p.onesided;
  int64_t axis = p.axis;
  std::vector<int64_t> v;
  ir::SymShape out = in;
  out.dims.back() = ir::Dim(inverse && onesided ? 1 : 2);
  if (p.axis_input && ctx.has(2)) {
    if (!const_ints(ctx.value(2), v) || v.size() != 1) {
      for (int i = 0; i + 1 < out.rank(); ++i) out.dims[i] = ir::Dim();
      ctx.out[0].shape = out;
      return Status::Ok();
    }
    axis = v[0];
  }
  if (!normalize_axis(axis, in.rank())) return ctx.error("axis out of range");
  ir::Dim len = in.dims[axis];
  if (ctx.has(1)) len = const_ints(ctx.value(1), v) && v.size() == 1 ? ir::Dim(v[0]) : ir::Dim();
  else if (inverse && onesided) len = len.is_static() ? ir::Dim(2 * (len.value - 1)) : ir::Dim();
  if (!inverse && onesided) len = len.is_static() ? ir::Dim(len.value / 2 + 1) : ir::Dim();
  out.dims[axis] = len;
  ctx.out[0].shape = out;
  return Status::Ok();
}

Status infer_stft(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0), unknown_dims(4));
  const ir::SymShape& in = ctx.shape(0);
  if (in.known && in.rank() == 3) ctx.out[0].shape.dims[0] = in.dims[0];
  ctx.out[0].shape.dims[3] = ir::Dim(2);
  std::vector<int64_t> step, fl;
  int64_t flen = -1;
  if (ctx.has(2) && ctx.shape(2).known && ctx.shape(2).rank() == 1 && ctx.shape(2).dims[0].is_static()) flen = ctx.shape(2).dims[0].value;
  if (ctx.has(3) && const_ints(ctx.value(3), fl) && fl.size() == 1) flen = fl[0];
  if (flen > 0) {
    ctx.out[0].shape.dims[2] = ir::Dim(parse_stft(ctx.node).onesided ? flen / 2 + 1 : flen);
    if (in.known && in.rank() == 3 && in.dims[1].is_static() && const_ints(ctx.value(1), step) && step.size() == 1 && step[0] > 0)
      ctx.out[0].shape.dims[1] = ir::Dim((in.dims[1].value - flen) / step[0] + 1);
  }
  return Status::Ok();
}

}  // namespace

void add_signal_ops(std::vector<OpDef>& t) {
  t.push_back({"DFT", "", 17, infer_dft});
  t.push_back({"STFT", "", 17, infer_stft});
  t.push_back({"HannWindow", "", 17, infer_window});
  t.push_back({"HammingWindow", "", 17, infer_window});
  t.push_back({"BlackmanWindow", "", 17, infer_window});
  t.push_back({"MelWeightMatrix", "", 17, infer_mel});
}

}  // namespace kiln::ops
