// backends/cpu/control.cpp — CPU kernels of the control family: registration and shared helpers.
// The kernels live in control_flow.cpp (If, Loop, Scan) and control_sequence.cpp (sequences and
// optionals).
#include <cstring>

#include "backends/cpu/control_common.h"

namespace kiln::cpu {

void register_control(KernelRegistry& r) {
  control::register_flow(r);
  control::register_sequence(r);
}

namespace control {

void copy_elems(const Tensor& src, int64_t src_off, Tensor& dst, int64_t dst_off, int64_t n) {
  if (n <= 0) return;
  if (src.dtype() == DataType::kString) {
    const std::string* s = src.data<std::string>() + src_off;
    std::string* d = dst.data<std::string>() + dst_off;
    for (int64_t i = 0; i < n; ++i) d[i] = s[i];
    return;
  }
  const size_t es = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw()) + dst_off * es, static_cast<const char*>(src.raw()) + src_off * es,
              static_cast<size_t>(n) * es);
}

Status copy_to_output(KernelContext& ctx, int i, const Tensor& t) {
  if (!ctx.has_output(i)) return Status::Ok();
  if (!t.device().is_cpu()) return ctx.error("expected a CPU tensor");
  Tensor& out = ctx.output(i, t.dtype(), t.shape());
  copy_elems(t, 0, out, 0, t.numel());
  return Status::Ok();
}

Status set_output(KernelContext& ctx, int i, const Slot& v) {
  if (v.kind == Slot::Kind::kTensor) return copy_to_output(ctx, i, v.tensor);
  if (ctx.has_output(i)) ctx.output_slot(i) = v;
  return Status::Ok();
}

Tensor scalar_bool(bool b) {
  Tensor t = Tensor::empty(DataType::kBool, {});
  *t.data<bool>() = b;
  return t;
}

Tensor scalar_int64(int64_t v) {
  Tensor t = Tensor::empty(DataType::kInt64, {});
  *t.data<int64_t>() = v;
  return t;
}

Expected<int64_t> read_int_scalar(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (t.numel() != 1) return ctx.error(std::string(what) + " must hold one value, got shape " + shape_to_string(t.shape()));
  if (t.dtype() == DataType::kInt64) return *t.data<int64_t>();
  if (t.dtype() == DataType::kInt32) return static_cast<int64_t>(*t.data<int32_t>());
  return ctx.error(std::string(what) + " must be int32 or int64, got " + dtype_name(t.dtype()));
}

Expected<bool> read_bool_scalar(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (t.numel() != 1) return ctx.error(std::string(what) + " must hold one value, got shape " + shape_to_string(t.shape()));
  if (t.dtype() != DataType::kBool) return ctx.error(std::string(what) + " must be bool, got " + dtype_name(t.dtype()));
  return *t.data<bool>();
}

const ir::Graph* graph_attr(const ir::Node& node, const std::string& name) {
  const ir::Attribute* a = node.attr(name);
  return a && a->kind == ir::Attribute::Kind::kGraph ? a->g.get() : nullptr;
}

Expected<std::shared_ptr<CompiledGraph>> compile_attr(const ir::Node& node, KernelInit& init, const std::string& name) {
  const ir::Graph* g = graph_attr(node, name);
  if (!g) return invalid_model(node.describe() + ": missing graph attribute '" + name + "'");
  if (!init.subgraphs) return unsupported(node.describe() + ": subgraphs can only run inside a lowered plan");
  return init.subgraphs->compile(*g);
}

Tensor take_along(const Tensor& x, int axis, int64_t idx) {
  Shape s = x.shape();
  const int64_t len = s[axis];
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  s.erase(s.begin() + axis);
  Tensor out = Tensor::empty(x.dtype(), s);
  for (int64_t o = 0; o < outer; ++o) copy_elems(x, (o * len + idx) * inner, out, o * inner, inner);
  return out;
}

Tensor zeros(DataType dt, const Shape& shape) { return Tensor::empty(dt, shape); }  // empty() zero-fills

}  // namespace control
}  // namespace kiln::cpu
