// serve/model_config.cpp — config.pbtxt through protobuf's text format (model_config.proto), checked
// and completed against the built model (model_config.h).
#include "serve/model_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model_config.pb.h"

namespace kiln::serve {

namespace fs = std::filesystem;
namespace pb = google::protobuf;

namespace {

// config.pbtxt's names, without "TYPE_"; the protocol spells TYPE_STRING as BYTES.
struct TypeName {
  DataType dtype;
  const char* name;
};
constexpr TypeName kTypes[] = {
    {DataType::kBool, "BOOL"},     {DataType::kUInt8, "UINT8"},   {DataType::kUInt16, "UINT16"},
    {DataType::kUInt32, "UINT32"}, {DataType::kUInt64, "UINT64"}, {DataType::kInt8, "INT8"},
    {DataType::kInt16, "INT16"},   {DataType::kInt32, "INT32"},   {DataType::kInt64, "INT64"},
    {DataType::kFloat16, "FP16"},  {DataType::kFloat32, "FP32"},  {DataType::kFloat64, "FP64"},
    {DataType::kString, "STRING"}, {DataType::kBFloat16, "BF16"},
};

const char* type_suffix(DataType dtype) {
  for (const TypeName& t : kTypes)
    if (t.dtype == dtype) return t.name;
  return nullptr;
}

DataType type_of_suffix(const std::string& name) {
  for (const TypeName& t : kTypes)
    if (name == t.name) return t.dtype;
  return DataType::kUndefined;
}

// Text-format errors as "FILE:LINE:COLUMN: message" (1-based, as editors count).
// The line is quoted, so a bad value's message names its field too.
class Collector : public pb::io::ErrorCollector {
 public:
  Collector(std::string file, const std::string& text) : file_(std::move(file)) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines_.push_back(line);
  }
  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!errors_.empty()) errors_ += "\n";
    errors_ += file_ + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " + message;
    if (line >= 0 && static_cast<size_t>(line) < lines_.size()) {
      std::string quoted = lines_[line];
      quoted.erase(0, quoted.find_first_not_of(" \t"));
      if (quoted.size() > 80) quoted = quoted.substr(0, 77) + "...";
      errors_ += " (in: " + quoted + ")";
    }
  }
  void AddWarning(int line, pb::io::ColumnNumber column, const std::string& message) override {
    AddError(line, column, message);
  }
  const std::string& errors() const { return errors_; }

 private:
  std::string file_;
  std::vector<std::string> lines_;
  std::string errors_;
};

// Where a field was written, for messages about its value: "FILE:LINE:COLUMN: field: ".
class Locator {
 public:
  Locator(std::string file, const pb::TextFormat::ParseInfoTree* tree) : file_(std::move(file)), tree_(tree) {}
  // `path`: fields from the top, e.g. {"dynamic_batching", "preferred_batch_size"}; `index`: of the last.
  std::string at(const pb::Descriptor* top, const std::vector<std::string>& path, int index = -1) const {
    const pb::TextFormat::ParseInfoTree* tree = tree_;
    const pb::Descriptor* d = top;
    std::string dotted;
    pb::TextFormat::ParseLocation found;  // the innermost location known (an element of a list may have none)
    for (size_t i = 0; i < path.size() && tree && d; ++i) {
      const pb::FieldDescriptor* f = d->FindFieldByName(path[i]);
      if (!f) break;
      dotted += (dotted.empty() ? "" : ".") + path[i];
      const bool last = i + 1 == path.size();
      const int idx = last ? index : (f->is_repeated() ? 0 : -1);
      pb::TextFormat::ParseLocation loc = tree->GetLocation(f, idx);
      if (loc.line < 0 && idx > 0) loc = tree->GetLocation(f, 0);
      if (loc.line >= 0) found = loc;
      if (!last) {
        tree = tree->GetTreeForNested(f, idx);
        d = f->message_type();
      }
    }
    std::string where = file_;
    if (found.line >= 0) where += ":" + std::to_string(found.line + 1) + ":" + std::to_string(found.column + 1);
    return where + ": " + dotted + ": ";
  }

 private:
  std::string file_;
  const pb::TextFormat::ParseInfoTree* tree_;
};

template <class T>  // config::Input or config::Output
TensorSpec tensor_spec(const T& t) {
  TensorSpec s;
  s.name = t.name();
  const std::string type = config::DataType_Name(t.data_type());
  s.dtype = t.data_type() == config::TYPE_INVALID ? DataType::kUndefined : type_of_suffix(type.substr(5));
  s.dims.assign(t.dims().begin(), t.dims().end());
  s.has_reshape = t.has_reshape();
  s.reshape.assign(t.reshape().shape().begin(), t.reshape().shape().end());
  return s;
}

template <class T>
Status check_tensors(const pb::RepeatedPtrField<T>& tensors, const char* field, const Locator& loc) {
  const pb::Descriptor* top = config::ModelConfig::descriptor();
  for (int i = 0; i < tensors.size(); ++i) {
    const T& t = tensors[i];
    if (t.name().empty()) return invalid_argument(loc.at(top, {field}, i) + "an entry without a name");
    for (int64_t d : t.dims())
      if (d < -1 || d == 0)
        return invalid_argument(loc.at(top, {field}, i) + "'" + t.name() + "' has dim " + std::to_string(d) +
                                " (dims are > 0, or -1 for any size)");
    if (t.data_type() == config::TYPE_STRING)
      return unsupported(loc.at(top, {field}, i) + "'" + t.name() + "': TYPE_STRING tensors are not served yet");
  }
  return Status::Ok();
}

Status spec_from_proto(const config::ModelConfig& c, const Locator& loc, ModelSpec& spec) {
  const pb::Descriptor* top = config::ModelConfig::descriptor();
  if (!c.name().empty() && c.name() != spec.name)
    return invalid_argument(loc.at(top, {"name"}) + "'" + c.name() + "' is not the model's folder name '" + spec.name +
                            "'");
  spec.platform = c.platform();
  spec.backend = c.backend();
  static const char* kPlatforms[] = {"", "kiln", "onnxruntime_onnx"};
  static const char* kBackends[] = {"", "kiln", "onnxruntime"};
  if (std::none_of(std::begin(kPlatforms), std::end(kPlatforms), [&](const char* p) { return c.platform() == p; }))
    return invalid_argument(loc.at(top, {"platform"}) + "'" + c.platform() +
                            "' is not served by kiln (use \"onnxruntime_onnx\" or backend: \"kiln\")");
  if (std::none_of(std::begin(kBackends), std::end(kBackends), [&](const char* b) { return c.backend() == b; }))
    return invalid_argument(loc.at(top, {"backend"}) + "'" + c.backend() +
                            "' is not served by kiln (use \"kiln\" or \"onnxruntime\")");
  if (c.max_batch_size() < 0)
    return invalid_argument(loc.at(top, {"max_batch_size"}) + "must be >= 0, got " +
                            std::to_string(c.max_batch_size()));
  spec.max_batch_size = c.max_batch_size();
  KILN_RETURN_IF_ERROR(check_tensors(c.input(), "input", loc));
  KILN_RETURN_IF_ERROR(check_tensors(c.output(), "output", loc));
  for (const auto& t : c.input()) {
    spec.inputs.push_back(tensor_spec(t));
    spec.inputs.back().optional = t.optional();
  }
  for (const auto& t : c.output()) spec.outputs.push_back(tensor_spec(t));

  if (c.has_dynamic_batching()) {
    const config::DynamicBatching& db = c.dynamic_batching();
    if (spec.max_batch_size == 0)
      return invalid_argument(loc.at(top, {"dynamic_batching"}) +
                              "needs max_batch_size > 0 (requests are merged along the batch dim)");
    spec.dynamic_batching = true;
    for (int i = 0; i < db.preferred_batch_size_size(); ++i) {
      const int64_t p = db.preferred_batch_size(i);
      if (p < 1 || p > spec.max_batch_size)
        return invalid_argument(loc.at(top, {"dynamic_batching", "preferred_batch_size"}, i) + std::to_string(p) +
                                " is outside 1..max_batch_size (" + std::to_string(spec.max_batch_size) + ")");
      spec.batcher.preferred_batch_sizes.push_back(p);
    }
    spec.batcher.max_queue_delay = clamp_microseconds(db.max_queue_delay_microseconds());
    const config::QueuePolicy& q = db.default_queue_policy();
    if (q.timeout_action() == config::QueuePolicy::DELAY)
      return unsupported(loc.at(top, {"dynamic_batching", "default_queue_policy"}) +
                         "timeout_action DELAY is not supported (timed-out requests are rejected)");
    spec.batcher.max_queue_size = q.max_queue_size();
    spec.batcher.default_timeout = clamp_microseconds(q.default_timeout_microseconds());
  }
  spec.batcher.max_batch_size = spec.dynamic_batching ? spec.max_batch_size : 0;

  if (c.instance_group_size() > 0) {
    spec.instance_count = 0;
    for (int i = 0; i < c.instance_group_size(); ++i) {
      const config::InstanceGroup& g = c.instance_group(i);
      const std::string kind = config::InstanceGroup::Kind_Name(g.kind());
      if (g.kind() == config::InstanceGroup::KIND_MODEL)
        return unsupported(loc.at(top, {"instance_group"}, i) + "KIND_MODEL is not supported (use KIND_CPU or KIND_GPU)");
      if (g.kind() == config::InstanceGroup::KIND_CPU && g.gpus_size() > 0)
        return invalid_argument(loc.at(top, {"instance_group"}, i) + "gpus listed for KIND_CPU");
      if (i > 0 && kind != spec.instance_kind)
        return unsupported(loc.at(top, {"instance_group"}, i) + "instance groups of different kinds (" +
                           spec.instance_kind + ", " + kind + ") in one model are not supported");
      if (g.count() < 0) return invalid_argument(loc.at(top, {"instance_group"}, i) + "count must be >= 0");
      for (int gpu : g.gpus()) {
        if (gpu < 0) return invalid_argument(loc.at(top, {"instance_group"}, i) + "gpu index " + std::to_string(gpu));
        if (gpu != 0)
          return unsupported(loc.at(top, {"instance_group"}, i) + "gpu " + std::to_string(gpu) +
                             ": kiln serves on GPU 0 only for now (the public API has no device index yet)");
        spec.gpus.push_back(gpu);
      }
      spec.instance_kind = kind;
      const int gpus = std::max(1, g.gpus_size());
      spec.instance_count += (g.count() == 0 ? 1 : g.count()) * gpus;
    }
  }

  if (c.has_version_policy()) {
    const config::VersionPolicy& v = c.version_policy();
    if (v.has_all()) {
      spec.versions = ModelSpec::Versions::kAll;
    } else if (v.has_specific()) {
      spec.versions = ModelSpec::Versions::kSpecific;
      spec.specific_versions.assign(v.specific().versions().begin(), v.specific().versions().end());
      if (spec.specific_versions.empty())
        return invalid_argument(loc.at(top, {"version_policy"}) + "specific lists no versions");
    } else if (v.has_latest()) {
      spec.latest_versions = std::max<int>(1, static_cast<int>(v.latest().num_versions()));
    }
  }
  for (const auto& [key, value] : c.parameters()) spec.parameters[key] = value.string_value();
  spec.model_filename = c.default_model_filename();
  if (!spec.model_filename.empty() && spec.model_filename.find('/') != std::string::npos)
    return invalid_argument(loc.at(top, {"default_model_filename"}) + "must be a file name, not a path");
  return Status::Ok();
}

}  // namespace

std::string config_type_name(DataType dtype) {
  const char* s = type_suffix(dtype);
  return s ? std::string("TYPE_") + s : "TYPE_INVALID";
}

std::string protocol_type_name(DataType dtype) {
  if (dtype == DataType::kString) return "BYTES";
  const char* s = type_suffix(dtype);
  return s ? s : "INVALID";
}

DataType protocol_type(const std::string& name) {
  if (name == "BYTES") return DataType::kString;
  if (name == "STRING") return DataType::kUndefined;
  return type_of_suffix(name);
}

Expected<ModelSpec> parse_model_config(const std::string& text, const std::string& source, const std::string& name) {
  ModelSpec spec;
  spec.name = name;
  spec.batcher.name = "model '" + name + "'";
  spec.source = source;
  config::ModelConfig c;
  Collector errors(source, text);
  pb::TextFormat::ParseInfoTree tree;
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text, &c))
    return invalid_argument("model configuration: " + errors.errors() +
                            (errors.errors().find("no field named") != std::string::npos
                                 ? " (kiln reads a subset of the model configuration: see docs/user-guide.md, Serving)"
                                 : ""));
  KILN_RETURN_IF_ERROR(spec_from_proto(c, Locator(source, &tree), spec));
  return spec;
}

Expected<ModelSpec> read_model_config(const std::string& model_dir, const std::string& name) {
  const fs::path path = fs::path(model_dir) / "config.pbtxt";
  std::error_code ec;
  if (!fs::exists(path, ec)) {  // no file (or a dangling link): the spec comes from the model
    ModelSpec spec;
    spec.name = name;
    spec.batcher.name = "model '" + name + "'";
    spec.source = "derived from the model (no config.pbtxt)";
    return spec;
  }
  // Opened without blocking and checked on the descriptor (a FIFO or a device under the name would
  // block the read or never end, and a name checked first could be swapped before it is opened), then
  // read to at most the size limit however the file grows meanwhile.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return io_error(path.string() + ": cannot be read (" + std::strerror(errno) + ")");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return invalid_argument(path.string() + ": not a regular file");
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return io_error(path.string() + ": cannot be read (" + std::strerror(errno) + ")");
    if (got == 0) break;
    text.append(buf, static_cast<size_t>(got));
    if (text.size() > kMaxConfigBytes)
      return invalid_argument(path.string() + ": larger than " + std::to_string(kMaxConfigBytes >> 20) +
                              " MiB, not a model configuration");
  }
  return parse_model_config(text, path.string(), name);
}

Expected<BuildOptions> build_options_of(const ModelSpec& spec, DeviceType device, int* threads) {
  BuildOptions options;
  options.device = device;
  *threads = 0;
  auto bad = [&](const std::string& key, const std::string& why) {
    return invalid_argument(spec.source + ": parameters: '" + key + "': " + why);
  };
  auto integer = [&](const std::string& key, const std::string& value, int lo, int hi) -> Expected<int> {
    try {
      size_t used = 0;
      const int v = std::stoi(value, &used);
      if (used == value.size() && v >= lo && v <= hi) return v;
    } catch (const std::exception&) {
    }
    return bad(key, "'" + value + "' is not an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  };
  for (const auto& [key, value] : spec.parameters) {
    if (key == "precision") {
      auto p = parse_precision(value);
      if (!p) return bad(key, p.status().message());
      options.precision = *p;
    } else if (key == "opt_level") {
      KILN_ASSIGN_OR_RETURN(options.opt_level, integer(key, value, 0, 3));
    } else if (key == "tune") {
      KILN_ASSIGN_OR_RETURN(options.tune, integer(key, value, -1, 1));
    } else if (key == "threads") {
      KILN_ASSIGN_OR_RETURN(*threads, integer(key, value, 0, 4096));
    } else if (key == "half_outputs") {
      if (value != "true" && value != "false" && value != "1" && value != "0") return bad(key, "'" + value + "' is not true or false");
      options.half_outputs = value == "true" || value == "1";
    } else {
      return bad(key, "unknown parameter (kiln reads precision, opt_level, tune, threads, half_outputs)");
    }
  }
  return options;
}

namespace {

// The config's dims of a model tensor: without dim 0 when batching.
Status check_against_model(TensorSpec& spec, const TensorInfo& model, bool batching, const std::string& where) {
  if (model.kind != "tensor") return unsupported(where + "'" + model.name + "' is a " + model.kind + ", not a tensor");
  if (spec.dtype == DataType::kUndefined) spec.dtype = model.dtype;
  if (spec.dtype != model.dtype)
    return invalid_argument(where + "'" + spec.name + "' is " + config_type_name(spec.dtype) + " but the model's is " +
                            config_type_name(model.dtype));
  if (!type_suffix(model.dtype) || model.dtype == DataType::kString)
    return unsupported(where + "'" + model.name + "': element type " + dtype_name(model.dtype) + " is not served");
  if (!model.rank_known) return unsupported(where + "'" + model.name + "' has no known rank");
  std::vector<int64_t> dims = model.shape;
  if (batching) {
    if (dims.empty() || dims[0] != -1)
      return invalid_argument(where + "max_batch_size > 0 but '" + model.name + "' has a fixed first dim (shape " +
                              shape_to_string(model.shape) + "): set max_batch_size: 0 or export with a dynamic batch");
    dims.erase(dims.begin());
  }
  if (spec.has_reshape) return Status::Ok();  // the model sees `reshape`; a request sends `dims`
  if (spec.dims.empty() && !dims.empty()) spec.dims = dims;
  if (spec.dims.size() != dims.size())
    return invalid_argument(where + "'" + spec.name + "' has " + std::to_string(spec.dims.size()) +
                            " dims but the model's has " + std::to_string(dims.size()) + " (" +
                            shape_to_string(dims) + (batching ? " after the batch dim)" : ")"));
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] != -1 && spec.dims[i] != dims[i])
      return invalid_argument(where + "'" + spec.name + "' dims " + shape_to_string(spec.dims) +
                              " disagree with the model's " + shape_to_string(dims));
  return Status::Ok();
}

Status complete_tensors(std::vector<TensorSpec>& specs, const std::vector<TensorInfo>& model, bool batching,
                        const std::string& where, const char* what) {
  for (const TensorSpec& s : specs)
    if (std::none_of(model.begin(), model.end(), [&](const TensorInfo& m) { return m.name == s.name; }))
      return invalid_argument(where + what + " '" + s.name + "' is not one of the model's " + what + "s");
  std::vector<TensorSpec> ordered;  // the model's order, which the engine runs in
  for (const TensorInfo& m : model) {
    auto it = std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.name == m.name; });
    TensorSpec s;
    if (it != specs.end()) {
      s = *it;
    } else {
      s.name = m.name;
      s.optional = m.has_default;
    }
    KILN_RETURN_IF_ERROR(check_against_model(s, m, batching, where));
    ordered.push_back(std::move(s));
  }
  specs = std::move(ordered);
  return Status::Ok();
}

}  // namespace

Status complete_model_config(ModelSpec& spec, const Engine& engine, int64_t default_max_batch_size) {
  const bool derived = spec.source.rfind("derived", 0) == 0;
  if (derived && default_max_batch_size > 0) {
    bool all_dynamic = !engine.inputs().empty();
    for (const TensorInfo& in : engine.inputs())
      all_dynamic = all_dynamic && in.rank_known && !in.shape.empty() && in.shape[0] == -1;
    for (const TensorInfo& out : engine.outputs())
      all_dynamic = all_dynamic && out.rank_known && !out.shape.empty() && out.shape[0] == -1;
    if (all_dynamic) {
      spec.max_batch_size = default_max_batch_size;
      spec.dynamic_batching = true;
      spec.batcher.max_batch_size = default_max_batch_size;
    }
  }
  const std::string where = spec.source + ": ";
  const bool batching = spec.max_batch_size > 0;
  KILN_RETURN_IF_ERROR(complete_tensors(spec.inputs, engine.inputs(), batching, where, "input"));
  KILN_RETURN_IF_ERROR(complete_tensors(spec.outputs, engine.outputs(), batching, where, "output"));
  if (spec.platform.empty() && spec.backend.empty()) spec.backend = "kiln";
  return Status::Ok();
}

void fill_model_config(const ModelSpec& spec, config::ModelConfig* out) {
  auto data_type = [](DataType dtype) {
    config::DataType t = config::TYPE_INVALID;
    config::DataType_Parse(config_type_name(dtype), &t);
    return t;
  };
  auto fill = [&](auto* t, const TensorSpec& s) {
    t->set_name(s.name);
    t->set_data_type(data_type(s.dtype));
    for (int64_t d : s.dims) t->add_dims(d);
    if (s.has_reshape)
      for (int64_t d : s.reshape) t->mutable_reshape()->add_shape(d);
  };
  out->set_name(spec.name);
  out->set_platform(spec.platform);
  out->set_backend(spec.backend);
  out->set_max_batch_size(static_cast<int32_t>(spec.max_batch_size));
  for (const TensorSpec& s : spec.inputs) {
    config::Input* in = out->add_input();
    fill(in, s);
    in->set_optional(s.optional);
  }
  for (const TensorSpec& s : spec.outputs) fill(out->add_output(), s);
  config::InstanceGroup* g = out->add_instance_group();
  g->set_name(spec.name);
  g->set_count(spec.instance_count);
  config::InstanceGroup::Kind kind = config::InstanceGroup::KIND_AUTO;
  config::InstanceGroup::Kind_Parse(spec.instance_kind, &kind);
  g->set_kind(kind);
  for (int gpu : spec.gpus) g->add_gpus(gpu);
  out->set_default_model_filename(spec.model_filename.empty() ? "model.onnx" : spec.model_filename);
  if (spec.dynamic_batching) {
    config::DynamicBatching* db = out->mutable_dynamic_batching();
    for (int64_t p : spec.batcher.preferred_batch_sizes) db->add_preferred_batch_size(static_cast<int32_t>(p));
    db->set_max_queue_delay_microseconds(static_cast<uint64_t>(spec.batcher.max_queue_delay.count()));
    db->mutable_default_queue_policy()->set_max_queue_size(static_cast<uint32_t>(spec.batcher.max_queue_size));
    db->mutable_default_queue_policy()->set_default_timeout_microseconds(
        static_cast<uint64_t>(spec.batcher.default_timeout.count()));
  }
  for (const auto& [k, v] : spec.parameters) (*out->mutable_parameters())[k].set_string_value(v);
  config::VersionPolicy* vp = out->mutable_version_policy();
  if (spec.versions == ModelSpec::Versions::kAll) {
    vp->mutable_all();
  } else if (spec.versions == ModelSpec::Versions::kSpecific) {
    for (int64_t v : spec.specific_versions) vp->mutable_specific()->add_versions(v);
  } else {
    vp->mutable_latest()->set_num_versions(static_cast<uint32_t>(spec.latest_versions));
  }
}

std::string model_config_json(const ModelSpec& spec) {
  using nlohmann::json;
  auto tensors = [](const std::vector<TensorSpec>& specs) {
    json list = json::array();
    for (const TensorSpec& t : specs) {
      json j = {{"name", t.name}, {"data_type", config_type_name(t.dtype)}, {"dims", t.dims}};
      if (t.has_reshape) j["reshape"] = {{"shape", t.reshape}};
      if (t.optional) j["optional"] = true;
      list.push_back(j);
    }
    return list;
  };
  json j = {{"name", spec.name},
            {"platform", spec.platform},
            {"backend", spec.backend},
            {"max_batch_size", spec.max_batch_size},
            {"input", tensors(spec.inputs)},
            {"output", tensors(spec.outputs)},
            {"instance_group",
             json::array({{{"name", spec.name}, {"kind", spec.instance_kind}, {"count", spec.instance_count},
                           {"gpus", spec.gpus}}})},
            {"default_model_filename", spec.model_filename.empty() ? "model.onnx" : spec.model_filename}};
  if (spec.dynamic_batching)
    j["dynamic_batching"] = {
        {"preferred_batch_size", spec.batcher.preferred_batch_sizes},
        {"max_queue_delay_microseconds", spec.batcher.max_queue_delay.count()},
        {"default_queue_policy",
         {{"max_queue_size", spec.batcher.max_queue_size},
          {"default_timeout_microseconds", spec.batcher.default_timeout.count()}}}};
  json params = json::object();
  for (const auto& [k, v] : spec.parameters) params[k] = {{"string_value", v}};
  j["parameters"] = params;
  if (spec.versions == ModelSpec::Versions::kAll)
    j["version_policy"] = {{"all", json::object()}};
  else if (spec.versions == ModelSpec::Versions::kSpecific)
    j["version_policy"] = {{"specific", {{"versions", spec.specific_versions}}}};
  else
    j["version_policy"] = {{"latest", {{"num_versions", spec.latest_versions}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kiln::serve
