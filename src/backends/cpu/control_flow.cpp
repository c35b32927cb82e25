// backends/cpu/control_flow.cpp — If, Loop and Scan on the CPU. Each kernel compiles its bodies
// once at creation and runs them through KernelContext::run_subgraph; values of enclosing graphs
// reach the bodies by name through the runtime's frames.
#include <limits>

#include "backends/cpu/control_common.h"
#include "ops/params_ml.h"

namespace kiln::cpu::control {
namespace {

using GraphPtr = std::shared_ptr<CompiledGraph>;

// Copies `part` into `dst` at index `pos` of dimension `axis` (dst = part's shape with `axis` inserted).
void place(Tensor& dst, int axis, int64_t pos, const Tensor& part) {
  const Shape& s = dst.shape();
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t len = s[axis];
  for (int64_t o = 0; o < outer; ++o) copy_elems(part, o * inner, dst, (o * len + pos) * inner, inner);
}

Shape insert_dim(Shape s, int axis, int64_t n) {
  s.insert(s.begin() + axis, n);
  return s;
}

// Per-iteration outputs of a body must all agree in dtype and shape.
Status check_same(const KernelContext& ctx, const std::vector<Tensor>& parts, const Tensor& t, size_t k) {
  if (parts.empty()) return Status::Ok();
  if (parts[0].dtype() != t.dtype() || parts[0].shape() != t.shape())
    return ctx.error("scan output " + std::to_string(k) + " changes from " + dtype_name(parts[0].dtype()) +
                     shape_to_string(parts[0].shape()) + " to " + dtype_name(t.dtype()) + shape_to_string(t.shape()) +
                     " between iterations; every iteration must give the same shape");
  return Status::Ok();
}

// dtype and per-iteration shape of an empty scan output, from the body's declared output type
// (unknown dims become 0, since there are no elements anyway).
void empty_part_type(const ir::Type& t, DataType* dt, Shape* s) {
  *dt = t.is_tensor() && t.dtype != DataType::kUndefined ? t.dtype : DataType::kFloat32;
  s->clear();
  if (t.is_tensor() && t.shape.known)
    for (const ir::Dim& d : t.shape.dims) s->push_back(d.is_static() ? d.value : 0);
}

// Writes the stacked scan output: parts[i] goes to index i (or n-1-i when `reverse`) of `axis`.
Status write_stacked(KernelContext& ctx, int out, const std::vector<Tensor>& parts, int64_t axis, bool reverse,
                     const ir::Type& body_type) {
  if (!ctx.has_output(out)) return Status::Ok();
  const int64_t n = static_cast<int64_t>(parts.size());
  DataType dt;
  Shape part_shape;
  if (parts.empty()) empty_part_type(body_type, &dt, &part_shape);
  else dt = parts[0].dtype(), part_shape = parts[0].shape();
  int64_t ax = axis;
  if (!ops::normalize_axis(ax, static_cast<int64_t>(part_shape.size()) + 1))
    return ctx.error("scan output axis " + std::to_string(axis) + " is out of range for rank " +
                     std::to_string(part_shape.size() + 1));
  Tensor& dst = ctx.output(out, dt, insert_dim(part_shape, static_cast<int>(ax), n));
  for (int64_t i = 0; i < n; ++i) place(dst, static_cast<int>(ax), reverse ? n - 1 - i : i, parts[i]);
  return Status::Ok();
}

// ---- If

Status run_if(KernelContext& ctx, const CompiledGraph& then_g, const CompiledGraph& else_g) {
  if (!ctx.has_input(0) || ctx.input_slot(0).kind != Slot::Kind::kTensor) return ctx.error("cond must be a tensor");
  KILN_ASSIGN_OR_RETURN(bool cond, read_bool_scalar(ctx, ctx.input(0), "cond"));
  std::vector<Slot> outs;
  KILN_RETURN_IF_ERROR(ctx.run_subgraph(cond ? then_g : else_g, {}, outs));
  if (static_cast<int>(outs.size()) < ctx.num_outputs())
    return ctx.error(std::string(cond ? "then" : "else") + "_branch gives " + std::to_string(outs.size()) +
                     " outputs, the node has " + std::to_string(ctx.num_outputs()));
  for (int i = 0; i < ctx.num_outputs(); ++i) KILN_RETURN_IF_ERROR(set_output(ctx, i, outs[i]));
  return Status::Ok();
}

Expected<KernelPtr> create_if(const ir::Node& node, KernelInit& init) {
  KILN_ASSIGN_OR_RETURN(GraphPtr then_g, compile_attr(node, init, "then_branch"));
  KILN_ASSIGN_OR_RETURN(GraphPtr else_g, compile_attr(node, init, "else_branch"));
  return make_kernel([then_g, else_g](KernelContext& ctx) { return run_if(ctx, *then_g, *else_g); });
}

// ---- Loop: inputs (M, cond, v...), body (iter, cond, v...) → (cond, v..., scan...), outputs (v..., scan...)

Status run_loop(KernelContext& ctx, const CompiledGraph& body, const ir::Graph& body_ir) {
  const int n_carried = ctx.num_inputs() - 2;
  const int n_scan = static_cast<int>(body_ir.outputs.size()) - 1 - n_carried;
  if (n_carried < 0 || n_scan < 0)
    return ctx.error("the body has " + std::to_string(body_ir.outputs.size()) + " outputs, expected at least 1 + " +
                     std::to_string(std::max(n_carried, 0)) + " (cond and the loop-carried values)");
  int64_t trip = std::numeric_limits<int64_t>::max();
  if (ctx.has_input(0)) {
    KILN_ASSIGN_OR_RETURN(trip, read_int_scalar(ctx, ctx.input(0), "M (trip count)"));
  }
  const bool use_cond = ctx.has_input(1);
  bool cond = true;
  if (use_cond) {
    KILN_ASSIGN_OR_RETURN(cond, read_bool_scalar(ctx, ctx.input(1), "cond"));
  }
  if (!ctx.has_input(0) && !use_cond) return ctx.error("neither a trip count M nor a condition: the loop would never end");

  std::vector<Slot> carried(n_carried);
  for (int j = 0; j < n_carried; ++j) carried[j] = ctx.input_slot(2 + j);
  std::vector<std::vector<Tensor>> scans(n_scan);
  std::vector<Slot> outs;
  for (int64_t it = 0; it < trip && cond; ++it) {
    std::vector<Slot> in;
    in.push_back(Slot::of(scalar_int64(it)));
    in.push_back(Slot::of(scalar_bool(cond)));
    for (const Slot& c : carried) in.push_back(c);
    KILN_RETURN_IF_ERROR(ctx.run_subgraph(body, std::move(in), outs));
    if (static_cast<int>(outs.size()) != 1 + n_carried + n_scan) return ctx.error("the body gave the wrong number of outputs");
    if (use_cond) {
      if (outs[0].kind != Slot::Kind::kTensor) return ctx.error("the body's cond output must be a tensor");
      KILN_ASSIGN_OR_RETURN(cond, read_bool_scalar(ctx, outs[0].tensor, "the body's cond output"));
    }
    for (int j = 0; j < n_carried; ++j) carried[j] = std::move(outs[1 + j]);
    for (int k = 0; k < n_scan; ++k) {
      const Slot& s = outs[1 + n_carried + k];
      if (s.kind != Slot::Kind::kTensor) return ctx.error("scan output " + std::to_string(k) + " must be a tensor");
      KILN_RETURN_IF_ERROR(check_same(ctx, scans[k], s.tensor, k));
      scans[k].push_back(s.tensor);
    }
  }
  for (int j = 0; j < n_carried; ++j) KILN_RETURN_IF_ERROR(set_output(ctx, j, carried[j]));
  for (int k = 0; k < n_scan; ++k)
    KILN_RETURN_IF_ERROR(write_stacked(ctx, n_carried + k, scans[k], 0, false, body_ir.outputs[1 + n_carried + k]->type));
  return Status::Ok();
}

Expected<KernelPtr> create_loop(const ir::Node& node, KernelInit& init) {
  KILN_ASSIGN_OR_RETURN(GraphPtr body, compile_attr(node, init, "body"));
  const ir::Graph* body_ir = graph_attr(node, "body");
  return make_kernel([body, body_ir](KernelContext& ctx) { return run_loop(ctx, *body, *body_ir); });
}

// ---- Scan

// Opset 9+: inputs (state..., scan...), no batch axis.
Status run_scan9(KernelContext& ctx, const CompiledGraph& body, const ir::Graph& body_ir, const ops::ScanParams& a) {
  const int m = a.num_scan_inputs;
  const int n = ctx.num_inputs() - m;
  const int k_out = static_cast<int>(body_ir.outputs.size()) - n;
  if (n < 0 || k_out < 0) return ctx.error("num_scan_inputs does not match the inputs and the body");
  int64_t seq_len = -1;
  std::vector<int> axes(m);
  for (int j = 0; j < m; ++j) {
    if (!ctx.has_input(n + j) || ctx.input_slot(n + j).kind != Slot::Kind::kTensor)
      return ctx.error("scan input " + std::to_string(j) + " must be a tensor");
    const Tensor& x = ctx.input(n + j);
    int64_t ax = j < static_cast<int>(a.input_axes.size()) ? a.input_axes[j] : 0;
    if (!ops::normalize_axis(ax, x.rank()))
      return ctx.error("scan_input_axes[" + std::to_string(j) + "] is out of range for rank " + std::to_string(x.rank()));
    axes[j] = static_cast<int>(ax);
    if (seq_len >= 0 && x.dim(axes[j]) != seq_len)
      return ctx.error("scan inputs disagree on the sequence length (" + std::to_string(seq_len) + " vs " +
                       std::to_string(x.dim(axes[j])) + ")");
    seq_len = x.dim(axes[j]);
  }
  if (seq_len < 0) seq_len = 0;
  std::vector<Slot> state(n);
  for (int i = 0; i < n; ++i) state[i] = ctx.input_slot(i);
  std::vector<std::vector<Tensor>> scans(k_out);
  std::vector<Slot> outs;
  for (int64_t t = 0; t < seq_len; ++t) {
    std::vector<Slot> in = state;
    for (int j = 0; j < m; ++j) {
      const bool rev = j < static_cast<int>(a.input_directions.size()) && a.input_directions[j] == 1;
      in.push_back(Slot::of(take_along(ctx.input(n + j), axes[j], rev ? seq_len - 1 - t : t)));
    }
    KILN_RETURN_IF_ERROR(ctx.run_subgraph(body, std::move(in), outs));
    if (static_cast<int>(outs.size()) != n + k_out) return ctx.error("the body gave the wrong number of outputs");
    for (int i = 0; i < n; ++i) state[i] = std::move(outs[i]);
    for (int k = 0; k < k_out; ++k) {
      const Slot& s = outs[n + k];
      if (s.kind != Slot::Kind::kTensor) return ctx.error("scan output " + std::to_string(k) + " must be a tensor");
      KILN_RETURN_IF_ERROR(check_same(ctx, scans[k], s.tensor, k));
      scans[k].push_back(s.tensor);
    }
  }
  for (int i = 0; i < n; ++i) KILN_RETURN_IF_ERROR(set_output(ctx, i, state[i]));
  for (int k = 0; k < k_out; ++k) {
    // As int64: an axis of 2^32 narrowed to int was axis 0, silently.
    const int64_t axis = k < static_cast<int>(a.output_axes.size()) ? a.output_axes[k] : 0;
    const bool rev = k < static_cast<int>(a.output_directions.size()) && a.output_directions[k] == 1;
    KILN_RETURN_IF_ERROR(write_stacked(ctx, n + k, scans[k], axis, rev, body_ir.outputs[n + k]->type));
  }
  return Status::Ok();
}

// Opset 8: inputs (sequence_lens?, state..., scan...); axis 0 is the batch, axis 1 the sequence.
Status run_scan8(KernelContext& ctx, const CompiledGraph& body, const ir::Graph& body_ir, const ops::ScanParams& a) {
  const int m = a.num_scan_inputs;
  const int n = ctx.num_inputs() - 1 - m;
  const int k_out = static_cast<int>(body_ir.outputs.size()) - n;
  if (n < 0 || k_out < 0 || m < 1) return ctx.error("num_scan_inputs does not match the inputs and the body");
  for (int i = 1; i < ctx.num_inputs(); ++i)
    if (!ctx.has_input(i) || ctx.input_slot(i).kind != Slot::Kind::kTensor || ctx.input(i).rank() < 1 + (i > n))
      return ctx.error("input " + std::to_string(i) + " must be a tensor with a batch axis (and a sequence axis for scan inputs)");
  const int64_t batch = ctx.input(1 + n).dim(0), max_len = ctx.input(1 + n).dim(1);
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (ctx.input(i).dim(0) != batch) return ctx.error("inputs disagree on the batch size");
    if (i > n && ctx.input(i).dim(1) != max_len) return ctx.error("scan inputs disagree on the sequence length");
  }
  std::vector<int64_t> lens(batch, max_len);
  if (ctx.has_input(0)) {
    const Tensor& sl = ctx.input(0);
    if (sl.numel() != batch || (sl.dtype() != DataType::kInt32 && sl.dtype() != DataType::kInt64))
      return ctx.error("sequence_lens must be int32/int64 with one entry per batch item");
    for (int64_t b = 0; b < batch; ++b) {
      lens[b] = sl.dtype() == DataType::kInt64 ? sl.data<int64_t>()[b] : sl.data<int32_t>()[b];
      if (lens[b] < 0 || lens[b] > max_len) return ctx.error("sequence_lens[" + std::to_string(b) + "] is out of range");
    }
  }
  // Per batch item: final states and per-step scan outputs.
  std::vector<std::vector<Tensor>> final_state(n);
  std::vector<std::vector<std::vector<Tensor>>> scans(k_out, std::vector<std::vector<Tensor>>(batch));
  std::vector<Slot> outs;
  std::vector<Shape> part_shape(k_out);
  std::vector<DataType> part_dt(k_out, DataType::kUndefined);
  std::vector<bool> have_part(k_out, false);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<Slot> state(n);
    for (int i = 0; i < n; ++i) state[i] = Slot::of(take_along(ctx.input(1 + i), 0, b));
    std::vector<Tensor> xs(m);
    for (int j = 0; j < m; ++j) xs[j] = take_along(ctx.input(1 + n + j), 0, b);
    for (int64_t t = 0; t < lens[b]; ++t) {
      std::vector<Slot> in = state;
      for (int j = 0; j < m; ++j) {
        const bool rev = j < static_cast<int>(a.input_directions.size()) && a.input_directions[j] == 1;
        in.push_back(Slot::of(take_along(xs[j], 0, rev ? lens[b] - 1 - t : t)));
      }
      KILN_RETURN_IF_ERROR(ctx.run_subgraph(body, std::move(in), outs));
      if (static_cast<int>(outs.size()) != n + k_out) return ctx.error("the body gave the wrong number of outputs");
      for (int i = 0; i < n; ++i) {
        if (outs[i].kind != Slot::Kind::kTensor) return ctx.error("state outputs must be tensors");
        state[i] = std::move(outs[i]);
      }
      for (int k = 0; k < k_out; ++k) {
        if (outs[n + k].kind != Slot::Kind::kTensor) return ctx.error("scan outputs must be tensors");
        const Tensor& p = outs[n + k].tensor;
        if (have_part[k] && (p.dtype() != part_dt[k] || p.shape() != part_shape[k]))
          return ctx.error("scan output " + std::to_string(k) + " changes shape between iterations");
        have_part[k] = true, part_dt[k] = p.dtype(), part_shape[k] = p.shape();
        scans[k][b].push_back(p);
      }
    }
    for (int i = 0; i < n; ++i) final_state[i].push_back(state[i].tensor);
  }
  for (int i = 0; i < n; ++i) {
    if (!ctx.has_output(i)) continue;
    const Tensor& first = final_state[i].empty() ? ctx.input(1 + i) : final_state[i][0];
    Shape s = batch ? insert_dim(first.shape(), 0, batch) : ctx.input(1 + i).shape();
    Tensor& dst = ctx.output(i, first.dtype(), s);
    for (int64_t b = 0; b < batch; ++b) {
      if (final_state[i][b].shape() != first.shape()) return ctx.error("final states differ in shape across the batch");
      place(dst, 0, b, final_state[i][b]);
    }
  }
  for (int k = 0; k < k_out; ++k) {
    if (!ctx.has_output(n + k)) continue;
    if (!have_part[k]) empty_part_type(body_ir.outputs[n + k]->type, &part_dt[k], &part_shape[k]);
    Tensor& dst = ctx.output(n + k, part_dt[k], insert_dim(insert_dim(part_shape[k], 0, max_len), 0, batch));
    for (int64_t b = 0; b < batch; ++b) {
      Tensor row = zeros(part_dt[k], insert_dim(part_shape[k], 0, max_len));
      for (size_t t = 0; t < scans[k][b].size(); ++t) place(row, 0, static_cast<int64_t>(t), scans[k][b][t]);
      place(dst, 0, b, row);
    }
  }
  return Status::Ok();
}

Expected<KernelPtr> create_scan(const ir::Node& node, KernelInit& init) {
  KILN_ASSIGN_OR_RETURN(GraphPtr body, compile_attr(node, init, "body"));
  const ir::Graph* body_ir = graph_attr(node, "body");
  KILN_ASSIGN_OR_RETURN(const ops::ScanParams a, ops::parse_scan(node));
  return make_kernel([body, body_ir, a](KernelContext& ctx) {
    return a.opset8 ? run_scan8(ctx, *body, *body_ir, a) : run_scan9(ctx, *body, *body_ir, a);
  });
}

}  // namespace

void register_flow(KernelRegistry& r) {
  r.add({"If", "", 1, 1 << 30, "cpu.If", nullptr, create_if});
  r.add({"Loop", "", 1, 1 << 30, "cpu.Loop", nullptr, create_loop});
  r.add({"Scan", "", 8, 1 << 30, "cpu.Scan", nullptr, create_scan});
}

}  // namespace kiln::cpu::control
