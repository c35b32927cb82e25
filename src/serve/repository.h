// serve/repository.h — the model repository of `kiln serve`, laid out as Triton's:
//
//   DIR/<model>/config.pbtxt              (optional: derived from the model when absent)
//   DIR/<model>/<version>/model.onnx      (or model.kiln, or config's default_model_filename)
//
// Loading a version builds its engine and caches it beside the model as
// <version>/model.<key>.kiln, the key hashing the model's bytes, kiln's version, the device kind and
// the build options, so a restart loads the engine instead of building it (an engine that no
// longer loads here, e.g. built on another GPU, is rebuilt). Each loaded version has its batcher
// with one execution context (and worker thread) per instance.
//
// Thread safety: every method may be called from any thread; a version handed out by find() stays
// usable (its batcher runs) until its last holder lets it go, even if it is unloaded meanwhile.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "serve/batcher.h"
#include "serve/model_config.h"
#include "serve/stats.h"

namespace kiln::serve {

struct RepositoryOptions {
  std::string path;
  DeviceType device = DeviceType::kCPU;   // for KIND_AUTO instances
  int64_t default_max_batch_size = 8;     // for models without config.pbtxt whose batch dim is dynamic
  bool cache_engines = true;
  // Triton's --strict-readiness: the server is ready only while no model failed to load.
  bool strict_readiness = true;
  std::function<void(const std::string&)> log;  // one line per load, unload and failure
};

struct ModelVersion {
  std::string name;
  int64_t version = 0;
  ModelSpec spec;
  std::shared_ptr<Engine> engine;
  std::shared_ptr<ModelStats> stats = std::make_shared<ModelStats>();
  std::unique_ptr<Batcher> batcher;
};

// One row of the repository index: a model folder's version and whether it is served.
struct ModelState {
  std::string name;
  std::string version;  // "" for a model that failed before its versions were known
  std::string state;    // "READY" or "UNAVAILABLE"
  std::string reason;
};

class Repository {
 public:
  explicit Repository(RepositoryOptions options);
  ~Repository();

  // Loads every model folder; a model that fails is listed UNAVAILABLE with its reason (and logged).
  // Returns how many models are ready.
  int load_all();
  // Loads (or reloads from disk) one model; its previous versions are drained and replaced.
  Status load(const std::string& name);
  // Stops serving a model: new requests are refused, queued ones still run.
  Status unload(const std::string& name);
  // The version to run: `version` "" is the highest loaded one. kNotFound naming what is missing.
  Expected<std::shared_ptr<ModelVersion>> find(const std::string& name, const std::string& version) const;
  std::vector<std::shared_ptr<ModelVersion>> loaded() const;
  std::vector<ModelState> index() const;
  // The repository's part of the server's readiness (HTTP /v2/health/ready and gRPC ServerReady ask
  // it): with strict_readiness, no load in progress (gRPC serves while the models load) and no model
  // failed to load (those unloaded on request aside); else true.
  bool ready() const;
  // Every loaded model's batcher runs what it gathers at once (Batcher::drain): a server stopping.
  void drain();
  // Unloads everything, draining every batcher.
  void shutdown();

 private:
  Expected<std::vector<std::shared_ptr<ModelVersion>>> load_versions(const std::string& name) const;
  Expected<std::shared_ptr<ModelVersion>> load_version(const ModelSpec& spec, int64_t version,
                                                       const std::string& dir) const;
  void log(const std::string& line) const;

  RepositoryOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::vector<std::shared_ptr<ModelVersion>>> models_;  // versions ascending
  std::map<std::string, std::string> failed_;
  std::atomic<int> loading_{0};  // load_all/load calls in progress: not ready meanwhile                                  // model → why
};

// A model name that may be used as a folder name (no path separators, not "." or "..").
bool is_valid_model_name(const std::string& name);

}  // namespace kiln::serve
