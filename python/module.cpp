// python/module.cpp — the `kiln._kiln` extension: Engine, ExecutionContext and numpy conversion.
//
// The Python package (python/kiln/) builds the ONNX Runtime–compatible InferenceSession and the onnx
// backend on top of these few bindings. Conversions:
//   numpy ndarray      ↔ kTensor Value (every ONNX dtype; bfloat16 / float8 / int4 / int2 / float4 through
//                        ml_dtypes, the dtypes onnx.numpy_helper itself uses)
//   list/tuple of them ↔ kSequence Value
//   None               ↔ kNone Value (an empty optional)
// Strings travel as numpy object arrays of `str` (inputs may also be 'U' or 'S' arrays).
// Errors raise kiln.KilnError (a RuntimeError) whose message is the Status text and whose `code`
// attribute is the status code name ("InvalidArgument", ...).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace py = pybind11;

namespace {

// ---- Errors

PyObject* g_kiln_error = nullptr;  // kiln.KilnError, created at module init

[[noreturn]] void raise_status(const kiln::Status& st) {
  py::object type = py::reinterpret_borrow<py::object>(g_kiln_error);
  py::object exc = type(st.to_string());
  exc.attr("code") = py::str(kiln::status_code_name(st.code()));
  PyErr_SetObject(g_kiln_error, exc.ptr());
  throw py::error_already_set();
}

template <typename T>
T unwrap(kiln::Expected<T>&& e) {
  if (!e.ok()) raise_status(e.status());
  return std::move(e).value();
}

void check(const kiln::Status& st) {
  if (!st.ok()) raise_status(st);
}

// ---- dtypes

// The ml_dtypes names onnx.helper.tensor_dtype_to_np_dtype uses for the types numpy lacks.
struct ExtDtype {
  kiln::DataType dt;
  const char* name;
};
constexpr ExtDtype kExtDtypes[] = {
    {kiln::DataType::kBFloat16, "bfloat16"},
    {kiln::DataType::kFloat8E4M3FN, "float8_e4m3fn"},
    {kiln::DataType::kFloat8E4M3FNUZ, "float8_e4m3fnuz"},
    {kiln::DataType::kFloat8E5M2, "float8_e5m2"},
    {kiln::DataType::kFloat8E5M2FNUZ, "float8_e5m2fnuz"},
    {kiln::DataType::kUInt4, "uint4"},
    {kiln::DataType::kInt4, "int4"},
    {kiln::DataType::kFloat4E2M1, "float4_e2m1fn"},
    {kiln::DataType::kFloat8E8M0, "float8_e8m0fnu"},
    {kiln::DataType::kUInt2, "uint2"},
    {kiln::DataType::kInt2, "int2"},
};

const char* numpy_builtin_name(kiln::DataType dt) {
  switch (dt) {
    case kiln::DataType::kFloat32: return "float32";
    case kiln::DataType::kFloat64: return "float64";
    case kiln::DataType::kFloat16: return "float16";
    case kiln::DataType::kInt8: return "int8";
    case kiln::DataType::kInt16: return "int16";
    case kiln::DataType::kInt32: return "int32";
    case kiln::DataType::kInt64: return "int64";
    case kiln::DataType::kUInt8: return "uint8";
    case kiln::DataType::kUInt16: return "uint16";
    case kiln::DataType::kUInt32: return "uint32";
    case kiln::DataType::kUInt64: return "uint64";
    case kiln::DataType::kBool: return "bool";
    case kiln::DataType::kComplex64: return "complex64";
    case kiln::DataType::kComplex128: return "complex128";
    case kiln::DataType::kString: return "object";
    default: return nullptr;
  }
}

// The numpy dtype kiln returns for `dt` (ml_dtypes for the extended types).
py::dtype numpy_dtype(kiln::DataType dt) {
  if (const char* name = numpy_builtin_name(dt)) return py::dtype(name);
  for (const auto& e : kExtDtypes) {
    if (e.dt == dt) {
      py::module_ ml = py::module_::import("ml_dtypes");
      return py::dtype::from_args(ml.attr(e.name));
    }
  }
  throw py::type_error(std::string("kiln: no numpy dtype for ") + kiln::dtype_name(dt));
}

// The kiln type of a numpy dtype, or kUndefined. Names first: ml_dtypes' float8_e5m2 has kind 'f'.
kiln::DataType kiln_dtype(const py::dtype& d) {
  const std::string name = py::str(d.attr("name"));
  for (const auto& e : kExtDtypes)
    if (name == e.name) return e.dt;
  const char kind = d.kind();
  const auto size = d.itemsize();
  switch (kind) {
    case 'f':
      if (size == 2) return kiln::DataType::kFloat16;
      if (size == 4) return kiln::DataType::kFloat32;
      if (size == 8) return kiln::DataType::kFloat64;
      break;
    case 'i':
      if (size == 1) return kiln::DataType::kInt8;
      if (size == 2) return kiln::DataType::kInt16;
      if (size == 4) return kiln::DataType::kInt32;
      if (size == 8) return kiln::DataType::kInt64;
      break;
    case 'u':
      if (size == 1) return kiln::DataType::kUInt8;
      if (size == 2) return kiln::DataType::kUInt16;
      if (size == 4) return kiln::DataType::kUInt32;
      if (size == 8) return kiln::DataType::kUInt64;
      break;
    case 'b': return kiln::DataType::kBool;
    case 'c':
      if (size == 8) return kiln::DataType::kComplex64;
      if (size == 16) return kiln::DataType::kComplex128;
      break;
    case 'U': case 'S': case 'O': return kiln::DataType::kString;
    default: break;
  }
  return kiln::DataType::kUndefined;
}

// Sub-byte types are held one element per byte, int4/int2 sign-extended (-8..7, -2..1); ml_dtypes
// keeps only the low bits. The mask of those bits, or 0 for the other types.
uint8_t sub_byte_mask(kiln::DataType dt) {
  switch (dt) {
    case kiln::DataType::kInt4: case kiln::DataType::kUInt4: case kiln::DataType::kFloat4E2M1: return 0x0F;
    case kiln::DataType::kInt2: case kiln::DataType::kUInt2: return 0x03;
    default: return 0;
  }
}

int8_t sign_extend(uint8_t b, int bits) {
  const int v = b & ((1 << bits) - 1);
  return static_cast<int8_t>(v >= (1 << (bits - 1)) ? v - (1 << bits) : v);
}

std::string to_utf8(const py::handle& item) {
  if (PyBytes_Check(item.ptr())) return std::string(py::reinterpret_borrow<py::bytes>(item));
  return std::string(py::str(item));
}

// ---- numpy → kiln

// Holds the numpy arrays whose memory input tensors borrow until the run finishes.
using KeepAlive = std::vector<py::object>;

kiln::Tensor to_tensor(const py::handle& obj, const std::string& what, KeepAlive& keep) {
  py::module_ np = py::module_::import("numpy");
  py::array arr = np.attr("asarray")(obj);
  py::dtype dtype = arr.dtype();
  const kiln::DataType dt = kiln_dtype(dtype);
  if (dt == kiln::DataType::kUndefined)
    throw py::type_error("kiln: " + what + ": unsupported numpy dtype " + std::string(py::str(dtype)));

  kiln::Shape shape(arr.shape(), arr.shape() + arr.ndim());

  if (dt == kiln::DataType::kString) {
    kiln::Tensor t = kiln::Tensor::empty(dt, shape);
    auto* out = t.data<std::string>();
    py::object flat = arr.attr("ravel")();
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) out[i] = to_utf8(flat[py::int_(i)]);
    return t;
  }
  if (!py::bool_(dtype.attr("isnative")))
    arr = arr.attr("astype")(dtype.attr("newbyteorder")("="));
  arr = np.attr("ascontiguousarray")(arr);

  if (dt == kiln::DataType::kInt4 || dt == kiln::DataType::kInt2) {
    const int bits = dt == kiln::DataType::kInt4 ? 4 : 2;
    kiln::Tensor t = kiln::Tensor::empty(dt, shape);
    const auto* src = static_cast<const uint8_t*>(arr.data());
    auto* dst = t.data<int8_t>();
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = sign_extend(src[i], bits);
    return t;
  }
  keep.push_back(arr);
  return kiln::Tensor::borrow(dt, shape, const_cast<void*>(arr.data()));
}

const kiln::TensorInfo* find_info(const std::vector<kiln::TensorInfo>& infos, const std::string& name) {
  for (const auto& i : infos)
    if (i.name == name) return &i;
  return nullptr;
}

kiln::Value to_value(const py::handle& obj, const std::string& name, const kiln::TensorInfo* info,
                     KeepAlive& keep) {
  if (obj.is_none()) return kiln::Value{};
  if (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj)) {
    std::vector<kiln::Tensor> seq;
    kiln::DataType dt = info ? info->dtype : kiln::DataType::kUndefined;
    size_t i = 0;
    for (const auto& item : py::reinterpret_borrow<py::sequence>(obj)) {
      seq.push_back(to_tensor(item, "input '" + name + "'[" + std::to_string(i++) + "]", keep));
      if (dt == kiln::DataType::kUndefined) dt = seq.back().dtype();
    }
    return kiln::Value::of_sequence(std::move(seq), dt);
  }
  return kiln::Value::of(to_tensor(obj, "input '" + name + "'", keep));
}

// ---- kiln → numpy

py::object to_numpy(const kiln::Tensor& t) {
  const kiln::DataType dt = t.dtype();
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  const int64_t n = t.numel();

  if (dt == kiln::DataType::kString) {
    py::array out(py::dtype("object"), shape);
    py::object flat = out.attr("reshape")(-1);
    const auto* src = t.data<std::string>();
    for (int64_t i = 0; i < n; ++i)
      flat[py::int_(i)] = py::reinterpret_steal<py::object>(
          PyUnicode_DecodeUTF8(src[i].data(), static_cast<py::ssize_t>(src[i].size()), "replace"));
    return out;
  }

  py::dtype dtype = numpy_dtype(dt);
  const auto& storage = t.storage();
  // Zero copy when this tensor is the sole owner of memory kiln allocated; otherwise (arena views,
  // weights, borrowed input memory) copy, so later runs cannot change a returned array.
  const uint8_t mask = sub_byte_mask(dt);
  const bool sole_owner = storage && storage.use_count() == 1 && storage->release && storage->device.is_cpu() &&
                          mask == 0;
  if (sole_owner) {
    auto* holder = new kiln::Tensor(t);
    py::capsule owner(holder, [](void* p) { delete static_cast<kiln::Tensor*>(p); });
    return py::array(dtype, shape, const_cast<void*>(t.raw()), owner);
  }
  py::array out(dtype, shape);
  if (n > 0) {
    std::memcpy(out.mutable_data(), t.raw(), t.nbytes());
    if (mask) {
      auto* p = static_cast<uint8_t*>(out.mutable_data());
      for (int64_t i = 0; i < n; ++i) p[i] &= mask;
    }
  }
  return out;
}

py::object to_python(const kiln::Value& v) {
  switch (v.kind) {
    case kiln::Value::Kind::kNone: return py::none();
    case kiln::Value::Kind::kTensor: return to_numpy(v.tensor);
    case kiln::Value::Kind::kSequence: {
      py::list out;
      for (const auto& t : v.sequence) out.append(to_numpy(t));
      return out;
    }
  }
  return py::none();
}

// ---- Engine / context wrappers

// Runs f() with the GIL released (kiln calls never touch Python objects).
template <typename F>
auto without_gil(F&& f) {
  py::gil_scoped_release nogil;
  return f();
}

kiln::BuildOptions build_options(const std::string& device, int opt_level, bool verbose,
                                 const std::string& precision = "fp32") {
  kiln::BuildOptions o;
  if (precision == "fp32") o.precision = kiln::Precision::kFloat32;
  else if (precision == "fp16") o.precision = kiln::Precision::kFloat16;
  else if (precision == "bf16") o.precision = kiln::Precision::kBFloat16;
  else if (precision == "tf32") o.precision = kiln::Precision::kTF32;
  else if (precision == "best") o.precision = kiln::Precision::kBest;
  else throw py::value_error("kiln: unknown precision '" + precision + "' (expected 'fp32', 'tf32', 'fp16', 'bf16' or 'best')");
  if (device == "cpu" || device == "CPU") {
    o.device = kiln::DeviceType::kCPU;
  } else if (device == "cuda" || device == "CUDA" || device == "gpu") {
    o.device = kiln::DeviceType::kCUDA;
  } else {
    throw py::value_error("kiln: unknown device '" + device + "' (expected 'cpu' or 'cuda')");
  }
  o.opt_level = opt_level;
  o.verbose = verbose;
  return o;
}

using EnginePtr = std::shared_ptr<kiln::Engine>;

// An ExecutionContext keeps its engine alive; runs on one context are serialized.
struct Context {
  EnginePtr engine;
  std::unique_ptr<kiln::ExecutionContext> ctx;
  std::mutex mu;

  py::list run(const py::dict& feeds) {
    KeepAlive keep;
    std::map<std::string, kiln::Value> inputs;
    for (const auto& [key, value] : feeds) {
      const std::string name = py::str(key);
      inputs.emplace(name, to_value(value, name, find_info(engine->inputs(), name), keep));
    }
    auto outs = without_gil([&] {
      std::lock_guard<std::mutex> lock(mu);
      auto r = ctx->run(inputs);
      inputs.clear();  // drop the borrowed views before the arrays they borrow can go
      return r;
    });
    std::vector<kiln::Value> values = unwrap(std::move(outs));
    py::list result;
    for (const auto& v : values) result.append(to_python(v));
    return result;
  }
};

py::object dim_object(const kiln::TensorInfo& info, size_t i) {
  if (info.shape[i] >= 0) return py::int_(info.shape[i]);
  if (i < info.dim_names.size() && !info.dim_names[i].empty()) return py::str(info.dim_names[i]);
  return py::none();
}

py::list shape_list(const kiln::TensorInfo& info) {
  py::list out;
  if (!info.rank_known) return out;
  for (size_t i = 0; i < info.shape.size(); ++i) out.append(dim_object(info, i));
  return out;
}

// Shape profiles from Python: a list of {input name: (min, opt, max)} dicts, each shape a sequence of
// ints; tune: None (cuda engines tune), True or False; timing_cache: a file path or "".
void tuning_options(kiln::BuildOptions& o, const py::object& profiles, const py::object& tune, const std::string& timing_cache) {
  if (!profiles.is_none()) {
    for (const py::handle& item : profiles) {
      if (!py::isinstance<py::dict>(item)) throw py::type_error("kiln: each profile is a dict {input name: (min, opt, max)}");
      kiln::ShapeProfile p;
      for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(item)) {
        const std::string name = py::str(k);
        const auto shapes = py::cast<std::vector<std::vector<int64_t>>>(v);
        if (shapes.size() != 3) throw py::value_error("kiln: profile entry '" + name + "' needs (min, opt, max) shapes");
        p.min[name] = shapes[0];
        p.opt[name] = shapes[1];
        p.max[name] = shapes[2];
      }
      o.profiles.push_back(std::move(p));
    }
  }
  o.tune = tune.is_none() ? -1 : py::cast<bool>(tune) ? 1 : 0;
  o.timing_cache = timing_cache;
}

EnginePtr engine_build(const std::string& path, const std::string& device, int opt_level, bool verbose, const std::string& precision,
                       const py::object& profiles, const py::object& tune, const std::string& timing_cache) {
  auto opts = build_options(device, opt_level, verbose, precision);
  tuning_options(opts, profiles, tune, timing_cache);
  return unwrap(without_gil([&] { return kiln::Engine::build(path, opts); }));
}

EnginePtr engine_build_from_bytes(const py::bytes& data, const std::string& device, int opt_level, bool verbose,
                                  const std::string& base_dir, const std::string& precision, const py::object& profiles,
                                  const py::object& tune, const std::string& timing_cache) {
  auto opts = build_options(device, opt_level, verbose, precision);
  tuning_options(opts, profiles, tune, timing_cache);
  const std::string bytes = data;
  return unwrap(without_gil([&] { return kiln::Engine::build_from_bytes(bytes, opts, base_dir); }));
}

EnginePtr engine_open(const std::string& path, const std::string& device, int opt_level, bool verbose, const std::string& precision,
                      const py::object& profiles, const py::object& tune, const std::string& timing_cache) {
  auto opts = build_options(device, opt_level, verbose, precision);
  tuning_options(opts, profiles, tune, timing_cache);
  return unwrap(without_gil([&] { return kiln::Engine::open(path, opts); }));
}

EnginePtr engine_load(const std::string& path) {
  return unwrap(without_gil([&] { return kiln::Engine::load(path); }));
}

EnginePtr engine_load_from_bytes(const py::bytes& data) {
  const std::string bytes = data;
  return unwrap(without_gil([&] { return kiln::Engine::load_from_bytes(bytes); }));
}

std::shared_ptr<Context> engine_create_context(const EnginePtr& engine) {
  auto c = std::make_shared<Context>();
  c->engine = engine;
  c->ctx = unwrap(engine->create_context());
  return c;
}

py::dict summary_dict(const kiln::ModelSummary& s) {
  py::dict d;
  d["path"] = s.path;
  d["producer"] = s.producer;
  d["graph_name"] = s.graph_name;
  d["ir_version"] = s.ir_version;
  d["opsets"] = s.opsets;
  d["inputs"] = s.inputs;
  d["outputs"] = s.outputs;
  d["op_histogram"] = s.op_histogram;
  d["num_parameters"] = s.num_parameters;
  d["parameter_bytes"] = s.parameter_bytes;
  d["num_nodes"] = s.num_nodes;
  d["unsupported"] = s.unsupported;
  return d;
}

}  // namespace

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "kiln: an inference compiler and runtime for ONNX models (native bindings)";

  g_kiln_error = PyErr_NewExceptionWithDoc("kiln.KilnError", "An error reported by kiln (message and .code).",
                                           PyExc_RuntimeError, nullptr);
  m.attr("KilnError") = py::reinterpret_borrow<py::object>(g_kiln_error);
  m.attr("__version__") = kiln::version();

  py::class_<kiln::TensorInfo>(m, "TensorInfo")
      .def_readonly("name", &kiln::TensorInfo::name)
      .def_readonly("kind", &kiln::TensorInfo::kind)
      .def_property_readonly("dtype", [](const kiln::TensorInfo& i) { return std::string(kiln::dtype_name(i.dtype)); })
      .def_property_readonly("onnx_dtype", [](const kiln::TensorInfo& i) { return static_cast<int>(i.dtype); })
      .def_readonly("rank_known", &kiln::TensorInfo::rank_known)
      .def_property_readonly("shape", &shape_list, "dims: int, or the symbol (str) / None where dynamic")
      .def_property_readonly("type", &kiln::TensorInfo::type_string)
      .def("__repr__", [](const kiln::TensorInfo& i) {
        return "TensorInfo(name='" + i.name + "', type='" + i.type_string() + "', shape=" +
               std::string(py::repr(shape_list(i))) + ")";
      });

  py::class_<Context, std::shared_ptr<Context>>(m, "ExecutionContext")
      .def("run", &Context::run, py::arg("feeds"),
           "Runs the engine on {name: ndarray | list of ndarrays | None}; returns all outputs in order.")
      .def(
          "set_cuda_stream",
          [](Context& c, uintptr_t stream) { check(c.ctx->set_cuda_stream(reinterpret_cast<void*>(stream))); },
          py::arg("stream"),
          "Queues this context's GPU work on the caller's CUDA stream (an integer cudaStream_t, e.g. "
          "torch.cuda.current_stream().cuda_stream); 0 goes back to the context's own stream.")
      .def("terminate", [](Context& c) { c.ctx->terminate(); },
           "Stops the run in progress on this context (from any thread): it raises KilnError (Cancelled) "
           "before its next step. A run that starts later clears the request.")
      .def("set_run_timeout", [](Context& c, double seconds) { c.ctx->set_run_timeout(seconds); }, py::arg("seconds"),
           "A time limit for each run (0: none); a run past it raises KilnError (Cancelled) before its next step.")
      .def("set_cuda_graphs", [](Context& c, bool on) { c.ctx->set_cuda_graphs(on); }, py::arg("enabled"),
           "CUDA graphs from the second run of each input-shape signature (on by default).")
      .def_property_readonly("cuda_graphs", [](const Context& c) { return c.ctx->cuda_graphs(); },
                             "CUDA graphs captured so far.")
      .def_property_readonly("active_profile", [](const Context& c) { return c.ctx->active_profile(); },
                             "The shape profile of the last run's input shapes.");

  py::class_<kiln::Engine, EnginePtr>(m, "Engine")
      .def_static("build", &engine_build, py::arg("path"), py::arg("device") = "cpu", py::arg("opt_level") = 1,
                  py::arg("verbose") = false, py::arg("precision") = "fp32", py::arg("profiles") = py::none(),
                  py::arg("tune") = py::none(), py::arg("timing_cache") = "",
                  "Imports, optimizes and lowers an .onnx file. precision: fp32, or fp16/bf16 for cuda. profiles: a "
                  "list of {input: (min, opt, max)} shape ranges; tune: time each layer's tactics (default: cuda "
                  "engines); timing_cache: a file of measured tactic times to reuse and extend.")
      .def_static("build_from_bytes", &engine_build_from_bytes, py::arg("data"), py::arg("device") = "cpu",
                  py::arg("opt_level") = 1, py::arg("verbose") = false, py::arg("base_dir") = "",
                  py::arg("precision") = "fp32", py::arg("profiles") = py::none(), py::arg("tune") = py::none(),
                  py::arg("timing_cache") = "",
                  "Same as build() from serialized ModelProto bytes; external data resolves under base_dir.")
      .def_static("open", &engine_open, py::arg("path"), py::arg("device") = "cpu", py::arg("opt_level") = 1,
                  py::arg("verbose") = false, py::arg("precision") = "fp32", py::arg("profiles") = py::none(),
                  py::arg("tune") = py::none(), py::arg("timing_cache") = "",
                  "Builds an .onnx file or loads an engine file (by its magic).")
      .def_property_readonly("profiles",
                             [](const kiln::Engine& e) {
                               py::list out;
                               for (const kiln::ShapeProfile& p : e.profiles()) {
                                 py::dict d;
                                 for (const auto& [name, opt] : p.opt)
                                   d[py::str(name)] = py::make_tuple(p.min.at(name), opt, p.max.at(name));
                                 out.append(d);
                               }
                               return out;
                             },
                             "The engine's shape profiles: a list of {input: (min, opt, max)}.")
      .def_static("load", &engine_load, py::arg("path"), "Loads an engine file written by save().")
      .def_static("load_from_bytes", &engine_load_from_bytes, py::arg("data"))
      .def("save", [](const kiln::Engine& e, const std::string& path) { check(e.save(path)); }, py::arg("path"))
      .def("serialize",
           [](const kiln::Engine& e) {
             auto r = e.serialize();
             return py::bytes(unwrap(std::move(r)));
           })
      .def_property_readonly("inputs", &kiln::Engine::inputs)
      .def_property_readonly("outputs", &kiln::Engine::outputs)
      .def_property_readonly("device",
                             [](const kiln::Engine& e) { return e.device() == kiln::DeviceType::kCUDA ? "cuda" : "cpu"; })
      .def("placement_report", &kiln::Engine::placement_report)
      .def("metadata", &kiln::Engine::metadata)
      .def("create_context", &engine_create_context);

  m.def("list_kernels", [] {
    py::list out;
    for (const kiln::KernelInfo& k : kiln::list_kernels()) {
      py::dict d;
      d["op"] = k.op;
      d["domain"] = k.domain;
      d["name"] = k.name;
      d["device"] = k.device;
      d["since"] = k.since;
      d["until"] = k.until;
      d["how"] = k.how;
      py::list dts;
      for (kiln::DataType t : k.dtypes) dts.append(kiln::dtype_name(t));
      d["dtypes"] = dts;
      out.append(d);
    }
    return out;
  }, "Every kernel of every available backend, with the dtypes its first input accepts.");
  m.def("summarize_model", [](const std::string& path) { return summary_dict(unwrap(kiln::summarize_model(path))); },
        py::arg("path"), "What `kiln info` prints, as a dict.");
}
