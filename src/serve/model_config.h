// serve/model_config.h — a served model's configuration: read from its config.pbtxt (the fields of
// Triton's model configuration that kiln uses, model_config.proto), or derived from the model when
// the file is absent, and checked against the model once it is built.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "serve/batcher.h"

namespace kiln::serve {

// A timeout or queue delay in microseconds (a request's or a config's), at most kMaxMicroseconds (a
// day): larger values (up to 2^64 - 1 on the wire) would overflow the clock arithmetic.
constexpr uint64_t kMaxMicroseconds = 86'400'000'000ull;
inline std::chrono::microseconds clamp_microseconds(uint64_t us) {
  return std::chrono::microseconds(static_cast<int64_t>(us < kMaxMicroseconds ? us : kMaxMicroseconds));
}

namespace config {
class ModelConfig;  // model_config.proto's message (generated; included by the .cpp files that use it)
}

struct TensorSpec {
  std::string name;
  DataType dtype = DataType::kUndefined;
  std::vector<int64_t> dims;     // without the batch dim when max_batch_size > 0; -1: any
  std::vector<int64_t> reshape;  // what the model sees instead of `dims` (has_reshape)
  bool has_reshape = false;
  bool optional = false;
};

struct ModelSpec {
  std::string name, platform, backend;
  std::string source;  // where it came from: ".../config.pbtxt", or "derived from the model"
  int64_t max_batch_size = 0;
  std::vector<TensorSpec> inputs, outputs;
  bool dynamic_batching = false;
  BatcherOptions batcher;  // queue delay, preferred sizes, queue size and timeout (with dynamic_batching)
  int instance_count = 1;
  std::string instance_kind = "KIND_AUTO";  // KIND_AUTO (the server's --device), KIND_CPU, KIND_GPU
  std::vector<int> gpus;
  std::map<std::string, std::string> parameters;  // as written; the build options come from them
  enum class Versions { kLatest, kAll, kSpecific } versions = Versions::kLatest;
  int latest_versions = 1;
  std::vector<int64_t> specific_versions;
  std::string model_filename;  // empty: model.onnx, else model.kiln
};

// Reads `model_dir`/config.pbtxt when it exists (else a spec with defaults for `name`). Errors name
// the file, and the line, column and field that is wrong: an unknown field, a bad value, a
// contradiction (dynamic_batching without max_batch_size, a preferred size over it, gpus with KIND_CPU).
Expected<ModelSpec> read_model_config(const std::string& model_dir, const std::string& name);
// The same from the file's text; `source` names it in errors and in ModelSpec::source.
Expected<ModelSpec> parse_model_config(const std::string& text, const std::string& source, const std::string& name);
// config.pbtxt files larger than this are refused before they are read.
constexpr uintmax_t kMaxConfigBytes = uintmax_t{4} << 20;

// The build options the spec's parameters ask for (precision, opt_level, tune, half_outputs) on `device`;
// kInvalidArgument naming the parameter for an unknown one or a bad value. `threads` receives the
// CPU threads per instance (parameter "threads", 0: the default).
Expected<BuildOptions> build_options_of(const ModelSpec& spec, DeviceType device, int* threads);

// Checks the spec against the built engine and fills what it leaves out: inputs and outputs (all of
// the model's when the spec lists none; dtype and dims from the model), and, for a spec without a
// config file, max_batch_size = `default_max_batch_size` with dynamic batching when every input's
// dim 0 is dynamic. A name, dtype or dim that disagrees with the model is an error naming both.
Status complete_model_config(ModelSpec& spec, const Engine& engine, int64_t default_max_batch_size);

// The config as Triton's /v2/models/{m}/config answers it (JSON, config.pbtxt's field names).
std::string model_config_json(const ModelSpec& spec);

// The config as model_config.proto's message (what the gRPC ModelConfig call answers).
void fill_model_config(const ModelSpec& spec, config::ModelConfig* out);

// "TYPE_FP32" <-> kFloat32 (config.pbtxt); "FP32" <-> kFloat32 (the protocol's datatype strings).
std::string config_type_name(DataType dtype);
std::string protocol_type_name(DataType dtype);
DataType protocol_type(const std::string& name);  // kUndefined when unknown

}  // namespace kiln::serve
