// backends/cpu/control_common.h — helpers shared by the control family's CPU kernels
// (control.cpp, control_flow.cpp, control_sequence.cpp). Not used outside the family.
#pragma once

#include <memory>
#include <string>

#include "backends/cpu/cpu_kernels.h"
#include "ops/op_table.h"

namespace kiln::cpu::control {

// Family registration, called from register_control.
void register_flow(KernelRegistry& r);      // If, Loop, Scan
void register_sequence(KernelRegistry& r);  // Sequence*, SplitToSequence, ConcatFromSequence, Optional*

// Copies `n` elements from src[src_off..] to dst[dst_off..] (element offsets; strings included).
void copy_elems(const Tensor& src, int64_t src_off, Tensor& dst, int64_t dst_off, int64_t n);
// Writes `v` to output i: a tensor is copied into ctx.output() memory, a sequence or an empty
// optional goes into the output slot.
Status set_output(KernelContext& ctx, int i, const Slot& v);
// Output i becomes a copy of tensor `t`.
Status copy_to_output(KernelContext& ctx, int i, const Tensor& t);

Tensor scalar_bool(bool b);
Tensor scalar_int64(int64_t v);
// The single value of an int32/int64 tensor with one element.
Expected<int64_t> read_int_scalar(const KernelContext& ctx, const Tensor& t, const char* what);
// The single value of a bool tensor with one element.
Expected<bool> read_bool_scalar(const KernelContext& ctx, const Tensor& t, const char* what);

// The graph attribute `name` of `node`, or null.
const ir::Graph* graph_attr(const ir::Node& node, const std::string& name);
// Compiles the graph attribute `name` through init.subgraphs.
Expected<std::shared_ptr<CompiledGraph>> compile_attr(const ir::Node& node, KernelInit& init, const std::string& name);

// Removes dimension `axis` of `x`, keeping index `idx` along it.
Tensor take_along(const Tensor& x, int axis, int64_t idx);
// A tensor of the given dtype/shape with every element zero (strings empty).
Tensor zeros(DataType dt, const Shape& shape);

}  // namespace kiln::cpu::control
