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

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace py = pybind11;

namespace {

// ---- Errors

PyObject* g_kiln_error = nullptr;  // kiln.KilnError, created at module init

// KilnError's subclasses, named as ONNX Runtime names its exceptions where the meaning is the same
// (onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument, ...), so code written against one
// catches the other's by name. Per status code; index = StatusCode.
struct ErrorClass {
  kiln::StatusCode code;
  const char* name;
  const char* doc;
};
constexpr ErrorClass kErrorClasses[] = {
    {kiln::StatusCode::kInvalidArgument, "InvalidArgument", "A wrong argument: an input's name, dtype or shape, an option."},
    {kiln::StatusCode::kInvalidModel, "InvalidGraph", "The model file is malformed or inconsistent."},
    {kiln::StatusCode::kUnsupported, "NotImplemented", "Valid, but kiln cannot run it (yet)."},
    {kiln::StatusCode::kNotFound, "NoSuchFile", "A file (or a named input/output) does not exist."},
    {kiln::StatusCode::kIoError, "FileError", "Reading or writing a file failed."},
    {kiln::StatusCode::kEngineMismatch, "EngineError", "An engine file built for another device, format or version."},
    {kiln::StatusCode::kRuntimeError, "RuntimeException", "A failure while running (device error, out of memory)."},
    {kiln::StatusCode::kInternal, "Fail", "A failure inside kiln (a bug: please report it)."},
    {kiln::StatusCode::kCancelled, "Cancelled", "The run was stopped (terminate, or its time limit)."},
};
std::map<int, PyObject*> g_error_types;  // StatusCode → class

// Names are bytes in a model. Python gets them as str decoded with 'surrogateescape' (as os.fsdecode
// gives file names), so a name that is not UTF-8 still round-trips: the str get_inputs() gives is
// the key run() takes, encoded back to the same bytes. Messages and reports, meant for reading,
// are decoded with 'backslashreplace': such a byte shows as \xNN, as the kiln command prints it.
py::str decoded(const std::string& s, const char* errors) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<py::ssize_t>(s.size()), errors);
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}
py::str name_to_py(const std::string& name) { return decoded(name, "surrogateescape"); }
py::str text_to_py(const std::string& text) { return decoded(text, "backslashreplace"); }

std::string name_from_py(py::handle key) {
  py::str s(key);
  PyObject* b = PyUnicode_AsEncodedString(s.ptr(), "utf-8", "surrogateescape");
  if (!b) throw py::error_already_set();
  py::bytes bytes = py::reinterpret_steal<py::bytes>(b);
  return std::string(bytes);
}

PyObject* error_type(kiln::StatusCode code) {
  auto it = g_error_types.find(static_cast<int>(code));
  return it == g_error_types.end() ? g_kiln_error : it->second;
}

[[noreturn]] void raise_status(const kiln::Status& st) {
  PyObject* cls = error_type(st.code());
  py::object type = py::reinterpret_borrow<py::object>(cls);
  py::object exc = type(text_to_py(st.to_string()));
  exc.attr("code") = py::str(kiln::status_code_name(st.code()));
  PyErr_SetObject(cls, exc.ptr());
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

// The kiln type of a numpy dtype, or kUndefined. ml_dtypes' types by name (float8_e5m2 has kind 'f'):
// they are user-defined dtypes, numbered from NPY_USERDEF (256) up; numpy's own are known by kind and
// size without asking for the name (dtype.name cost 11 us of a 32-us run of a small model).
kiln::DataType kiln_dtype(const py::dtype& d) {
  constexpr int kNpyUserDef = 256;
  if (d.num() >= kNpyUserDef) {
    const std::string name = py::str(d.attr("name"));
    for (const auto& e : kExtDtypes)
      if (name == e.name) return e.dt;
  }
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

// Runs f() with the GIL released (kiln calls never touch Python objects).
template <typename F>
auto without_gil(F&& f) {
  py::gil_scoped_release nogil;
  return f();
}

template <typename F>
kiln::Status without_gil_status(F&& f) {
  py::gil_scoped_release nogil;
  return f();
}

// ---- kiln.Tensor: a tensor on a device (ONNX Runtime's OrtValue), with DLPack in and out

// DLPack's C ABI (the data-exchange protocol numpy, PyTorch and CuPy speak), declared from its
// specification: the unversioned capsule "dltensor", renamed "used_dltensor" by the consumer.
namespace dlpack {
enum : int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3 };
enum : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kComplex = 5, kBool = 6 };
struct Device {
  int32_t device_type;
  int32_t device_id;
};
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct Managed {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(Managed*);
};
}  // namespace dlpack

bool dlpack_dtype(kiln::DataType dt, dlpack::DataType& out) {
  using D = kiln::DataType;
  const auto set = [&](uint8_t code, uint8_t bits) {
    out = {code, bits, 1};
    return true;
  };
  switch (dt) {
    case D::kFloat32: return set(dlpack::kFloat, 32);
    case D::kFloat64: return set(dlpack::kFloat, 64);
    case D::kFloat16: return set(dlpack::kFloat, 16);
    case D::kBFloat16: return set(dlpack::kBfloat, 16);
    case D::kInt8: return set(dlpack::kInt, 8);
    case D::kInt16: return set(dlpack::kInt, 16);
    case D::kInt32: return set(dlpack::kInt, 32);
    case D::kInt64: return set(dlpack::kInt, 64);
    case D::kUInt8: return set(dlpack::kUInt, 8);
    case D::kUInt16: return set(dlpack::kUInt, 16);
    case D::kUInt32: return set(dlpack::kUInt, 32);
    case D::kUInt64: return set(dlpack::kUInt, 64);
    case D::kBool: return set(dlpack::kBool, 8);
    case D::kComplex64: return set(dlpack::kComplex, 64);
    case D::kComplex128: return set(dlpack::kComplex, 128);
    default: return false;
  }
}

kiln::DataType kiln_dtype_of(const dlpack::DataType& d) {
  for (int c = 1; c <= static_cast<int>(kiln::DataType::kBFloat16); ++c) {
    dlpack::DataType x{};
    if (dlpack_dtype(static_cast<kiln::DataType>(c), x) && x.code == d.code && x.bits == d.bits && d.lanes == 1)
      return static_cast<kiln::DataType>(c);
  }
  return kiln::DataType::kUndefined;
}

// A tensor held by Python. Its storage may be kiln's (allocate_tensor, run outputs), a numpy array's
// (kept alive in `owner`) or a DLPack producer's (released through the producer's deleter).
struct PyTensor {
  kiln::Tensor t;
  py::object owner;
  // Why a run may not write this tensor as a bound output: "" when it may. Set for a tensor over a
  // read-only array (bytes, a read-only mmap, flags.writeable False: writing there changes an
  // immutable object or faults) and for a copy of the caller's array (results would not reach it).
  std::string unwritable;
};

// "cpu" or "cuda" with its index: where a Tensor factory puts the tensor; ValueError otherwise.
kiln::Device tensor_device(const std::string& device, int device_id) {
  if (device == "cpu") return {};
  if (device == "cuda") return {kiln::DeviceType::kCUDA, device_id};
  throw py::value_error("kiln: unknown device '" + device + "' (expected 'cpu' or 'cuda')");
}

const char* device_name(const kiln::Tensor& t) { return t.device().is_cpu() ? "cpu" : "cuda"; }

// The element type of a numpy dtype (or anything numpy.dtype takes) for a Tensor factory: plain
// elements only (no strings); TypeError naming the factory otherwise.
kiln::DataType element_dtype(const py::object& dtype, const char* factory) {
  const kiln::DataType dt = kiln_dtype(py::dtype::from_args(dtype));
  if (dt == kiln::DataType::kUndefined || dt == kiln::DataType::kString)
    throw py::type_error(std::string("kiln: ") + factory + ": unsupported dtype " + std::string(py::str(dtype)));
  return dt;
}

// ONNX Runtime's name of the element type: "tensor(float)" (OrtValue.data_type()).
std::string data_type(const PyTensor& p) { return std::string("tensor(") + kiln::dtype_onnx_name(p.t.dtype()) + ")"; }

// OrtValue.update_inplace: the array's values copied into the tensor's own memory (CPU or GPU), which
// stays where it is (bound inputs, captured CUDA graphs keep reading it). The array must have the
// tensor's element count, as ONNX Runtime checks, and its dtype (ONNX Runtime copies the bytes of
// another dtype as they are; kiln refuses that).
void tensor_update_inplace(PyTensor& p, const py::handle& obj) {
  KeepAlive keep;
  py::array given = py::module_::import("numpy").attr("asarray")(obj);
  kiln::Tensor host = to_tensor(given, "update_inplace", keep);
  if (host.dtype() != p.t.dtype())
    throw py::type_error(std::string("kiln: update_inplace: the array's dtype ") + kiln::dtype_name(host.dtype()) +
                         " is not the tensor's " + kiln::dtype_name(p.t.dtype()) + ": convert it first (array.astype)");
  if (host.numel() != p.t.numel())
    throw py::value_error("kiln: update_inplace: the array has " + std::to_string(host.numel()) + " elements, the tensor " +
                          kiln::shape_to_string(p.t.shape()) + " " + std::to_string(p.t.numel()) +
                          " (the input size of numpy arrays does not match the size of the OrtValue)");
  if (host.dtype() == kiln::DataType::kString) throw py::type_error("kiln: update_inplace: string tensors are not updated in place");
  if (!p.unwritable.empty() && p.t.device().is_cpu())
    throw py::value_error("kiln: update_inplace: the tensor is over " + p.unwritable + ": it cannot be written");
  if (host.numel() == 0) return;
  check(without_gil_status([&] { return kiln::transfer(host, p.t); }));  // same dtype and bytes; shapes may differ
}

PyTensor tensor_from_numpy(const py::handle& obj, const std::string& device, int device_id) {
  KeepAlive keep;
  py::array given = py::module_::import("numpy").attr("asarray")(obj);
  kiln::Tensor host = to_tensor(given, "tensor", keep);
  if (host.dtype() == kiln::DataType::kString && device != "cpu")
    throw py::value_error("kiln: string tensors stay on the CPU");
  const kiln::Device d = tensor_device(device, device_id);
  if (d.is_cpu()) {
    PyTensor out;
    out.t = host;
    if (!keep.empty()) out.owner = keep.back();
    if (!py::bool_(given.attr("flags").attr("writeable")))
      out.unwritable = "a read-only array (flags.writeable is False: memory of a bytes object, a read-only mmap, ...)";
    else if (host.numel() > 0 && host.raw() != given.data())
      out.unwritable = "a copy of the array (it is not C-contiguous or not in native byte order), which the caller never sees";
    return out;
  }
  PyTensor out;
  out.t = unwrap(kiln::allocate_tensor(host.dtype(), host.shape(), d));
  check(without_gil_status([&] { return kiln::transfer(host, out.t); }));
  return out;
}

py::object tensor_to_numpy(const PyTensor& p) {
  if (p.t.device().is_cpu()) return to_numpy(p.t);
  kiln::Tensor host = kiln::Tensor::empty(p.t.dtype(), p.t.shape());
  check(without_gil_status([&] { return kiln::transfer(p.t, host); }));
  return to_numpy(host);
}

void dlpack_capsule_destructor(PyObject* capsule) {
  // Only a capsule nobody consumed still owns its tensor.
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* m = static_cast<dlpack::Managed*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (m && m->deleter) m->deleter(m);
}

struct ExportCtx {
  kiln::Tensor t;  // shares the storage for as long as the consumer holds it
  std::vector<int64_t> shape;
};

py::object tensor_dlpack(const PyTensor& p) {
  dlpack::DataType dt{};
  if (!dlpack_dtype(p.t.dtype(), dt))
    throw py::type_error(std::string("kiln: DLPack has no dtype for ") + kiln::dtype_name(p.t.dtype()));
  auto* ctx = new ExportCtx{p.t, p.t.shape()};
  auto* m = new dlpack::Managed{};
  m->dl_tensor.data = const_cast<void*>(p.t.raw());
  m->dl_tensor.device = {p.t.device().is_cpu() ? dlpack::kCPU : dlpack::kCUDA, p.t.device().is_cpu() ? 0 : p.t.device().index};
  m->dl_tensor.ndim = static_cast<int32_t>(ctx->shape.size());
  m->dl_tensor.dtype = dt;
  m->dl_tensor.shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
  m->dl_tensor.strides = nullptr;  // compact row-major
  m->dl_tensor.byte_offset = 0;
  m->manager_ctx = ctx;
  m->deleter = [](dlpack::Managed* self) {
    delete static_cast<ExportCtx*>(self->manager_ctx);
    delete self;
  };
  PyObject* cap = PyCapsule_New(m, "dltensor", dlpack_capsule_destructor);
  if (!cap) {
    m->deleter(m);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(cap);
}

// Takes a DLPack capsule (or an object with __dlpack__): zero copy, the producer's memory is used
// in place and released through its deleter when the last kiln handle goes.
PyTensor tensor_from_dlpack(const py::object& obj) {
  py::object cap = obj;
  if (py::hasattr(obj, "__dlpack__")) cap = obj.attr("__dlpack__")();
  if (!PyCapsule_IsValid(cap.ptr(), "dltensor"))
    throw py::type_error("kiln: from_dlpack expects an object with __dlpack__ or an unused 'dltensor' capsule");
  auto* m = static_cast<dlpack::Managed*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  const dlpack::DLTensor& d = m->dl_tensor;
  std::string why;
  const kiln::DataType dt = kiln_dtype_of(d.dtype);
  kiln::Device device;
  if (d.device.device_type == dlpack::kCPU || d.device.device_type == dlpack::kCUDAHost) device = {};
  else if (d.device.device_type == dlpack::kCUDA) device = {kiln::DeviceType::kCUDA, d.device.device_id};
  else why = "device type " + std::to_string(d.device.device_type) + " (kiln takes CPU and CUDA tensors)";
  if (dt == kiln::DataType::kUndefined && why.empty())
    why = "dtype code " + std::to_string(d.dtype.code) + " bits " + std::to_string(d.dtype.bits) + " lanes " + std::to_string(d.dtype.lanes);
  if (d.ndim < 0 || (d.ndim > 0 && !d.shape)) why = "a malformed shape";
  kiln::Shape shape;
  if (why.empty() && d.ndim > 64) why = "rank " + std::to_string(d.ndim) + " (at most 64)";
  if (why.empty()) shape.assign(d.shape, d.shape + d.ndim);
  for (int64_t dim : shape)
    if (why.empty() && dim < 0) why = "a negative dim";
  if (why.empty() && dt != kiln::DataType::kUndefined && kiln::shape_nbytes(dt, shape) == SIZE_MAX) why = "a size that overflows";
  if (why.empty() && d.strides) {
    int64_t expect = 1;
    for (int i = d.ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && d.strides[i] != expect) {
        why = "a strided (non-contiguous) tensor: make it contiguous first";
        break;
      }
      expect *= shape[i];
    }
  }
  if (!why.empty()) throw py::value_error("kiln: from_dlpack: " + why);
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  auto storage = std::make_shared<kiln::Storage>();
  storage->data = static_cast<char*>(d.data) + d.byte_offset;
  storage->bytes = kiln::shape_nbytes(dt, shape);
  storage->device = device;
  storage->release = [m](void*) {
    py::gil_scoped_acquire gil;  // a producer's deleter may touch Python objects (numpy's does)
    if (m->deleter) m->deleter(m);
  };
  PyTensor out;
  out.t = kiln::Tensor::with_storage(dt, shape, storage);
  return out;
}

// ---- Engine / context wrappers

kiln::BuildOptions build_options(const std::string& device, int opt_level, bool verbose,
                                 const std::string& precision = "fp32") {
  kiln::BuildOptions o;
  auto p = kiln::parse_precision(precision);
  if (!p.ok()) throw py::value_error("kiln: " + p.status().message());
  o.precision = *p;
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

// RunOptions.terminate (python/kiln/__init__.py): one flag per RunOptions object, set from any
// thread and left set until the caller clears it. The context checks it before every step of a run
// given it, so a request made at any time after run() was called (while the inputs are still being
// converted, which may run the caller's Python code) stops that run; ExecutionContext::terminate()
// alone is cleared when the kiln run starts, and would lose such a request.
struct StopFlag {
  std::atomic<bool> on{false};
};

// Gives a context a run's StopFlag for the length of one call (none when null).
class StopScope {
 public:
  StopScope(kiln::ExecutionContext& ctx, const std::shared_ptr<StopFlag>& stop) : ctx_(ctx) {
    ctx_.set_stop_flag(stop ? &stop->on : nullptr);
  }
  ~StopScope() { ctx_.set_stop_flag(nullptr); }
  StopScope(const StopScope&) = delete;
  StopScope& operator=(const StopScope&) = delete;

 private:
  kiln::ExecutionContext& ctx_;
};

// An ExecutionContext keeps its engine alive; runs on one context are serialized.
struct Context {
  EnginePtr engine;
  std::unique_ptr<kiln::ExecutionContext> ctx;
  std::mutex mu;

  py::list run(const py::dict& feeds, const std::shared_ptr<StopFlag>& stop) {
    KeepAlive keep;
    std::map<std::string, kiln::Value> inputs;
    for (const auto& [key, value] : feeds) {
      const std::string name = name_from_py(key);
      inputs.emplace(name, to_value(value, name, find_info(engine->inputs(), name), keep));
    }
    auto outs = without_gil([&] {
      std::lock_guard<std::mutex> lock(mu);
      StopScope scope(*ctx, stop);
      auto r = ctx->run(inputs);
      inputs.clear();  // drop the borrowed views before the arrays they borrow can go
      return r;
    });
    std::vector<kiln::Value> values = unwrap(std::move(outs));
    py::list result;
    for (const auto& v : values) result.append(to_python(v));
    return result;
  }

  // The allocation-free form (IOBinding): inputs in engine order (kiln.Tensor on the CPU or the
  // engine's GPU, numpy arrays, None for an input with a default); outputs: per engine output a
  // kiln.Tensor to write in place (of its dtype and shape, on the CPU or the engine's GPU) or None.
  // Returns every output as a kiln.Tensor (the bound ones are those same tensors).
  py::list run_into(const py::sequence& inputs, const py::sequence& outputs, const std::shared_ptr<StopFlag>& stop) {
    const auto& infos = engine->inputs();
    if (static_cast<size_t>(py::len(inputs)) != infos.size())
      throw py::value_error("kiln: run_into expects " + std::to_string(infos.size()) + " inputs in engine order, got " +
                            std::to_string(py::len(inputs)));
    KeepAlive keep;
    std::vector<PyTensor> held;  // keeps bound tensors' owners alive across the run
    std::vector<kiln::Value> in(infos.size());
    for (size_t i = 0; i < infos.size(); ++i) {
      py::handle obj = inputs[i];
      if (obj.is_none()) continue;
      if (py::isinstance<PyTensor>(obj)) {
        held.push_back(obj.cast<PyTensor>());
        in[i] = kiln::Value::of(held.back().t);
      } else {
        in[i] = to_value(obj, infos[i].name, &infos[i], keep);
      }
    }
    std::vector<kiln::Value> out(engine->outputs().size());
    for (size_t i = 0; i < out.size() && i < static_cast<size_t>(py::len(outputs)); ++i) {
      py::handle obj = outputs[i];
      if (!py::isinstance<PyTensor>(obj)) continue;
      const PyTensor& bound = obj.cast<const PyTensor&>();
      if (!bound.unwritable.empty())
        check(kiln::invalid_argument("output '" + engine->outputs()[i].name + "' is bound to " + bound.unwritable +
                                     ": bind a writable C-contiguous array (numpy.ascontiguousarray(a) or a.copy()), "
                                     "or bind the output to a device"));
      out[i] = kiln::Value::of(bound.t);
    }
    check(without_gil_status([&] {
      std::lock_guard<std::mutex> lock(mu);
      StopScope scope(*ctx, stop);
      kiln::Status st = ctx->run_into(in, out);
      in.clear();
      return st;
    }));
    py::list result;
    for (size_t i = 0; i < out.size(); ++i) {
      const kiln::Value& v = out[i];
      if (v.kind != kiln::Value::Kind::kTensor) {
        result.append(to_python(v));
        continue;
      }
      py::handle bound = i < static_cast<size_t>(py::len(outputs)) ? outputs[i] : py::handle(Py_None);
      if (py::isinstance<PyTensor>(bound) && bound.cast<PyTensor>().t.raw() == v.tensor.raw()) {
        result.append(bound);  // written in place
      } else {
        result.append(py::cast(PyTensor{v.tensor, py::none()}));
      }
    }
    return result;
  }
};

py::object dim_object(const kiln::TensorInfo& info, size_t i) {
  if (info.shape[i] >= 0) return py::int_(info.shape[i]);
  if (i < info.dim_names.size() && !info.dim_names[i].empty()) return name_to_py(info.dim_names[i]);
  return py::none();
}

py::list shape_list(const kiln::TensorInfo& info) {
  py::list out;
  if (!info.rank_known) return out;
  for (size_t i = 0; i < info.shape.size(); ++i) out.append(dim_object(info, i));
  return out;
}

// Shape profiles from Python: a list of {input name: (min, opt, max)} dicts, each shape a sequence of
// ints; tune: None (cuda engines tune), True or False; timing_cache: a file path or ""; threads: the
// build's CPU threads (0: the calling thread's count).
void tuning_options(kiln::BuildOptions& o, const py::object& profiles, const py::object& tune, const std::string& timing_cache,
                    int threads) {
  o.threads = threads > 0 ? threads : 0;
  if (!profiles.is_none()) {
    for (const py::handle& item : profiles) {
      if (!py::isinstance<py::dict>(item)) throw py::type_error("kiln: each profile is a dict {input name: (min, opt, max)}");
      kiln::ShapeProfile p;
      for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(item)) {
        const std::string name = name_from_py(k);
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

// INT8 and FP8 builds: calibration is an iterable of {input name: array} dicts (or a folder path), the rest as
// BuildOptions. The arrays are borrowed: `keep` holds them until the build returns.
void int8_options(kiln::BuildOptions& o, bool int8, const py::object& calibration, const std::string& method,
                  double percentile, const std::string& cache, double budget, const std::string& metric, KeepAlive& keep) {
  o.int8 = int8;
  o.accuracy_budget = budget;
  o.accuracy_metric = metric;
  o.calibration_method = method;
  o.calibration_percentile = percentile;
  o.calibration_cache = cache;
  if (calibration.is_none()) return;
  if (py::isinstance<py::str>(calibration) || py::hasattr(calibration, "__fspath__")) {
    o.calibration_dir = py::str(py::module_::import("os").attr("fspath")(calibration));
    return;
  }
  for (const py::handle& item : calibration) {
    if (!py::isinstance<py::dict>(item)) throw py::type_error("kiln: calibration yields one {input name: array} dict per input set");
    std::map<std::string, kiln::Tensor> set;
    for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(item)) {
      const std::string name = name_from_py(k);
      set[name] = to_tensor(v, "calibration input '" + name + "'", keep);
    }
    o.calibration.push_back(std::move(set));
  }
}

// BuildOptions from Engine.build / build_from_bytes / open's keyword arguments: device ("cpu"),
// opt_level (2), verbose, precision ("fp32"), rest_precision (8-bit builds; None: the precision's own), half_outputs (False), profiles, tune (None: cuda engines tune), timing_cache,
// threads, int8, calibration, calibration_method ("minmax"), calibration_percentile (99.99),
// calibration_cache, accuracy_budget (0), accuracy_metric ("rel_l2"), disabled_passes ([]). One
// place names them all; an unknown keyword is a TypeError naming it. Calibration arrays are borrowed
// into `keep` until the build returns.
kiln::BuildOptions build_options_from(const py::kwargs& kw, KeepAlive& keep) {
  static const std::set<std::string> known = {
      "device", "opt_level", "verbose", "precision", "rest_precision", "half_outputs", "profiles", "tune", "timing_cache", "threads", "int8", "calibration",
      "calibration_method", "calibration_percentile", "calibration_cache", "accuracy_budget", "accuracy_metric",
      "disabled_passes"};
  for (const auto& [k, v] : kw)
    if (!known.count(py::str(k))) throw py::type_error("kiln: unknown build option '" + std::string(py::str(k)) + "'");
  auto get = [&](const char* name, auto fallback) {
    using T = decltype(fallback);
    return kw.contains(name) && !kw[name].is_none() ? py::cast<T>(kw[name]) : fallback;
  };
  auto opts = build_options(get("device", std::string("cpu")), get("opt_level", 2), get("verbose", false),
                            get("precision", std::string("fp32")));
  opts.disabled_passes = get("disabled_passes", std::vector<std::string>{});
  opts.half_outputs = get("half_outputs", false);
  if (kw.contains("rest_precision") && !kw["rest_precision"].is_none()) {
    auto rest = kiln::parse_precision(py::cast<std::string>(kw["rest_precision"]));
    if (!rest.ok()) throw py::value_error("kiln: rest_precision: " + rest.status().message());
    opts.rest_precision = *rest;
  }
  tuning_options(opts, kw.contains("profiles") ? py::object(kw["profiles"]) : py::object(py::none()),
                 kw.contains("tune") ? py::object(kw["tune"]) : py::object(py::none()), get("timing_cache", std::string()),
                 get("threads", 0));
  int8_options(opts, get("int8", false), kw.contains("calibration") ? py::object(kw["calibration"]) : py::object(py::none()),
               get("calibration_method", std::string("minmax")), get("calibration_percentile", 99.99),
               get("calibration_cache", std::string()), get("accuracy_budget", 0.0), get("accuracy_metric", std::string("rel_l2")),
               keep);
  return opts;
}

EnginePtr engine_build(const std::string& path, const py::kwargs& kw) {
  KeepAlive keep;
  const kiln::BuildOptions opts = build_options_from(kw, keep);
  return unwrap(without_gil([&] { return kiln::Engine::build(path, opts); }));
}

EnginePtr engine_build_from_bytes(const py::bytes& data, const std::string& base_dir, const py::kwargs& kw) {
  KeepAlive keep;
  const kiln::BuildOptions opts = build_options_from(kw, keep);
  const std::string bytes = data;
  return unwrap(without_gil([&] { return kiln::Engine::build_from_bytes(bytes, opts, base_dir); }));
}

// Engine.load's and open's policy for an engine built for another machine (kiln::EngineLoadOptions).
kiln::EngineLoadOptions load_options(const std::string& on_mismatch, const std::string& timing_cache) {
  kiln::EngineLoadOptions lo;
  auto policy = kiln::parse_on_mismatch(on_mismatch);
  if (!policy.ok()) throw py::value_error("kiln: " + policy.status().message());
  lo.on_mismatch = *policy;
  lo.timing_cache = timing_cache;
  return lo;
}

EnginePtr engine_open(const std::string& path, const py::kwargs& kw) {
  KeepAlive keep;
  // on_mismatch applies to an engine file; the other keywords are build options for an .onnx.
  py::kwargs build;
  std::string on_mismatch = "error";
  for (auto item : kw) {
    if (py::str(item.first).cast<std::string>() == "on_mismatch") {
      if (!item.second.is_none()) on_mismatch = py::cast<std::string>(item.second);
    } else {
      build[item.first] = item.second;
    }
  }
  const kiln::BuildOptions opts = build_options_from(build, keep);
  const kiln::EngineLoadOptions lo = load_options(on_mismatch, opts.timing_cache);
  return unwrap(without_gil([&] { return kiln::Engine::open(path, opts, lo); }));
}

EnginePtr engine_load(const std::string& path, const std::string& on_mismatch, const std::string& timing_cache) {
  const kiln::EngineLoadOptions lo = load_options(on_mismatch, timing_cache);
  return unwrap(without_gil([&] { return kiln::Engine::load(path, lo); }));
}

EnginePtr engine_load_from_bytes(const py::bytes& data, const std::string& on_mismatch) {
  const std::string bytes = data;
  const kiln::EngineLoadOptions lo = load_options(on_mismatch, "");
  return unwrap(without_gil([&] { return kiln::Engine::load_from_bytes(bytes, lo); }));
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
  for (const ErrorClass& e : kErrorClasses) {
    const std::string qualified = std::string("kiln.") + e.name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), e.doc, g_kiln_error, nullptr);
    if (!cls) throw py::error_already_set();
    g_error_types[static_cast<int>(e.code)] = cls;
    m.attr(e.name) = py::reinterpret_borrow<py::object>(cls);
  }
  m.def("error_class", [](const std::string& code) {
    for (int c = 0; c <= static_cast<int>(kiln::StatusCode::kCancelled); ++c)
      if (code == kiln::status_code_name(static_cast<kiln::StatusCode>(c)))
        return py::reinterpret_borrow<py::object>(error_type(static_cast<kiln::StatusCode>(c)));
    return py::reinterpret_borrow<py::object>(g_kiln_error);
  }, py::arg("code"), "The exception class kiln raises for a status code name (\"InvalidArgument\", ...).");
  m.def("set_seed", [](int64_t seed) { kiln::set_random_seed(static_cast<uint64_t>(seed)); }, py::arg("seed"),
        "Seeds the random ops that have no seed attribute, process-wide (kiln::set_random_seed).");
  m.def("set_default_logger_severity", &kiln::set_logger_severity, py::arg("severity"),
        "Process-wide log severity, as onnxruntime numbers it: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal.");
  m.def("profile_to_chrome_trace", [](const std::vector<kiln::ProfileEvent>& events, const std::string& name) {
    return kiln::profile_to_chrome_trace(events, name);
  });
  m.attr("__version__") = kiln::version();
  m.def("load_plugin", [](const std::string& library, bool allow_override) {
    const kiln::PluginInfo info = unwrap(kiln::load_plugin(library, allow_override));
    py::dict d;
    d["library"] = info.library;
    d["path"] = info.path;
    d["name"] = info.name;
    d["version"] = info.version;
    d["ops"] = info.ops;
    return d;
  }, py::arg("library"), py::arg("allow_override") = false,
        "Loads a kiln plugin library (include/kiln/plugin.h) into the process; returns its name, version and ops.");

  py::class_<kiln::TensorInfo>(m, "TensorInfo")
      .def_property_readonly("name", [](const kiln::TensorInfo& i) { return name_to_py(i.name); })
      .def_readonly("kind", &kiln::TensorInfo::kind)
      .def_property_readonly("dtype", [](const kiln::TensorInfo& i) { return std::string(kiln::dtype_name(i.dtype)); })
      .def_property_readonly("onnx_dtype", [](const kiln::TensorInfo& i) { return static_cast<int>(i.dtype); })
      .def_readonly("rank_known", &kiln::TensorInfo::rank_known)
      .def_readonly("has_default", &kiln::TensorInfo::has_default,
                    "an input backed by an initializer (feeding it is optional): an overridable initializer")
      .def_property_readonly("shape", &shape_list, "dims: int, or the symbol (str) / None where dynamic")
      .def_property_readonly("type", &kiln::TensorInfo::type_string)
      .def("__repr__", [](const kiln::TensorInfo& i) {
        return text_to_py("TensorInfo(name='" + i.name + "', type='" + i.type_string() + "', shape=" +
                          std::string(py::repr(shape_list(i))) + ")");
      });

  py::class_<kiln::ProfileEvent>(m, "ProfileEvent")
      .def_readonly("run", &kiln::ProfileEvent::run)
      .def_readonly("step", &kiln::ProfileEvent::step)
      .def_property_readonly("name", [](const kiln::ProfileEvent& e) { return name_to_py(e.name); })
      .def_readonly("op", &kiln::ProfileEvent::op)
      .def_readonly("kernel", &kiln::ProfileEvent::kernel)
      .def_readonly("device", &kiln::ProfileEvent::device)
      .def_readonly("tactic", &kiln::ProfileEvent::tactic)
      .def_readonly("inputs", &kiln::ProfileEvent::inputs)
      .def_readonly("outputs", &kiln::ProfileEvent::outputs)
      .def_readonly("output_bytes", &kiln::ProfileEvent::output_bytes)
      .def_readonly("start_us", &kiln::ProfileEvent::start_us)
      .def_readonly("dur_us", &kiln::ProfileEvent::dur_us)
      .def("__repr__", [](const kiln::ProfileEvent& e) {
        return text_to_py("ProfileEvent(run=" + std::to_string(e.run) + ", step=" + std::to_string(e.step) + ", name='" +
                          e.name + "', op='" + e.op + "', dur_us=" + std::to_string(e.dur_us) + ")");
      });

  py::class_<PyTensor>(m, "Tensor", "A tensor on a device (ONNX Runtime's OrtValue); DLPack in and out.")
      .def_static("from_numpy", &tensor_from_numpy, py::arg("array"), py::arg("device") = "cpu", py::arg("device_id") = 0,
                  "A tensor holding `array`: on the CPU it shares the array's memory (a contiguous copy when it is not "
                  "contiguous); on 'cuda' a copy in GPU memory.")
      .def_static("empty",
                  [](const std::vector<int64_t>& shape, const py::object& dtype, const std::string& device, int device_id) {
                    PyTensor out;
                    out.t = unwrap(kiln::allocate_tensor(element_dtype(dtype, "Tensor.empty"), shape,
                                                         tensor_device(device, device_id)));
                    return out;
                  },
                  py::arg("shape"), py::arg("dtype"), py::arg("device") = "cpu", py::arg("device_id") = 0,
                  "An uninitialized tensor (ONNX Runtime's ortvalue_from_shape_and_type).")
      .def_static("from_pointer",
                  [](uintptr_t ptr, const std::vector<int64_t>& shape, const py::object& dtype, const std::string& device,
                     int device_id) {
                    const kiln::DataType dt = element_dtype(dtype, "Tensor.from_pointer");
                    if (!ptr && kiln::shape_numel(shape) != 0) throw py::value_error("kiln: Tensor.from_pointer: null pointer");
                    if (kiln::shape_nbytes(dt, shape) == SIZE_MAX) throw py::value_error("kiln: Tensor.from_pointer: bad shape");
                    return PyTensor{kiln::Tensor::borrow(dt, shape, reinterpret_cast<void*>(ptr), tensor_device(device, device_id)),
                                    py::none()};
                  },
                  py::arg("ptr"), py::arg("shape"), py::arg("dtype"), py::arg("device") = "cpu", py::arg("device_id") = 0,
                  "A tensor over memory the caller owns and keeps alive (ONNX Runtime's bind_input with a buffer_ptr).")
      .def_static("from_dlpack", &tensor_from_dlpack, py::arg("obj"),
                  "Zero copy from a DLPack producer (a torch/CuPy/numpy array, or a 'dltensor' capsule); contiguous "
                  "CPU or CUDA tensors. For a CUDA tensor, finish the producer's work first (e.g. torch.cuda.synchronize()).")
      .def("numpy", &tensor_to_numpy, "A numpy array of the tensor's values (copied from the GPU when it is there).")
      .def("shape", [](const PyTensor& p) { return std::vector<int64_t>(p.t.shape().begin(), p.t.shape().end()); })
      .def_property_readonly("dtype", [](const PyTensor& p) { return numpy_dtype(p.t.dtype()); })
      .def("element_type", [](const PyTensor& p) { return static_cast<int>(p.t.dtype()); },
           "The element type as ONNX's TensorProto numbers it (1 float, 7 int64, ...), as ONNX Runtime's OrtValue returns it.")
      .def("data_type", &data_type, "The type as ONNX Runtime names it: \"tensor(float)\".")
      .def("update_inplace", &tensor_update_inplace, py::arg("np_arr"),
           "Copies the array's values into this tensor's memory (CPU or GPU), which stays where it is: same dtype and "
           "element count.")
      .def("has_value", [](const PyTensor&) { return true; }, "True: a kiln tensor always holds a value.")
      .def("device_name", [](const PyTensor& p) { return device_name(p.t); })
      .def("device_id", [](const PyTensor& p) { return p.t.device().index; })
      .def("data_ptr", [](const PyTensor& p) { return reinterpret_cast<uintptr_t>(p.t.raw()); })
      .def("is_tensor", [](const PyTensor&) { return true; })
      .def("__dlpack__", [](const PyTensor& p, const py::args&, const py::kwargs&) { return tensor_dlpack(p); },
           "A DLPack capsule sharing this tensor's memory (runs have finished when they return: no stream to wait for).")
      .def("__dlpack_device__", [](const PyTensor& p) {
        const int type = p.t.device().is_cpu() ? dlpack::kCPU : dlpack::kCUDA;
        return py::make_tuple(type, p.t.device().is_cpu() ? 0 : p.t.device().index);
      })
      .def("__repr__", [](const PyTensor& p) {
        return std::string("kiln.Tensor(") + kiln::dtype_name(p.t.dtype()) + kiln::shape_to_string(p.t.shape()) + ", " +
               device_name(p.t) + ")";
      });

  py::class_<StopFlag, std::shared_ptr<StopFlag>>(m, "StopFlag",
                                                  "A run's stop request (RunOptions.terminate): set from any thread, it "
                                                  "stays set until cleared; a run given it stops before its next step.")
      .def(py::init<>())
      .def_property(
          "is_set", [](const StopFlag& f) { return f.on.load(std::memory_order_relaxed); },
          [](StopFlag& f, bool on) { f.on.store(on, std::memory_order_relaxed); });

  py::class_<Context, std::shared_ptr<Context>>(m, "ExecutionContext")
      .def("run", &Context::run, py::arg("feeds"), py::arg("stop") = py::none(),
           "Runs the engine on {name: ndarray | list of ndarrays | None}; returns all outputs in order. `stop`: a "
           "StopFlag that stops the run (KilnError Cancelled) when set at any time during the call.")
      .def("run_into", &Context::run_into, py::arg("inputs"), py::arg("outputs"), py::arg("stop") = py::none(),
           "The allocation-free form: inputs in engine order (kiln.Tensor, ndarray or None), outputs per engine output a "
           "kiln.Tensor to write in place (CPU or the engine's GPU; not over a read-only or copied array) or None; "
           "returns kiln.Tensors. `stop` as run()'s.")
      .def("set_num_threads", [](Context& c, int n) { c.ctx->set_num_threads(n); }, py::arg("n"),
           "CPU threads for this context's runs (0: the calling thread's default); never changes other contexts.")
      .def("set_profiling", [](Context& c, bool on) { c.ctx->set_profiling(on); }, py::arg("enabled"),
           "Record every step's time while on (GPU steps waited for one by one, no CUDA graphs).")
      .def("take_profile", [](Context& c) { return c.ctx->take_profile(); },
           "The ProfileEvents recorded since profiling was turned on or last taken.")
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
                             "The shape profile of the last run's input shapes.")
      .def_property(
          "max_shape_plans", [](const Context& c) { return c.ctx->max_shape_plans(); },
          [](Context& c, size_t n) { c.ctx->set_max_shape_plans(n); },
          "Input-shape signatures whose plans this context keeps (default 16; 0 sets the default): the least "
          "recently used goes past it and the arena shrinks to what the others need.")
      .def_property_readonly("planned_signatures", [](const Context& c) { return c.ctx->planned_signatures(); },
                             "Input-shape signatures planned and kept now (at most max_shape_plans).")
      .def_property_readonly("arena_bytes", [](const Context& c) { return c.ctx->arena_bytes(kiln::DeviceType::kCPU); },
                             "Host bytes of this context's arena.");

  py::class_<kiln::Engine, EnginePtr>(m, "Engine")
      .def_static("build", &engine_build, py::arg("path"),
                  "Imports, optimizes and lowers an .onnx file. Keyword options: device (cpu or cuda), opt_level (0-3, "
                  "default 2), verbose, precision (fp32; for cuda tf32, fp16, bf16, best; 8-bit: int8, fp8, with activation "
                  "ranges from calibration: an iterable of {input: array} dicts, or a folder as kiln build --calibration), "
                  "rest_precision (8-bit engines: the precision of the rest; default fp16 on cuda, fp32 on cpu), profiles (a list of "
                  "{input: (min, opt, max)} shape ranges), tune (time each layer's tactics; default: cuda engines), "
                  "timing_cache (a file of measured tactic times to reuse and extend), threads (the build's CPU "
                  "threads; 0: the calling thread's OpenMP count), int8 (deprecated: int8=True with precision P is "
                  "precision='int8' with rest_precision=P), calibration_method (minmax, entropy, percentile), calibration_percentile, "
                  "calibration_cache (a file of ranges to reuse or write), accuracy_budget (> 0 keeps the most "
                  "sensitive products in float, as few as hold accuracy_metric, rel_l2 or top1, within it), "
                  "disabled_passes (names of passes to skip: the optimizer's, or a target stage such as channels-last; "
                  "kiln inspect lists them). An unknown option is a TypeError.")
      .def_static("build_from_bytes", &engine_build_from_bytes, py::arg("data"), py::arg("base_dir") = "",
                  "Same as build() from serialized ModelProto bytes (the same keyword options); external data resolves "
                  "under base_dir.")
      .def_static("open", &engine_open, py::arg("path"),
                  "Builds an .onnx file (build()'s keyword options) or loads an engine file (by its magic; on_mismatch "
                  "as load()'s).")
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
      .def_static("load", &engine_load, py::arg("path"), py::arg("on_mismatch") = "error", py::arg("timing_cache") = "",
                  "Loads an engine file written by save(). on_mismatch: what an engine built for another GPU, driver or "
                  "library version does — 'error', 'rebuild' (from the graph it holds, tuned here with timing_cache "
                  "when given) or 'rebuild-and-save' (also kept beside the file as model.<hash>.kiln and reused).")
      .def_static("rebuilt_path", [](const std::string& path) { return unwrap(kiln::Engine::rebuilt_path(path)); },
                  py::arg("path"), "Where Engine.load(path, on_mismatch='rebuild-and-save') keeps the rebuilt engine here.")
      .def_static("load_from_bytes", &engine_load_from_bytes, py::arg("data"), py::arg("on_mismatch") = "error",
                  "Same as load() from the file's bytes ('rebuild-and-save' keeps nothing: bytes have no folder).")
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
      .def("placement_report", [](const kiln::Engine& e) { return text_to_py(e.placement_report()); })
      .def("metadata",
           [](const kiln::Engine& e) {
             py::dict d;  // a model's names and descriptions: bytes, shown as text
             for (const auto& [k, v] : e.metadata()) d[text_to_py(k)] = text_to_py(v);
             return d;
           })
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
  m.def("_read_npy", [](const std::string& path) { return to_numpy(unwrap(kiln::read_npy(path))); }, py::arg("path"),
        "kiln's .npy reader (the one the kiln command and calibration use), for tests against np.load.");
  m.def("list_lowered_ops", [] {
    py::list out;
    for (const kiln::LoweredOpInfo& o : kiln::list_lowered_ops())
      out.append(py::dict(py::arg("op") = o.op, py::arg("domain") = o.domain, py::arg("since") = o.since));
    return out;
  }, "The ops kiln rewrites into other ops before optimizing (ONNX Runtime's contrib ops).");
  m.def("summarize_model", [](const std::string& path) { return summary_dict(unwrap(kiln::summarize_model(path))); },
        py::arg("path"), "What `kiln info` prints, as a dict.");
}
