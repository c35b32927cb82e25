// api/c_api.cpp — kiln's C API (include/kiln/kiln_c.h) over the C++ one (include/kiln/kiln.h).
//
// Decisions:
//  * Errors are codes plus a per-thread message (kiln_last_error), as C callers expect; no C++
//    exception crosses the boundary (every entry point catches, out of memory included).
//  * The C objects hold the C++ ones by shared_ptr (a context keeps its engine's plan alive, as in
//    C++), plus the strings and shape arrays handed out, so every pointer returned stays valid for
//    the object's life.
//  * Inputs are borrowed for the call (Tensor::borrow: no copy); outputs are the run's CPU tensors,
//    owned by the KilnOutputs.
#include "kiln/kiln_c.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace {

thread_local std::string t_last_error;

KilnCode code_of(kiln::StatusCode c) {
  switch (c) {
    case kiln::StatusCode::kOk: return KILN_OK;
    case kiln::StatusCode::kInvalidArgument: return KILN_INVALID_ARGUMENT;
    case kiln::StatusCode::kNotFound: return KILN_NOT_FOUND;
    case kiln::StatusCode::kInvalidModel: return KILN_INVALID_MODEL;
    case kiln::StatusCode::kUnsupported: return KILN_UNSUPPORTED;
    case kiln::StatusCode::kEngineMismatch: return KILN_ENGINE_MISMATCH;
    case kiln::StatusCode::kIoError: return KILN_IO_ERROR;
    default: return KILN_RUNTIME_ERROR;
  }
}

// Never throws (the message is dropped for a fixed one if even that cannot be stored).
void set_error(const std::string& message) noexcept {
  try {
    t_last_error = message;
  } catch (...) {
    t_last_error.clear();
  }
}

KilnCode fail(const kiln::Status& st) {
  set_error(st.to_string());
  return code_of(st.code());
}

KilnCode fail(KilnCode code, const std::string& message) {
  set_error(message);
  return code;
}

// Runs `fn` (returning KilnCode), turning any exception into an error.
template <class Fn>
KilnCode guarded(const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return fail(KILN_RUNTIME_ERROR, std::string(what) + ": out of host memory");
  } catch (const std::exception& e) {
    return fail(KILN_RUNTIME_ERROR, std::string(what) + ": " + e.what());
  } catch (...) {
    return fail(KILN_RUNTIME_ERROR, std::string(what) + ": an unknown error");
  }
}

struct Info {
  std::string name;
  int32_t dtype = 0;
  std::vector<int64_t> shape;
};

std::vector<Info> infos_of(const std::vector<kiln::TensorInfo>& list) {
  std::vector<Info> out;
  for (const kiln::TensorInfo& t : list) out.push_back({t.name, static_cast<int32_t>(t.dtype), t.shape});
  return out;
}

}  // namespace

struct KilnEngine {
  std::shared_ptr<kiln::Engine> engine;
  std::vector<Info> inputs, outputs;
};

struct KilnContext {
  std::shared_ptr<kiln::Engine> engine;
  std::unique_ptr<kiln::ExecutionContext> context;
};

struct KilnOutputs {
  std::vector<Info> infos;
  std::vector<kiln::Value> values;
};

extern "C" {

const char* kiln_version(void) { return kiln::version(); }
const char* kiln_last_error(void) { return t_last_error.c_str(); }

void kiln_build_options_init(KilnBuildOptions* o, size_t struct_size) {
  if (!o || struct_size < offsetof(KilnBuildOptions, device)) return;
  KilnBuildOptions d{};
  d.struct_size = static_cast<uint32_t>(std::min(struct_size, sizeof(KilnBuildOptions)));
  d.device = "cpu";
  d.precision = "fp32";
  d.opt_level = 2;
  d.tune = -1;
  std::memcpy(o, &d, d.struct_size);  // the caller's fields only (NULL for the optional strings)
}

// The first header's layout (its struct ended at timing_cache): what a program built against it calls.
#undef kiln_build_options_default
void kiln_build_options_default(KilnBuildOptions* o) {
  kiln_build_options_init(o, offsetof(KilnBuildOptions, calibration_dir));
}

static KilnCode wrap_engine(kiln::Expected<std::shared_ptr<kiln::Engine>> e, KilnEngine** out) {
  if (!e.ok()) return fail(e.status());
  auto* k = new KilnEngine;
  k->engine = *e;
  k->inputs = infos_of(k->engine->inputs());
  k->outputs = infos_of(k->engine->outputs());
  *out = k;
  return KILN_OK;
}

KilnCode kiln_engine_build(const char* onnx_path, const KilnBuildOptions* options, KilnEngine** engine) {
  return guarded("kiln_engine_build", [&]() -> KilnCode {
    if (!onnx_path || !engine) return fail(KILN_INVALID_ARGUMENT, "kiln_engine_build: onnx_path and engine must not be NULL");
    *engine = nullptr;
    KilnBuildOptions o;
    kiln_build_options_init(&o, sizeof(KilnBuildOptions));
    if (options) {
      // The fields the caller's struct holds (struct_size), the rest at their defaults.
      if (options->struct_size < offsetof(KilnBuildOptions, device) + sizeof(const char*))
        return fail(KILN_INVALID_ARGUMENT,
                    "kiln_engine_build: options->struct_size is " + std::to_string(options->struct_size) +
                        " (fill the options with kiln_build_options_default first)");
      std::memcpy(&o, options, std::min<size_t>(options->struct_size, sizeof(KilnBuildOptions)));
      o.struct_size = sizeof(KilnBuildOptions);
    }
    kiln::BuildOptions b;
    const std::string device = o.device ? o.device : "cpu";
    if (device != "cpu" && device != "cuda")
      return fail(KILN_INVALID_ARGUMENT, "kiln_engine_build: device '" + device + "' (expected cpu or cuda)");
    b.device = device == "cuda" ? kiln::DeviceType::kCUDA : kiln::DeviceType::kCPU;
    auto precision = kiln::parse_precision(o.precision ? o.precision : "fp32");
    if (!precision.ok()) return fail(precision.status());
    b.precision = *precision;
    if (o.opt_level < 0 || o.opt_level > 3)
      return fail(KILN_INVALID_ARGUMENT, "kiln_engine_build: opt_level " + std::to_string(o.opt_level) + " (expected 0-3)");
    b.opt_level = o.opt_level;
    b.tune = o.tune;
    if (o.timing_cache) b.timing_cache = o.timing_cache;
    if (o.calibration_dir) b.calibration_dir = o.calibration_dir;
    if (o.calibration_cache) b.calibration_cache = o.calibration_cache;
    if (o.rest_precision) {
      auto rest = kiln::parse_precision(o.rest_precision);
      if (!rest.ok()) return fail(rest.status());
      b.rest_precision = *rest;
    }
    if (o.half_outputs != 0 && o.half_outputs != 1)
      return fail(KILN_INVALID_ARGUMENT, "kiln_engine_build: half_outputs " + std::to_string(o.half_outputs) + " (expected 0 or 1)");
    b.half_outputs = o.half_outputs == 1;
    return wrap_engine(kiln::Engine::build(onnx_path, b), engine);
  });
}

KilnCode kiln_engine_load(const char* engine_path, KilnEngine** engine) {
  return guarded("kiln_engine_load", [&]() -> KilnCode {
    if (!engine_path || !engine) return fail(KILN_INVALID_ARGUMENT, "kiln_engine_load: engine_path and engine must not be NULL");
    *engine = nullptr;
    return wrap_engine(kiln::Engine::load(engine_path), engine);
  });
}

KilnCode kiln_engine_save(const KilnEngine* engine, const char* engine_path) {
  return guarded("kiln_engine_save", [&]() -> KilnCode {
    if (!engine || !engine_path) return fail(KILN_INVALID_ARGUMENT, "kiln_engine_save: engine and engine_path must not be NULL");
    kiln::Status st = engine->engine->save(engine_path);
    return st.ok() ? KILN_OK : fail(st);
  });
}

void kiln_engine_release(KilnEngine* engine) { delete engine; }

size_t kiln_engine_input_count(const KilnEngine* e) { return e ? e->inputs.size() : 0; }
size_t kiln_engine_output_count(const KilnEngine* e) { return e ? e->outputs.size() : 0; }
const char* kiln_engine_input_name(const KilnEngine* e, size_t i) {
  return e && i < e->inputs.size() ? e->inputs[i].name.c_str() : nullptr;
}
const char* kiln_engine_output_name(const KilnEngine* e, size_t i) {
  return e && i < e->outputs.size() ? e->outputs[i].name.c_str() : nullptr;
}

static KilnCode info(const std::vector<Info>* list, const char* what, size_t i, int32_t* dtype, size_t* rank,
                     const int64_t** shape) {
  if (!list) return fail(KILN_INVALID_ARGUMENT, std::string(what) + ": engine is NULL");
  if (i >= list->size())
    return fail(KILN_INVALID_ARGUMENT, std::string(what) + ": index " + std::to_string(i) + " (the engine has " +
                                           std::to_string(list->size()) + ")");
  const Info& t = (*list)[i];
  if (dtype) *dtype = t.dtype;
  if (rank) *rank = t.shape.size();
  if (shape) *shape = t.shape.data();
  return KILN_OK;
}

KilnCode kiln_engine_input_info(const KilnEngine* e, size_t i, int32_t* dtype, size_t* rank, const int64_t** shape) {
  return guarded("kiln_engine_input_info",
                 [&] { return info(e ? &e->inputs : nullptr, "kiln_engine_input_info", i, dtype, rank, shape); });
}
KilnCode kiln_engine_output_info(const KilnEngine* e, size_t i, int32_t* dtype, size_t* rank, const int64_t** shape) {
  return guarded("kiln_engine_output_info",
                 [&] { return info(e ? &e->outputs : nullptr, "kiln_engine_output_info", i, dtype, rank, shape); });
}

KilnCode kiln_context_create(const KilnEngine* engine, KilnContext** context) {
  return guarded("kiln_context_create", [&]() -> KilnCode {
    if (!engine || !context) return fail(KILN_INVALID_ARGUMENT, "kiln_context_create: engine and context must not be NULL");
    *context = nullptr;
    auto c = engine->engine->create_context();
    if (!c.ok()) return fail(c.status());
    auto* k = new KilnContext;
    k->engine = engine->engine;
    k->context = std::move(c).value();
    *context = k;
    return KILN_OK;
  });
}

void kiln_context_release(KilnContext* context) { delete context; }

KilnCode kiln_context_run(KilnContext* context, const KilnTensor* inputs, size_t count, KilnOutputs** outputs) {
  return guarded("kiln_context_run", [&]() -> KilnCode {
    if (!context || !outputs || (count && !inputs))
      return fail(KILN_INVALID_ARGUMENT, "kiln_context_run: context, outputs (and inputs when count > 0) must not be NULL");
    *outputs = nullptr;
    std::map<std::string, kiln::Value> feed;
    for (size_t i = 0; i < count; ++i) {
      const KilnTensor& t = inputs[i];
      const std::string at = "kiln_context_run: input " + std::to_string(i);
      if (!t.name) return fail(KILN_INVALID_ARGUMENT, at + " has no name");
      if (t.rank && !t.shape) return fail(KILN_INVALID_ARGUMENT, at + " ('" + std::string(t.name) + "') has rank " +
                                                                     std::to_string(t.rank) + " but no shape");
      kiln::Shape shape(t.shape, t.shape + t.rank);
      for (int64_t d : shape)
        if (d < 0) return fail(KILN_INVALID_ARGUMENT, at + " ('" + std::string(t.name) + "') has a negative dim");
      const auto dt = static_cast<kiln::DataType>(t.dtype);
      const bool sub_byte = dt == kiln::DataType::kUInt4 || dt == kiln::DataType::kInt4 || dt == kiln::DataType::kUInt2 ||
                            dt == kiln::DataType::kInt2 || dt == kiln::DataType::kFloat4E2M1;
      if (t.dtype <= 0 || t.dtype > static_cast<int32_t>(kiln::DataType::kInt2) || sub_byte || kiln::dtype_size(dt) == 0 ||
          dt == kiln::DataType::kString)
        return fail(KILN_INVALID_ARGUMENT, at + " ('" + std::string(t.name) + "') has element type " +
                                               std::to_string(t.dtype) + ", which the C API does not take");
      if (!t.data && kiln::shape_numel(shape) > 0)
        return fail(KILN_INVALID_ARGUMENT, at + " ('" + std::string(t.name) + "') has no data");
      if (dt == kiln::DataType::kBool) {
        const auto* b = static_cast<const unsigned char*>(t.data);
        for (int64_t k = 0, n = kiln::shape_numel(shape); k < n; ++k)
          if (b[k] > 1)
            return fail(KILN_INVALID_ARGUMENT, at + " ('" + std::string(t.name) + "'): bool element " + std::to_string(k) +
                                                   " is " + std::to_string(b[k]) + " (bool elements are bytes 0 or 1)");
      }
      if (!feed.emplace(t.name, kiln::Value::of(kiln::Tensor::borrow(dt, shape, const_cast<void*>(t.data)))).second)
        return fail(KILN_INVALID_ARGUMENT, at + ": '" + std::string(t.name) + "' is given twice");
    }
    auto out = context->context->run(feed);
    if (!out.ok()) return fail(out.status());
    auto* k = new KilnOutputs;
    k->infos = infos_of(context->engine->outputs());
    k->values = std::move(out).value();
    for (size_t i = 0; i < k->values.size() && i < k->infos.size(); ++i)
      if (k->values[i].kind == kiln::Value::Kind::kTensor) k->infos[i].shape = k->values[i].tensor.shape();
    *outputs = k;
    return KILN_OK;
  });
}

size_t kiln_outputs_count(const KilnOutputs* o) { return o ? o->values.size() : 0; }

KilnCode kiln_outputs_get(const KilnOutputs* o, size_t i, KilnTensor* tensor) {
  return guarded("kiln_outputs_get", [&]() -> KilnCode {
  if (!o || !tensor) return fail(KILN_INVALID_ARGUMENT, "kiln_outputs_get: outputs and tensor must not be NULL");
  if (i >= o->values.size())
    return fail(KILN_INVALID_ARGUMENT, "kiln_outputs_get: index " + std::to_string(i) + " (the run has " +
                                           std::to_string(o->values.size()) + " outputs)");
  const kiln::Value& v = o->values[i];
  if (v.kind != kiln::Value::Kind::kTensor)
    return fail(KILN_UNSUPPORTED, "kiln_outputs_get: output '" + o->infos[i].name + "' is not a tensor (a sequence)");
  if (v.tensor.dtype() == kiln::DataType::kString)
    return fail(KILN_UNSUPPORTED, "kiln_outputs_get: output '" + o->infos[i].name + "' holds strings, which the C API does not give");
  tensor->name = o->infos[i].name.c_str();
  tensor->dtype = static_cast<int32_t>(v.tensor.dtype());
  tensor->rank = o->infos[i].shape.size();
  tensor->shape = o->infos[i].shape.data();
  tensor->data = v.tensor.raw();
  return KILN_OK;
  });
}

void kiln_outputs_release(KilnOutputs* outputs) { delete outputs; }

}  // extern "C"
