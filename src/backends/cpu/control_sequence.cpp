// backends/cpu/control_sequence.cpp — sequence and optional operators on the CPU.
// Tensors stored into sequences or optionals are owned copies (ctx.owned_copy), so a sequence
// never points into arena memory the planner reuses. Tensors inside sequences are never written
// again, so sequences may share them.
#include <numeric>

#include "backends/cpu/control_common.h"
#include "ops/params_ml.h"

namespace kiln::cpu::control {
namespace {

using GraphPtr = std::shared_ptr<CompiledGraph>;

Expected<const Slot*> sequence_input(const KernelContext& ctx, int i) {
  if (!ctx.has_input(i) || ctx.input_slot(i).kind != Slot::Kind::kSequence)
    return ctx.error("input " + std::to_string(i) + " must be a sequence");
  return &ctx.input_slot(i);
}

Expected<const Tensor*> tensor_input(const KernelContext& ctx, int i) {
  if (!ctx.has_input(i) || ctx.input_slot(i).kind != Slot::Kind::kTensor)
    return ctx.error("input " + std::to_string(i) + " must be a tensor");
  return &ctx.input(i);
}

// A position into a sequence of length n: valid in [-n, n-1], or [-n, n] when `end_ok`.
Expected<int64_t> seq_position(const KernelContext& ctx, const Tensor& p, int64_t n, bool end_ok) {
  KILN_ASSIGN_OR_RETURN(int64_t pos, read_int_scalar(ctx, p, "position"));
  const int64_t hi = end_ok ? n : n - 1;
  if (pos < -n || pos > hi)
    return ctx.error("position " + std::to_string(pos) + " is out of range for a sequence of length " + std::to_string(n));
  return pos < 0 ? pos + n : pos;
}

Status set_sequence(KernelContext& ctx, int i, std::vector<Tensor> seq, DataType dt) {
  if (ctx.has_output(i)) ctx.output_slot(i) = Slot::of_sequence(std::move(seq), dt);
  return Status::Ok();
}

// ---- Sequence ops

Status sequence_construct(KernelContext& ctx) {
  std::vector<Tensor> seq;
  DataType dt = DataType::kUndefined;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    KILN_ASSIGN_OR_RETURN(const Tensor* t, tensor_input(ctx, i));
    if (i > 0 && t->dtype() != dt) return ctx.error("all inputs must have the same dtype");
    dt = t->dtype();
    seq.push_back(ctx.owned_copy(*t));
  }
  return set_sequence(ctx, 0, std::move(seq), dt);
}

Status sequence_at(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Slot* s, sequence_input(ctx, 0));
  KILN_ASSIGN_OR_RETURN(const Tensor* p, tensor_input(ctx, 1));
  KILN_ASSIGN_OR_RETURN(int64_t pos, seq_position(ctx, *p, static_cast<int64_t>(s->sequence.size()), false));
  return copy_to_output(ctx, 0, s->sequence[pos]);
}

Status sequence_insert(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Slot* s, sequence_input(ctx, 0));
  KILN_ASSIGN_OR_RETURN(const Tensor* t, tensor_input(ctx, 1));
  const bool typed = s->seq_dtype != DataType::kUndefined;
  if (typed && t->dtype() != s->seq_dtype)
    return ctx.error(std::string("cannot insert a ") + dtype_name(t->dtype()) + " tensor into a sequence of " +
                     dtype_name(s->seq_dtype));
  std::vector<Tensor> seq = s->sequence;
  int64_t pos = static_cast<int64_t>(seq.size());
  if (ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(pos, seq_position(ctx, ctx.input(2), pos, true));
  }
  seq.insert(seq.begin() + pos, ctx.owned_copy(*t));
  return set_sequence(ctx, 0, std::move(seq), typed ? s->seq_dtype : t->dtype());
}

Status sequence_erase(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Slot* s, sequence_input(ctx, 0));
  std::vector<Tensor> seq = s->sequence;
  const int64_t n = static_cast<int64_t>(seq.size());
  int64_t pos = n - 1;
  if (ctx.has_input(1)) {
    KILN_ASSIGN_OR_RETURN(pos, seq_position(ctx, ctx.input(1), n, false));
  } else if (n == 0) {
    return ctx.error("cannot erase from an empty sequence");
  }
  seq.erase(seq.begin() + pos);
  return set_sequence(ctx, 0, std::move(seq), s->seq_dtype);
}

Status sequence_length(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(const Slot* s, sequence_input(ctx, 0));
  return copy_to_output(ctx, 0, scalar_int64(static_cast<int64_t>(s->sequence.size())));
}

Status split_to_sequence(KernelContext& ctx, int64_t axis_attr, bool keepdims) {
  KILN_ASSIGN_OR_RETURN(const Tensor* x, tensor_input(ctx, 0));
  int64_t axis = axis_attr;
  if (!ops::normalize_axis(axis, x->rank()))
    return ctx.error("axis " + std::to_string(axis_attr) + " is out of range for rank " + std::to_string(x->rank()));
  const int64_t len = x->dim(static_cast<int>(axis));
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (!ctx.has_input(1)) {
    sizes.assign(len, 1);
    squeeze = !keepdims;
  } else {
    const Tensor& sp = ctx.input(1);
    if (sp.dtype() != DataType::kInt64 && sp.dtype() != DataType::kInt32) return ctx.error("split must be int32 or int64");
    auto at = [&](int64_t i) { return sp.dtype() == DataType::kInt64 ? sp.data<int64_t>()[i] : sp.data<int32_t>()[i]; };
    if (sp.rank() == 0) {
      const int64_t chunk = at(0);
      if (chunk <= 0) return ctx.error("split must be positive, got " + std::to_string(chunk));
      for (int64_t b = 0; b < len; b += chunk) sizes.push_back(std::min(chunk, len - b));
    } else if (sp.rank() == 1) {
      for (int64_t i = 0; i < sp.numel(); ++i) {
        if (at(i) < 0) return ctx.error("split sizes must not be negative");
        sizes.push_back(at(i));
      }
      if (std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) != len)
        return ctx.error("split sizes sum to " + std::to_string(std::accumulate(sizes.begin(), sizes.end(), int64_t{0})) +
                         ", but the axis has " + std::to_string(len) + " elements");
    } else {
      return ctx.error("split must be a scalar or a 1-D tensor");
    }
  }
  const Shape& s = x->shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  std::vector<Tensor> seq;
  int64_t start = 0;
  for (int64_t size : sizes) {
    Shape ps = s;
    ps[axis] = size;
    if (squeeze) ps.erase(ps.begin() + axis);
    Tensor part = Tensor::empty(x->dtype(), ps);
    for (int64_t o = 0; o < outer; ++o) copy_elems(*x, (o * len + start) * inner, part, o * size * inner, size * inner);
    seq.push_back(std::move(part));  // freshly allocated: owned already
    start += size;
  }
  return set_sequence(ctx, 0, std::move(seq), x->dtype());
}

Status concat_from_sequence(KernelContext& ctx, int64_t axis_attr, bool new_axis) {
  KILN_ASSIGN_OR_RETURN(const Slot* s, sequence_input(ctx, 0));
  const auto& seq = s->sequence;
  if (seq.empty()) return ctx.error("cannot concatenate an empty sequence");
  const Tensor& first = seq[0];
  const int r = first.rank();
  int64_t axis = axis_attr;
  if (!ops::normalize_axis(axis, r + (new_axis ? 1 : 0)))
    return ctx.error("axis " + std::to_string(axis_attr) + " is out of range for rank " + std::to_string(r));
  // Every element as seen with the concatenation axis present (new_axis inserts a 1).
  auto view_shape = [&](const Tensor& t) {
    Shape v = t.shape();
    if (new_axis) v.insert(v.begin() + axis, 1);
    return v;
  };
  Shape out = view_shape(first);
  out[axis] = 0;
  for (const Tensor& t : seq) {
    const Shape v = view_shape(t);
    if (t.dtype() != first.dtype() || static_cast<int>(v.size()) != static_cast<int>(out.size()))
      return ctx.error("sequence elements differ in dtype or rank");
    for (size_t d = 0; d < v.size(); ++d)
      if (static_cast<int64_t>(d) != axis && v[d] != out[d])
        return ctx.error("sequence elements " + shape_to_string(first.shape()) + " and " + shape_to_string(t.shape()) +
                         " differ outside the concatenation axis");
    out[axis] += v[axis];
  }
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out[d];
  for (size_t d = axis + 1; d < out.size(); ++d) inner *= out[d];
  Tensor& dst = ctx.output(0, first.dtype(), out);
  int64_t start = 0;
  for (const Tensor& t : seq) {
    const int64_t size = view_shape(t)[axis];
    for (int64_t o = 0; o < outer; ++o) copy_elems(t, o * size * inner, dst, (o * out[axis] + start) * inner, size * inner);
    start += size;
  }
  return Status::Ok();
}

// SequenceMap: the body runs once per element of input 0; further inputs are sequences (taken
// element-wise, same length) or tensors (given whole each time). Body outputs form sequences.
Status sequence_map(KernelContext& ctx, const CompiledGraph& body, const ir::Graph& body_ir) {
  KILN_ASSIGN_OR_RETURN(const Slot* s0, sequence_input(ctx, 0));
  const size_t n = s0->sequence.size();
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is missing");
    const Slot& s = ctx.input_slot(i);
    if (s.kind == Slot::Kind::kSequence && s.sequence.size() != n)
      return ctx.error("input sequences differ in length (" + std::to_string(n) + " vs " +
                       std::to_string(s.sequence.size()) + ")");
  }
  const int n_out = ctx.num_outputs();
  std::vector<std::vector<Tensor>> results(n_out);
  std::vector<Slot> outs;
  for (size_t e = 0; e < n; ++e) {
    std::vector<Slot> in;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Slot& s = ctx.input_slot(i);
      in.push_back(s.kind == Slot::Kind::kSequence ? Slot::of(s.sequence[e]) : s);
    }
    KILN_RETURN_IF_ERROR(ctx.run_subgraph(body, std::move(in), outs));
    if (static_cast<int>(outs.size()) < n_out) return ctx.error("the body gives fewer outputs than the node has");
    for (int o = 0; o < n_out; ++o) {
      if (outs[o].kind != Slot::Kind::kTensor) return ctx.error("body outputs must be tensors");
      results[o].push_back(ctx.owned_copy(outs[o].tensor));
    }
  }
  for (int o = 0; o < n_out; ++o) {
    DataType dt = results[o].empty() ? DataType::kUndefined : results[o][0].dtype();
    if (dt == DataType::kUndefined && o < static_cast<int>(body_ir.outputs.size())) dt = body_ir.outputs[o]->type.dtype;
    KILN_RETURN_IF_ERROR(set_sequence(ctx, o, std::move(results[o]), dt));
  }
  return Status::Ok();
}

// ---- Optional ops

Status optional_make(KernelContext& ctx) {
  if (!ctx.has_output(0)) return Status::Ok();
  if (!ctx.has_input(0)) {
    ctx.output_slot(0) = Slot();
    return Status::Ok();
  }
  const Slot& in = ctx.input_slot(0);
  if (in.kind == Slot::Kind::kTensor) return copy_to_output(ctx, 0, in.tensor);
  ctx.output_slot(0) = in;  // a sequence: its tensors are owned already
  return Status::Ok();
}

Status optional_has_element(KernelContext& ctx) {
  return copy_to_output(ctx, 0, scalar_bool(ctx.has_input(0)));
}

Status optional_get_element(KernelContext& ctx) {
  if (!ctx.has_input(0)) return ctx.error("the optional input is empty");
  return set_output(ctx, 0, ctx.input_slot(0));
}

KernelFactory plain(Status (*fn)(KernelContext&)) {
  return [fn](const ir::Node&, KernelInit&) -> Expected<KernelPtr> { return make_kernel(fn); };
}

Expected<KernelPtr> create_sequence_empty(const ir::Node& node, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::SequenceEmptyParams p, ops::parse_sequence_empty(node));
  return make_kernel([dt = p.dtype](KernelContext& ctx) { return set_sequence(ctx, 0, {}, dt); });
}

Expected<KernelPtr> create_split_to_sequence(const ir::Node& node, KernelInit&) {
  const ops::SplitToSequenceParams p = ops::parse_split_to_sequence(node);
  return make_kernel([p](KernelContext& ctx) { return split_to_sequence(ctx, p.axis, p.keepdims); });
}

Expected<KernelPtr> create_concat_from_sequence(const ir::Node& node, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(const ops::ConcatFromSequenceParams p, ops::parse_concat_from_sequence(node));
  return make_kernel([p](KernelContext& ctx) { return concat_from_sequence(ctx, p.axis, p.new_axis); });
}

Expected<KernelPtr> create_sequence_map(const ir::Node& node, KernelInit& init) {
  KILN_ASSIGN_OR_RETURN(GraphPtr body, compile_attr(node, init, "body"));
  const ir::Graph* body_ir = graph_attr(node, "body");
  return make_kernel([body, body_ir](KernelContext& ctx) { return sequence_map(ctx, *body, *body_ir); });
}

}  // namespace

void register_sequence(KernelRegistry& r) {
  r.add({"SequenceConstruct", "", 11, 1 << 30, "cpu.SequenceConstruct", nullptr, plain(sequence_construct)});
  r.add({"SequenceEmpty", "", 11, 1 << 30, "cpu.SequenceEmpty", nullptr, create_sequence_empty});
  r.add({"SequenceAt", "", 11, 1 << 30, "cpu.SequenceAt", nullptr, plain(sequence_at)});
  r.add({"SequenceInsert", "", 11, 1 << 30, "cpu.SequenceInsert", nullptr, plain(sequence_insert)});
  r.add({"SequenceErase", "", 11, 1 << 30, "cpu.SequenceErase", nullptr, plain(sequence_erase)});
  r.add({"SequenceLength", "", 11, 1 << 30, "cpu.SequenceLength", nullptr, plain(sequence_length)});
  r.add({"SplitToSequence", "", 11, 1 << 30, "cpu.SplitToSequence", nullptr, create_split_to_sequence});
  r.add({"ConcatFromSequence", "", 11, 1 << 30, "cpu.ConcatFromSequence", nullptr, create_concat_from_sequence});
  r.add({"SequenceMap", "", 17, 1 << 30, "cpu.SequenceMap", nullptr, create_sequence_map});
  r.add({"Optional", "", 15, 1 << 30, "cpu.Optional", nullptr, plain(optional_make)});
  r.add({"OptionalHasElement", "", 15, 1 << 30, "cpu.OptionalHasElement", nullptr, plain(optional_has_element)});
  r.add({"OptionalGetElement", "", 15, 1 << 30, "cpu.OptionalGetElement", nullptr, plain(optional_get_element)});
}

}  // namespace kiln::cpu::control
