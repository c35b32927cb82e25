// backends/cuda/cuda_rnn.cpp — RNN, GRU and LSTM (7+; `layout` from 14) on the GPU: attributes from
// ops::parse_rnn as on the CPU, shapes checked at reshape; the recurrence in cuda_rnn.cu.
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_ml.h"

namespace kiln::cuda {
namespace {

std::string check_rnn(const ir::Node& n) {
  for (int i = 0; i < 3; ++i)
    if (!n.has_input(i)) return "X, W and R are required";
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt != DataType::kUndefined && !is_float_type(dt) && dt != DataType::kFloat64)
    return std::string(dtype_name(dt)) + " does not run on CUDA";
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) continue;
    const DataType t = n.inputs[i]->type.dtype;
    if (i == 4) {
      if (t != DataType::kUndefined && t != DataType::kInt32) return "sequence_lens must be int32";
    } else if (t != DataType::kUndefined && dt != DataType::kUndefined && t != dt) {
      return "every float input must have X's dtype";
    }
  }
  return "";
}

Expected<KernelPtr> create_rnn(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::RnnParams p, ops::parse_rnn(n));
  RnnArgs base;
  const int cell = p.cell;
  base.cell = cell;
  base.num_dir = p.num_dir;
  base.reverse_only = p.reverse_only;
  const int64_t hidden_attr = p.hidden_size;
  base.layout = static_cast<int>(p.layout);
  base.linear_before_reset = p.linear_before_reset;
  base.input_forget = p.input_forget;
  base.has_clip = p.has_clip;
  base.clip = p.clip;
  for (size_t i = 0; i < p.acts.size() && i < 6; ++i) base.acts[i] = p.acts[i];
  auto reshape = [base, hidden_attr](ReshapeContext& rc) -> Status {
    auto present = [&](size_t i) { return rc.in.size() > i && rc.in[i].present; };
    const Shape &x = rc.in[0].shape, &w = rc.in[1].shape, &r = rc.in[2].shape;
    if (x.size() != 3 || w.size() != 3 || r.size() != 3) return rc.error("X, W and R must be 3-D");
    auto a = std::make_shared<RnnArgs>(base);
    a->elem = elem_of(rc.in[0].dtype);
    a->seq = base.layout == 1 ? x[1] : x[0];
    a->batch = base.layout == 1 ? x[0] : x[1];
    a->input = x[2];
    a->hidden = r[2];
    if (hidden_attr && hidden_attr != a->hidden) return rc.error("hidden_size differs from R's last dim");
    const int64_t nd = a->num_dir, G = base.cell == 0 ? 1 : base.cell == 1 ? 3 : 4, GH = G * a->hidden, B = a->batch,
                  H = a->hidden;
    auto want = [&](size_t i, const char* name, const Shape& s) -> Status {
      if (!present(i) || rc.in[i].shape == s) return Status::Ok();
      return rc.error(std::string(name) + " must have shape " + shape_to_string(s) + ", got " + shape_to_string(rc.in[i].shape));
    };
    KILN_RETURN_IF_ERROR(want(1, "W", {nd, GH, a->input}));
    KILN_RETURN_IF_ERROR(want(2, "R", {nd, GH, H}));
    KILN_RETURN_IF_ERROR(want(3, "B", {nd, 2 * GH}));
    KILN_RETURN_IF_ERROR(want(4, "sequence_lens", {B}));
    const Shape state = base.layout == 1 ? Shape{B, nd, H} : Shape{nd, B, H};
    KILN_RETURN_IF_ERROR(want(5, "initial_h", state));
    if (base.cell == 2) {
      KILN_RETURN_IF_ERROR(want(6, "initial_c", state));
      KILN_RETURN_IF_ERROR(want(7, "P", {nd, 3 * H}));
    }
    if (present(4) && rc.in[4].value) {  // lengths known while planning are checked here
      const Tensor& l = *rc.in[4].value;
      for (int64_t i = 0; i < l.numel(); ++i)
        if (l.data<int32_t>()[i] < 0 || l.data<int32_t>()[i] > a->seq) return rc.error("sequence_lens entries must lie in [0, seq]");
    }
    const DataType dt = rc.in[0].dtype;
    rc.out[0] = {dt, base.layout == 1 ? Shape{B, a->seq, nd, H} : Shape{a->seq, nd, B, H}};
    if (rc.out.size() > 1) rc.out[1] = {dt, state};
    if (rc.out.size() > 2 && base.cell == 2) rc.out[2] = {dt, state};
    rc.workspace_bytes = rnn_workspace(*a);
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [cell](KernelContext& ctx) -> Status {
    RnnArgs a = shape_state<RnnArgs>(ctx);
    auto in = [&](int i) -> const void* { return ctx.has_input(i) ? ctx.input(i).raw() : nullptr; };
    a.x = in(0), a.w = in(1), a.r = in(2), a.b = in(3);
    a.lens = ctx.has_input(4) ? ctx.input(4).data<int32_t>() : nullptr;
    a.h0 = in(5);
    a.c0 = cell == 2 ? in(6) : nullptr;
    a.p = cell == 2 ? in(7) : nullptr;
    a.y = ctx.has_output(0) ? ctx.output(0).raw() : nullptr;
    a.yh = ctx.has_output(1) ? ctx.output(1).raw() : nullptr;
    a.yc = cell == 2 && ctx.has_output(2) ? ctx.output(2).raw() : nullptr;
    a.workspace = static_cast<double*>(ctx.workspace());
    return launched(ctx, launch_rnn(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_rnn(KernelRegistry& r) {
  for (const char* op : {"RNN", "GRU", "LSTM"})
    r.add(kernel_row(op, 7, check_rnn, [](const ir::Node& n, KernelInit&) { return create_rnn(n); }));
}

}  // namespace kiln::cuda
