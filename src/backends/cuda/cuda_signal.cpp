// backends/cuda/cuda_signal.cpp — DFT (17, 20) and the Hann/Hamming/Blackman windows (17+) on the GPU;
// their scalar operands (dft_length, axis, size) are host inputs (launchers in cuda_signal.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cuda {
namespace {

Expected<KernelPtr> create_window(const ir::Node& n) {
  const int kind = n.op_type == "HannWindow" ? 0 : n.op_type == "HammingWindow" ? 1 : 2;
  const ops::SignalWindowParams wp = ops::parse_signal_window(n);
  const bool periodic = wp.periodic;
  const DataType dt = wp.output_datatype;
  auto reshape = [dt](ReshapeContext& rc) -> Status {
    auto v = host_ints(rc.in[0].value);
    if (!v || v->size() != 1 || (*v)[0] < 0) return rc.error("size must be a non-negative scalar int known on the host");
    if (elem_of(dt) < 0) return rc.error(std::string("output_datatype ") + dtype_name(dt) + " does not run on CUDA");
    rc.out[0] = {dt, Shape{(*v)[0]}};
    return Status::Ok();
  };
  auto run = [kind, periodic](KernelContext& ctx) -> Status {
    Tensor& y = ctx.output(0);
    return launched(ctx, launch_window(kind, elem_of(y.dtype()), y.raw(), y.numel(), periodic, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

Expected<KernelPtr> create_dft(const ir::Node& nd) {
  const ops::DftParams p = ops::parse_dft(nd);
  const bool axis_input = p.axis_input;
  const int64_t axis_attr = p.axis;
  const bool inverse = p.inverse, onesided = p.onesided;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    if (r < 2 || (x.back() != 1 && x.back() != 2)) return rc.error("input's last dim must be 1 (real) or 2 (complex)");
    int64_t axis = axis_attr;
    if (axis_input && rc.in.size() > 2 && rc.in[2].present) {
      auto v = host_ints(rc.in[2].value);
      if (!v || v->size() != 1) return rc.error("axis must be a scalar int known on the host");
      axis = (*v)[0];
    }
    if (!normalize_axis(axis, r) || axis == r - 1) return rc.error("axis out of range");
    auto a = std::make_shared<DftArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->len = x[axis];
    a->n = inverse && onesided ? 2 * (a->len - 1) : a->len;
    if (rc.in.size() > 1 && rc.in[1].present && rc.in[1].value && rc.in[1].value->numel() > 0) {
      auto v = host_ints(rc.in[1].value);
      if (!v || v->size() != 1) return rc.error("dft_length must be a scalar int");
      a->n = (*v)[0];
    }
    if (a->n <= 0) return rc.error("dft_length must be positive");
    a->complex_in = x.back() == 2;
    a->inverse = inverse;
    a->real_out = inverse && onesided;
    for (int64_t d = 0; d < axis; ++d) a->outer *= x[d];
    for (int64_t d = axis + 1; d < r - 1; ++d) a->inner *= x[d];
    a->m = inverse ? a->n : (onesided ? a->n / 2 + 1 : a->n);
    Shape os = x;
    os[axis] = a->m;
    os.back() = a->real_out ? 1 : 2;
    rc.out[0] = {rc.in[0].dtype, os};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    DftArgs a = shape_state<DftArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_dft(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_signal(KernelRegistry& r) {
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) {
    KernelDef w = kernel_row(op, 17, [](const ir::Node& n) -> std::string {
      const DataType dt = ops::parse_signal_window(n).output_datatype;
      return elem_of(dt) < 0 ? std::string(dtype_name(dt)) + " output does not run on CUDA" : "";
    }, [](const ir::Node& n, KernelInit&) { return create_window(n); });
    w.host_inputs = 0b1;
    w.half_floats = false;
    r.add(w);
  }
  KernelDef dft = kernel_row("DFT", 17, [](const ir::Node& n) { return check_numeric0(n, true); },
                             [](const ir::Node& n, KernelInit&) { return create_dft(n); });
  dft.host_inputs = 0b110;
  r.add(dft);
}

}  // namespace kiln::cuda
