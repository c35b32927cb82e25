// serve/repository.cpp — model folders → built (or cached) engines with their batchers (repository.h).
#include "serve/repository.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln::serve {

namespace fs = std::filesystem;

namespace {

// Runs batches on one execution context of the engine (one instance of the model).
class ContextExecutor : public BatchExecutor {
 public:
  explicit ContextExecutor(std::unique_ptr<ExecutionContext> context) : context_(std::move(context)) {}
  Expected<std::vector<Tensor>> run(const std::vector<Tensor>& inputs) override {
    std::vector<Value> values(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].defined()) values[i] = Value::of(inputs[i]);
    std::vector<Value> outputs;  // fresh tensors every run: the requests keep views of them
    KILN_RETURN_IF_ERROR(context_->run_into(values, outputs));
    std::vector<Tensor> tensors;
    for (Value& v : outputs) {
      if (v.kind != Value::Kind::kTensor) return unsupported("an output that is not a tensor cannot be served");
      tensors.push_back(std::move(v.tensor));
    }
    return tensors;
  }

 private:
  std::unique_ptr<ExecutionContext> context_;
};

// FNV-1a, 64 bits: the engine cache's key (not a security boundary: the cached file is the user's own).
uint64_t fnv1a(const std::string& bytes, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

Expected<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path.string() + ": cannot be read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

bool is_valid_model_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

Repository::Repository(RepositoryOptions options) : options_(std::move(options)) {}
Repository::~Repository() { shutdown(); }

void Repository::log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

Expected<std::shared_ptr<ModelVersion>> Repository::load_version(const ModelSpec& base, int64_t version,
                                                                 const std::string& dir) const {
  const auto start = std::chrono::steady_clock::now();
  auto mv = std::make_shared<ModelVersion>();
  mv->name = base.name;
  mv->version = version;
  mv->spec = base;
  const std::string who = "model '" + base.name + "' version " + std::to_string(version);
  mv->spec.batcher.name = who;
  DeviceType device = options_.device;
  if (base.instance_kind == "KIND_GPU") device = DeviceType::kCUDA;
  if (base.instance_kind == "KIND_CPU") device = DeviceType::kCPU;
  int threads = 0;
  KILN_ASSIGN_OR_RETURN(BuildOptions build, build_options_of(base, device, &threads));

  std::string file = base.model_filename;
  if (file.empty()) file = fs::exists(fs::path(dir) / "model.onnx") ? "model.onnx" : "model.kiln";
  const fs::path model_path = fs::path(dir) / file;
  if (!fs::is_regular_file(model_path))
    return not_found(who + ": " + model_path.string() + " is missing (expected model.onnx or model.kiln)");
  std::string how;
  if (model_path.extension() != ".onnx") {
    // An engine file built on another GPU or library version is rebuilt here from the graph it holds
    // (logged), not left UNAVAILABLE; the repository is not written to (the rebuild is redone on a
    // restart: ship the .onnx, which kiln serve builds once and caches, to avoid that).
    EngineLoadOptions lo;
    lo.on_mismatch = OnMismatch::kRebuild;
    KILN_ASSIGN_OR_RETURN(mv->engine, Engine::load(model_path.string(), lo));
    how = mv->engine->metadata().count("rebuilt_from") ? "rebuilt here (built for " + mv->engine->metadata()["rebuilt_from"] + ")"
                                                        : "loaded";
  } else {
    KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(model_path));
    std::string options_text = std::string(kiln::version()) + "|" + (device == DeviceType::kCUDA ? "cuda" : "cpu") +
                               "|" + precision_name(build.precision) + "|" + std::to_string(build.opt_level) + "|" +
                               std::to_string(build.tune) + (build.half_outputs ? "|half_outputs" : "");
    // The version folder's other files (external data beside the model) by name, size and time: new
    // weights in weights.bin must not load an engine built from the old ones.
    std::error_code ec;
    std::vector<std::string> others;
    for (const fs::directory_entry& f : fs::directory_iterator(dir, ec)) {
      const std::string name = f.path().filename().string();
      if (name == file || name[0] == '.' || !f.is_regular_file(ec) ||
          (name.rfind("model.", 0) == 0 && f.path().extension() == ".kiln") ||
          name == "model.timing-cache")
        continue;
      const auto when = f.last_write_time(ec).time_since_epoch().count();
      others.push_back(name + ":" + std::to_string(f.file_size(ec)) + ":" + std::to_string(when));
    }
    std::sort(others.begin(), others.end());
    for (const std::string& o : others) options_text += "|" + o;
    const fs::path cached = fs::path(dir) / ("model." + hex(fnv1a(bytes, fnv1a(options_text))) + ".kiln");
    if (options_.cache_engines && fs::exists(cached)) {
      auto e = Engine::load(cached.string());
      if (e.ok()) {
        mv->engine = *e;
        how = "loaded the cached engine " + cached.filename().string();
      } else {
        log(who + ": the cached engine " + cached.string() + " is not usable here (" + e.status().message() +
            "): rebuilding it");
      }
    }
    if (!mv->engine) {
      build.timing_cache = (fs::path(dir) / "model.timing-cache").string();
      KILN_ASSIGN_OR_RETURN(mv->engine, Engine::build(model_path.string(), build));
      how = "built";
      if (options_.cache_engines) {
        Status saved = mv->engine->save(cached.string());
        if (saved.ok())
          how += ", cached as " + cached.filename().string();
        else
          log(who + ": the engine was not cached: " + saved.message());
      }
    }
  }
  KILN_RETURN_IF_ERROR(complete_model_config(mv->spec, *mv->engine, options_.default_max_batch_size));
  mv->spec.batcher.name = who;
  std::vector<std::unique_ptr<BatchExecutor>> instances;
  for (int i = 0; i < std::max(1, mv->spec.instance_count); ++i) {
    KILN_ASSIGN_OR_RETURN(auto context, mv->engine->create_context());
    if (threads > 0) context->set_num_threads(threads);
    instances.push_back(std::make_unique<ContextExecutor>(std::move(context)));
  }
  mv->batcher = std::make_unique<Batcher>(mv->spec.batcher, std::move(instances), mv->stats);
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.2f", seconds_since(start));
  log(who + ": ready (" + how + " in " + secs + " s; " + std::to_string(std::max(1, mv->spec.instance_count)) +
      " instance(s), max_batch_size " + std::to_string(mv->spec.max_batch_size) +
      (mv->spec.dynamic_batching ? ", dynamic batching" : "") + ")");
  return mv;
}

Expected<std::vector<std::shared_ptr<ModelVersion>>> Repository::load_versions(const std::string& name) const {
  const fs::path dir = fs::path(options_.path) / name;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("no model '" + name + "' in the repository " + options_.path);
  KILN_ASSIGN_OR_RETURN(ModelSpec spec, read_model_config(dir.string(), name));
  std::vector<int64_t> versions;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string v = entry.path().filename().string();
    if (!entry.is_directory() || v.empty() || v.size() >= 19 || !std::all_of(v.begin(), v.end(), ::isdigit)) continue;
    // A version is its folder's number written plainly: "007" and "01" would alias "7" and "1" (two
    // folders, one version), so they are skipped, saying so.
    if (v.size() > 1 && v[0] == '0') {
      log("model '" + name + "': version folder '" + v + "' skipped (write version numbers without leading zeros)");
      continue;
    }
    versions.push_back(std::stoll(v));
  }
  std::sort(versions.begin(), versions.end());
  if (versions.empty())
    return not_found("model '" + name + "': no version folder (" + dir.string() + "/<number>/model.onnx)");
  std::vector<int64_t> chosen;
  switch (spec.versions) {
    case ModelSpec::Versions::kAll: chosen = versions; break;
    case ModelSpec::Versions::kLatest:
      chosen.assign(versions.end() - std::min<size_t>(versions.size(), spec.latest_versions), versions.end());
      break;
    case ModelSpec::Versions::kSpecific:
      for (int64_t v : spec.specific_versions) {
        if (std::find(versions.begin(), versions.end(), v) == versions.end())
          return not_found(spec.source + ": version_policy: version " + std::to_string(v) + " has no folder");
        chosen.push_back(v);
      }
      std::sort(chosen.begin(), chosen.end());
      break;
  }
  std::vector<std::shared_ptr<ModelVersion>> loaded;
  for (int64_t v : chosen) {
    KILN_ASSIGN_OR_RETURN(auto mv, load_version(spec, v, (dir / std::to_string(v)).string()));
    loaded.push_back(std::move(mv));
  }
  return loaded;
}

namespace {
// Counts a load in progress for Repository::ready (RAII).
struct Loading {
  std::atomic<int>& n;
  explicit Loading(std::atomic<int>& c) : n(c) { ++n; }
  ~Loading() { --n; }
};
}  // namespace

int Repository::load_all() {
  Loading loading(loading_);
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.path, ec))
    if (entry.is_directory() && is_valid_model_name(entry.path().filename().string()))
      names.push_back(entry.path().filename().string());
  if (ec) log("model repository " + options_.path + ": " + ec.message());
  std::sort(names.begin(), names.end());
  int ready = 0;
  for (const std::string& name : names) ready += load(name).ok() ? 1 : 0;
  return ready;
}

Status Repository::load(const std::string& name) {
  if (!is_valid_model_name(name)) return invalid_argument("'" + name + "' is not a model name");
  Loading loading(loading_);
  std::error_code ec;
  if (!fs::is_directory(fs::path(options_.path) / name, ec))
    return not_found("no model '" + name + "' in the repository " + options_.path);
  auto versions = load_versions(name);
  std::vector<std::shared_ptr<ModelVersion>> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    if (it != models_.end()) old = std::move(it->second);
    models_.erase(name);
    failed_.erase(name);
    if (versions.ok())
      models_[name] = std::move(*versions);
    else
      failed_[name] = versions.status().message();
  }
  for (auto& mv : old) mv->batcher->shutdown();
  if (!versions.ok()) {
    log("model '" + name + "': not loaded: " + versions.status().message());
    return versions.status();
  }
  return Status::Ok();
}

Status Repository::unload(const std::string& name) {
  std::vector<std::shared_ptr<ModelVersion>> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end()) {
      if (failed_.erase(name)) return Status::Ok();
      return not_found("unknown model '" + name + "' (not loaded)");
    }
    old = std::move(it->second);
    models_.erase(it);
  }
  for (auto& mv : old) mv->batcher->shutdown();
  log("model '" + name + "': unloaded");
  return Status::Ok();
}

Expected<std::shared_ptr<ModelVersion>> Repository::find(const std::string& name, const std::string& version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end()) {
    auto f = failed_.find(name);
    if (f != failed_.end()) return not_found("model '" + name + "' is not ready: " + f->second);
    return not_found("unknown model '" + name + "'");
  }
  if (version.empty()) return it->second.back();
  for (const auto& mv : it->second)
    if (std::to_string(mv->version) == version) return mv;
  return not_found("model '" + name + "' has no loaded version '" + version + "'");
}

std::vector<std::shared_ptr<ModelVersion>> Repository::loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<ModelVersion>> all;
  for (const auto& [name, versions] : models_) all.insert(all.end(), versions.begin(), versions.end());
  return all;
}

std::vector<ModelState> Repository::index() const {
  std::vector<ModelState> rows;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.path, ec))
    if (entry.is_directory() && is_valid_model_name(entry.path().filename().string()))
      names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : names) {
    auto it = models_.find(name);
    if (it != models_.end()) {
      for (const auto& mv : it->second) rows.push_back({name, std::to_string(mv->version), "READY", ""});
      continue;
    }
    auto f = failed_.find(name);
    rows.push_back({name, "", "UNAVAILABLE", f != failed_.end() ? f->second : "unloaded"});
  }
  return rows;
}

bool Repository::ready() const {
  if (!options_.strict_readiness) return true;
  if (loading_.load() > 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return failed_.empty();
}


void Repository::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, versions] : models_)
    for (auto& mv : versions) mv->batcher->drain();
}

void Repository::shutdown() {
  std::map<std::string, std::vector<std::shared_ptr<ModelVersion>>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.swap(models_);
  }
  for (auto& [name, versions] : all)
    for (auto& mv : versions) mv->batcher->shutdown();
}

}  // namespace kiln::serve
