// backends/cuda/cuda_util.cpp — host-side helpers shared by the CUDA kernel tables.
#include "backends/cuda/cuda_util.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "ops/shape_infer_util.h"

namespace kiln::cuda {

namespace {
std::string require_types(const ir::Value* v, const char* what, int i, const std::vector<DataType>& allowed) {
  if (!v || !v->type.is_tensor() || v->type.dtype == DataType::kUndefined) return "";
  for (DataType d : allowed)
    if (d == v->type.dtype) return "";
  return std::string(what) + " " + std::to_string(i) + " is " + dtype_name(v->type.dtype) + ", which this CUDA kernel does not take";
}
bool real_type(DataType t) { return is_float_type(t) || t == DataType::kFloat64; }
}  // namespace

std::string require_input_types(const ir::Node& n, int i, const std::vector<DataType>& allowed) {
  return require_types(n.has_input(i) ? n.inputs[i] : nullptr, "input", i, allowed);
}
std::string require_output_types(const ir::Node& n, int i, const std::vector<DataType>& allowed) {
  return require_types(n.has_output(i) ? n.outputs[i] : nullptr, "output", i, allowed);
}

int elem_of(DataType t) {
  switch (t) {
    case DataType::kFloat32: case DataType::kUInt8: case DataType::kInt8: case DataType::kUInt16:
    case DataType::kInt16: case DataType::kInt32: case DataType::kInt64: case DataType::kBool:
    case DataType::kFloat16: case DataType::kFloat64: case DataType::kUInt32: case DataType::kUInt64:
    case DataType::kBFloat16:
      return static_cast<int>(t);
    default:
      return -1;
  }
}

bool is_float_type(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat16 || t == DataType::kBFloat16;
}

std::optional<std::vector<int64_t>> host_ints(const Tensor* t) {
  if (!t || !t->device().is_cpu()) return std::nullopt;
  std::vector<int64_t> v(static_cast<size_t>(t->numel()));
  if (t->dtype() == DataType::kInt64) std::copy(t->data<int64_t>(), t->data<int64_t>() + t->numel(), v.begin());
  else if (t->dtype() == DataType::kInt32) std::copy(t->data<int32_t>(), t->data<int32_t>() + t->numel(), v.begin());
  else return std::nullopt;
  return v;
}

std::string require_float(const ir::Node& n) {
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i] && !n.inputs[i]->type.is_tensor()) return "takes tensors only";
    if (std::string r = require_input_types(n, static_cast<int>(i), {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16});
        !r.empty())
      return r;
  }
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (std::string r = require_output_types(n, static_cast<int>(i), {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16});
        !r.empty())
      return r;
  return "";
}

std::string tensor_inputs(const ir::Node& n, size_t required) {
  for (size_t i = 0; i < required; ++i)
    if (!n.has_input(static_cast<int>(i))) return "input " + std::to_string(i) + " is required";
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && !n.inputs[i]->type.is_tensor()) return "takes tensors only";
  return "";
}

std::string check_numeric0(const ir::Node& n, bool real_only) {
  if (!n.has_input(0) || !n.inputs[0]->type.is_tensor()) return "input 0 is required";
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt == DataType::kUndefined) return "";
  if (real_only ? !(is_float_type(dt) || dt == DataType::kFloat64) : (elem_of(dt) < 0 || dt == DataType::kBool))
    return std::string(dtype_name(dt)) + " does not run on CUDA";
  return "";
}

std::string check_same_float(const ir::Node& n, size_t required, uint32_t ints) {
  for (size_t i = 0; i < required; ++i)
    if (!n.has_input(static_cast<int>(i))) return "input " + std::to_string(i) + " is required";
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt != DataType::kUndefined && !real_type(dt)) return std::string(dtype_name(dt)) + " does not run on CUDA";
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) continue;
    if (!n.inputs[i]->type.is_tensor()) return "takes tensors only";
    const DataType t = n.inputs[i]->type.dtype;
    if ((ints >> i) & 1u) {
      if (t != DataType::kUndefined && t != DataType::kInt64) return "position_ids must be int64";
    } else if (t != DataType::kUndefined && dt != DataType::kUndefined && t != dt) {
      return "every float input must have the first input's dtype";
    }
  }
  return "";
}

KernelDef kernel_row(const std::string& op, int since, std::function<std::string(const ir::Node&)> check,
                     KernelFactory create, const std::string& domain) {
  KernelDef d;
  d.op = op;
  d.domain = domain;
  d.since = since;
  d.name = "cuda." + (domain.empty() ? op : domain + "." + op);
  d.half_floats = true;
  d.check = std::move(check);
  d.create = std::move(create);
  return d;
}

Status launched(const KernelContext& ctx, int err) {
  if (err == cudaSuccess) return Status::Ok();
  return runtime_error(ctx.node().describe() + ": CUDA launch failed: " +
                       cudaGetErrorString(static_cast<cudaError_t>(err)));
}

bool broadcast_shape(const Shape& a, const Shape& b, Shape& out) {
  const size_t r = std::max(a.size(), b.size());
  out.assign(r, 1);
  for (size_t k = 0; k < r; ++k) {
    const int64_t da = k < r - a.size() ? 1 : a[k - (r - a.size())];
    const int64_t db = k < r - b.size() ? 1 : b[k - (r - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    out[k] = da == 1 ? db : da;
  }
  return true;
}

bool make_broadcast_index(const Shape& out, const Shape& a, const Shape& b, BroadcastIndex& index) {
  const size_t r = out.size();
  // Per output dim: size and whether each input spans it (size > 1 there).
  std::vector<int64_t> dims;
  std::vector<bool> in_a, in_b;
  for (size_t k = 0; k < r; ++k) {
    const int64_t da = k < r - a.size() ? 1 : a[k - (r - a.size())];
    const int64_t db = k < r - b.size() ? 1 : b[k - (r - b.size())];
    if (out[k] == 1) continue;  // size-1 dims do not move any index
    const bool ua = da != 1, ub = db != 1;
    if (!dims.empty() && in_a.back() == ua && in_b.back() == ub) {
      dims.back() *= out[k];  // merge with the previous (outer) dim
    } else {
      dims.push_back(out[k]);
      in_a.push_back(ua);
      in_b.push_back(ub);
    }
  }
  if (dims.size() > static_cast<size_t>(kMaxRank)) return false;
  index = {};
  index.rank = static_cast<int>(dims.size());
  int64_t sa = 1, sb = 1;
  for (int k = index.rank - 1; k >= 0; --k) {
    index.dims[k] = dims[k];
    index.a_strides[k] = in_a[k] ? sa : 0;
    index.b_strides[k] = in_b[k] ? sb : 0;
    if (in_a[k]) sa *= dims[k];
    if (in_b[k]) sb *= dims[k];
  }
  return true;
}

bool normalize_axis(int64_t& axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return false;
  if (axis < 0) axis += rank;
  return true;
}

WindowIndex window_index(const ops::WindowGeometry& g, const std::vector<int64_t>& in) {
  WindowIndex w;
  w.n = static_cast<int>(in.size());
  for (int d = 0; d < w.n && d < kMaxRank; ++d) {
    w.in[d] = in[d];
    w.out[d] = g.out[d];
    w.kernel[d] = g.kernel[d];
    w.strides[d] = g.strides[d];
    w.dilations[d] = g.dilations[d];
    w.pad_begin[d] = g.pads[d];
    w.pad_end[d] = g.pads[w.n + d];
  }
  return w;
}

Status copy_device(const KernelContext& ctx, const Tensor& src, Tensor& dst) {
  if (src.nbytes() == 0) return Status::Ok();
  return launched(ctx, cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDeviceToDevice,
                                       state_of(ctx).stream));
}

Expected<Tensor> upload(const Tensor& host) {
  KILN_ASSIGN_OR_RETURN(Backend * gpu, backend_for(DeviceType::kCUDA));
  KILN_ASSIGN_OR_RETURN(auto storage, gpu->allocate(host.nbytes()));
  Tensor dev = Tensor::with_storage(host.dtype(), host.shape(), storage);
  KILN_RETURN_IF_ERROR(gpu->copy(host, dev, nullptr));
  return dev;
}

double quantized_bias(const Tensor* b, const std::vector<double>& values, int64_t j, double acc_scale) {
  if (!b) return 0.0;
  return b->dtype() == DataType::kInt32 ? values[static_cast<size_t>(j)] * acc_scale : values[static_cast<size_t>(j)];
}

}  // namespace kiln::cuda

namespace kiln::cuda {

Expected<Window> window_geometry(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pad_begin, int64_t pad_end,
                                 const std::string& auto_pad, bool ceil_mode) {
  if (k < 1 || s < 1 || d < 1) return invalid_argument("kernel, stride and dilation must be positive");
  const int64_t span = (k - 1) * d + 1;
  Window w;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    w.out = (in + s - 1) / s;
    const int64_t total = std::max<int64_t>(0, (w.out - 1) * s + span - in);
    w.pad_begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    w.pad_end = total - w.pad_begin;
    return w;
  }
  if (auto_pad == "VALID") {
    pad_begin = pad_end = 0;
  } else if (auto_pad != "NOTSET" && !auto_pad.empty()) {
    return invalid_argument("unknown auto_pad '" + auto_pad + "'");
  }
  w.pad_begin = pad_begin;
  w.pad_end = pad_end;
  const int64_t avail = in + pad_begin + pad_end - span;
  if (avail < 0) return invalid_argument("the window is larger than the padded input");
  w.out = (ceil_mode ? (avail + s - 1) / s : avail / s) + 1;
  // A window must start inside the input or its begin pad (ONNX Runtime and PyTorch drop the last otherwise).
  if (ceil_mode && (w.out - 1) * s >= in + pad_begin) --w.out;
  return w;
}

const Tensor* const_at(const ir::Node& n, int i) {
  return n.has_input(static_cast<size_t>(i)) && n.inputs[i]->is_constant() ? &*n.inputs[i]->constant : nullptr;
}

bool all_zero(const Tensor* t) {
  std::vector<double> v;
  if (!t || !ops::read_doubles(*t, v)) return false;
  for (double x : v)
    if (x != 0) return false;
  return true;
}

bool one_positive(const Tensor* t, double* out) {
  std::vector<double> v;
  if (!t || t->dtype() != DataType::kFloat32 || !ops::read_doubles(*t, v) || v.size() != 1) return false;
  if (!(v[0] > 0) || !std::isfinite(v[0])) return false;
  if (out) *out = v[0];
  return true;
}

}  // namespace kiln::cuda
