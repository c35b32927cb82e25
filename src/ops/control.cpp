// ops/control.cpp — types and shapes of the control op family: If, Loop, Scan, sequences and
// optionals. Bodies are inferred first (infer_graph walks subgraphs before their node), so their
// declared or inferred output types are available here.
#include "ops/op_table.h"
#include "ops/params_ml.h"

namespace kiln::ops {
namespace {

using ir::Type;

const ir::Graph* body(const InferContext& ctx, const char* name) {
  const ir::Attribute* a = ctx.node.attr(name);
  return a && a->g ? a->g.get() : nullptr;
}

Type sequence_of(Type elem) {
  Type t;
  t.kind = Type::Kind::kSequence;
  t.elem = std::make_shared<Type>(std::move(elem));
  return t;
}

Type optional_of(Type elem) {
  Type t;
  t.kind = Type::Kind::kOptional;
  t.elem = std::make_shared<Type>(std::move(elem));
  return t;
}

Type unknown() {
  Type t;
  t.kind = Type::Kind::kUnknown;
  return t;
}

// What two branch/iteration types have in common: same dtype, dims kept where equal.
Type common(const Type& a, const Type& b) {
  if (a.kind != b.kind) return unknown();
  if (a.kind != Type::Kind::kTensor) return a;
  // An undefined dtype is "not known yet" and yields to the other side.
  const DataType dt = a.dtype == DataType::kUndefined ? b.dtype
                      : b.dtype == DataType::kUndefined || a.dtype == b.dtype ? a.dtype
                                                                               : DataType::kUndefined;
  Type t = Type::tensor(dt);
  if (a.shape.known && b.shape.known && a.shape.rank() == b.shape.rank()) {
    std::vector<ir::Dim> d(a.shape.rank());
    for (int i = 0; i < a.shape.rank(); ++i) d[i] = a.shape.dims[i] == b.shape.dims[i] ? a.shape.dims[i] : ir::Dim();
    t.shape = ir::SymShape(std::move(d));
  }
  return t;
}

// The tensor element type of a sequence/optional type (or the tensor type itself).
Type element(const Type& t) {
  if ((t.kind == Type::Kind::kSequence || t.kind == Type::Kind::kOptional) && t.elem) return *t.elem;
  if (t.kind == Type::Kind::kTensor) return t;
  return unknown();
}

// A tensor type with a new dim inserted at `axis` (unknown rank stays unknown).
Type with_new_dim(const Type& per_iter, int64_t axis, ir::Dim d) {
  Type t = Type::tensor(per_iter.dtype);
  if (per_iter.is_tensor() && per_iter.shape.known && normalize_axis(axis, per_iter.shape.rank() + 1)) {
    std::vector<ir::Dim> dims = per_iter.shape.dims;
    dims.insert(dims.begin() + axis, d);
    t.shape = ir::SymShape(std::move(dims));
  }
  return t;
}

Status infer_if(InferContext& ctx) {
  const ir::Graph* a = body(ctx, "then_branch");
  const ir::Graph* b = body(ctx, "else_branch");
  if (!a || !b) return ctx.error("missing then_branch or else_branch");
  for (size_t i = 0; i < ctx.out.size(); ++i) {
    if (i >= a->outputs.size() || i >= b->outputs.size()) break;
    ctx.out[i] = common(a->outputs[i]->type, b->outputs[i]->type);
  }
  return Status::Ok();
}

Status infer_loop(InferContext& ctx) {
  const ir::Graph* g = body(ctx, "body");
  if (!g) return ctx.error("missing body");
  const size_t n = ctx.node.inputs.size() >= 2 ? ctx.node.inputs.size() - 2 : 0;
  for (size_t i = 0; i < ctx.out.size() && 1 + i < g->outputs.size(); ++i) {
    const Type& t = g->outputs[1 + i]->type;
    if (i < n) ctx.out[i] = ctx.has(static_cast<int>(2 + i)) ? common(t, ctx.type(static_cast<int>(2 + i))) : t;
    else ctx.out[i] = with_new_dim(t, 0, ir::Dim());
    if (i < n && ctx.out[i].kind == Type::Kind::kUnknown) ctx.out[i] = t;
  }
  return Status::Ok();
}

Status infer_scan(InferContext& ctx) {
  const ir::Graph* g = body(ctx, "body");
  if (!g) return ctx.error("missing body");
  const ScanParams p = parse_scan_unchecked(ctx.node);
  const int m = p.num_scan_inputs;
  const bool v8 = p.opset8;
  const int n = static_cast<int>(ctx.node.inputs.size()) - m - (v8 ? 1 : 0);
  if (n < 0) return ctx.error("num_scan_inputs is larger than the number of inputs");
  const std::vector<int64_t>& out_axes = p.output_axes;
  for (size_t i = 0; i < ctx.out.size() && i < g->outputs.size(); ++i) {
    const Type& t = g->outputs[i]->type;
    if (static_cast<int>(i) < n) {
      // v8 states keep their batch axis: take the input's type.
      const int in = static_cast<int>(i) + (v8 ? 1 : 0);
      ctx.out[i] = v8 ? (ctx.has(in) ? ctx.type(in) : unknown()) : t;
    } else if (v8) {
      ctx.out[i] = with_new_dim(with_new_dim(t, 0, ir::Dim()), 0, ir::Dim());
    } else {
      const size_t k = i - n;
      ctx.out[i] = with_new_dim(t, k < out_axes.size() ? out_axes[k] : 0, ir::Dim());
    }
  }
  return Status::Ok();
}

Status infer_sequence_construct(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  Type e = ctx.type(0);
  for (int i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has(i)) e = common(e, ctx.type(i));
  ctx.out[0] = sequence_of(e);
  return Status::Ok();
}

Status infer_sequence_empty(InferContext& ctx) {
  ctx.out[0] = sequence_of(Type::tensor(parse_sequence_empty_unchecked(ctx.node).dtype));
  return Status::Ok();
}

Status infer_sequence_at(InferContext& ctx) {
  if (ctx.has(0)) ctx.out[0] = element(ctx.type(0));
  return Status::Ok();
}

Status infer_sequence_insert(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  Type e = element(ctx.type(0));
  if (ctx.has(1)) e = e.kind == Type::Kind::kUnknown ? ctx.type(1) : common(e, ctx.type(1));
  ctx.out[0] = sequence_of(e);
  return Status::Ok();
}

Status infer_same_as_input(InferContext& ctx) {
  if (ctx.has(0)) ctx.out[0] = ctx.type(0);
  return Status::Ok();
}

Status infer_sequence_length(InferContext& ctx) {
  ctx.out[0] = Type::tensor(DataType::kInt64, ir::SymShape(std::vector<ir::Dim>{}));
  return Status::Ok();
}

Status infer_split_to_sequence(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  Type e = Type::tensor(ctx.dtype(0));
  const ir::SymShape& s = ctx.shape(0);
  if (s.known) {
    const SplitToSequenceParams p = parse_split_to_sequence(ctx.node);
    int64_t axis = p.axis;
    if (!normalize_axis(axis, s.rank())) return ctx.error("axis is out of range");
    std::vector<ir::Dim> dims = s.dims;
    const bool squeeze = !ctx.has(1) && !p.keepdims;
    if (squeeze) dims.erase(dims.begin() + axis);
    else dims[axis] = ctx.has(1) ? ir::Dim() : ir::Dim(1);
    e.shape = ir::SymShape(std::move(dims));
  }
  ctx.out[0] = sequence_of(e);
  return Status::Ok();
}

Status infer_concat_from_sequence(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  const Type e = element(ctx.type(0));
  if (e.kind != Type::Kind::kTensor) return Status::Ok();
  Type t = Type::tensor(e.dtype);
  if (e.shape.known) {
    const ConcatFromSequenceParams p = parse_concat_from_sequence_unchecked(ctx.node);
    const bool new_axis = p.new_axis;
    int64_t axis = p.axis;
    const int r = e.shape.rank() + (new_axis ? 1 : 0);
    if (!normalize_axis(axis, r)) return ctx.error("axis is out of range");
    std::vector<ir::Dim> dims = e.shape.dims;
    if (new_axis) dims.insert(dims.begin() + axis, ir::Dim());
    else dims[axis] = ir::Dim();
    t.shape = ir::SymShape(std::move(dims));
  }
  ctx.out[0] = t;
  return Status::Ok();
}

Status infer_sequence_map(InferContext& ctx) {
  const ir::Graph* g = body(ctx, "body");
  if (!g) return ctx.error("missing body");
  for (size_t i = 0; i < ctx.out.size() && i < g->outputs.size(); ++i) ctx.out[i] = sequence_of(g->outputs[i]->type);
  return Status::Ok();
}

Status infer_optional(InferContext& ctx) {
  if (ctx.has(0)) {
    ctx.out[0] = optional_of(ctx.type(0));
  } else if (const OptionalParams p = parse_optional(ctx.node); p.has_type) {
    ctx.out[0] = optional_of(p.type);
  }
  return Status::Ok();
}

Status infer_optional_has_element(InferContext& ctx) {
  ctx.out[0] = Type::tensor(DataType::kBool, ir::SymShape(std::vector<ir::Dim>{}));
  return Status::Ok();
}

Status infer_optional_get_element(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  const Type& t = ctx.type(0);
  if (t.kind == Type::Kind::kOptional && t.elem) ctx.out[0] = *t.elem;
  else if (t.kind != Type::Kind::kOptional) ctx.out[0] = t;
  return Status::Ok();
}

}  // namespace

void add_control_ops(std::vector<OpDef>& t) {
  t.push_back({"If", "", 1, infer_if});
  t.push_back({"Loop", "", 1, infer_loop});
  t.push_back({"Scan", "", 8, infer_scan});
  t.push_back({"SequenceConstruct", "", 11, infer_sequence_construct});
  t.push_back({"SequenceEmpty", "", 11, infer_sequence_empty});
  t.push_back({"SequenceAt", "", 11, infer_sequence_at});
  t.push_back({"SequenceInsert", "", 11, infer_sequence_insert});
  t.push_back({"SequenceErase", "", 11, infer_same_as_input});
  t.push_back({"SequenceLength", "", 11, infer_sequence_length});
  t.push_back({"SplitToSequence", "", 11, infer_split_to_sequence});
  t.push_back({"ConcatFromSequence", "", 11, infer_concat_from_sequence});
  t.push_back({"SequenceMap", "", 17, infer_sequence_map});
  t.push_back({"Optional", "", 15, infer_optional});
  t.push_back({"OptionalHasElement", "", 15, infer_optional_has_element});
  t.push_back({"OptionalGetElement", "", 15, infer_optional_get_element});
}

}  // namespace kiln::ops
